"""The stall watchdog of ``monitor()``: alive only while the loop runs, on trio's clock,
paused by a human wait a run of the session parks, resumed fresh by ``signal()``."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from operative import GenerateResponse, InvalidArgument, ToolCall, create_agent, tool
from operative.liveness import StallPolicy
from operative.sessions import SessionStore, open_session, wait_for_signal
from operative.testing import HANG, ScriptedModel


@tool
async def ask_human(question: str) -> str:
    """Ask a person and wait for their answer."""
    answer = await wait_for_signal("answer", prompt=question)
    return f"human said {answer}"


async def test_a_monitor_whose_tick_hangs_reads_stalled_then_unreachable_and_stops_counting(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    agent = create_agent(generate=ScriptedModel(["degraded", HANG]), name="watcher")
    async with open_session("ops", store=sessions, agent_name="watcher", agent=agent) as ops:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: ops.monitor(every=30, input="Check health"))
            await trio.sleep(30 + 59)  # the second tick began at 30 and hangs
            assert ops.snapshot().status == "running"
            await trio.sleep(2)  # two intervals without a tick
            stalled = ops.snapshot()
            assert stalled.status == "stalled"
            assert stalled.missed_pulse_count == 1
            await trio.sleep(60)  # four intervals
            assert ops.snapshot().reachability == "unreachable"
            ops.cancel()
        after = ops.snapshot()  # the aborted tick was stored: a progress pulse
        assert (after.status, after.missed_pulse_count) == ("running", 0)
        await trio.sleep(3600)  # the loop returned: its watchdog is gone
        assert ops.snapshot().status == "running"
        assert ops.snapshot().missed_pulse_count == 0


async def test_a_policy_that_aborts_when_stalled_cancels_the_monitor(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    agent = create_agent(generate=ScriptedModel([HANG]), name="watcher")
    async with open_session("ops", store=sessions, agent_name="watcher", agent=agent) as ops:
        with trio.fail_after(100):
            outcome = await ops.monitor(
                every=30,
                input="Check health",
                stall_policy=StallPolicy(stall_after=45, abort_when_stalled=True),
            )
        assert trio.current_time() == pytest.approx(45)
    assert outcome.stopped_by == "cancelled"
    stored = await sessions.load("ops")
    assert stored is not None
    assert [ref.outcome.finish_reason for ref in stored.runs if ref.outcome] == ["aborted"]


async def test_a_human_wait_pauses_the_watchdog_and_signal_resumes_it_fresh(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="ask_human", arguments={"question": "ok?"}),)
            ),
            "thanks",
            HANG,  # the next tick hangs
        ]
    )
    agent = create_agent(generate=model, name="watcher", tools=[ask_human])
    async with (
        open_session("ops", store=sessions, agent_name="watcher", agent=agent) as ops,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(lambda: ops.monitor(every=30, input="Check health"))
        await trio.sleep(3600)  # parked for an hour: not a stall
        parked = ops.snapshot()
        assert parked.status == "waiting"
        assert parked.missed_pulse_count == 0
        assert parked.reachability == "reachable"
        assert parked.declared_wait is not None
        assert (parked.declared_wait.reason, parked.declared_wait.deadline) == ("review", None)
        signalled_at = trio.current_time()
        assert ops.signal("answer", "yes")
        # The first tick ends, the next one starts at once (it overran) and hangs.
        await trio.sleep(59)
        assert ops.snapshot().status == "running"  # fresh: the hour is not counted
        await trio.sleep(2)
        stalled = ops.snapshot()
        assert stalled.status == "stalled"
        assert stalled.missed_pulse_count == 1
        assert trio.current_time() - signalled_at == pytest.approx(61)
        ops.cancel()


async def test_monitor_refuses_a_stall_policy_of_another_type(sessions: SessionStore) -> None:
    agent = create_agent(generate=ScriptedModel([]), name="watcher")
    async with open_session("ops", store=sessions, agent_name="watcher", agent=agent) as ops:
        with pytest.raises(InvalidArgument, match="StallPolicy"):
            await ops.monitor(every=30, input="x", stall_policy={"stall_after": 1})  # type: ignore[arg-type]
