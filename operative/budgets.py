"""Token, cost, request, tool-call and wall-clock budgets for a run.

A :class:`Budget` is a record of limits. The loop turns it into a :class:`BudgetTracker`
(one per run) and charges it at fixed points: before each generate attempt
(:meth:`~BudgetTracker.charge_request`), after each attempt that reported usage
(:meth:`~BudgetTracker.charge_usage`), before a step's tools run
(:meth:`~BudgetTracker.charge_tool_calls`). Every charge is synchronous and pure
accounting; it returns a :class:`BudgetStatus` that says whether a limit was crossed
(the loop then cancels the run scope, and the run ends with ``finish_reason ==
"budget-exceeded"``) and which warning thresholds were newly crossed (each is reported
once per run and limit). ``max_duration`` is not charged: it becomes the run scope's
deadline (:attr:`~BudgetTracker.deadline`).

A limit means "at most this much": a run may spend exactly ``max_tokens`` tokens, and
the next generate attempt is then refused because nothing is left. Usage is charged
after the fact (the tokens are spent whatever the budget says), so a run can end a
little past its token or cost limit; requests and tool calls are refused before they
happen, so those limits are never passed.

:func:`create_cost_budget_monitor` wraps a cost budget with ``on_threshold`` /
``on_exceeded`` callbacks; pass it wherever a ``Budget`` is accepted.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable
from typing import Literal, TypeAlias, TypeVar

import attrs
import msgspec
import trio

from ._core._errors import BudgetExceededError, InvalidArgument
from ._core._types import Usage
from ._pricing import DEFAULT_PRICES, ModelPrice, PriceTable, cost_of

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

BudgetLimit: TypeAlias = Literal["tokens", "cost_usd", "requests", "tool_calls", "duration"]
"""Which limit of a budget: ``max_tokens`` is ``"tokens"``, ``max_cost_usd`` is
``"cost_usd"``, and so on."""

_FIELDS: dict[BudgetLimit, str] = {
    "tokens": "max_tokens",
    "cost_usd": "max_cost_usd",
    "requests": "max_requests",
    "tool_calls": "max_tool_calls",
    "duration": "max_duration",
}


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    """How much one run may spend. Every limit is optional; ``None`` means unlimited."""

    max_tokens: int | None = None
    """Total tokens over every generate attempt (``Usage.total``)."""
    max_cost_usd: float | None = None
    """Cost in USD at the run's price table (see :class:`PriceTable`)."""
    max_requests: int | None = None
    """Generate attempts, retries included."""
    max_tool_calls: int | None = None
    """Tool calls executed."""
    max_duration: float | None = None
    """Seconds on trio's clock from the start of the run; becomes the run's deadline."""
    thresholds: tuple[float, ...] = (0.8,)
    """Fractions of each limit at which a ``budget.threshold`` warning is reported (once
    per run, limit and fraction). Each in ``(0, 1]``; ``()`` for none."""

    def __post_init__(self) -> None:
        for limit, name in _FIELDS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgument(f"Budget.{name} must be a number, not {value!r}")
            if not value >= 0 or math.isinf(value):
                raise InvalidArgument(f"Budget.{name} must be finite and >= 0, not {value!r}")
            if limit in ("tokens", "requests", "tool_calls") and not isinstance(value, int):
                raise InvalidArgument(f"Budget.{name} must be an int, not {value!r}")
        for fraction in self.thresholds:
            if (
                isinstance(fraction, bool)
                or not isinstance(fraction, int | float)
                or not 0 < fraction <= 1
            ):
                raise InvalidArgument(
                    f"Budget.thresholds must be fractions in (0, 1], not {fraction!r}"
                )
        msgspec.structs.force_setattr(self, "thresholds", tuple(sorted(set(self.thresholds))))

    def limit(self, limit: BudgetLimit) -> float | None:
        """The maximum for ``limit``, or ``None`` when it is unlimited."""
        value: float | None = getattr(self, _FIELDS[limit])
        return value


class BudgetSpent(msgspec.Struct, frozen=True, kw_only=True):
    """What a run has spent so far."""

    tokens: int = 0
    cost_usd: float = 0.0
    """Cost of the usage whose model has a price; see ``unpriced_tokens``."""
    requests: int = 0
    tool_calls: int = 0
    unpriced_tokens: int = 0
    """Tokens of usage that could not be priced (no model, or a model the price table
    does not know): counted in ``tokens`` but not in ``cost_usd``."""


class BudgetThreshold(msgspec.Struct, frozen=True, kw_only=True):
    """A warning threshold was crossed: ``spent`` reached ``fraction`` of ``maximum``."""

    limit: BudgetLimit
    fraction: float
    maximum: float
    spent: float
    run_id: str = ""


class BudgetExceeded(msgspec.Struct, frozen=True, kw_only=True):
    """A limit was crossed: ``spent`` is what the run spent, or would have spent."""

    limit: BudgetLimit
    maximum: float
    spent: float
    run_id: str = ""

    @property
    def message(self) -> str:
        """A sentence for logs, events and the run's abort reason."""
        spent, maximum = _fmt(self.limit, self.spent), _fmt(self.limit, self.maximum)
        return f"budget exceeded: {self.limit} {spent} of {maximum}"

    def to_error(self) -> BudgetExceededError:
        """The equivalent :class:`~operative.BudgetExceededError`."""
        return BudgetExceededError(
            self.message, limit=self.limit, maximum=self.maximum, spent=self.spent
        )


def _fmt(limit: BudgetLimit, value: float) -> str:
    if limit == "cost_usd":
        return f"${value:.4f}"
    if limit == "duration":
        return f"{value:.1f}s"
    return f"{value:,.0f}"


class BudgetStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What one charge did to the budget."""

    exceeded: BudgetExceeded | None = None
    """Set when a limit is (or already was) crossed: the run must stop."""
    thresholds: tuple[BudgetThreshold, ...] = ()
    """Warning thresholds crossed by this charge (never reported twice)."""
    unpriced_model: str | None = None
    """Set the first time a run with a cost limit charges usage it cannot price: the
    model's name, or ``""`` when the usage named no model."""

    @property
    def ok(self) -> bool:
        """No limit is crossed."""
        return self.exceeded is None

    @property
    def reportable(self) -> bool:
        """There is something to report (a threshold or an exceeded limit)."""
        return self.exceeded is not None or bool(self.thresholds)


_OK = BudgetStatus()


def usage_tokens(usage: Usage) -> int:
    """The tokens a usage record counts against ``max_tokens``: ``total``, or when a
    provider left it at 0, the sum of the parts."""
    return usage.total or (usage.prompt + usage.completion + usage.cache_read + usage.cache_write)


_Info = TypeVar("_Info")

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

    budget: Budget
    prices: PriceTable = DEFAULT_PRICES
    on_threshold: ThresholdCallback | None = None
    on_exceeded: ExceededCallback | None = None

    def tracker(self, *, run_id: str = "", model: str | None = None) -> BudgetTracker:
        """A fresh tracker for one run."""
        return BudgetTracker(self, run_id=run_id, model=model)


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
            return _OK
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
            return _OK
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
        tokens = usage_tokens(usage)
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
        return _OK

    def charge_child(self, spent: BudgetSpent) -> BudgetStatus:
        """Add what a child run (a subagent given :meth:`remaining`) spent."""
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

        The loop calls this after a charge whose status is ``reportable``, next to
        emitting the events, and before it cancels the run for an exceeded limit.
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
            return _OK
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
