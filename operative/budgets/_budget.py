"""What a budget is and what a charge reports: ``Budget`` and its records.

A :class:`Budget` is a record of limits (stored with durable runs, handed to subagents);
it is also the feature ``budget=`` attaches to a run (see ``_extension``). The other
records say what a run spent (:class:`BudgetSpent`), which warning threshold or limit a
charge crossed (:class:`BudgetThreshold`, :class:`BudgetExceeded`), and what one charge
did (:class:`BudgetStatus`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, Literal, TypeAlias

import msgspec

from .._core._errors import InvalidArgument, OperativeError
from .._core._types import Usage

if TYPE_CHECKING:
    from .._core._extension import Extension
    from .._core._options import RunConfig

__all__ = [
    "OK",
    "Budget",
    "BudgetExceeded",
    "BudgetExceededError",
    "BudgetLimit",
    "BudgetSpent",
    "BudgetStatus",
    "BudgetThreshold",
    "usage_tokens",
]


class BudgetExceededError(OperativeError):
    """A run's budget ran out; ``limit`` says which one.

    ``limit`` is ``"tokens"``, ``"cost_usd"``, ``"requests"``, ``"tool_calls"`` or
    ``"duration"``; ``maximum`` is the budget's limit and ``spent`` the amount that
    crossed it (in tokens, USD, requests, tool calls or seconds). A run that runs out of
    budget ends with ``finish_reason == "budget-exceeded"`` rather than raising this;
    raise it from a hook or a tool to end the run the same way.
    """

    def __init__(self, message: str, *, limit: str, maximum: float, spent: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum
        self.spent = spent


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
    """How much one run may spend. Every limit is optional; ``None`` means unlimited.

    Pass it as ``budget=``: it is the feature that attaches a budget to each run (its
    :meth:`extension`), and the record a subagent inherits what is left of.
    """

    option: ClassVar[str] = "budget"
    """The run option this feature stands for."""

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

    def extension(self, config: RunConfig) -> Extension:
        """This budget's part in one run: a fresh tracker, charged at the run's boundaries."""
        from ._extension import budget_extension

        return budget_extension(self, config)


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
        """The equivalent :class:`~operative.budgets.BudgetExceededError`."""
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


OK = BudgetStatus()
"""The status of a charge that crossed nothing (shared)."""


_COUNTS = ("prompt", "completion", "total", "cache_read", "cache_write", "reasoning")


def charged_tokens(usage: Usage, where: str) -> int:
    """:func:`usage_tokens` of usage about to be charged by ``where`` (a budget or a rate
    limit), which is never credited tokens: usage with a negative count is refused.

    A run never gets this far with such usage (the loop refuses the response that
    carries it with :class:`~operative.errors.InvalidResponseError`); this guards the
    invariant for whoever charges by hand.

    Raises:
        InvalidArgument: a count of ``usage`` is negative.
    """
    if (
        min(
            usage.prompt,
            usage.completion,
            usage.total,
            usage.cache_read,
            usage.cache_write,
            usage.reasoning,
        )
        < 0
    ):
        name = next(name for name in _COUNTS if getattr(usage, name) < 0)
        raise InvalidArgument(
            f"{where} was given usage with {name}={getattr(usage, name)}: token counts are "
            "never negative, and a budget or rate limit is never credited tokens. Count "
            "what a server reported below zero as 0 (the provider adapters do, with a "
            "warning)"
        )
    return usage_tokens(usage)


def usage_tokens(usage: Usage) -> int:
    """The tokens a usage record counts against ``max_tokens``: ``total``, or when a
    provider left it at 0, the sum of the parts."""
    return usage.total or (usage.prompt + usage.completion + usage.cache_read + usage.cache_write)
