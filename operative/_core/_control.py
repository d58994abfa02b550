"""``RunControl``: one run from the inside, for the features attached to it.

The run's caller holds an :class:`~operative.ActiveRun` (result, events, abort,
snapshots). A feature is given this object at each boundary of the extension seam
(``_extension``): what the run is now (its configuration, step, spend, answer) and what
a feature may do to it (charge, emit, stop, add a deadline, switch, resume from a
journal, replace the answer). A tool the loop runs reaches it too, as
``ExecutionContext.run`` (a subagent charges its parent; a handoff switches it).

It is composed of the parts that run the loop; each owns the state it writes:

- ``RunState``: what several parts write — the configuration (a switch), the step
  counter, the spend, the steps, the step in flight, a pending switch — and the run's
  fixed wiring (event hub, liveness tracker, extensions);
- ``RunScope``: the cancel scope, its deadlines, the first reason it was cancelled for,
  the run's result (recorded by the loop task, it ends the run);
- ``StepLoop``: the steps, and the run's two phases (``GeneratePhase``, ``ToolPhase``).

No part keeps this object (it is passed down to what extensions and tools are given),
so a run that has ended is freed by reference counting, not by the collector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..conversation import Conversation
from ..hooks import HookContext
from ..liveness import LivenessTracker
from ._errors import InvalidArgument
from ._event_hub import EventHub
from ._events import Event
from ._extension import (
    BOUNDARIES,
    Extension,
    ResumePoint,
    Settle,
    Switch,
    charge_extensions,
    extensions_for,
)
from ._final_answer import answer_of
from ._model import GenerateResponse, usage_problem
from ._options import RunConfig
from ._results import RunResult, StepResult
from ._run_scope import RunScope
from ._run_state import CancelReason, RunState, run_clock
from ._step import StepLoop
from ._types import FinishReason, Usage

if TYPE_CHECKING:
    from ..context import ContextManager

__all__ = ["RunControl"]

_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR


class RunControl:
    """One run, as the features attached to it see it and act on it."""

    __slots__ = ("conversation", "hub", "liveness", "loop", "run_id", "scope", "state")

    def __init__(self, config: RunConfig, conversation: Conversation) -> None:
        run_id = self.run_id = config.run_id
        self.conversation: Conversation = conversation
        """The run's live conversation (shared with the caller when one was passed)."""
        now = run_clock()
        ext = extensions_for(config)
        self.liveness = LivenessTracker(
            run_id, clock=now, durability="process-local" if ext.durable is None else "durable"
        )
        self.hub = EventHub()
        self.state = RunState(config, run_id, conversation, now, self.hub, self.liveness, ext)
        self.scope = RunScope()
        self.loop = StepLoop(self.state)

    def __repr__(self) -> str:
        return f"<RunControl {self.run_id} step={self.state.step}>"

    # -- what the run is now ---------------------------------------------------------

    @property
    def config(self) -> RunConfig:
        """The run's validated configuration (it changes when a switch is applied)."""
        return self.state.config

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """The extensions attached to this run, in order."""
        return self.state.ext.all

    @property
    def ended_result(self) -> RunResult | None:
        """The run's result once it has ended (synchronous; ``None`` before)."""
        return self.scope.result

    @property
    def resumed(self) -> bool:
        """True for a run rebuilt from a durable journal (it ran before a crash)."""
        return bool(getattr(self.state.config.feature("durable"), "resumes_journal", False))

    @property
    def cancel_message(self) -> str | None:
        """Why the run was asked to stop (an abort, a deadline, a budget), if it was."""
        reason = self.scope.reason
        return None if reason is None else reason.message

    @property
    def current_step(self) -> int:
        """The step in progress (0 before the first)."""
        return self.state.step

    @property
    def steps(self) -> tuple[StepResult, ...]:
        """The steps completed so far."""
        return tuple(self.state.steps)

    @property
    def usage(self) -> Usage:
        """What the run has spent so far."""
        return self.state.usage

    @property
    def started_at(self) -> float | None:
        """When the run's loop started, on the run's clock (``None`` before)."""
        return self.state.started_at

    def now(self) -> float:
        """The run's clock (trio's)."""
        return self.state.now()

    def hook_context(self) -> HookContext:
        """What hooks are given about the run now (run id, agent, step, conversation,
        request context, principal): for a feature that calls user checks."""
        return self.state.hook_context()

    @property
    def answer(self) -> str:
        """The run's final answer as it stands (the last step's content, or what replaced
        it)."""
        answer = self.state.answer
        if answer is not None and answer.content_override is not None:
            return answer.content_override
        steps = self.state.steps
        return steps[-1].content if steps else ""

    @property
    def context_manager(self) -> ContextManager | None:
        """The run's context manager (``context_management=``), or ``None``."""
        return self.loop.context

    def query(self, name: str) -> Any:
        """What the first extension with a method ``name`` answers (not ``None``), for
        features that ask each other (a durable journal asks for ``traceparent``; a
        subagent for its parent's ``budget_remaining``)."""
        if name in BOUNDARIES:
            raise InvalidArgument(f"{name!r} is a boundary of the seam, not a query")
        for extension in self.state.ext.all:
            ask = getattr(extension, name, None)
            if callable(ask):
                answer = ask(self)
                if answer is not None:
                    return answer
        return None

    async def wait_ended(self) -> None:
        """Return once the run has ended (its result is recorded)."""
        await self.scope.wait_ended()

    # -- events ----------------------------------------------------------------------

    def wants(self, type: str) -> bool:
        """Whether anyone listens for events of ``type`` (build them only then)."""
        return self.hub.wants(type)

    async def emit(self, event: Event) -> None:
        """Send ``event`` to the run's listeners and streams (waits for a full stream)."""
        await self.hub.emit(event)

    def emit_nowait(self, event: Event) -> None:
        """Send ``event`` without waiting (a full stream merges or drops, as configured)."""
        self.hub.emit_nowait(event)

    def add_listener(self, type: str, listener: Callable[[Any], None]) -> Any:
        """Call ``listener(event)`` for every event of ``type`` (see ``ActiveRun``)."""
        return self.hub.add_listener(type, listener)

    # -- acting on the run -----------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Ask the run to stop; it ends with ``finish_reason == "aborted"``."""
        self.scope.cancel(CancelReason(_ABORTED, reason or "aborted"))

    def stop(self, finish_reason: FinishReason, message: str) -> None:
        """Ask the run to stop with ``finish_reason`` (a feature's limit:
        ``FinishReason.BUDGET_EXCEEDED``) and ``message`` as its abort reason.

        Like :meth:`abort`: synchronous, effective at the run's next checkpoint (await
        ``trio.lowlevel.checkpoint()`` to stop right there), the first reason wins.
        """
        if not isinstance(finish_reason, FinishReason) or finish_reason is _ERROR:
            raise InvalidArgument(
                f"stop() takes the FinishReason the run ends with, not {finish_reason!r}; "
                "a failure is raised, not stopped with"
            )
        self.scope.cancel(CancelReason(finish_reason, message))

    def add_deadline(
        self, when: float, finish_reason: FinishReason, message: str | Callable[[], str]
    ) -> None:
        """End the run at ``when`` (trio time) with ``finish_reason``, unless it ended
        first. ``message`` is the abort reason, or a function that says it once the
        deadline has ended the run (a budget tells how far past its limit it went)."""
        if callable(message):
            reason = CancelReason(finish_reason, "", describe=message)
        else:
            reason = CancelReason(finish_reason, message)
        self.scope.add_deadline(when, reason)

    def watch_cancellation(self, watcher: Callable[[float | None], None] | None) -> None:
        """Have ``watcher`` told, synchronously, when the run scope is cancelled
        (``None``) or gains a deadline (that deadline); ``None`` stops it. A feature
        that shields work in the loop task (the durable journal's writes) bounds that
        work from then on. One watcher at a time: a new one replaces the last."""
        self.scope.watcher = watcher

    def charge(
        self, usage: Usage, *, step: int | None = None, spent: Any = None
    ) -> tuple[Settle, ...] | None:
        """Add ``usage`` (spent on the run's behalf, e.g. by a subagent) to the run and,
        when ``step`` is in flight, to that step; tell the extensions that count spending
        (``spent``, with ``source="charge"`` and ``spent`` as its ``detail``). Synchronous,
        so it is safe during a cancellation. Returns what to pass to :meth:`enforce`
        (``None``: nothing to do).

        Raises:
            InvalidArgument: ``usage`` has a negative count (nothing is charged).
        """
        problem = usage_problem(usage)
        if problem is not None:
            raise InvalidArgument(f"run.charge() got unusable usage: {problem}")
        state = self.state
        state.usage = state.usage + usage
        inflight = state.inflight
        if inflight is not None and inflight.step == step:
            inflight.usage = inflight.usage + usage
        spending = state.ext.spent
        if not spending:
            return None
        return charge_extensions(self, spending, step, usage, None, "charge", spent) or None

    async def enforce(self, status: tuple[Settle, ...] | None) -> None:
        """Do what the extensions asked about a :meth:`charge` (``status`` is what it
        returned): report a crossed budget threshold, end the run at a crossed limit."""
        if status:
            for settle in status:
                await settle(self)

    def reconfigure(self, config: RunConfig) -> None:
        """Run on under ``config`` from the next step, as given (its generate function is
        wrapped by the ``wrap_generate`` extensions each step, as the run's first was)."""
        self.state.config = config

    @property
    def pending_switch(self) -> Switch | None:
        """The switch a tool asked for in this step, not applied yet."""
        return self.state.switch

    def request_switch(self, switch: Switch) -> None:
        """Apply ``switch`` at the end of this step (``await switch.apply(run)``).

        One switch per step: a second request raises :class:`InvalidArgument`.
        """
        state = self.state
        if state.switch is not None:
            raise InvalidArgument("this step already switched the run's configuration")
        state.switch = switch

    def resume(self, steps: Sequence[StepResult], usage: Usage, at: ResumePoint) -> None:
        """Take up the steps and spend of a run rebuilt from a journal, and go on from
        ``at`` (called by a ``wrap_run`` wrapper before the loop)."""
        state = self.state
        state.steps.extend(steps)
        state.usage = usage
        state.resume = at

    def answer_with(self, response: GenerateResponse) -> None:
        """Answer the coming step with ``response``, recorded before a crash, instead
        of calling the model (called by a ``wrap_step`` wrapper before the body).

        The answer's usage becomes the step's; the run's is not added to (a journal
        counted it already, in the usage it passed to :meth:`resume`), and no ``spent``
        is told of it."""
        self.state.recorded_answer = response

    def replace_answer(self, content: str) -> None:
        """Make ``content`` the run's final answer (an output guardrail's rewrite); a run
        with a structured ``output`` type validates it again. The transcript is the
        caller's to change."""
        state = self.state
        answer = answer_of(state)
        answer.content_override = content
        if state.config.output is not None:
            answer.validate(state, content)
