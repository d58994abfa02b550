"""Prices and cost, budgets and their tracker, the cost budget monitor."""

from __future__ import annotations

import msgspec
import pytest
import trio

from operative import InvalidArgument, OperativeError, Usage
from operative.budgets import (
    DEFAULT_PRICES,
    Budget,
    BudgetExceeded,
    BudgetExceededError,
    BudgetSpent,
    BudgetThreshold,
    BudgetTracker,
    CostBudgetMonitor,
    ModelPrice,
    PriceTable,
    cost_of,
    create_cost_budget_monitor,
    usage_tokens,
)


def _usage(total: int) -> Usage:
    return Usage(prompt=total, total=total)


# -- prices -------------------------------------------------------------------------------


def test_anthropic_shape_counts_cache_reads_and_writes_at_their_prices() -> None:
    """Uncached input, output, cache reads and cache writes each have their own price."""
    usage = Usage(prompt=1000, completion=500, total=3900, cache_read=2000, cache_write=400)
    cost = cost_of(usage, "claude-sonnet-4-5")
    assert cost == pytest.approx((1000 * 3 + 500 * 15 + 2000 * 0.30 + 400 * 3.75) / 1e6)


def test_openai_shape_prices_cache_writes_as_input() -> None:
    """A model without a cache-write premium prices written tokens as plain input."""
    usage = Usage(prompt=1000, completion=100, cache_read=1000, cache_write=10)
    assert cost_of(usage, "gpt-4o") == pytest.approx((1010 * 2.5 + 100 * 10 + 1000 * 1.25) / 1e6)


def test_gemini_shape() -> None:
    """Gemini prices: input, output, cached reads."""
    usage = Usage(prompt=10_000, completion=2_000, cache_read=50_000)
    expected = (10_000 * 0.30 + 2_000 * 2.50 + 50_000 * 0.03) / 1e6
    assert cost_of(usage, "gemini-2.5-flash") == pytest.approx(expected)


def test_missing_cache_prices_default_to_the_input_price() -> None:
    """A ModelPrice without cache prices charges cached tokens as input."""
    price = ModelPrice(input_per_mtok=2.0, output_per_mtok=4.0)
    usage = Usage(prompt=1, completion=1, cache_read=1, cache_write=1)
    assert price.cost(usage) == pytest.approx((2 + 4 + 2 + 2) / 1e6)


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("CLAUDE-HAIKU-4-5", "claude-haiku-4-5"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("openai/gpt-4.1-nano", "gpt-4.1-nano"),
        ("o4-mini-2025-04-16", "o4-mini"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("gemini-2.0-flash-001", "gemini-2.0-flash"),
    ],
)
def test_lookup_by_exact_name_then_snapshot_prefix(name: str, key: str) -> None:
    """Snapshots, versions and provider prefixes find their base model's price."""
    assert DEFAULT_PRICES.lookup(name) is DEFAULT_PRICES.lookup(key) is not None


@pytest.mark.parametrize(
    "name",
    [
        "claude-opus-4-9",  # not claude-opus-4's price: a newer model
        "gpt-5.9",  # not gpt-5's
        "gemini-2.5-flash-preview-05-20",
        "gemini-2.5-flash-image",
        "my-own-model",
        "",
    ],
)
def test_unknown_models_have_no_price(name: str) -> None:
    """A name that only looks like a known model is not priced: never guess."""
    assert DEFAULT_PRICES.lookup(name) is None
    assert cost_of(Usage.of(10, 10), name) is None
    assert name not in DEFAULT_PRICES


def test_longest_matching_key_wins() -> None:
    """Of two keys that both prefix a snapshot name, the longer one applies."""
    short = ModelPrice(input_per_mtok=1, output_per_mtok=1)
    long = ModelPrice(input_per_mtok=2, output_per_mtok=2)
    table = PriceTable({"acme": short, "acme-pro": long})
    assert table.lookup("acme-pro-20260101") is long
    assert table.lookup("acme-20260101") is short
    assert table.lookup("acme-pro-max") is None


def test_tables_are_overridable_and_extendable() -> None:
    """with_prices adds and replaces without touching the original table."""
    mine = ModelPrice(input_per_mtok=0.5, output_per_mtok=1.0)
    cheaper = ModelPrice(input_per_mtok=0.1, output_per_mtok=0.1)
    table = DEFAULT_PRICES.with_prices({"My-Model": mine, "gpt-4o": cheaper})
    assert table.lookup("my-model") is mine
    assert table.lookup("gpt-4o-2024-08-06") is cheaper
    assert table.lookup("claude-haiku-4-5") is DEFAULT_PRICES.lookup("claude-haiku-4-5")
    assert DEFAULT_PRICES.lookup("my-model") is None
    assert cost_of(Usage.of(1_000_000, 0), "gpt-4o", table) == pytest.approx(0.1)
    alone = PriceTable({"my-model": mine})
    assert len(alone) == 1
    assert list(alone) == ["my-model"]
    assert alone.lookup("gpt-4o") is None


def test_default_prices_are_plausible() -> None:
    """Every shipped price: output costs more than input, cache reads less."""
    assert len(DEFAULT_PRICES) > 30
    for name in DEFAULT_PRICES:
        price = DEFAULT_PRICES.lookup(name)
        assert price is not None
        assert price.output_per_mtok > price.input_per_mtok, name
        if price.cache_read_per_mtok is not None:
            assert price.cache_read_per_mtok < price.input_per_mtok, name


def test_bad_prices_are_refused() -> None:
    """Negative prices and values that are not ModelPrice raise InvalidArgument."""
    with pytest.raises(InvalidArgument):
        ModelPrice(input_per_mtok=-1, output_per_mtok=1)
    with pytest.raises(InvalidArgument):
        PriceTable({"x": (1.0, 2.0)})  # type: ignore[dict-item]


# -- Budget -------------------------------------------------------------------------------


def test_budget_validates_eagerly() -> None:
    """Negative, infinite or non-integer counts and bad thresholds raise InvalidArgument."""
    for bad in (
        {"max_tokens": -1},
        {"max_tokens": 1.5},
        {"max_requests": True},
        {"max_cost_usd": float("inf")},
        {"max_cost_usd": float("nan")},
        {"max_duration": -0.1},
        {"thresholds": (0.0,)},
        {"thresholds": (1.5,)},
        {"thresholds": ("half",)},
    ):
        with pytest.raises(InvalidArgument):
            Budget(**bad)


def test_budget_is_a_record() -> None:
    """A budget round-trips through JSON (durable runs store it); thresholds are sorted."""
    budget = Budget(max_tokens=50_000, max_cost_usd=0.5, max_duration=120, thresholds=(0.9, 0.5))
    assert budget.thresholds == (0.5, 0.9)
    assert msgspec.json.decode(msgspec.json.encode(budget), type=Budget) == budget
    assert budget.limit("tokens") == 50_000
    assert budget.limit("requests") is None


# -- BudgetTracker ------------------------------------------------------------------------


def test_token_thresholds_are_reported_once_each() -> None:
    """Each threshold is reported by the charge that crosses it, and never again."""
    tracker = BudgetTracker(Budget(max_tokens=1000, thresholds=(0.5, 0.8)), run_id="r1")
    assert tracker.charge_usage(_usage(400)).thresholds == ()
    crossed = tracker.charge_usage(_usage(200)).thresholds
    assert crossed == (
        BudgetThreshold(limit="tokens", fraction=0.5, maximum=1000, spent=600, run_id="r1"),
    )
    assert [t.fraction for t in tracker.charge_usage(_usage(300)).thresholds] == [0.8]
    status = tracker.charge_usage(_usage(100))
    assert status.ok
    assert status.thresholds == ()
    assert not status.reportable
    assert tracker.spent.tokens == 1000


def test_a_used_up_token_budget_refuses_the_next_request() -> None:
    """Spending exactly the limit is allowed; the next generate attempt is refused."""
    tracker = BudgetTracker(Budget(max_tokens=100))
    assert tracker.charge_request().ok
    assert tracker.charge_usage(_usage(100)).ok
    status = tracker.charge_request()
    assert status.exceeded == BudgetExceeded(limit="tokens", maximum=100, spent=100)
    assert tracker.spent.requests == 1


def test_overshooting_reports_every_threshold_and_the_limit() -> None:
    """One big charge crosses every threshold and the limit at once; later charges repeat
    the same exceeded record and no thresholds."""
    tracker = BudgetTracker(Budget(max_tokens=1000, thresholds=(0.5, 0.8)))
    status = tracker.charge_usage(_usage(1500))
    assert [t.fraction for t in status.thresholds] == [0.5, 0.8]
    assert status.exceeded == BudgetExceeded(limit="tokens", maximum=1000, spent=1500)
    assert status.reportable
    again = tracker.charge_usage(_usage(10))
    assert again.exceeded is status.exceeded
    assert again.thresholds == ()
    assert tracker.exceeded is status.exceeded
    assert tracker.charge_request().exceeded is status.exceeded


def test_usage_without_total_counts_its_parts() -> None:
    """A provider that left ``total`` at 0 is counted by its parts."""
    assert usage_tokens(Usage(prompt=3, completion=4, cache_read=5, cache_write=6)) == 18
    assert usage_tokens(Usage(prompt=3, completion=4, total=9)) == 9


def test_requests_are_refused_before_they_pass_the_limit() -> None:
    """The attempt that would pass max_requests is refused and not counted."""
    tracker = BudgetTracker(Budget(max_requests=3, thresholds=(0.6,)))
    assert tracker.charge_request().thresholds == ()
    assert [t.limit for t in tracker.charge_request().thresholds] == ["requests"]
    assert tracker.charge_request().ok
    status = tracker.charge_request()
    assert status.exceeded == BudgetExceeded(limit="requests", maximum=3, spent=4)
    assert tracker.spent.requests == 3


def test_tool_calls_are_all_or_nothing() -> None:
    """A step's tool calls are counted together, or refused together."""
    tracker = BudgetTracker(Budget(max_tool_calls=5))
    assert tracker.charge_tool_calls(3).ok
    status = tracker.charge_tool_calls(3)
    assert status.exceeded == BudgetExceeded(limit="tool_calls", maximum=5, spent=6)
    assert tracker.spent.tool_calls == 3
    with pytest.raises(InvalidArgument):
        tracker.charge_tool_calls(-1)


def test_unlimited_charges_are_cheap_and_ok() -> None:
    """Without limits every charge is ok and still accounted."""
    tracker = BudgetTracker(Budget())
    assert tracker.charge_request().ok
    assert tracker.charge_tool_calls(2).ok
    assert tracker.charge_usage(_usage(5), "gpt-4o").ok
    assert tracker.charge_usage(None).ok
    spent = tracker.spent
    assert spent.cost_usd == pytest.approx(5 * 2.5 / 1e6)
    assert spent == BudgetSpent(tokens=5, cost_usd=spent.cost_usd, requests=1, tool_calls=2)


def test_cost_limit() -> None:
    """Usage is priced by its model; passing max_cost_usd exceeds the budget."""
    tracker = BudgetTracker(Budget(max_cost_usd=0.01, thresholds=(0.5,)))
    usage = Usage(prompt=1000, completion=500, total=1500)  # $0.0105 on claude-sonnet-4-5
    status = tracker.charge_usage(usage, "claude-sonnet-4-5-20250929")
    assert status.exceeded is not None
    assert status.exceeded.limit == "cost_usd"
    assert status.exceeded.spent == pytest.approx(0.0105)
    assert [t.limit for t in status.thresholds] == ["cost_usd"]
    assert tracker.spent.cost_usd == pytest.approx(0.0105)


def test_reported_cost_and_the_default_model() -> None:
    """A provider-reported cost wins over the table; the tracker's model prices usage
    that names none."""
    tracker = BudgetTracker(Budget(max_cost_usd=1.0), model="gpt-4o")
    tracker.charge_usage(Usage.of(1_000_000, 0))
    assert tracker.spent.cost_usd == pytest.approx(2.5)
    other = BudgetTracker(Budget(max_cost_usd=1.0))
    assert other.charge_usage(Usage.of(10, 10), "unknown-model", cost_usd=0.25).ok
    assert other.spent.cost_usd == 0.25
    assert other.spent.unpriced_tokens == 0


def test_unpriced_usage_is_reported_once_per_model() -> None:
    """Under a cost limit, usage of an unknown model is counted as unpriced and reported
    once per model; it never counts as cost."""
    tracker = BudgetTracker(Budget(max_cost_usd=0.001))
    first = tracker.charge_usage(_usage(1_000_000), "acme-1")
    assert first.ok
    assert first.unpriced_model == "acme-1"
    assert tracker.charge_usage(_usage(5), "acme-1").unpriced_model is None
    assert tracker.charge_usage(_usage(5)).unpriced_model == ""
    assert tracker.spent.unpriced_tokens == 1_000_010
    assert tracker.spent.cost_usd == 0.0
    without_limit = BudgetTracker(Budget(max_tokens=10**9))
    assert without_limit.charge_usage(_usage(5), "acme-1").unpriced_model is None


def test_preview_checks_streaming_usage_without_charging() -> None:
    """Running usage of a streaming attempt can be checked without being charged."""
    tracker = BudgetTracker(Budget(max_tokens=100, max_cost_usd=0.001))
    tracker.charge_usage(_usage(60))
    assert tracker.preview_usage(_usage(40)).ok
    over = tracker.preview_usage(_usage(41))
    assert over.exceeded == BudgetExceeded(limit="tokens", maximum=100, spent=101)
    pricey = tracker.preview_usage(Usage(completion=30, total=30), "claude-opus-4-1")
    assert pricey.exceeded is not None
    assert pricey.exceeded.limit == "cost_usd"
    assert tracker.spent.tokens == 60
    assert tracker.exceeded is None


def test_duration_is_a_deadline_with_thresholds() -> None:
    """max_duration sets the deadline from start; check_time reports thresholds and the
    passed deadline."""
    tracker = BudgetTracker(Budget(max_duration=30, thresholds=(0.5, 0.8)))
    assert tracker.check_time(1000.0).ok
    assert tracker.started_at is None
    tracker.start(100.0)
    assert tracker.deadline == 130.0
    assert tracker.check_time(110.0).thresholds == ()
    assert [t.fraction for t in tracker.check_time(125.0).thresholds] == [0.5, 0.8]
    assert tracker.check_time(126.0).thresholds == ()
    status = tracker.check_time(130.0)
    assert status.exceeded == BudgetExceeded(limit="duration", maximum=30, spent=30)
    assert BudgetTracker(Budget(max_tokens=1)).check_time(5.0).ok


def test_remaining_is_the_budget_for_a_child_run() -> None:
    """What is left of every limit; unlimited stays unlimited; thresholds carry over."""
    tracker = BudgetTracker(
        Budget(
            max_tokens=1000,
            max_cost_usd=1.0,
            max_requests=10,
            max_duration=60,
            thresholds=(0.5,),
        )
    )
    tracker.start(0.0)
    tracker.charge_request()
    tracker.charge_usage(Usage.of(200_000, 0), "gpt-4o")  # $0.50
    left = tracker.remaining(now=45.0)
    assert left.max_cost_usd == pytest.approx(0.5)
    assert left == Budget(
        max_tokens=0,
        max_cost_usd=left.max_cost_usd,
        max_requests=9,
        max_tool_calls=None,
        max_duration=15.0,
        thresholds=(0.5,),
    )
    assert tracker.remaining(now=100.0).max_duration == 0.0


async def test_remaining_reads_trio_clock_by_default(autojump_clock: trio.abc.Clock) -> None:
    """Without ``now``, remaining time is measured on trio's clock."""
    tracker = BudgetTracker(Budget(max_duration=10))
    tracker.start(trio.current_time())
    await trio.sleep(4)
    assert tracker.remaining().max_duration == pytest.approx(6.0)


def test_a_child_runs_spending_counts_for_the_parent() -> None:
    """charge_child adds a child tracker's spending, thresholds and limits included."""
    parent = BudgetTracker(Budget(max_tokens=1000, max_requests=4, thresholds=(0.5,)))
    child = BudgetTracker(parent.remaining())
    child.charge_request()
    child.charge_usage(_usage(600))
    status = parent.charge_child(child.spent)
    assert parent.spent.tokens == 600
    assert parent.spent.requests == 1
    assert [t.limit for t in status.thresholds] == ["tokens"]
    more = parent.charge_child(BudgetSpent(requests=4, tool_calls=1))
    assert more.exceeded == BudgetExceeded(limit="requests", maximum=4, spent=5)
    assert [t.limit for t in more.thresholds] == ["requests"]


def test_a_tracker_needs_a_budget() -> None:
    """Anything but a Budget or a monitor is refused."""
    with pytest.raises(InvalidArgument):
        BudgetTracker({"max_tokens": 5})  # type: ignore[arg-type]


def test_exceeded_message_and_error() -> None:
    """An exceeded record says what ran out and converts to BudgetExceededError."""
    exceeded = BudgetExceeded(limit="cost_usd", maximum=0.5, spent=0.51234, run_id="r")
    assert exceeded.message == "budget exceeded: cost_usd $0.5123 of $0.5000"
    error = exceeded.to_error()
    assert isinstance(error, BudgetExceededError)
    assert isinstance(error, OperativeError)
    assert (error.limit, error.maximum, error.spent) == ("cost_usd", 0.5, 0.51234)
    assert (
        "tokens 1,500 of 1,000" in BudgetExceeded(limit="tokens", maximum=1000, spent=1500).message
    )
    assert "12.0s" in BudgetExceeded(limit="duration", maximum=12, spent=12).message


# -- the cost budget monitor ----------------------------------------------------------------


async def test_monitor_calls_sync_and_async_callbacks() -> None:
    """Threshold callbacks fire per crossed threshold; on_exceeded fires once."""
    seen: list[object] = []

    async def on_exceeded(info: BudgetExceeded) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(info)

    monitor = create_cost_budget_monitor(
        1.0, thresholds=(0.5, 0.8), on_threshold=seen.append, on_exceeded=on_exceeded
    )
    assert isinstance(monitor, CostBudgetMonitor)
    assert monitor.budget == Budget(max_cost_usd=1.0, thresholds=(0.5, 0.8))
    tracker = monitor.tracker(run_id="r9", model="gpt-4o")
    status = tracker.charge_usage(Usage.of(240_000, 0))  # $0.60
    await tracker.notify(status)
    assert [type(item).__name__ for item in seen] == ["BudgetThreshold"]
    status = tracker.charge_usage(Usage.of(200_000, 0))  # $1.10
    assert status.exceeded is not None
    await tracker.notify(status)
    await tracker.notify(tracker.charge_request())
    assert [type(item).__name__ for item in seen] == [
        "BudgetThreshold",
        "BudgetThreshold",
        "BudgetExceeded",
    ]
    assert isinstance(seen[-1], BudgetExceeded)
    assert seen[-1].run_id == "r9"


async def test_monitor_without_callbacks_and_plain_budgets_notify_nothing() -> None:
    """notify is a no-op without a monitor or without callbacks."""
    plain = BudgetTracker(Budget(max_tokens=1))
    await plain.notify(plain.charge_usage(_usage(5)))
    quiet = BudgetTracker(CostBudgetMonitor(budget=Budget(max_tokens=1)))
    await quiet.notify(quiet.charge_usage(_usage(5)))
    assert quiet.exceeded is not None


def test_monitor_uses_its_prices() -> None:
    """A monitor's price table prices its runs' usage."""
    table = PriceTable({"house": ModelPrice(input_per_mtok=1_000_000, output_per_mtok=0)})
    tracker = BudgetTracker(create_cost_budget_monitor(2.0, prices=table))
    assert tracker.charge_usage(_usage(1), "house").ok
    assert tracker.charge_usage(_usage(2), "house").exceeded is not None


def test_monitor_arguments_are_checked() -> None:
    """Bad callbacks, prices or limits raise InvalidArgument."""
    with pytest.raises(InvalidArgument):
        create_cost_budget_monitor(1.0, on_threshold="print")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        create_cost_budget_monitor(1.0, prices={})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        create_cost_budget_monitor(-1.0)


def test_the_standalone_samples_of_the_guide_run() -> None:
    """docs/budgets.md's samples that need no model run as written."""
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[1] / "docs" / "budgets.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.M)
    standalone = [b for b in blocks if "generate" not in b and "open_run" not in b]
    assert len(standalone) >= 3
    namespace: dict[str, object] = {}
    for index, block in enumerate(standalone):
        exec(compile(block, f"docs/budgets.md sample {index + 1}", "exec"), namespace)
