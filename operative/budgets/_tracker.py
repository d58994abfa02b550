"""One run's accounting against a budget: ``BudgetTracker`` (the package's docstring
says when a run charges it and what a limit means)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TypeVar

import trio

from .._core._errors import InvalidArgument
from .._core._types import Usage
from .._pricing import DEFAULT_PRICES, PriceTable, cost_of
from ._budget import (
    OK,
    Budget,
    BudgetExceeded,
    BudgetLimit,
    BudgetSpent,
    BudgetStatus,
    BudgetThreshold,
    charged_tokens,
    usage_tokens,
)
from ._monitor import CostBudgetMonitor

__all__ = ["BudgetTracker"]

_Info = TypeVar("_Info")


class BudgetTracker:
    """One run's accounting against a :class:`Budget` (or a :class:`CostBudgetMonitor`).

    Plain synchronous bookkeeping, never shared between runs. ``model`` is the model
    to price usage with when a charge does not name one; ``prices`` defaults to the
    monitor's table, else :data:`DEFAULT_PRICES`.
    """

    __slots__ = (
        "_cost",
        "_exceeded",
        "_notified_exceeded",
        "_reported",
        "_requests",
        "_tokens",
        "_tool_calls",
        "_unpriced",
        "_unpriced_models",
        "budget",
        "deadline",
        "model",
        "monitor",
        "prices",
        "run_id",
        "started_at",
    )

    def __init__(
        self,
        budget: Budget | CostBudgetMonitor,
        *,
        prices: PriceTable | None = None,
        run_id: str = "",
        model: str | None = None,
    ) -> None:
        if isinstance(budget, CostBudgetMonitor):
            self.monitor: CostBudgetMonitor | None = budget
            self.budget: Budget = budget.budget
            self.prices: PriceTable = budget.prices if prices is None else prices
        elif isinstance(budget, Budget):
            self.monitor = None
            self.budget = budget
            self.prices = DEFAULT_PRICES if prices is None else prices
        else:
            raise InvalidArgument(
                f"budget= must be a Budget or a CostBudgetMonitor, not {type(budget).__name__}"
            )
        self.run_id = run_id
        self.model = model
        self.started_at: float | None = None
        self.deadline: float | None = None
        """Trio time at which ``max_duration`` runs out (``None``: no limit, or not started)."""
        self._tokens = 0
        self._cost = 0.0
        self._requests = 0
        self._tool_calls = 0
        self._unpriced = 0
        self._unpriced_models: set[str] = set()
        self._reported: set[tuple[BudgetLimit, float]] = set()
        self._exceeded: BudgetExceeded | None = None
        self._notified_exceeded = False

    # -- the run's clock -----------------------------------------------------------------

    def start(self, now: float) -> None:
        """Start the clock at trio time ``now`` (call once, when the run starts)."""
        self.started_at = now
        if self.budget.max_duration is not None:
            self.deadline = now + self.budget.max_duration

    def check_time(self, now: float) -> BudgetStatus:
        """Duration thresholds crossed by ``now``, and whether the deadline has passed.

        Call it at step boundaries for ``budget.threshold`` warnings on time, and after
        the run scope's deadline fired, to get the :class:`BudgetExceeded` to report.
        """
        maximum = self.budget.max_duration
        if maximum is None or self.started_at is None:
            return self._status()
        elapsed = now - self.started_at
        exceeded = None
        if self.deadline is not None and now >= self.deadline:
            exceeded = self._exceed("duration", maximum, elapsed)
        return self._status(exceeded, self._crossings("duration", maximum, elapsed))

    # -- charges ------------------------------------------------------------------------

    def charge_request(self) -> BudgetStatus:
        """Count one generate attempt, unless the budget has no room for it.

        Call before every attempt (retries included). The attempt is refused (the status
        is exceeded, and it is not counted) when it would pass ``max_requests``, or when
        the token or cost budget is already used up.
        """
        if self._exceeded is not None:
            return self._status()
        budget = self.budget
        if budget.max_requests is not None and self._requests + 1 > budget.max_requests:
            return self._status(self._exceed("requests", budget.max_requests, self._requests + 1))
        if budget.max_tokens is not None and self._tokens >= budget.max_tokens:
            return self._status(self._exceed("tokens", budget.max_tokens, self._tokens))
        if budget.max_cost_usd is not None and self._cost >= budget.max_cost_usd:
            return self._status(self._exceed("cost_usd", budget.max_cost_usd, self._cost))
        self._requests += 1
        if budget.max_requests is None:
            return OK
        return self._status(None, self._crossings("requests", budget.max_requests, self._requests))

    def charge_tool_calls(self, count: int) -> BudgetStatus:
        """Count a step's ``count`` tool calls before they run, unless that would pass
        ``max_tool_calls`` (then none is counted and the status is exceeded)."""
        if count < 0:
            raise InvalidArgument(f"count must be >= 0, not {count!r}")
        if self._exceeded is not None:
            return self._status()
        maximum = self.budget.max_tool_calls
        if maximum is not None and self._tool_calls + count > maximum:
            return self._status(self._exceed("tool_calls", maximum, self._tool_calls + count))
        self._tool_calls += count
        if maximum is None:
            return OK
        return self._status(None, self._crossings("tool_calls", maximum, self._tool_calls))

    def charge_usage(
        self, usage: Usage | None, model: str | None = None, *, cost_usd: float | None = None
    ) -> BudgetStatus:
        """Add what one generate attempt spent; check the token and cost limits.

        ``model`` (else the tracker's ``model``) prices the usage; ``cost_usd``, when the
        provider reported the cost itself, is used instead. Usage that cannot be priced
        is counted in ``spent.unpriced_tokens`` and, under a cost limit, reported once
        per model through ``BudgetStatus.unpriced_model``: it does not count towards
        ``max_cost_usd`` (operative never guesses a price; add one to the table).
        """
        if usage is None:
            return self._status()
        tokens = charged_tokens(usage, "BudgetTracker.charge_usage")
        if cost_usd is not None and not cost_usd >= 0:
            raise InvalidArgument(
                f"BudgetTracker.charge_usage was given cost_usd={cost_usd!r}: a cost is a "
                "number >= 0, and a budget is never credited"
            )
        self._tokens += tokens
        unpriced: str | None = None
        cost = cost_usd if cost_usd is not None else self._price(usage, model)
        if cost is None:
            self._unpriced += tokens
            name = model or self.model or ""
            if self.budget.max_cost_usd is not None and name not in self._unpriced_models:
                self._unpriced_models.add(name)
                unpriced = name
        else:
            self._cost += cost
        return self._check_spend(unpriced)

    def preview_usage(
        self, usage: Usage, model: str | None = None, *, cost_usd: float | None = None
    ) -> BudgetStatus:
        """Would the run be over its token or cost limit with ``usage`` (the running
        usage of an attempt still streaming) added? Charges nothing, reports no
        thresholds; charge the attempt's final usage with :meth:`charge_usage`."""
        budget = self.budget
        if budget.max_tokens is not None:
            tokens = self._tokens + usage_tokens(usage)
            if tokens > budget.max_tokens:
                return BudgetStatus(exceeded=self._record("tokens", budget.max_tokens, tokens))
        if budget.max_cost_usd is not None:
            cost = cost_usd if cost_usd is not None else self._price(usage, model)
            if cost is not None and self._cost + cost > budget.max_cost_usd:
                return BudgetStatus(
                    exceeded=self._record("cost_usd", budget.max_cost_usd, self._cost + cost)
                )
        return OK

    def charge_child(self, spent: BudgetSpent) -> BudgetStatus:
        """Add what a child run (a subagent given :meth:`remaining`) spent.

        Raises:
            InvalidArgument: a count of ``spent`` is negative (a budget is never credited).
        """
        for name in ("tokens", "cost_usd", "requests", "tool_calls", "unpriced_tokens"):
            value = getattr(spent, name)
            if not value >= 0:
                raise InvalidArgument(
                    f"BudgetTracker.charge_child was given BudgetSpent with {name}={value!r}: "
                    "what a child run spent is never negative, and a budget is never credited"
                )
        self._tokens += spent.tokens
        self._cost += spent.cost_usd
        self._unpriced += spent.unpriced_tokens
        self._requests += spent.requests
        self._tool_calls += spent.tool_calls
        budget = self.budget
        crossed: list[BudgetThreshold] = []
        if budget.max_requests is not None:
            crossed += self._crossings("requests", budget.max_requests, self._requests)
            if self._requests > budget.max_requests:
                self._exceed("requests", budget.max_requests, self._requests)
        if budget.max_tool_calls is not None:
            crossed += self._crossings("tool_calls", budget.max_tool_calls, self._tool_calls)
            if self._tool_calls > budget.max_tool_calls:
                self._exceed("tool_calls", budget.max_tool_calls, self._tool_calls)
        status = self._check_spend(None)
        return self._status(None, [*status.thresholds, *crossed])

    # -- reading ------------------------------------------------------------------------

    @property
    def spent(self) -> BudgetSpent:
        """What the run has spent so far."""
        return BudgetSpent(
            tokens=self._tokens,
            cost_usd=self._cost,
            requests=self._requests,
            tool_calls=self._tool_calls,
            unpriced_tokens=self._unpriced,
        )

    @property
    def exceeded(self) -> BudgetExceeded | None:
        """The first limit the run crossed, if any."""
        return self._exceeded

    def remaining(self, now: float | None = None) -> Budget:
        """What is left, as a budget for a child run (a subagent).

        Unlimited limits stay unlimited; the thresholds carry over. ``max_duration`` is
        the time left until this run's deadline at ``now`` (default: trio's clock).
        """
        budget = self.budget
        duration = budget.max_duration
        if duration is not None and self.deadline is not None:
            if now is None:
                now = trio.current_time()
            duration = max(0.0, self.deadline - now)
        return Budget(
            max_tokens=_left(budget.max_tokens, self._tokens),
            max_cost_usd=None
            if budget.max_cost_usd is None
            else max(0.0, budget.max_cost_usd - self._cost),
            max_requests=_left(budget.max_requests, self._requests),
            max_tool_calls=_left(budget.max_tool_calls, self._tool_calls),
            max_duration=duration,
            thresholds=budget.thresholds,
        )

    # -- callbacks ----------------------------------------------------------------------

    async def notify(self, status: BudgetStatus) -> None:
        """Call the monitor's callbacks for ``status`` (nothing without a monitor).

        The run's budget extension calls this after a charge whose status is
        ``reportable``, next to emitting the events, and before it stops the run for an
        exceeded limit.
        ``on_exceeded`` is called once per run. A callback that raises fails the run.
        """
        monitor = self.monitor
        if monitor is None:
            return
        if monitor.on_threshold is not None:
            for threshold in status.thresholds:
                await _call(monitor.on_threshold, threshold)
        if (
            status.exceeded is not None
            and monitor.on_exceeded is not None
            and not self._notified_exceeded
        ):
            self._notified_exceeded = True
            await _call(monitor.on_exceeded, status.exceeded)

    # -- internals ----------------------------------------------------------------------

    def _price(self, usage: Usage, model: str | None) -> float | None:
        name = model or self.model
        return None if name is None else cost_of(usage, name, self.prices)

    def _check_spend(self, unpriced: str | None) -> BudgetStatus:
        budget = self.budget
        crossed: list[BudgetThreshold] = []
        exceeded = None
        if budget.max_tokens is not None:
            crossed += self._crossings("tokens", budget.max_tokens, self._tokens)
            if self._tokens > budget.max_tokens:
                exceeded = self._exceed("tokens", budget.max_tokens, self._tokens)
        if budget.max_cost_usd is not None:
            crossed += self._crossings("cost_usd", budget.max_cost_usd, self._cost)
            if exceeded is None and self._cost > budget.max_cost_usd:
                exceeded = self._exceed("cost_usd", budget.max_cost_usd, self._cost)
        if exceeded is None and not crossed and unpriced is None and self._exceeded is None:
            return OK
        return self._status(exceeded, crossed, unpriced)

    def _crossings(self, limit: BudgetLimit, maximum: float, spent: float) -> list[BudgetThreshold]:
        if maximum <= 0:
            return []
        crossed = []
        for fraction in self.budget.thresholds:
            if spent >= fraction * maximum and (limit, fraction) not in self._reported:
                self._reported.add((limit, fraction))
                crossed.append(
                    BudgetThreshold(
                        limit=limit,
                        fraction=fraction,
                        maximum=maximum,
                        spent=spent,
                        run_id=self.run_id,
                    )
                )
        return crossed

    def _record(self, limit: BudgetLimit, maximum: float, spent: float) -> BudgetExceeded:
        return BudgetExceeded(limit=limit, maximum=maximum, spent=spent, run_id=self.run_id)

    def _exceed(self, limit: BudgetLimit, maximum: float, spent: float) -> BudgetExceeded:
        if self._exceeded is None:
            self._exceeded = self._record(limit, maximum, spent)
        return self._exceeded

    def _status(
        self,
        exceeded: BudgetExceeded | None = None,
        crossed: Iterable[BudgetThreshold] = (),
        unpriced: str | None = None,
    ) -> BudgetStatus:
        return BudgetStatus(
            exceeded=exceeded or self._exceeded, thresholds=tuple(crossed), unpriced_model=unpriced
        )


def _left(maximum: int | None, spent: int) -> int | None:
    return None if maximum is None else max(0, maximum - spent)


async def _call(callback: Callable[[_Info], object], info: _Info) -> None:
    result = callback(info)
    if inspect.isawaitable(result):
        await result
