"""A run's budget, enforced: the extension ``budget=`` attaches to each run.

A :class:`~operative.budgets.Budget` (or a :class:`CostBudgetMonitor`) is a feature:
each run it configures gets a :class:`BudgetExtension` with a fresh
:class:`BudgetTracker`, charged at the run's boundaries::

    attach          the clock starts; max_duration becomes a deadline of the run scope
    wrap_step       duration thresholds, as each step starts
    spent           each attempt's usage (a failed one's too), a compaction's summary,
                    a subagent's spend (``run.charge``): charged at once, enforced once
                    what it paid for is recorded (an answer: before its calls run)
    wrap_generate   a request, before each generate attempt (retries too) calls the model
    wrap_tool       the step's calls, all or nothing, before any of them runs
    run_ending      the overrun reported, when the deadline ended the run

Only a budget with ``max_duration`` overrides the three timed boundaries
(:class:`TimedBudgetExtension`), so an untimed budget costs the loop nothing there.

A crossed threshold emits ``budget.threshold`` (and calls a monitor's ``on_threshold``);
a crossed limit emits ``budget.exceeded`` (and calls ``on_exceeded``), then stops the
run with ``finish_reason == "budget-exceeded"``: whatever was in flight is repaired like
an abort.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

import trio

from .._core._events import BudgetLimitExceeded, BudgetThresholdCrossed, Event
from .._core._extension import Execute, Extension, Settle, SpendSource, Step
from .._core._types import FinishReason, ToolCall, Usage
from ._budget import Budget, BudgetSpent, BudgetStatus, usage_tokens
from ._monitor import CostBudgetMonitor
from ._tracker import BudgetTracker

if TYPE_CHECKING:
    from .._core._control import RunControl
    from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
    from .._core._options import RunConfig
    from .._core._results import RunResult, StepResult

__all__ = ["BudgetExtension", "TimedBudgetExtension", "budget_extension"]

logger = logging.getLogger("operative.run")

_EXCEEDED = FinishReason.BUDGET_EXCEEDED


def budget_extension(budget: Budget | CostBudgetMonitor, config: RunConfig) -> BudgetExtension:
    """The extension that enforces ``budget`` in the run ``config`` configures."""
    limits = budget.budget if isinstance(budget, CostBudgetMonitor) else budget
    timed = limits.max_duration is not None
    kind = TimedBudgetExtension if timed else BudgetExtension
    return kind(BudgetTracker(budget, run_id=config.run_id))


class BudgetExtension(Extension):
    """One run's budget: its tracker, charged at the run's boundaries, and what a crossed
    threshold or limit does to the run. It never keeps the run (each boundary is given
    it), so an ended run is freed by reference counting."""

    __slots__ = ("tracker",)

    def __init__(self, tracker: BudgetTracker) -> None:
        self.tracker = tracker

    # -- boundaries ------------------------------------------------------------------

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
        tracker = self.tracker
        if source == "charge":
            # A subagent passes what its own budget counted (requests, tool calls, cost).
            spent = detail if detail is not None else BudgetSpent(tokens=usage_tokens(usage))
            status = tracker.charge_child(spent)
        else:
            status = tracker.charge_usage(usage, model)
        if not status.reportable and status.unpriced_model is None:
            return None
        return functools.partial(self.enforce, status=status)

    def wrap_generate(self, run: RunControl, generate: GenerateFunction) -> GenerateFunction:
        tracker = self.tracker

        async def counted(request: GenerateRequest) -> GenerateResponse:
            # A request counts before the model is called; past max_requests, it is not.
            status = tracker.charge_request()
            if status.reportable:
                await self.enforce(run, status)
            return await generate(request)

        return counted

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        # All or nothing: when the step's calls would pass max_tool_calls, none runs.
        status = self.tracker.charge_tool_calls(len(calls))
        if status.reportable:
            await self.enforce(run, status)
        return execute

    # -- queries (``RunControl.query``) ----------------------------------------------

    def budget_remaining(self, run: RunControl) -> Budget:
        """What is left of the budget, as a budget for a child run (a subagent)."""
        return self.tracker.remaining(run.now())

    def budget_spent(self, run: RunControl) -> BudgetSpent:
        """What the budget has counted so far."""
        return self.tracker.spent

    # -- reporting -------------------------------------------------------------------

    def events(self, run: RunControl, status: BudgetStatus) -> list[Event]:
        """The ``budget.threshold`` / ``budget.exceeded`` events ``status`` calls for."""
        if status.unpriced_model is not None:
            logger.warning(
                "run %s: usage of model %r has no price; it counts toward max_tokens but "
                "not toward max_cost_usd (add it to the price table)",
                run.run_id,
                status.unpriced_model,
            )
        events: list[Event] = []
        if run.wants("budget.threshold"):
            events.extend(
                BudgetThresholdCrossed(
                    run_id=run.run_id,
                    step=run.current_step,
                    time=run.now(),
                    limit=threshold.limit,
                    fraction=threshold.fraction,
                    maximum=threshold.maximum,
                    spent=threshold.spent,
                )
                for threshold in status.thresholds
            )
        exceeded = status.exceeded
        if exceeded is not None and run.wants("budget.exceeded"):
            events.append(
                BudgetLimitExceeded(
                    run_id=run.run_id,
                    step=run.current_step,
                    time=run.now(),
                    limit=exceeded.limit,
                    maximum=exceeded.maximum,
                    spent=exceeded.spent,
                    message=exceeded.message,
                )
            )
        return events

    async def enforce(self, run: RunControl, status: BudgetStatus) -> None:
        """Report ``status`` (events, then the monitor's callbacks); when a limit is
        crossed, stop the run here.

        The run scope is cancelled with the budget's reason and the checkpoint that
        follows raises ``Cancelled``: whatever was in flight is repaired like an abort,
        and the run ends with ``finish_reason == "budget-exceeded"``.
        """
        if not status.reportable and status.unpriced_model is None:
            return
        for event in self.events(run, status):
            await run.emit(event)
        await self.tracker.notify(status)
        exceeded = status.exceeded
        if exceeded is not None:
            run.stop(_EXCEEDED, exceeded.message)
            await trio.lowlevel.checkpoint()


class TimedBudgetExtension(BudgetExtension):
    """A budget with ``max_duration``: the run's deadline, and thresholds on its time."""

    __slots__ = ("overrun",)

    def __init__(self, tracker: BudgetTracker) -> None:
        super().__init__(tracker)
        self.overrun: BudgetStatus | None = None
        """What the deadline's passing reported, until ``run_ending`` reports it."""

    def attach(self, run: RunControl, nursery: trio.Nursery) -> None:
        # Before the loop starts, so the deadline bounds whatever the run does first.
        tracker = self.tracker
        tracker.start(run.now())
        assert tracker.deadline is not None
        run.add_deadline(tracker.deadline, _EXCEEDED, self._describe_overrun)

    def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
        async def timed() -> StepResult:
            await self.enforce(run, self.tracker.check_time(run.now()))
            return await body()

        return timed

    def _describe_overrun(self) -> str:
        """Why the run ended, once the deadline has ended it: how long it ran."""
        status = self.overrun = self.tracker.check_time(trio.current_time())
        exceeded = status.exceeded
        return exceeded.message if exceeded is not None else "budget exceeded: duration"

    async def run_ending(self, run: RunControl, result: RunResult, *, shutdown: bool) -> RunResult:
        status = self.overrun
        if status is None:
            return result
        self.overrun = None
        for event in self.events(run, status):
            run.emit_nowait(event)
        try:
            await self.tracker.notify(status)
        except Exception:
            logger.exception("budget callback of run %s raised", run.run_id)
            raise
        return result
