"""The state one run carries, shared by the phases of its loop.

``ActiveRun`` is assembled from phases (``_generate_phase``, ``_tool_phase``, ``_step``)
that all read and write this state; keeping it in one slotted base class makes each
phase a module of its own without a per-step indirection.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import attrs
import msgspec
import trio

from ..conversation import Conversation
from ..hooks import HookContext
from ..liveness import DeclaredWait, LivenessTracker
from ._errors import InvalidArgument
from ._event_hub import EventHub
from ._events import BudgetLimitExceeded, BudgetThresholdCrossed, Event
from ._extension import Extension, Extensions, Switch, extensions_for
from ._model import GenerateFunction
from ._options import RunConfig
from ._results import RunResult, SchemaValidation, StepResult
from ._types import FinishReason, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    from ..budgets import BudgetStatus, BudgetTracker
    from ..context import ContextManager
    from ..steering import SteeringCursor

__all__ = ["NO_USAGE", "CancelReason", "Inflight", "RunState", "is_shutdown", "only_cancelled"]

logger = logging.getLogger("operative.run")

NO_USAGE = Usage()


def only_cancelled(exc: BaseException | None) -> bool:
    """True for a ``trio.Cancelled``, or an exception group holding nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def is_shutdown(exc: BaseException | None) -> bool:
    """True when ``exc`` stops the process rather than the run: a ``trio.Cancelled``, a
    ``KeyboardInterrupt`` (Ctrl-C), a ``SystemExit``, or a group holding nothing else.

    A run that meets one records nothing terminal: a durable run releases its lease and
    is finished by whoever recovers it.
    """
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(_SHUTDOWN)[1] is None
    return isinstance(exc, _SHUTDOWN)


_SHUTDOWN = (trio.Cancelled, KeyboardInterrupt, SystemExit)


@attrs.frozen
class CancelReason:
    """Why the run scope was cancelled; the first reason recorded wins.

    ``shutdown`` marks a cancellation that ends the process, not the run (Ctrl-C in
    the block running it): nothing terminal is recorded.
    """

    finish_reason: FinishReason
    message: str
    shutdown: bool = False


class Inflight:
    """The step in progress: what clean-up needs to repair if the step is cut."""

    __slots__ = (
        "calls",
        "completed",
        "content",
        "generated",
        "results",
        "settled",
        "step",
        "stop_reason",
        "usage",
    )

    def __init__(self, step: int) -> None:
        self.step = step
        self.generated = False
        self.settled = False
        """The step's tool results are in the transcript (clean-up must not add them)."""
        self.completed = False
        self.stop_reason: str | None = None
        self.content = ""
        self.calls: tuple[ToolCall, ...] = ()
        self.results: list[ToolResult | None] = []
        self.usage = NO_USAGE


class RunState:
    """Everything a run knows about itself; methods here are shared by every phase."""

    __slots__ = (
        "_budget",
        "_budget_pending",
        "_cancel_reason",
        "_cfg",
        "_content_override",
        "_context",
        "_deadlines",
        "_done",
        "_elicit",
        "_ext",
        "_hub",
        "_inflight",
        "_liveness",
        "_now",
        "_output",
        "_recovered_error",
        "_result",
        "_schema_attempts",
        "_schema_validation",
        "_scope",
        "_seen_call_ids",
        "_steering",
        "_steering_wait",
        "_step",
        "_steps",
        "_switch",
        "_usage",
        "conversation",
        "run_id",
    )

    def __init__(self, config: RunConfig, conversation: Conversation) -> None:
        self._cfg = config
        self.run_id: str = config.run_id
        self.conversation: Conversation = conversation
        """The run's live conversation (shared with the caller when one was passed)."""
        self._hub = EventHub()
        self._scope = trio.CancelScope()
        self._cancel_reason: CancelReason | None = None
        self._deadlines: list[tuple[float, CancelReason]] = []
        self._done = trio.Event()
        self._result: RunResult | None = None
        self._steps: list[StepResult] = []
        self._usage = Usage()
        self._step = 0
        self._ext: Extensions = extensions_for(config)
        """The features attached to this run, by the boundaries they override."""
        self._liveness = LivenessTracker(
            self.run_id,
            clock=self._clock_now,
            durability="process-local" if self._ext.durable is None else "durable",
        )
        self._elicit: Callable[[Any], Awaitable[Any]] | None = (
            self._elicit_while_waiting if config.on_elicitation is not None else None
        )
        self._now = trio.current_time
        self._inflight: Inflight | None = None
        self._seen_call_ids: set[str] = set()
        self._schema_attempts = 0
        self._schema_validation: SchemaValidation | None = None
        self._output: Any = None
        self._content_override: str | None = None
        self._recovered_error: str | None = None
        self._switch: Any = None
        """A pending configuration switch (a handoff), applied at the step's end."""
        # Optional subsystems are imported only by runs that use them.
        self._budget: BudgetTracker | None = None
        if config.budget is not None:
            from ..budgets import BudgetTracker

            self._budget = BudgetTracker(config.budget, run_id=self.run_id)
        self._budget_pending: BudgetStatus | None = None
        self._steering_wait: DeclaredWait | None = None
        self._steering: SteeringCursor | None = None
        if config.steering is not None:
            from ..steering import SteeringCursor

            self._steering = SteeringCursor(
                config.steering,
                self.run_id,
                on_park=self._steering_parked,
                on_unpark=self._steering_resumed,
            )
        self._context: ContextManager | None = None
        if config.context_management is not None:
            from ..context import ContextManager

            self._context = ContextManager(config.context_management)

    def _cancel(self, reason: CancelReason) -> None:
        if self._done.is_set():
            return
        if self._cancel_reason is None:
            self._cancel_reason = reason
        self._scope.cancel()

    def _add_deadline(self, when: float, reason: CancelReason) -> None:
        """Bound the run scope by ``when`` (trio time); ``reason`` says why if it fires."""
        self._deadlines.append((when, reason))
        self._scope.deadline = min(self._scope.deadline, when)

    def _deadline_reason(self) -> CancelReason | None:
        """The reason of the deadline that fired (the earliest one), if any did."""
        if not self._deadlines:
            return None
        return min(self._deadlines, key=lambda item: item[0])[1]

    async def _elicit_while_waiting(self, request: Any) -> Any:
        """The host answers a tool's question: a declared wait, never a stall."""
        handler = self._cfg.on_elicitation
        assert handler is not None
        with self._liveness.waiting("elicitation", detail=str(request.request_id)):
            return await handler(request)

    def _steering_parked(self, state: object) -> None:
        self._steering_wait = self._liveness.declare_wait("steering")

    def _steering_resumed(self) -> None:
        self._liveness.clear_wait(self._steering_wait)
        self._steering_wait = None

    def _clock_now(self) -> float:
        return self._now()

    def _hook_context(self) -> HookContext:
        cfg = self._cfg
        return HookContext(
            run_id=self.run_id,
            agent_name=cfg.agent_name,
            step=self._step,
            conversation=self.conversation.current,
            request_context=cfg.request_context,
            principal=cfg.principal,
        )

    # -- for extensions --------------------------------------------------------------
    # What a feature attached through the extension seam may read and call. Nothing
    # here is on the loop's hot path.

    @property
    def config(self) -> RunConfig:
        """The run's validated configuration (it changes when a switch is applied)."""
        return self._cfg

    @property
    def extensions(self) -> tuple[Extension, ...]:
        """The extensions attached to this run, in order."""
        return self._ext.all

    @property
    def ended_result(self) -> RunResult | None:
        """The run's result once it has ended (synchronous; ``None`` before)."""
        return self._result

    @property
    def resumed(self) -> bool:
        """True for a run rebuilt from a durable journal (it ran before a crash)."""
        return bool(getattr(self._cfg.durable, "resumes_journal", False))

    @property
    def cancel_message(self) -> str | None:
        """Why the run was asked to stop (an abort, a deadline, a budget), if it was."""
        reason = self._cancel_reason
        return None if reason is None else reason.message

    @property
    def current_step(self) -> int:
        """The step in progress (0 before the first)."""
        return self._step

    @property
    def steps(self) -> tuple[StepResult, ...]:
        """The steps completed so far."""
        return tuple(self._steps)

    @property
    def usage(self) -> Usage:
        """What the run has spent so far."""
        return self._usage

    def now(self) -> float:
        """The run's clock (trio's)."""
        return self._now()

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
        for extension in self._ext.wrap_generate:
            generate = extension.wrap_generate(generate)
        return generate

    def reconfigure(self, config: RunConfig) -> None:
        """Run on under ``config`` from the next step (its generate is wrapped here)."""
        self._cfg = msgspec.structs.replace(config, generate=self.wrap_generate(config.generate))

    @property
    def pending_switch(self) -> Switch | None:
        """The switch a tool asked for in this step, not applied yet."""
        return cast("Switch | None", self._switch)

    def request_switch(self, switch: Switch) -> None:
        """Apply ``switch`` at the end of this step (``await switch.apply(run)``).

        One switch per step: a second request raises :class:`InvalidArgument`.
        """
        if self._switch is not None:
            raise InvalidArgument("this step already switched the run's configuration")
        self._switch = switch

    def resume_from(self, steps: Sequence[StepResult], usage: Usage) -> None:
        """Take up the steps and spend of a run rebuilt from a journal (before its loop)."""
        self._steps.extend(steps)
        self._usage = usage

    def charge(self, usage: Usage, *, step: int | None = None, spent: Any = None) -> Any:
        """Add ``usage`` (spent on the run's behalf, e.g. by a subagent) to the run and,
        when ``step`` is in flight, to that step; charge the budget with ``spent`` (a
        ``BudgetSpent``; derived from ``usage`` when omitted). Synchronous, so it is safe
        during a cancellation. Returns the budget status to pass to :meth:`enforce`."""
        self._usage = self._usage + usage
        inflight = self._inflight
        if inflight is not None and inflight.step == step:
            inflight.usage = inflight.usage + usage
        tracker = self._budget
        if tracker is None:
            return None
        if spent is None:
            from ..budgets import BudgetSpent, usage_tokens

            spent = BudgetSpent(tokens=usage_tokens(usage), requests=0)
        return tracker.charge_child(spent)

    async def enforce(self, status: Any) -> None:
        """Report a budget status from :meth:`charge`; end the run if a limit is crossed."""
        if status is not None and self._budget is not None:
            await self._enforce_budget(status)

    def budget_remaining(self) -> Any:
        """What is left of the run's budget (a ``Budget``), or ``None`` without one."""
        if self._budget is None:
            return None
        return self._budget.remaining(self._now())

    def budget_spent(self) -> Any:
        """What the run's budget counted so far (a ``BudgetSpent``), or ``None``."""
        return None if self._budget is None else self._budget.spent

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the run's trace, when an extension traces it."""
        for extension in self._ext.all:
            parent = extension.traceparent()
            if parent is not None:
                return parent
        return None

    # -- budgets ---------------------------------------------------------------------

    def _budget_events(self, status: BudgetStatus) -> list[Event]:
        """The ``budget.threshold`` / ``budget.exceeded`` events ``status`` calls for."""
        if status.unpriced_model is not None:
            logger.warning(
                "run %s: usage of model %r has no price; it counts toward max_tokens but "
                "not toward max_cost_usd (add it to the price table)",
                self.run_id,
                status.unpriced_model,
            )
        hub = self._hub
        events: list[Event] = []
        if hub.wants("budget.threshold"):
            events.extend(
                BudgetThresholdCrossed(
                    run_id=self.run_id,
                    step=self._step,
                    time=self._now(),
                    limit=threshold.limit,
                    fraction=threshold.fraction,
                    maximum=threshold.maximum,
                    spent=threshold.spent,
                )
                for threshold in status.thresholds
            )
        exceeded = status.exceeded
        if exceeded is not None and hub.wants("budget.exceeded"):
            events.append(
                BudgetLimitExceeded(
                    run_id=self.run_id,
                    step=self._step,
                    time=self._now(),
                    limit=exceeded.limit,
                    maximum=exceeded.maximum,
                    spent=exceeded.spent,
                    message=exceeded.message,
                )
            )
        return events

    async def _report_budget(self, status: BudgetStatus) -> None:
        """Emit threshold / exceeded events and call the monitor's callbacks."""
        for event in self._budget_events(status):
            await self._hub.emit(event)
        assert self._budget is not None
        await self._budget.notify(status)

    async def _enforce_budget(self, status: BudgetStatus) -> None:
        """Report ``status``; when a limit is crossed, end the run here.

        The run scope is cancelled with the budget's reason and the checkpoint that
        follows raises ``Cancelled``: whatever was in flight is repaired like an abort,
        and the run ends with ``finish_reason == "budget-exceeded"``.
        """
        if not status.reportable and status.unpriced_model is None:
            return
        await self._report_budget(status)
        exceeded = status.exceeded
        if exceeded is not None:
            self._cancel(CancelReason(FinishReason.BUDGET_EXCEEDED, exceeded.message))
            await trio.lowlevel.checkpoint()

    async def _settle_pending_budget(self) -> None:
        """Enforce the budget status the last generate call left behind, if any."""
        pending = self._budget_pending
        if pending is not None:
            self._budget_pending = None
            await self._enforce_budget(pending)
