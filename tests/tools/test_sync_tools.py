"""Sync tools are honest: an abandoned thread is reported, and keeps its places until it ends.

Every worker thread here blocks on a ``threading.Event`` that the test sets (never a
sleep), so which threads run at any moment is decided by the test, not by timing.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any

import pytest
import trio
import trio.testing
from _doubles import calls_then
from hypothesis import given, settings
from hypothesis import strategies as st

from operative import Conversation, ToolCall, ToolResult, open_run, stop_when
from operative.tools import Tool, Toolbox, tool


class Gates:
    """Worker threads that each block until the test opens their gate, counted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gates: dict[int, threading.Event] = {}
        self.arrived: dict[int, threading.Event] = {}
        self.running = 0
        self.peak = 0
        self.started: list[int] = []
        self.ended: list[int] = []

    def gate(self, n: int) -> threading.Event:
        with self.lock:
            return self.gates.setdefault(n, threading.Event())

    def at_gate(self, n: int) -> threading.Event:
        """Set once thread ``n`` has started and waits at its gate."""
        with self.lock:
            return self.arrived.setdefault(n, threading.Event())

    def work(self, n: int) -> int:
        """The sync tool's body (runs in a worker thread)."""
        gate = self.gate(n)
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.started.append(n)
        self.at_gate(n).set()
        try:
            gate.wait()
        finally:
            with self.lock:
                self.running -= 1
                self.ended.append(n)
        return n

    def open(self, numbers: range | list[int]) -> None:
        for n in numbers:
            self.gate(n).set()


def _blocking_tool(gates: Gates, **options: Any) -> Tool:
    def work(n: int) -> int:
        """Work until the test lets go."""
        return gates.work(n)

    return Tool(work, timeout=1, **options)


async def _wait_until_free(limiter: trio.CapacityLimiter | None = None) -> None:
    """Returns once every place of ``limiter`` (default: trio's thread limiter, which a
    sync tool's thread holds until it ends) is free, and gives them back."""
    if limiter is None:
        limiter = trio.to_thread.current_default_thread_limiter()
    borrowers = [object() for _ in range(int(limiter.total_tokens))]
    for borrower in borrowers:
        await limiter.acquire_on_behalf_of(borrower)
    for borrower in borrowers:
        limiter.release_on_behalf_of(borrower)


@pytest.mark.parametrize("limit", ["tool", "toolbox"])
async def test_three_calls_past_timeout_never_run_two_threads_at_once(
    limit: str, autojump_clock: trio.testing.MockClock
) -> None:
    """max_concurrency=1: a call waits until the abandoned thread before it really ends."""
    gates = Gates()
    if limit == "tool":
        work = _blocking_tool(gates, max_concurrency=1)
        box = Toolbox([work])
        limiter = work._limiter
    else:
        box = Toolbox([_blocking_tool(gates)], max_concurrency=1)
        limiter = box._limiter
    assert limiter is not None
    send, receive = trio.open_memory_channel[ToolResult](3)

    async def execute(n: int) -> None:
        await send.send(await box.execute(ToolCall(id=f"c{n}", name="work", arguments={"n": n})))

    async with trio.open_nursery() as nursery:
        for n in (1, 2, 3):
            nursery.start_soon(execute, n)
        for settled in range(1, 4):
            result = await receive.receive()
            assert result.outcome == "error"
            assert result.error is not None
            assert "abandoned" in result.error
            assert "may still be running" in result.error
            n = int(result.call_id[1:])
            # The test waits (in a thread of its own) until the abandoned thread is at
            # its gate, then a minute: nobody else has started or settled meanwhile.
            await trio.to_thread.run_sync(gates.at_gate(n).wait)
            await trio.sleep(60)
            with pytest.raises(trio.WouldBlock):
                receive.receive_nowait()
            with gates.lock:
                assert gates.running == 1
                assert gates.started[-1] == n
                assert len(gates.started) == settled
            gates.gate(n).set()  # the abandoned thread may end now
    await _wait_until_free(limiter)
    await _wait_until_free()
    assert gates.peak == 1
    assert sorted(gates.ended) == [1, 2, 3]


async def test_a_thread_that_ends_in_time_gives_its_place_back_at_once() -> None:
    """The common case: the call succeeds and its place is free when execute returns."""

    @tool(max_concurrency=1)
    def double(n: int) -> int:
        """Double n."""
        return 2 * n

    box = Toolbox([double], max_concurrency=1)
    for n in range(3):
        result = await box.execute(ToolCall(id=f"c{n}", name="double", arguments={"n": n}))
        assert (result.outcome, result.value) == ("success", 2 * n)
        assert double._limiter is not None
        assert box._limiter is not None
        assert double._limiter.borrowed_tokens == box._limiter.borrowed_tokens == 0


async def test_a_failing_sync_tool_gives_its_place_back() -> None:
    """A thread that raises ends: its places are free and the model reads the error."""

    @tool(max_concurrency=1)
    def broken() -> None:
        """Fail."""
        raise ValueError("no")

    result = await Toolbox([broken]).execute(ToolCall(id="c1", name="broken", arguments={}))
    assert result.outcome == "error"
    assert "ValueError: no" in (result.error or "")
    assert broken._limiter is not None
    assert broken._limiter.borrowed_tokens == 0


async def test_an_aborted_run_reports_the_thread_it_leaves_running(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """An abort abandons the thread: a warning says so, and the place stays held until
    the thread ends (after the run), when an info record says it did."""
    gates = Gates()
    work = _blocking_tool(gates, max_concurrency=1)
    conversation = Conversation()
    conversation.append_user_message("work")
    call = ToolCall(id="c1", name="work", arguments={"n": 1})
    caplog.set_level(logging.INFO, logger="operative.tools")
    async with open_run(
        generate=calls_then(call),
        conversation=conversation,
        tools=[work],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        await trio.sleep(0.5)  # the thread is blocked on its gate by now (timeout: 1 s)
        run.abort("stopped by the user")
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert result.steps[0].results[0].outcome == "cancelled"
    assert work._limiter is not None
    assert work._limiter.borrowed_tokens == 1  # the thread outlived its run, and holds on
    records = [r for r in caplog.records if r.name == "operative.tools"]
    [warning] = [r for r in records if r.levelno == logging.WARNING]
    assert "'work' call c1 was abandoned" in warning.getMessage()
    assert "may still be running" in warning.getMessage()
    assert not any("has ended" in r.getMessage() for r in records)
    gates.open([1])
    await _wait_until_free(work._limiter)
    records = [r for r in caplog.records if r.name == "operative.tools"]
    assert "'work' call c1 has ended" in records[-1].getMessage()
    assert gates.ended == [1]


@settings(max_examples=25, deadline=None)
@given(
    tool_limit=st.sampled_from([None, 1, 2]),
    box_limit=st.sampled_from([None, 1, 2]),
    calls=st.integers(min_value=1, max_value=5),
    quick=st.sets(st.integers(min_value=0, max_value=4)),
    delays=st.lists(st.floats(min_value=0.1, max_value=3), min_size=1, max_size=6),
    picks=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=6),
)
def test_abandoned_threads_never_exceed_the_limits(
    tool_limit: int | None,
    box_limit: int | None,
    calls: int,
    quick: set[int],
    delays: list[float],
    picks: list[int],
) -> None:
    """Whatever mix of calls that finish and calls abandoned past their timeout, no more
    threads run at once than the tool's and the toolbox's limits allow, every call
    settles once (a success, or an error saying it was abandoned), and every place is
    free once the threads have ended."""
    limits = [limit for limit in (tool_limit, box_limit) if limit is not None]
    gates = Gates()
    for n in quick:
        gates.gate(n).set()  # these threads return as soon as they start
    work = _blocking_tool(gates, max_concurrency=tool_limit)
    box = Toolbox([work], max_concurrency=box_limit)

    async def main() -> list[ToolResult]:
        send, receive = trio.open_memory_channel[ToolResult](calls)
        settled: list[ToolResult] = []

        async def execute(n: int) -> None:
            call = ToolCall(id=f"c{n}", name="work", arguments={"n": n})
            await send.send(await box.execute(call))

        abandoned: list[int] = []

        async def release_now_and_then() -> None:
            # Abandoned threads end at random (virtual) times, one at a time: calls
            # waiting for their places start only then.
            for turn in itertools.count():
                await trio.sleep(delays[turn % len(delays)])
                if abandoned:
                    pick = picks[turn % len(picks)] % len(abandoned)
                    gates.gate(abandoned.pop(pick)).set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(release_now_and_then)
            for n in range(calls):
                nursery.start_soon(execute, n)
            while len(settled) < calls:
                result = await receive.receive()
                settled.append(result)
                if result.outcome != "success":
                    abandoned.append(int(result.call_id[1:]))
            nursery.cancel_scope.cancel()
        gates.open(range(calls))
        await _wait_until_free()
        for limiter in (work._limiter, box._limiter):
            if limiter is not None:
                assert limiter.borrowed_tokens == 0
        return settled

    settled = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sorted(r.call_id for r in settled) == sorted(f"c{n}" for n in range(calls))
    for result in settled:
        if result.outcome == "success":
            assert result.value == int(result.call_id[1:])
        else:
            assert result.outcome == "error"
            assert "abandoned" in (result.error or "")
    assert gates.peak <= min(limits, default=calls)
    assert gates.running == 0


async def test_a_thread_that_checks_for_cancellation_ends_once_abandoned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """trio.from_thread.check_cancelled() raises in an abandoned thread, which then ends
    early and frees its place (what the cancellation page recommends)."""
    poke = threading.Event()
    finished: list[str] = []

    @tool(timeout=1, max_concurrency=1)
    def careful() -> str:
        """Check for cancellation between units of work."""
        poke.wait()  # one unit of work, until the test pokes it
        trio.from_thread.check_cancelled()
        finished.append("ran to the end")
        return "done"

    result = await Toolbox([careful]).execute(ToolCall(id="c1", name="careful", arguments={}))
    assert "abandoned" in (result.error or "")
    poke.set()
    assert careful._limiter is not None
    await _wait_until_free(careful._limiter)
    assert finished == []
