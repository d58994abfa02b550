"""The extension seam: how a feature attaches to a run without the loop knowing it.

A *feature* is an option value (``budget=Budget(...)``, ``durable=Durable(...)``,
``guardrails=[...]``, an instrumentation, or anything in ``extensions=[...]``) with an
``extension(config)`` method. When a run opens, each feature makes one
:class:`Extension` for that run. The loop calls extensions at named boundaries::

    open_run
    ├── wrap_generate(fn)      the run's generate function (again after a config switch)
    ├── attached(run)          the run exists; its nursery is not open yet
    ├── start_tasks(run, n)    tasks beside the loop, in the run's nursery
    └── loop task
        ├── run_started(run)   inside the run scope; may resume a journaled run
        ├── wrap_loop(run, f)  the step loop, wrapped (a guardrail's trip scope)
        ├── step k
        │   ├── step_started(run, k)       before the step's first checkpoint
        │   ├── step_entered(run, k)       the step is current, ``step.started`` sent
        │   ├── replayed(run, k)           a recorded answer instead of a model call
        │   ├── spent(run, k, usage, ...)  a compaction's summary was paid for
        │   ├── generate attempt n         (each retry too)
        │   │   ├── before_attempt(run, request, n)   the model is not called yet
        │   │   └── spent(run, k, usage, ...)         its usage (a failed one's too)
        │   ├── generated(run, k, resp)    the answer is in the transcript
        │   ├── tools_starting(run, k, cs) the calls about to run, none started yet
        │   ├── wrap_tool(run, exe, k)     each call's execution, wrapped
        │   │   └── spent(run, k, ...)     ``run.charge``: a subagent's spend
        │   ├── tool_parked(run, k, call)  a call waits for a person
        │   └── step_completed(run, sr)    the step's results are in the transcript
        ├── run_stopped(run, result)       the result is decided; before on_run_end hooks
        └── run_ending(run, result)        after them; shielded, bounded by cleanup_timeout

An extension overrides only the boundaries it needs. The run looks up, once, which
boundaries are overridden; the loop then calls only those, so a run with no feature
pays one empty-tuple check per boundary.

Stopping a run: a boundary that may end the run (``step_started``, ``step_entered``,
``before_attempt``, ``tools_starting``, a :data:`Settle`) calls ``run.stop(reason,
message)`` (or ``run.abort``) and awaits a checkpoint: the run scope is cancelled there,
whatever was in flight is repaired, and the run ends with that finish reason (the
first reason recorded wins). ``spent`` itself is synchronous (it also runs while a
subagent is being cancelled): what it wants done about a spend, it returns as a
:data:`Settle`, which the run awaits once what was paid for is recorded.

Order: extensions are called in the order their features are listed — ``budget=``
(its deadline bounds whatever the others do at run start), the tool sources of
``tools=`` (read before the other features, so each sees their tools), then
``guardrails=``, ``extensions=``, the instrumentation, and ``durable=`` last.
``wrap_*`` results nest in that order too: the last extension's wrapper is outermost
(the durable journal sees what every other wrapper made of a call).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from ._types import FinishReason, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    import trio

    from ..tools import ExecutionContext
    from ._model import GenerateFunction, GenerateRequest, GenerateResponse
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
    "Settle",
    "SpendSource",
    "Switch",
]

Execute = Callable[[ToolCall, "ExecutionContext"], Awaitable[ToolResult]]
"""How the tool phase runs one call."""

Settle: TypeAlias = Callable[["ActiveRun"], Awaitable[None]]
"""What an extension's ``spent`` asks the run to do about a spend once what it paid for
is recorded: an async function of the run, which may stop it (a budget's limit)."""

SpendSource: TypeAlias = Literal["attempt", "failed-attempt", "compaction", "charge"]
"""What spent the usage passed to ``spent``: a generate attempt that answered, one that
failed (it still reported usage), a compaction's summarizing call, or work done for the
run elsewhere and charged through ``run.charge`` (a subagent)."""


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


class ResumePoint(msgspec.Struct, frozen=True):
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
        """Step ``step`` begins; nothing of it has happened yet (``run.current_step`` is
        still the step before)."""

    async def step_entered(self, run: ActiveRun, step: int) -> None:
        """Step ``step`` is under way: it is ``run.current_step`` and ``step.started`` is
        sent; its request is not assembled yet. May stop the run (a limit on time)."""

    def spent(
        self,
        run: ActiveRun,
        step: int | None,
        usage: Usage,
        model: str | None,
        *,
        source: SpendSource,
        detail: Any = None,
    ) -> Settle | None:
        """``usage`` was paid for on the run's behalf and added to ``run.usage`` (and to
        step ``step``'s, when it is in flight; ``None``: the run's only). ``model`` names
        the model when the answer did; ``source`` says what spent it; ``detail`` is what
        a ``run.charge(..., spent=detail)`` caller passed along (a subagent's
        ``BudgetSpent``), else ``None``.

        Synchronous: count, log, decide. What should happen about it (report a crossed
        limit, stop the run) is returned as a :data:`Settle`, which the run awaits once
        what was paid for is recorded: a failed attempt's before the next attempt (not
        at all if the failure ends the run), an answer's once it is in the transcript and
        ``step.generated`` is sent (before any of its calls runs), a compaction's at
        once, a charge's when its caller awaits ``run.enforce``.
        """
        return None

    async def before_attempt(self, run: ActiveRun, request: GenerateRequest, attempt: int) -> None:
        """Generate attempt ``attempt`` of the step (1, then each retry) is about to send
        ``request``. May stop the run: the attempt is then never made."""

    def replayed(self, run: ActiveRun, step: int) -> GenerateResponse | None:
        """A recorded answer for ``step``, used instead of calling the model."""
        return None

    async def generated(
        self, run: ActiveRun, step: int, response: GenerateResponse, usage: Usage
    ) -> None:
        """The step's answer is in the transcript; ``usage`` is what the step cost so far
        (failed attempts and a compaction's summary included)."""

    async def tools_starting(self, run: ActiveRun, step: int, calls: tuple[ToolCall, ...]) -> None:
        """``calls``, the step's calls that are about to run (after the hooks that may
        skip some), none of them started. May stop the run: then none of them runs, and
        each gets a ``cancelled`` result."""

    def wrap_tool(self, run: ActiveRun, execute: Execute, step: int) -> Execute:
        """How each call of ``step`` executes, wrapped (results are JSON-sendable)."""
        return execute

    async def tool_parked(self, run: ActiveRun, step: int, call: ToolCall, *, parked: bool) -> None:
        """``call`` waits for a person's decision (``parked``), or was approved and runs."""

    async def step_completed(self, run: ActiveRun, step: StepResult) -> None:
        """The step's tool results are in the transcript; its event is not sent yet."""

    async def run_stopped(self, run: ActiveRun, result: RunResult) -> None:
        """The run has stopped and ``result`` is decided: report it (events, callbacks).

        Runs before the ``on_run_end`` hooks, shielded with them and bounded by the same
        ``cleanup_timeout``. An exception makes the run's result an error (its
        ``finish_reason`` ``"error"``, the exception its ``error``), as a failing
        ``on_run_end`` hook does; the run does not log it.
        """

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

    # -- queries a feature may answer (the first answer that is not None wins) ---------

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the run's trace, for features that record it."""
        return None

    def budget_remaining(self, run: ActiveRun) -> Any:
        """What is left of the run's budget, as a budget for a child run (a subagent):
        ``run.budget_remaining()``. Answered by the feature that keeps the budget."""
        return None

    def budget_spent(self) -> Any:
        """What the run's budget has counted so far: ``run.budget_spent()``."""
        return None


BOUNDARIES = (
    "wrap_generate",
    "attached",
    "start_tasks",
    "run_started",
    "wrap_loop",
    "step_started",
    "step_entered",
    "replayed",
    "spent",
    "before_attempt",
    "generated",
    "tools_starting",
    "wrap_tool",
    "tool_parked",
    "step_completed",
    "run_stopped",
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
    step_entered: tuple[Extension, ...]
    replayed: tuple[Extension, ...]
    spent: tuple[Extension, ...]
    before_attempt: tuple[Extension, ...]
    generated: tuple[Extension, ...]
    tools_starting: tuple[Extension, ...]
    wrap_tool: tuple[Extension, ...]
    tool_parked: tuple[Extension, ...]
    step_completed: tuple[Extension, ...]
    run_stopped: tuple[Extension, ...]
    run_ending: tuple[Extension, ...]

    def __init__(self, extensions: tuple[Extension, ...]) -> None:
        # Once per run, so kept cheap: every boundary starts empty, and each extension
        # is added to those its class overrides (read now: a class patched later counts),
        # found by comparing all of the class's boundaries with the no-ops at once.
        self.all = extensions
        durable: Extension | None = None
        for boundary in BOUNDARIES:
            setattr(self, boundary, ())
        for extension in extensions:
            if extension.durable:
                durable = extension
            overrides = map(operator.is_not, _boundaries_of(type(extension)), _NO_OPS)
            for boundary in itertools.compress(BOUNDARIES, overrides):
                setattr(self, boundary, (*getattr(self, boundary), extension))
        self.durable = durable


_boundaries_of = operator.attrgetter(*BOUNDARIES)
"""A class's boundaries, in the order of ``BOUNDARIES``."""

_NO_OPS = _boundaries_of(Extension)
"""The no-op each boundary of a class that does not override it is."""

NO_EXTENSIONS = Extensions(())


class _Made:
    """An extension the kernel made itself, standing in the list of features."""

    __slots__ = ("made",)

    def __init__(self, made: Extension) -> None:
        self.made = made

    def extension(self, config: RunConfig) -> Extension:
        return self.made


def has_features(config: RunConfig) -> bool:
    """True when ``config`` names a feature, so its runs may attach extensions (made
    per run: :func:`extensions_for`); False: every run gets :data:`NO_EXTENSIONS`."""
    return (
        config.budget is not None
        or bool(config.tool_sources)
        or config.guardrails is not None
        or bool(config.extensions)
        or config.instrumentation is not None
        or config.durable is not None
    )


def extensions_for(config: RunConfig) -> Extensions:
    """Ask each feature of ``config`` for its extension to this run."""
    if not has_features(config):
        return NO_EXTENSIONS
    features: list[Any] = []
    if config.budget is not None:
        features.append(config.budget)
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
    made = []
    for feature in features:
        extension = feature.extension(config)
        if extension is not None:
            made.append(extension)
    return Extensions(tuple(made)) if made else NO_EXTENSIONS


def charge_extensions(
    run: ActiveRun,
    spending: tuple[Extension, ...],
    step: int | None,
    usage: Usage,
    model: str | None,
    source: SpendSource,
    detail: Any = None,
) -> tuple[Settle, ...]:
    """Tell each extension of ``spending`` (those overriding ``spent``) what was paid
    for; what they ask to be done about it, to await once it is recorded."""
    settles: tuple[Settle, ...] = ()
    for extension in spending:
        settle = extension.spent(run, step, usage, model, source=source, detail=detail)
        if settle is not None:
            settles += (settle,)
    return settles
