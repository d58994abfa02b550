"""The extension seam: how a feature attaches to a run without the loop knowing it.

A *feature* is an option value (``durable=Durable(...)``, ``guardrails=[...]``, an
instrumentation, or anything in ``extensions=[...]``) with an ``extension(config)``
method. When a run opens, each feature makes one :class:`Extension` for that run. The
loop calls extensions at named boundaries::

    open_run
    ├── wrap_generate(fn)      the run's generate function (again after a config switch)
    ├── attached(run)          the run exists; its nursery is not open yet
    ├── start_tasks(run, n)    tasks beside the loop, in the run's nursery
    └── loop task
        ├── run_started(run)   inside the run scope; may resume a journaled run
        ├── wrap_loop(run, f)  the step loop, wrapped (a guardrail's trip scope)
        ├── step k
        │   ├── step_started(run, k)       before the step's first checkpoint
        │   ├── replayed(run, k)           a recorded answer instead of a model call
        │   ├── generated(run, k, resp)    the answer is in the transcript
        │   ├── wrap_tool(run, exe, k)     each call's execution, wrapped
        │   ├── tool_parked(run, k, call)  a call waits for a person
        │   └── step_completed(run, sr)    the step's results are in the transcript
        └── run_ending(run, result)        shielded, bounded by ``cleanup_timeout``

An extension overrides only the boundaries it needs. The run looks up, once, which
boundaries are overridden; the loop then calls only those, so a run with no feature
pays one empty-tuple check per boundary.

Order: extensions are called in the order their features are listed — the tool
sources of ``tools=`` (read first, so every other feature sees their tools), then
``guardrails=``, ``extensions=``, the instrumentation, and ``durable=`` last.
``wrap_*`` results nest in that order too: the last extension's wrapper is outermost
(the durable journal sees what every other wrapper made of a call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from ._types import FinishReason, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    import trio

    from ..tools import ExecutionContext
    from ._model import GenerateFunction, GenerateResponse
    from ._options import RunConfig
    from ._results import RunResult, StepResult
    from ._run import ActiveRun

__all__ = [
    "BOUNDARIES",
    "Execute",
    "Extension",
    "Extensions",
    "Feature",
    "ResumePoint",
    "Switch",
]

Execute = Callable[[ToolCall, "ExecutionContext"], Awaitable[ToolResult]]
"""How the tool phase runs one call."""


@runtime_checkable
class Feature(Protocol):
    """An option value that attaches an :class:`Extension` to each run it configures.

    Optional attributes the kernel reads (with ``getattr``):

    - ``run_id``: the run's identity, when the feature names it (a durable routing);
    - ``resumes_journal``: True when the run goes on from a recorded transcript (its
      history was checked when it was first run, and is not checked again).
    """

    def extension(self, config: RunConfig) -> Extension | None:
        """This run's extension (``None``: nothing to do for this run)."""
        ...


@attrs.frozen
class ResumePoint:
    """Where a run rebuilt from a journal goes on: ``next_step``, and whether its last
    recorded step is checked against the stop conditions first (not after a handoff)."""

    next_step: int
    check_stop: bool = True


class Switch(Protocol):
    """A change of the run's configuration a tool asks for (a handoff to another
    agent), applied by the loop at the end of the step that asked for it."""

    async def apply(self, run: ActiveRun) -> None:
        """Switch (``run.reconfigure(...)``) and announce it."""
        ...

    def replay(self, run: ActiveRun, step: StepResult, *, last: bool) -> None:
        """Switch again, silently, in a run rebuilt from a journal where ``step`` had
        switched (``last``: it is the journal's last step)."""
        ...


class Extension:
    """One feature's part in one run. Subclass and override the boundaries you need.

    Every method here is a no-op; the run never calls one that is not overridden. The
    ``run`` passed is the :class:`~operative.ActiveRun`; its section "for extensions"
    lists what a feature may read and call.
    """

    durable: bool = False
    """True for the extension that commits the run to a durable journal (one per run):
    ``run.wait_durably_started()`` waits for it, and liveness reports ``"durable"``."""

    def attached(self, run: ActiveRun) -> None:
        """The run exists and its loop has not started: look, do not wait."""

    def wrap_generate(self, generate: GenerateFunction) -> GenerateFunction:
        """The run's generate function, wrapped (also after a config switch)."""
        return generate

    def start_tasks(self, run: ActiveRun, nursery: trio.Nursery) -> None:
        """Start tasks beside the loop; each must return by itself once the run ends
        (``await run.wait_ended()``)."""

    async def run_started(self, run: ActiveRun) -> ResumePoint | None:
        """Inside the run scope, before the ``on_run_start`` hooks. A feature that
        rebuilt the run from a journal says where it goes on."""
        return None

    def wrap_loop(
        self, run: ActiveRun, loop: Callable[[], Awaitable[FinishReason]]
    ) -> Callable[[], Awaitable[FinishReason]]:
        """The step loop, wrapped (for a scope around every step)."""
        return loop

    async def step_started(self, run: ActiveRun, step: int) -> None:
        """Step ``step`` begins; nothing of it has happened yet."""

    def replayed(self, run: ActiveRun, step: int) -> GenerateResponse | None:
        """A recorded answer for ``step``, used instead of calling the model."""
        return None

    async def generated(
        self, run: ActiveRun, step: int, response: GenerateResponse, usage: Usage
    ) -> None:
        """The step's answer is in the transcript; ``usage`` is what the step cost so far
        (failed attempts and a compaction's summary included)."""

    def wrap_tool(self, run: ActiveRun, execute: Execute, step: int) -> Execute:
        """How each call of ``step`` executes, wrapped (results are JSON-sendable)."""
        return execute

    async def tool_parked(self, run: ActiveRun, step: int, call: ToolCall, *, parked: bool) -> None:
        """``call`` waits for a person's decision (``parked``), or was approved and runs."""

    async def step_completed(self, run: ActiveRun, step: StepResult) -> None:
        """The step's tool results are in the transcript; its event is not sent yet."""

    async def run_ending(self, run: ActiveRun, result: RunResult, *, shutdown: bool) -> RunResult:
        """Record the end of the run; return the result (possibly changed).

        Runs shielded, bounded by ``cleanup_timeout``. ``shutdown`` is True when the
        process is stopping rather than the run ending (nothing terminal should be
        recorded). Raising :class:`~operative.CleanupError`'s cause — any exception —
        makes the run's result a ``CleanupError``: the clean-up did not finish.
        """
        return result

    # -- for the durable extension (``durable = True``) ----------------------------------

    def is_durably_started(self) -> bool:
        """True once the run's durable record is committed."""
        return False

    async def wait_durably_started(self) -> None:
        """Return once the run's durable record is committed; raise what stopped it."""

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the run's trace, for features that record it."""
        return None


BOUNDARIES = (
    "wrap_generate",
    "attached",
    "start_tasks",
    "run_started",
    "wrap_loop",
    "step_started",
    "replayed",
    "generated",
    "wrap_tool",
    "tool_parked",
    "step_completed",
    "run_ending",
)


class Extensions:
    """A run's extensions, indexed by the boundaries each overrides.

    Each attribute is a tuple (empty when nobody overrides that boundary), so the loop
    asks ``if extensions.generated:`` once per boundary and nothing more.
    """

    __slots__ = ("all", "durable", *BOUNDARIES)

    attached: tuple[Extension, ...]
    wrap_generate: tuple[Extension, ...]
    start_tasks: tuple[Extension, ...]
    run_started: tuple[Extension, ...]
    wrap_loop: tuple[Extension, ...]
    step_started: tuple[Extension, ...]
    replayed: tuple[Extension, ...]
    generated: tuple[Extension, ...]
    wrap_tool: tuple[Extension, ...]
    tool_parked: tuple[Extension, ...]
    step_completed: tuple[Extension, ...]
    run_ending: tuple[Extension, ...]

    def __init__(self, extensions: tuple[Extension, ...]) -> None:
        self.all = extensions
        self.durable: Extension | None = None
        for extension in extensions:
            if extension.durable:
                self.durable = extension
        for boundary in BOUNDARIES:
            base = getattr(Extension, boundary)
            setattr(
                self,
                boundary,
                tuple(e for e in extensions if getattr(type(e), boundary) is not base),
            )


NO_EXTENSIONS = Extensions(())


@attrs.frozen
class _Made:
    """An extension the kernel made itself, standing in the list of features."""

    made: Extension

    def extension(self, config: RunConfig) -> Extension:
        return self.made


def extensions_for(config: RunConfig) -> Extensions:
    """Ask each feature of ``config`` for its extension to this run."""
    features: list[Any] = []
    if config.tool_sources:
        from ._tool_sources import ToolSources

        features.append(_Made(ToolSources(config.tool_sources)))
    if config.guardrails is not None:
        features.append(config.guardrails)
    features.extend(config.extensions)
    if config.instrumentation is not None:
        features.append(config.instrumentation)
    if config.durable is not None:
        features.append(config.durable)
    if not features:
        return NO_EXTENSIONS
    made = []
    for feature in features:
        extension = feature.extension(config)
        if extension is not None:
            made.append(extension)
    return Extensions(tuple(made)) if made else NO_EXTENSIONS
