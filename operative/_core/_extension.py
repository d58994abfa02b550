"""The extension seam: how a feature attaches to a run without the loop knowing it.

A *feature* is an option value (``budget=Budget(...)``, ``durable=Durable(...)``,
``guardrails=[...]``, an instrumentation, or anything in ``extensions=[...]``) with an
``extension(config)`` method. When a run opens, each feature makes one
:class:`Extension` for that run. The seam has eight boundaries: four wrappers, around
the run, each step, each model call and each tool call, and four moments no wrapper
sees::

    open_run
    ├── attach(run, nursery)          the run exists, its loop not started: listen, start
    │                                 tasks beside the loop
    └── loop task
        ├── wrap_run(run, loop)       the whole loop, after ``run.started``
        │   └── wrap_step(run, k, s)  each step, from before its first checkpoint to its
        │       │                     record (not yet kept or announced)
        │       ├── wrap_generate     each generate attempt (retries too)
        │       ├── spent(...)        usage paid for: an attempt's, a compaction's, a charge
        │       ├── recorded(run, f)  the answer is in the transcript; a call parks
        │       └── wrap_tool         the step's calls about to run, each one's execution
        └── run_ending(run, result)   shielded, bounded by ``cleanup_timeout``

Each boundary's users (and why a boundary with one user is one) are listed in
``docs/design.md``. The argument ``run`` is the run's :class:`RunControl`: what a feature
may read and do (charge, emit, stop, add a deadline, switch, replace the answer), which
the run's caller never sees.

An extension overrides only the boundaries it needs. The run looks up, once, which
boundaries are overridden, and calls only those.

Stopping a run: a boundary that may end the run calls ``run.stop(reason, message)`` (or
``run.abort``) and awaits a checkpoint: the run scope is cancelled there, whatever was in
flight is repaired, and the run ends with that finish reason (the first reason recorded
wins). ``spent`` itself is synchronous (it also runs while a subagent is being
cancelled): what it wants done about a spend, it returns as a :data:`Settle`, which the
run awaits once what was paid for is recorded.

Order: extensions are made in the order their features are listed — ``budget=``, the
tool sources of ``tools=``, ``guardrails=``, ``extensions=``, the instrumentation, and
``durable=`` last. Moments are called in that order; wrappers nest in it: the last
extension's wrapper is outermost (the durable journal sees what every other wrapper made
of a call, and begins the run before the others wrap it).
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
    from ._control import RunControl
    from ._model import GenerateFunction, GenerateResponse
    from ._options import RunConfig
    from ._results import RunResult, StepResult

__all__ = [
    "BOUNDARIES",
    "Answered",
    "Execute",
    "Extension",
    "Extensions",
    "Feature",
    "Parked",
    "Recorded",
    "ResumePoint",
    "Settle",
    "SpendSource",
    "Step",
    "Switch",
]

Execute = Callable[[ToolCall, "ExecutionContext"], Awaitable[ToolResult]]
"""How the tool phase runs one call."""

Step = Callable[[], Awaitable["StepResult"]]
"""One step of the run, from its entry to its record (what :meth:`Extension.wrap_step`
wraps)."""

Loop = Callable[[], Awaitable[FinishReason]]
"""The run's step loop (what :meth:`Extension.wrap_run` wraps)."""

Settle: TypeAlias = Callable[["RunControl"], Awaitable[None]]
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


class Answered(msgspec.Struct, frozen=True):
    """A fact for :meth:`Extension.recorded`: step ``step``'s answer is in the
    transcript; ``usage`` is what the step cost so far (failed attempts and a
    compaction's summary included). None of its calls has run."""

    step: int
    response: GenerateResponse
    usage: Usage


class Parked(msgspec.Struct, frozen=True):
    """A fact for :meth:`Extension.recorded`: ``call`` of step ``step`` waits for a
    person's decision (``parked``), or was decided and runs (not ``parked``)."""

    step: int
    call: ToolCall
    parked: bool


Recorded: TypeAlias = Answered | Parked
"""What :meth:`Extension.recorded` is told."""


class Switch(Protocol):
    """A change of the run's configuration a tool asks for (a handoff to another
    agent), applied by the loop at the end of the step that asked for it."""

    async def apply(self, run: RunControl) -> None:
        """Switch (``run.reconfigure(...)``) and announce it."""
        ...

    def replay(self, run: RunControl, step: StepResult, *, last: bool) -> None:
        """Switch again, silently, in a run rebuilt from a journal where ``step`` had
        switched (``last``: it is the journal's last step)."""
        ...


class Extension:
    """One feature's part in one run. Subclass and override the boundaries you need.

    Every method here is a no-op; the run never calls one that is not overridden. Each
    is given the run's :class:`RunControl`.

    Two optional attributes the run reads: ``durable = True`` marks the extension that
    commits the run to a durable journal (its liveness reports ``"durable"``); such an
    extension also defines ``is_durably_started() -> bool`` and ``async
    wait_durably_started()``, which the caller's ``run.is_durably_started`` and
    ``run.wait_durably_started()`` answer with. ``unfinished`` says what a
    ``run_ending`` that did not finish leaves behind.
    """

    durable: bool = False
    unfinished: str = ""

    def attach(self, run: RunControl, nursery: trio.Nursery) -> None:
        """The run exists and its loop has not started: add listeners, start tasks
        beside the loop in ``nursery`` (each must return by itself once the run ends:
        ``await run.wait_ended()``)."""

    def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
        """The run's loop, wrapped: inside the run scope, after ``run.started``, around
        the ``on_run_start`` hooks and every step. A feature that rebuilds the run from
        a journal calls ``run.resume(...)`` before the loop."""
        return loop

    def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
        """Step ``step``, wrapped: from before its first checkpoint (``run.current_step``
        is still the step before) to its record, which the wrapper gets before the run
        keeps it and sends ``step.completed``. A journal may hand the step a recorded
        answer (``run.answer_with(...)``) before the body runs."""
        return body

    def wrap_generate(self, run: RunControl, generate: GenerateFunction) -> GenerateFunction:
        """A generate attempt, wrapped: wrapped once a step, called once per attempt
        (retries too). ``generate`` is the kernel's attempt (``generate.started``, the
        backpressure slot, the attempt's timeout, the model's call; the model itself is
        ``run.config.generate``). May stop the run before the attempt starts."""
        return generate

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        """How each of ``calls`` (the step's calls about to run, none started)
        executes, wrapped. May stop the run first: then none of them runs, and each gets
        a ``cancelled`` result."""
        return execute

    def spent(
        self,
        run: RunControl,
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

    async def recorded(self, run: RunControl, fact: Recorded) -> None:
        """A step's fact became final: its answer is in the transcript (:class:`Answered`,
        before ``step.generated``), or a call parks for a person or leaves parking
        (:class:`Parked`)."""

    async def run_ending(self, run: RunControl, result: RunResult, *, shutdown: bool) -> RunResult:
        """The run has stopped: record and report its end; return the result (possibly
        changed).

        Runs after the ``on_run_end`` hooks, shielded, bounded by ``cleanup_timeout``.
        ``shutdown`` is True when the process is stopping rather than the run ending
        (nothing terminal should be recorded). Any exception makes the run's result a
        :class:`~operative.CleanupError` (the clean-up did not finish), with
        ``unfinished`` (or the exception) saying what is left.
        """
        return result


BOUNDARIES = (
    "attach",
    "wrap_run",
    "wrap_step",
    "wrap_generate",
    "wrap_tool",
    "spent",
    "recorded",
    "run_ending",
)


class Extensions:
    """A run's extensions, indexed by the boundaries each overrides.

    Each attribute is a tuple (empty when nobody overrides that boundary), so the loop
    asks ``if extensions.recorded:`` once per boundary and nothing more.
    """

    __slots__ = ("all", "durable", *BOUNDARIES)

    attach: tuple[Extension, ...]
    wrap_run: tuple[Extension, ...]
    wrap_step: tuple[Extension, ...]
    wrap_generate: tuple[Extension, ...]
    wrap_tool: tuple[Extension, ...]
    spent: tuple[Extension, ...]
    recorded: tuple[Extension, ...]
    run_ending: tuple[Extension, ...]

    def __init__(self, extensions: tuple[Extension, ...]) -> None:
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


def extensions_for(config: RunConfig) -> Extensions:
    """Ask each feature of ``config`` for its extension to this run."""
    if not config.features:
        return NO_EXTENSIONS
    made = []
    for feature in config.features:
        extension = feature.extension(config)
        if extension is not None:
            made.append(extension)
    return Extensions(tuple(made)) if made else NO_EXTENSIONS


def charge_extensions(
    run: RunControl,
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
