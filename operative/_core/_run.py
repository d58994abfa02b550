"""``ActiveRun``: one run's handle, composed of the parts that run it.

::

    open_run(...)            run nursery (``_open_run``): every child has ended on leaving
    └── loop task            ``drive`` (``_run_task``): the run scope (``RunScope``): abort,
        │                    deadline, budgets; the run's end and its result
        └── step k           ``StepLoop``: generate → assistant message → tools → stop?
            ├── generate     ``GeneratePhase``: attempts, retries, backpressure, spend
            └── tool nursery ``ToolPhase``: one child task per call

Each part owns the state it writes:

- ``RunState``: what several parts write — the configuration, the step counter, the
  spend, the steps, the step in flight, a pending switch — and the run's fixed wiring
  (event hub, liveness tracker, extensions); every part holds it;
- ``RunScope``: the cancel scope, its deadlines, the first reason it was cancelled for,
  the run's result (recorded by the loop task, it ends the run);
- ``FinalAnswer`` (in ``RunState``, made on first use): an answer replacing the last
  step's, the structured output, its validation;
- ``StepLoop``: the ids of the transcript's calls, the context manager, the steering
  cursor, and the run's two phases:
- ``GeneratePhase``: nothing beyond one call (attempts are its locals); adds the spend;
- ``ToolPhase``: the step's results (in ``Inflight``), the elicitation handler.

No part keeps the run handle (it is passed down to what extensions and tools are
given), so a run that has ended is freed by reference counting, not by the collector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..conversation import Conversation
from ..hooks import HookContext, run_created_callbacks
from ..liveness import (
    LivenessSnapshot,
    LivenessTracker,
    SnapshotObserver,
    SnapshotStream,
    SnapshotSubscription,
)
from ._errors import CleanupError, InvalidArgument, OutputValidationError
from ._event_hub import EventHub, EventStream, Listener, Overflow
from ._events import Event
from ._extension import (
    Extension,
    Settle,
    Switch,
    charge_extensions,
    extensions_for,
)
from ._final_answer import answer_of
from ._model import GenerateFunction, usage_problem
from ._options import RunConfig
from ._results import RunResult, StepResult
from ._run_scope import RunScope
from ._run_state import CancelReason, RunState, run_clock
from ._step import StepLoop
from ._types import FinishReason, Usage

if TYPE_CHECKING:
    from ..context import ContextManager

__all__ = ["ActiveRun"]


_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR


class ActiveRun:
    """A run in progress, yielded by :func:`open_run` (and ``agent.open_run``).

    Attach listeners or start iterating events right after entering the block: the loop
    starts only once the block first yields control, so nothing is missed.
    """

    __slots__ = (
        "_hub",
        "_liveness",
        "_loop",
        "_scope",
        "_state",
        "conversation",
        "run_id",
    )

    def __init__(self, config: RunConfig, conversation: Conversation) -> None:
        run_id = self.run_id = config.run_id
        self.conversation: Conversation = conversation
        """The run's live conversation (shared with the caller when one was passed)."""
        now = run_clock()
        ext = extensions_for(config)
        self._liveness = LivenessTracker(
            run_id, clock=now, durability="process-local" if ext.durable is None else "durable"
        )
        self._hub = EventHub()
        self._state = RunState(config, run_id, conversation, now, self._hub, self._liveness, ext)
        self._scope = RunScope()
        self._loop = StepLoop(self._state)
        for created in run_created_callbacks():
            created(self)

    def __repr__(self) -> str:
        return f"<ActiveRun {self.run_id} {self._liveness.status} step={self._state.step}>"

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Ask the run to stop; it ends with ``finish_reason == "aborted"``.

        Synchronous: it takes effect at the run's next checkpoint. Unfinished tool calls
        get ``cancelled`` results. Calling it again, or after the run ended, does nothing.
        """
        self._scope.cancel(CancelReason(_ABORTED, reason or "aborted"))

    def complete(self) -> None:
        """End every event stream now, without stopping the run (listeners stay)."""
        self._hub.close()

    # -- observing -------------------------------------------------------------------

    def add_listener(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for every event of ``type`` (``"*"``: every event).

        Listeners are plain callables, called in the run's task; one that raises is
        logged and counted, never allowed to break the run. Returns a remover.
        """
        return self._hub.add_listener(type, listener)

    def once(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for the first event of ``type`` only, then drop it.

        Returns a remover, like :meth:`add_listener`; :meth:`remove_listener` also
        removes it before it fired.
        """
        return self._hub.once(type, listener)

    def remove_listener(self, type: str, listener: Listener) -> None:
        """Remove ``listener`` for ``type`` (one registration, by :meth:`add_listener` or
        :meth:`once`); a listener that is not registered is ignored."""
        self._hub.remove_listener(type, listener)

    def events(self, *types: str, capacity: int = 256, overflow: Overflow = "block") -> EventStream:
        """Iterate the run's events (all, or only ``types``) until the terminal one."""
        return self._hub.stream(types, capacity=capacity, overflow=overflow)

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing now; never blocks, never changes anything."""
        return self._liveness.snapshot()

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change.

        The terminal snapshot is delivered exactly once, then the subscription ends.
        Returns a handle with ``unsubscribe()`` (also usable as a ``with`` block).
        """
        return self._liveness.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one."""
        return self._liveness.snapshots(capacity=capacity)

    @property
    def is_durably_started(self) -> bool:
        """True once this run's durable record is committed (never for in-memory runs)."""
        durable = self._state.ext.durable
        return durable is not None and durable.is_durably_started()

    async def wait_durably_started(self) -> None:
        """Return once the durable run record is committed (the run id is then safe to
        acknowledge: the run survives any later crash). Raises what stopped the write.

        Raises:
            InvalidArgument: the run is not durable (no ``durable=`` was given).
        """
        durable = self._state.ext.durable
        if durable is None:
            raise InvalidArgument(
                "this run is not durable: pass durable=Durable(engine=..., "
                "checkpoint_store=...) to open_run to make it so"
            )
        await durable.wait_durably_started()

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: steps so far, listener failures."""
        return {"steps": len(self._state.steps), "listener_errors": self._hub.listener_errors}

    # -- outcome ---------------------------------------------------------------------

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result (cached).

        Completed, errored and aborted runs all return a result; ``finish_reason`` says
        which (a failing ``on_run_end`` hook, the place where hosts commit the outcome,
        turns it into ``"error"``).

        Raises:
            CleanupError: the run ended but its clean-up did not finish (the durable
                terminal commit failed or timed out, ``on_run_end`` hooks overran
                ``cleanup_timeout``): an uncommitted run never reads as a success.
                Raised again on every call; ``.result`` is the run's own result.
        """
        await self._scope.wait_ended()
        return self._outcome()

    def _outcome(self) -> RunResult:
        """The recorded result (the run has ended), or its clean-up's failure raised."""
        result = self._scope.result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error
        return result

    async def closed(self) -> None:
        """Wait for the run's clean-up to finish: the transcript repaired, ``on_run_end``
        hooks run, a durable run's terminal record committed, the terminal event sent.

        The specification's cleanup acknowledgement, apart from ``result()``: it returns
        once the clean-up succeeded. Bound the wait with ``trio.fail_after`` if need be.

        Raises:
            CleanupError: the clean-up did not finish (the acknowledgement failed).
        """
        await self._scope.wait_ended()
        result = self._scope.result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error

    async def aclose(self) -> None:
        """Abort the run, end its event streams and wait until it has ended.

        The specification's dispose (``using``): for hosts that want leaving a scope to
        stop a run rather than wait for it, as leaving ``async with`` does. Calling it
        after the run ended only waits. It does not raise for a failed clean-up; call
        :meth:`closed` for that.
        """
        self.abort("the run was closed")
        self.complete()
        await self._scope.wait_ended()

    async def unwrap(self) -> RunResult:
        """The result, or the run's error raised when it ended with one."""
        result = await self.result()
        if result.finish_reason is _ERROR and result.error is not None:
            raise result.error
        return result

    async def output(self) -> Any:
        """The validated structured output.

        Raises:
            InvalidArgument: the run has no ``output`` type.
            OutputValidationError: the final answer never validated.
        """
        if self._state.config.output is None:
            raise InvalidArgument("this run has no output type: pass output= to get one")
        result = await self.unwrap()
        validation = result.schema_validation
        if validation is None or not validation.success:
            detail = validation.error if validation is not None else "no final answer"
            raise OutputValidationError(
                f"the run's final answer did not match the output type: {detail}. "
                "Raise schema_retries, or inspect result.content."
            )
        return result.output

    # -- the loop --------------------------------------------------------------------

    # -- for extensions --------------------------------------------------------------
    # What a feature attached through the extension seam may read and call. Nothing
    # here is on the loop's hot path.

    @property
    def config(self) -> RunConfig:
        """The run's validated configuration (it changes when a switch is applied)."""
        return self._state.config

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """The extensions attached to this run, in order."""
        return self._state.ext.all

    @property
    def ended_result(self) -> RunResult | None:
        """The run's result once it has ended (synchronous; ``None`` before)."""
        return self._scope.result

    def watch_cancellation(self, watcher: Callable[[float | None], None] | None) -> None:
        """Have ``watcher`` told, synchronously, when the run scope is cancelled
        (``None``) or gains a deadline (that deadline); ``None`` stops it. A feature
        that shields work in the loop task (the durable journal's writes) bounds that
        work from then on. One watcher at a time: a new one replaces the last."""
        self._scope.watcher = watcher

    @property
    def resumed(self) -> bool:
        """True for a run rebuilt from a durable journal (it ran before a crash)."""
        return bool(getattr(self._state.config.durable, "resumes_journal", False))

    @property
    def cancel_message(self) -> str | None:
        """Why the run was asked to stop (an abort, a deadline, a budget), if it was."""
        reason = self._scope.reason
        return None if reason is None else reason.message

    @property
    def current_step(self) -> int:
        """The step in progress (0 before the first)."""
        return self._state.step

    @property
    def steps(self) -> tuple[StepResult, ...]:
        """The steps completed so far."""
        return tuple(self._state.steps)

    @property
    def usage(self) -> Usage:
        """What the run has spent so far."""
        return self._state.usage

    def now(self) -> float:
        """The run's clock (trio's)."""
        return self._state.now()

    def wants(self, type: str) -> bool:
        """Whether anyone listens for events of ``type`` (build them only then)."""
        return self._hub.wants(type)

    async def emit(self, event: Event) -> None:
        """Send ``event`` to the run's listeners and streams (waits for a full stream)."""
        await self._hub.emit(event)

    def emit_nowait(self, event: Event) -> None:
        """Send ``event`` without waiting (a full stream merges or drops, as configured)."""
        self._hub.emit_nowait(event)

    def wrap_generate(self, generate: GenerateFunction) -> GenerateFunction:
        """``generate`` wrapped by every extension that wraps the run's model calls."""
        for extension in self._state.ext.wrap_generate:
            generate = extension.wrap_generate(generate)
        return generate

    def reconfigure(self, config: RunConfig) -> None:
        """Run on under ``config`` from the next step, as given. A new generate function
        is not wrapped here: pass ``run.wrap_generate(generate)`` in it, so the run's
        tracing (and any other wrapper) covers it exactly once."""
        self._state.config = config

    @property
    def pending_switch(self) -> Switch | None:
        """The switch a tool asked for in this step, not applied yet."""
        return self._state.switch

    def request_switch(self, switch: Switch) -> None:
        """Apply ``switch`` at the end of this step (``await switch.apply(run)``).

        One switch per step: a second request raises :class:`InvalidArgument`.
        """
        state = self._state
        if state.switch is not None:
            raise InvalidArgument("this step already switched the run's configuration")
        state.switch = switch

    def resume_from(self, steps: Sequence[StepResult], usage: Usage) -> None:
        """Take up the steps and spend of a run rebuilt from a journal (before its loop)."""
        state = self._state
        state.steps.extend(steps)
        state.usage = usage

    def charge(
        self, usage: Usage, *, step: int | None = None, spent: Any = None
    ) -> tuple[Settle, ...] | None:
        """Add ``usage`` (spent on the run's behalf, e.g. by a subagent) to the run and,
        when ``step`` is in flight, to that step; tell the extensions that count spending
        (``spent``, with ``source="charge"`` and ``spent`` as its ``detail``: a budget
        charges a ``BudgetSpent``, derived from ``usage`` when omitted). Synchronous, so
        it is safe during a cancellation. Returns what to pass to :meth:`enforce` (``None``:
        nothing to do).

        Raises:
            InvalidArgument: ``usage`` has a negative count (nothing is charged).
        """
        problem = usage_problem(usage)
        if problem is not None:
            raise InvalidArgument(f"run.charge() got unusable usage: {problem}")
        state = self._state
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
        self._scope.cancel(CancelReason(finish_reason, message))

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
        self._scope.add_deadline(when, reason)

    @property
    def started_at(self) -> float | None:
        """When the run's loop started, on the run's clock (``None`` before)."""
        return self._state.started_at

    def hook_context(self) -> HookContext:
        """What hooks are given about the run now (run id, agent, step, conversation,
        request context, principal): for a feature that calls user checks."""
        return self._state.hook_context()

    @property
    def answer(self) -> str:
        """The run's final answer as it stands (the last step's content, or what replaced
        it)."""
        answer = self._state.answer
        if answer is not None and answer.content_override is not None:
            return answer.content_override
        steps = self._state.steps
        return steps[-1].content if steps else ""

    def replace_answer(self, content: str) -> None:
        """Make ``content`` the run's final answer (an output guardrail's rewrite); a run
        with a structured ``output`` type validates it again. The transcript is the
        caller's to change."""
        state = self._state
        answer = answer_of(state)
        answer.content_override = content
        if state.config.output is not None:
            answer.validate(state, content)

    @property
    def context_manager(self) -> ContextManager | None:
        """The run's context manager (``context_management=``), or ``None``."""
        return self._loop.context

    def budget_remaining(self) -> Any:
        """What is left of the run's budget (a ``Budget``), or ``None`` without one."""
        for extension in self._state.ext.all:
            remaining = extension.budget_remaining(self)
            if remaining is not None:
                return remaining
        return None

    def budget_spent(self) -> Any:
        """What the run's budget counted so far (a ``BudgetSpent``), or ``None``."""
        for extension in self._state.ext.all:
            spent = extension.budget_spent()
            if spent is not None:
                return spent
        return None

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the run's trace, when an extension traces it."""
        for extension in self._state.ext.all:
            parent = extension.traceparent()
            if parent is not None:
                return parent
        return None

    # -- kernel internals some tests still reach ------------------------------------
    # (each delegates to the part that owns the state)

    @property
    def _cfg(self) -> RunConfig:
        return self._state.config

    @property
    def _result(self) -> RunResult | None:
        return self._scope.result
