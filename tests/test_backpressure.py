"""Backpressure strategies in virtual time: fixed delays and the shared generate limiter."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from operative import GenerateRequest, InvalidArgument, ToolCall, Usage
from operative.backpressure import (
    BackpressureStrategy,
    FixedDelay,
    GenerateLimiter,
    estimate_tokens,
)
from operative.conversation import ConversationHistory, Message

REQUEST = GenerateRequest(conversation=ConversationHistory())


class Recorder:
    """A BackpressureNotify that records what it was told, with trio's time."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float | None, str]] = []

    async def applied(self, delay: float | None, reason: str) -> None:
        self.calls.append(("applied", trio.current_time(), delay, reason))

    async def released(self, waited: float) -> None:
        self.calls.append(("released", trio.current_time(), waited, ""))


def _fixed(tokens: int) -> Callable[[GenerateRequest], int]:
    return lambda request: tokens


def _worst_window(starts: list[tuple[float, int]]) -> int:
    """The most any half-open 60 s window holds (the worst ones begin at a start)."""
    return max(sum(amount for t, amount in starts if s <= t < s + 60) for s, _ in starts)


# -- FixedDelay ---------------------------------------------------------------------------


async def test_fixed_delay_waits_before_every_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each slot starts exactly ``seconds`` after it was asked for, and says so."""
    strategy: BackpressureStrategy = FixedDelay(0.5)
    notify = Recorder()
    start = trio.current_time()
    for _ in range(3):
        async with strategy.slot(REQUEST, notify) as slot:
            slot.record(Usage.of(1, 1))
    assert trio.current_time() - start == pytest.approx(1.5)
    assert notify.calls[:2] == [
        ("applied", start, 0.5, "fixed-delay"),
        ("released", start + 0.5, 0.5, ""),
    ]
    assert len(notify.calls) == 6


async def test_a_zero_delay_never_notifies() -> None:
    """FixedDelay(0) does not wait, so nothing is reported."""
    notify = Recorder()
    async with FixedDelay(0).slot(REQUEST, notify):
        pass
    assert notify.calls == []


def test_fixed_delay_validates() -> None:
    """Negative, infinite and non-numeric delays are refused."""
    for bad in (-1, float("inf"), "1", True):
        with pytest.raises(InvalidArgument):
            FixedDelay(bad)  # type: ignore[arg-type]


# -- GenerateLimiter: concurrency ---------------------------------------------------------


async def test_concurrency_cap_holds_with_many_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Twenty runs sharing max_concurrent=3 never exceed three calls at once."""
    limiter = GenerateLimiter(max_concurrent=3)
    in_flight = peak = 0
    notifies = [Recorder() for _ in range(20)]

    async def attempt(notify: Recorder) -> None:
        nonlocal in_flight, peak
        async with limiter.slot(REQUEST, notify):
            in_flight += 1
            peak = max(peak, in_flight)
            assert limiter.statistics().in_flight == in_flight
            await trio.sleep(1)
            in_flight -= 1

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for notify in notifies:
            nursery.start_soon(attempt, notify)
    assert peak == 3
    assert trio.current_time() - start == pytest.approx(7)  # ceil(20 / 3) rounds of 1 s
    waited = [n for n in notifies if n.calls]
    assert len(waited) == 17
    assert all(n.calls[0][2:] == (None, "max-concurrent") for n in waited)
    assert all(n.calls[1][0] == "released" for n in waited)
    stats = limiter.statistics()
    assert (stats.waiting, stats.in_flight, stats.max_concurrent) == (0, 0, 3)


async def test_notify_only_when_waiting(autojump_clock: trio.testing.MockClock) -> None:
    """A limiter with room admits at once and reports nothing."""
    limiter = GenerateLimiter(max_concurrent=5, requests_per_minute=10, tokens_per_minute=10_000)
    notify = Recorder()
    for _ in range(5):
        async with limiter.slot(REQUEST, notify) as slot:
            slot.record(Usage.of(10, 10))
    assert notify.calls == []


# -- GenerateLimiter: rates ---------------------------------------------------------------


async def test_tokens_per_minute_hold_over_ten_minutes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Over ten virtual minutes no 60 s window holds more than tokens_per_minute, and the
    limiter still lets nearly all of it through (estimates corrected by usage)."""
    limit = 1000
    limiter = GenerateLimiter(tokens_per_minute=limit, estimate=_fixed(300))
    starts: list[tuple[float, int]] = []
    end = trio.current_time() + 600

    async def run(worker: int) -> None:
        for turn in range(10_000):
            async with limiter.slot(REQUEST, Recorder()) as slot:
                now = trio.current_time()
                if now >= end:
                    return
                actual = 150 + (worker * 37 + turn * 53) % 150  # 150..299, under the estimate
                starts.append((now, actual))
                await trio.sleep(0.5 + (worker + turn) % 4)
                slot.record(Usage(prompt=actual, total=actual))

    async with trio.open_nursery() as nursery:
        for worker in range(6):
            nursery.start_soon(run, worker)
    assert _worst_window(starts) <= limit
    # What is lost: room smaller than one estimate, and estimates not yet corrected.
    assert sum(amount for _, amount in starts) >= 7.5 * limit


async def test_requests_per_minute_hold_over_ten_minutes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Over ten virtual minutes no 60 s window starts more than requests_per_minute."""
    limiter = GenerateLimiter(requests_per_minute=30, max_concurrent=8)
    starts: list[tuple[float, int]] = []
    end = trio.current_time() + 600

    async def run(worker: int) -> None:
        while True:
            async with limiter.slot(REQUEST, Recorder()):
                if trio.current_time() >= end:
                    return
                starts.append((trio.current_time(), 1))
                await trio.sleep(0.1 * (worker + 1))

    async with trio.open_nursery() as nursery:
        for worker in range(12):
            nursery.start_soon(run, worker)
    assert _worst_window(starts) == 30
    assert len(starts) >= 290


async def test_rate_wait_is_reported_with_its_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A request over the token rate waits for the oldest tokens to leave the window."""
    limiter = GenerateLimiter(tokens_per_minute=100, estimate=_fixed(60))
    start = trio.current_time()
    async with limiter.slot(REQUEST, Recorder()):
        pass
    await trio.sleep(10)
    notify = Recorder()
    async with limiter.slot(REQUEST, notify):
        assert trio.current_time() - start == pytest.approx(60)
    assert notify.calls[0][3] == "tokens-per-minute"
    assert notify.calls[0][2] == pytest.approx(50)
    assert notify.calls[1][2] == pytest.approx(50)
    stats = limiter.statistics()
    assert (stats.tokens_in_window, stats.tokens_available) == (60, 40)
    assert (stats.requests_in_window, stats.requests_available) == (1, None)


@pytest.mark.parametrize(("second_estimate", "admitted_at"), [(900, 5), (1000, 60)])
async def test_recorded_usage_replaces_the_estimate(
    autojump_clock: trio.testing.MockClock, second_estimate: int, admitted_at: float
) -> None:
    """Recording less than the estimate wakes the waiter at the head of the queue at
    once (no polling); it goes if the corrected window has room, else it keeps waiting."""
    limiter = GenerateLimiter(
        tokens_per_minute=1000, estimate=lambda r: 1000 if r.step == 1 else second_estimate
    )
    admitted: list[float] = []

    async def first() -> None:
        async with limiter.slot(REQUEST, Recorder()) as slot:
            await trio.sleep(5)
            slot.record(Usage.of(40, 60))

    async def second() -> None:
        await trio.sleep(1)
        async with limiter.slot(
            GenerateRequest(conversation=ConversationHistory(), step=2), Recorder()
        ):
            admitted.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        nursery.start_soon(second)
    assert admitted == [pytest.approx(start + admitted_at)]
    first_left = admitted_at >= 60  # the first call's tokens leave the window at 60 s
    assert limiter.statistics().tokens_in_window == second_estimate + (0 if first_left else 100)


async def test_a_request_larger_than_the_rate_runs_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An estimate above tokens_per_minute is clamped to it instead of waiting forever."""
    limiter = GenerateLimiter(tokens_per_minute=1000, estimate=_fixed(5000))
    start = trio.current_time()
    for _ in range(2):
        async with limiter.slot(REQUEST, Recorder()):
            pass
    assert trio.current_time() - start == pytest.approx(60)


# -- GenerateLimiter: fairness and cancellation ----------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: GenerateLimiter(max_concurrent=1),
        lambda: GenerateLimiter(requests_per_minute=1),
        lambda: GenerateLimiter(max_concurrent=1, tokens_per_minute=100, estimate=_fixed(100)),
    ],
    ids=["concurrency", "requests", "both"],
)
async def test_waiters_are_served_first_come_first_served(
    autojump_clock: trio.testing.MockClock, make: Callable[[], GenerateLimiter]
) -> None:
    """Waiters are admitted in the order they arrived."""
    limiter = make()
    order: list[int] = []

    async def attempt(index: int) -> None:
        await trio.sleep(0.01 * index)
        async with limiter.slot(REQUEST, Recorder()):
            order.append(index)
            await trio.sleep(1)

    async with trio.open_nursery() as nursery:
        for index in (3, 0, 7, 1, 9, 4, 2, 8, 5, 6):
            nursery.start_soon(attempt, index)
    assert order == list(range(10))


async def test_a_cancelled_waiter_leaves_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A waiter cancelled in either queue frees its place; later waiters proceed and the
    capacity and rate are whole again."""
    limiter = GenerateLimiter(max_concurrent=1, tokens_per_minute=100, estimate=_fixed(100))
    admitted: list[tuple[str, float]] = []

    async def attempt(name: str, delay: float, hold: float, cancel_after: float) -> None:
        await trio.sleep(delay)
        with trio.move_on_after(cancel_after):
            async with limiter.slot(REQUEST, Recorder()):
                admitted.append((name, trio.current_time()))
                await trio.sleep(hold)

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(attempt, "first", 0, 5, 100)
        nursery.start_soon(attempt, "gives up on concurrency", 1, 0, 2)
        nursery.start_soon(attempt, "gives up on rate", 10, 0, 20)
        nursery.start_soon(attempt, "patient", 12, 0, 200)
        await trio.sleep(11)
        assert limiter.statistics().waiting == 1
    assert [(name, t - start) for name, t in admitted] == [
        ("first", 0),
        ("patient", pytest.approx(60)),
    ]
    stats = limiter.statistics()
    assert (stats.waiting, stats.in_flight, stats.tokens_in_window) == (0, 0, 100)
    await trio.sleep(60)
    assert limiter.statistics().tokens_available == 100
    async with limiter.slot(REQUEST, Recorder()):
        assert limiter.statistics().in_flight == 1


async def test_a_cancelled_holder_frees_its_concurrency(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancelling a call inside its slot releases the slot."""
    limiter = GenerateLimiter(max_concurrent=1)
    with trio.move_on_after(1):
        async with limiter.slot(REQUEST, Recorder()):
            await trio.sleep_forever()
    async with limiter.slot(REQUEST, Recorder()):
        pass
    assert limiter.statistics().in_flight == 0


async def test_a_notify_that_is_cancelled_releases_the_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Cancellation while reporting the end of a wait still frees the concurrency."""
    limiter = GenerateLimiter(max_concurrent=1)

    class Stuck(Recorder):
        async def released(self, waited: float) -> None:
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:

        async def hold() -> None:
            async with limiter.slot(REQUEST, Recorder()):
                await trio.sleep(1)

        nursery.start_soon(hold)
        await trio.sleep(0.1)
        with trio.move_on_after(5):
            async with limiter.slot(REQUEST, Stuck()):
                pytest.fail("the slot should not have been entered")
    stats = limiter.statistics()
    assert (stats.in_flight, stats.waiting) == (0, 0)
    async with limiter.slot(REQUEST, Recorder()):
        pass


# -- estimates and arguments ----------------------------------------------------------------


def test_default_estimate_is_characters_over_four() -> None:
    """Message text and tool-call arguments count, at four characters a token."""
    messages = (
        Message(id="1", role="user", content="x" * 40),
        Message(
            id="2",
            role="assistant",
            content="y" * 7,
            tool_calls=(ToolCall(id="c", name="find", arguments={"q": "abc"}),),
        ),
        Message(id="3", role="tool", content="z" * 4, tool_call_id="c"),
        Message(
            id="4",
            role="assistant",
            tool_calls=(ToolCall(id="d", name="go", arguments='{"a":1}'),),
        ),
    )
    request = GenerateRequest(conversation=ConversationHistory(messages=messages))
    chars = 40 + 7 + len("find") + len('{"q":"abc"}') + 4 + len("go") + len('{"a":1}')
    assert estimate_tokens(request) == -(-chars // 4)
    assert estimate_tokens(REQUEST) == 1


def test_limiter_validates() -> None:
    """Limits must be positive ints; the estimator must be callable."""
    for bad in (
        {"max_concurrent": 0},
        {"requests_per_minute": -1},
        {"tokens_per_minute": 1.5},
        {"max_concurrent": True},
        {"estimate": 5},
    ):
        with pytest.raises(InvalidArgument):
            GenerateLimiter(**bad)
    assert "tokens_per_minute=10" in repr(GenerateLimiter(tokens_per_minute=10))
