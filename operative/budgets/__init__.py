"""Token, cost, request, tool-call and wall-clock budgets for a run.

A :class:`Budget` is a record of limits, and the feature ``budget=`` attaches to a run:
each run gets a ``BudgetExtension`` with its own :class:`BudgetTracker`, charged at
the run's boundaries (the extension seam, ``operative._core._extension``): before each
generate attempt (:meth:`~BudgetTracker.charge_request`), after each attempt that
reported usage (:meth:`~BudgetTracker.charge_usage`), before a step's tools run
(:meth:`~BudgetTracker.charge_tool_calls`). Every charge is synchronous and pure
accounting; it returns a :class:`BudgetStatus` that says whether a limit was crossed
(the run then ends with ``finish_reason == "budget-exceeded"``) and which warning
thresholds were newly crossed (each is reported once per run and limit).
``max_duration`` is not charged: it becomes the run scope's deadline
(:attr:`~BudgetTracker.deadline`).

A limit means "at most this much": a run may spend exactly ``max_tokens`` tokens, and
the next generate attempt is then refused because nothing is left. Usage is charged
after the fact (the tokens are spent whatever the budget says), so a run can end a
little past its token or cost limit; requests and tool calls are refused before they
happen, so those limits are never passed.

:func:`create_cost_budget_monitor` wraps a cost budget with ``on_threshold`` /
``on_exceeded`` callbacks; pass it wherever a ``Budget`` is accepted.

::

    budgets/
    ├── _budget.py     Budget and the records a charge reports
    ├── _monitor.py    CostBudgetMonitor: a budget with callbacks
    ├── _tracker.py    BudgetTracker: one run's accounting
    └── _extension.py  BudgetExtension: the tracker charged at the run's boundaries
"""

from __future__ import annotations

from .._pricing import DEFAULT_PRICES, ModelPrice, PriceTable, cost_of
from ._budget import (
    Budget,
    BudgetExceeded,
    BudgetExceededError,
    BudgetLimit,
    BudgetSpent,
    BudgetStatus,
    BudgetThreshold,
    usage_tokens,
)
from ._monitor import (
    CostBudgetMonitor,
    ExceededCallback,
    ThresholdCallback,
    create_cost_budget_monitor,
)
from ._tracker import BudgetTracker

__all__ = [
    "DEFAULT_PRICES",
    "Budget",
    "BudgetExceeded",
    "BudgetExceededError",
    "BudgetLimit",
    "BudgetSpent",
    "BudgetStatus",
    "BudgetThreshold",
    "BudgetTracker",
    "CostBudgetMonitor",
    "ExceededCallback",
    "ModelPrice",
    "PriceTable",
    "ThresholdCallback",
    "cost_of",
    "create_cost_budget_monitor",
    "usage_tokens",
]
