"""A budget with callbacks: ``CostBudgetMonitor`` and ``create_cost_budget_monitor``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar, TypeAlias

import attrs

from .._core._errors import InvalidArgument
from .._pricing import DEFAULT_PRICES, PriceTable
from ._budget import Budget, BudgetExceeded, BudgetThreshold

if TYPE_CHECKING:
    from .._core._extension import Extension
    from .._core._options import RunConfig
    from ._tracker import BudgetTracker

__all__ = [
    "CostBudgetMonitor",
    "ExceededCallback",
    "ThresholdCallback",
    "create_cost_budget_monitor",
]

ThresholdCallback: TypeAlias = Callable[[BudgetThreshold], object]
"""``on_threshold``: a plain or async function of the crossed threshold."""
ExceededCallback: TypeAlias = Callable[[BudgetExceeded], object]
"""``on_exceeded``: a plain or async function of the exceeded limit."""


@attrs.frozen(kw_only=True)
class CostBudgetMonitor:
    """A budget plus the callbacks to call when it nears or crosses a limit.

    Pass it as a run's ``budget=``: the run tracks ``budget`` at ``prices`` and calls
    ``on_threshold(BudgetThreshold)`` / ``on_exceeded(BudgetExceeded)`` (plain or async
    functions) as well as emitting the ``budget.threshold`` / ``budget.exceeded``
    events. Callbacks live here rather than on :class:`Budget` because a budget is a
    record (it is stored with durable runs and handed to subagents); a monitor is
    behaviour. One monitor may serve many runs: each run is accounted separately.
    """

    option: ClassVar[str] = "budget"
    """The run option this feature stands for."""

    budget: Budget
    prices: PriceTable = DEFAULT_PRICES
    on_threshold: ThresholdCallback | None = None
    on_exceeded: ExceededCallback | None = None

    def tracker(self, *, run_id: str = "", model: str | None = None) -> BudgetTracker:
        """A fresh tracker for one run."""
        from ._tracker import BudgetTracker

        return BudgetTracker(self, run_id=run_id, model=model)

    def extension(self, config: RunConfig) -> Extension:
        """This monitor's part in one run: a fresh tracker, charged at the run's
        boundaries, whose crossings also call the callbacks."""
        from ._extension import budget_extension

        return budget_extension(self, config)


def create_cost_budget_monitor(
    max_cost_usd: float,
    *,
    thresholds: Iterable[float] = (0.5, 0.8),
    on_threshold: ThresholdCallback | None = None,
    on_exceeded: ExceededCallback | None = None,
    prices: PriceTable = DEFAULT_PRICES,
) -> CostBudgetMonitor:
    """A monitor that stops a run at ``max_cost_usd`` and reports ``thresholds`` of it.

    For a monitor over other limits too, build ``CostBudgetMonitor(budget=Budget(...),
    ...)`` directly.
    """
    if not isinstance(prices, PriceTable):
        raise InvalidArgument(f"prices= must be a PriceTable, not {type(prices).__name__}")
    for name, callback in (("on_threshold", on_threshold), ("on_exceeded", on_exceeded)):
        if callback is not None and not callable(callback):
            raise InvalidArgument(f"{name}= must be callable, not {callback!r}")
    return CostBudgetMonitor(
        budget=Budget(max_cost_usd=max_cost_usd, thresholds=tuple(thresholds)),
        prices=prices,
        on_threshold=on_threshold,
        on_exceeded=on_exceeded,
    )
