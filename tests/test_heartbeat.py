"""Heartbeats: timed pulses that keep the stall watchdog from misreading long work."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from operative import (
    Conversation,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    create_agent,
    open_run,
    tool,
)
from operative.liveness import (
    Heartbeat,
    LivenessTracker,
    PulseKind,
    StallPolicy,
    create_stall_watchdog,
    serve_heartbeat,
)
from operative.testing import ScriptedModel
from operative.tools import Toolbox


def _call(name: str) -> GenerateResponse:
    return GenerateResponse(tool_calls=(ToolCall(id="c1", name=name),))


async def _watch(
    kind: PulseKind, policy: StallPolicy, seconds: float, aborts: list[str]
) -> tuple[LivenessTracker, list[str]]:
    tracker = LivenessTracker("work")
    statuses: list[str] = []
    tracker.subscribe_snapshot(lambda snapshot: statuses.append(snapshot.status))
    tracker.start()
    watchdog = create_stall_watchdog(tracker, policy, on_abort=aborts.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        await nursery.start(serve_heartbeat, tracker, 5.0, kind)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return tracker, statuses


async def test_host_reachability_beats_keep_the_watchdog_quiet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Beats that vouch for the work keep it running through an hour of host-side wait."""
    aborts: list[str] = []
    policy = StallPolicy(stall_after=30, unreachable_after=60, abort_when_stalled=True)
    tracker, statuses = await _watch("host-reachability", policy, 3600, aborts)
    assert aborts == []
    assert "stalled" not in statuses
    assert tracker.snapshot().missed_pulse_count == 0


async def test_plain_heartbeats_keep_work_reachable_but_not_unstalled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A 'heartbeat' beat proves the process is alive, not that the work moves."""
    policy = StallPolicy(stall_after=30, unreachable_after=60)
    tracker, statuses = await _watch("heartbeat", policy, 600, [])
    assert "stalled" in statuses
    assert "unreachable" not in statuses
    assert tracker.snapshot().reachability == "reachable"
    silent, _ = await _watch("heartbeat", policy, 0, [])
    assert silent.status == "running"


async def test_a_long_tool_with_a_heartbeat_is_not_aborted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool working for ten minutes beats progress; the stall policy leaves the run be."""
    runs: list[object] = []

    @tool
    async def crunch() -> str:
        """Crunch numbers for a while."""
        async with Heartbeat(runs[0], every=10, kind="progress") as beat:
            for _ in range(3):
                await trio.sleep(200)
                beat.beat()
        return "crunched"

    model = ScriptedModel([_call("crunch"), "all done"])
    conversation = Conversation()
    conversation.append_user_message("go")
    async with open_run(
        generate=model,
        toolbox=Toolbox([crunch]),
        conversation=conversation,
        stop_when=None,
        maximum_steps=2,
        stall_policy=StallPolicy(stall_after=60, abort_when_stalled=True),
    ) as run:
        runs.append(run)
        result = await run.result()
    assert result.finish_reason == "maximum-steps"
    assert result.steps[0].results[0].value == "crunched"
    assert run.snapshot().missed_pulse_count == 0


async def test_without_a_heartbeat_the_same_tool_is_aborted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The control case: silence longer than stall_after aborts the run."""

    @tool
    async def crunch() -> str:
        """Crunch numbers for a while."""
        await trio.sleep(600)
        return "crunched"

    agent = create_agent(
        generate=ScriptedModel([_call("crunch"), "all done"]),
        tools=[crunch],
        stall_policy=StallPolicy(stall_after=60, abort_when_stalled=True),
    )
    result = await agent.run("go")
    assert result.finish_reason == "aborted"


async def test_beat_and_validation() -> None:
    """beat() pulses at once; bad targets and intervals are refused."""
    tracker = LivenessTracker("work")
    tracker.start()
    before = tracker.revision
    async with Heartbeat(tracker, kind="progress") as beat:
        beat.beat()
    assert beat.beats == 1
    assert tracker.revision > before
    with pytest.raises(InvalidArgument, match="LivenessTracker"):
        Heartbeat(object(), every=1)
    with pytest.raises(InvalidArgument, match="every"):
        Heartbeat(tracker, every=0)
    with pytest.raises(InvalidArgument, match="kind"):
        Heartbeat(tracker, every=1, kind="pulse")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await serve_heartbeat(tracker, -1)
