"""A run's budget, enforced: charges, threshold events, and the end of an overspent run.

Only a run configured with ``budget=`` has one (the loop tests ``budget is None`` once
per boundary otherwise). A generate call's usage is charged as soon as it is known,
but enforced once the answer is in the transcript — it was paid for — so the status it
leaves is kept in :attr:`RunBudget.pending` until then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ._events import BudgetLimitExceeded, BudgetThresholdCrossed, Event
from ._run_state import CancelReason, RunState
from ._types import FinishReason

if TYPE_CHECKING:
    from ..budgets import Budget, BudgetStatus, BudgetTracker, CostBudgetMonitor

__all__ = ["RunBudget"]

logger = logging.getLogger("operative.run")


class RunBudget:
    """The budget tracker of one run and what a crossed limit does to the run."""

    __slots__ = ("_cancel", "_state", "pending", "timed", "tracker")

    def __init__(
        self,
        budget: Budget | CostBudgetMonitor,
        state: RunState,
        cancel: Callable[[CancelReason], None],
    ) -> None:
        from ..budgets import BudgetTracker  # imported only by runs with a budget

        self.tracker: BudgetTracker = BudgetTracker(budget, run_id=state.run_id)
        self.timed = self.tracker.budget.max_duration is not None
        """True when the budget limits the run's duration (checked at every step)."""
        self.pending: BudgetStatus | None = None
        """The status the last generate call left, to enforce once its answer is
        recorded (written by ``GeneratePhase``, cleared by :meth:`settle_pending`)."""
        self._state = state
        self._cancel = cancel

    def events(self, status: BudgetStatus) -> list[Event]:
        """The ``budget.threshold`` / ``budget.exceeded`` events ``status`` calls for."""
        state = self._state
        if status.unpriced_model is not None:
            logger.warning(
                "run %s: usage of model %r has no price; it counts toward max_tokens but "
                "not toward max_cost_usd (add it to the price table)",
                state.run_id,
                status.unpriced_model,
            )
        hub = state.hub
        events: list[Event] = []
        if hub.wants("budget.threshold"):
            events.extend(
                BudgetThresholdCrossed(
                    run_id=state.run_id,
                    step=state.step,
                    time=state.now(),
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
                    run_id=state.run_id,
                    step=state.step,
                    time=state.now(),
                    limit=exceeded.limit,
                    maximum=exceeded.maximum,
                    spent=exceeded.spent,
                    message=exceeded.message,
                )
            )
        return events

    async def report(self, status: BudgetStatus) -> None:
        """Emit threshold / exceeded events and call the monitor's callbacks."""
        hub = self._state.hub
        for event in self.events(status):
            await hub.emit(event)
        await self.tracker.notify(status)

    async def enforce(self, status: BudgetStatus) -> None:
        """Report ``status``; when a limit is crossed, end the run here.

        The run scope is cancelled with the budget's reason and the checkpoint that
        follows raises ``Cancelled``: whatever was in flight is repaired like an abort,
        and the run ends with ``finish_reason == "budget-exceeded"``.
        """
        if not status.reportable and status.unpriced_model is None:
            return
        await self.report(status)
        exceeded = status.exceeded
        if exceeded is not None:
            self._cancel(CancelReason(FinishReason.BUDGET_EXCEEDED, exceeded.message))
            await trio.lowlevel.checkpoint()

    async def settle_pending(self) -> None:
        """Enforce the budget status the last generate call left behind, if any."""
        pending = self.pending
        if pending is not None:
            self.pending = None
            await self.enforce(pending)
