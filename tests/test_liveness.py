"""Liveness: the tracker's states, snapshot subscriptions and the stall watchdog."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from operative import FinishReason, InvalidArgument, Usage
from operative.liveness import (
    DeclaredWait,
    LivenessSnapshot,
    LivenessTracker,
    StallPolicy,
    create_stall_watchdog,
    terminal_status,
)


def status(tracker: LivenessTracker) -> str:
    """The tracker's status, read afresh (a helper, so type narrowing never sticks)."""
    return tracker.status


# -- the tracker ----------------------------------------------------------------------


async def test_tracker_moves_from_starting_to_running_and_counts_revisions(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """start() makes the work running; progress pulses bump the revision and the step."""
    tracker = LivenessTracker("run-1")
    first = tracker.snapshot()
    assert (first.status, first.revision, first.started_at) == ("starting", 0, None)
    tracker.start()
    await trio.sleep(1)
    tracker.pulse("progress", step=1, usage=Usage.of(3, 4))
    snapshot = tracker.snapshot()
    assert snapshot.status == "running"
    assert snapshot.revision == 2
    assert snapshot.step == 1
    assert snapshot.usage.total == 7
    assert snapshot.started_at is not None
    assert snapshot.last_progress_at == snapshot.last_activity_at == snapshot.started_at + 1
    assert snapshot.reachability == "reachable"
    assert not snapshot.terminal


async def test_heartbeats_are_quiet(autojump_clock: trio.testing.MockClock) -> None:
    """A heartbeat stamps last_heartbeat_at without a revision change or progress."""
    tracker = LivenessTracker("run-1")
    tracker.start()
    before = tracker.snapshot()
    await trio.sleep(5)
    tracker.pulse("heartbeat")
    after = tracker.snapshot()
    assert after.revision == before.revision
    assert after.last_heartbeat_at == before.started_at + 5  # type: ignore[operator]
    assert after.last_progress_at == before.last_progress_at


async def test_host_reachability_pulses_stamp_everything() -> None:
    """A host-reachability pulse stamps activity, heartbeat and progress, as specified."""
    tracker = LivenessTracker("session-1", kind="session")
    tracker.pulse("host-reachability")
    snapshot = tracker.snapshot()
    assert snapshot.kind == "session"
    assert snapshot.status == "running"
    assert snapshot.last_activity_at == snapshot.last_heartbeat_at == snapshot.last_progress_at


async def test_declared_waits_nest_and_show_the_oldest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two waits at once keep the status waiting until both end; the oldest is shown."""
    tracker = LivenessTracker("run-1")
    tracker.start()
    approval = tracker.declare_wait("approval", detail="call-1")
    await trio.sleep(1)
    review = tracker.declare_wait("review", deadline=trio.current_time() + 30)
    snapshot = tracker.snapshot()
    assert snapshot.status == "waiting"
    assert snapshot.declared_wait == approval
    assert tracker.declared_waits == (approval, review)
    tracker.clear_wait(approval)
    assert tracker.snapshot().declared_wait is review
    tracker.clear_wait(approval)  # not in force any more: nothing happens
    tracker.clear_wait(review)
    assert tracker.snapshot().status == "running"
    assert tracker.snapshot().declared_wait is None


async def test_waiting_context_manager_and_ready_made_waits() -> None:
    """waiting() declares for a block; a ready DeclaredWait is taken as it is."""
    tracker = LivenessTracker("run-1")
    tracker.start()
    with tracker.waiting("elicitation", detail="which city?") as wait:
        assert status(tracker) == "waiting"
        assert wait.reason == "elicitation"
    assert status(tracker) == "running"
    ready = DeclaredWait(reason="signal", since=trio.current_time())
    assert tracker.declare_wait(ready) is ready
    tracker.clear_wait()
    assert status(tracker) == "running"


async def test_finish_is_terminal_and_idempotent() -> None:
    """finish() records the terminal status once; later calls and pulses change nothing."""
    tracker = LivenessTracker("run-1")
    tracker.start()
    tracker.declare_wait("approval")
    terminal = tracker.finish("aborted", FinishReason.ABORTED, step=3)
    assert terminal.terminal
    assert terminal.status == "aborted"
    assert terminal.finish_reason == "aborted"
    assert terminal.declared_wait is None
    assert terminal.step == 3
    again = tracker.finish("completed", FinishReason.STOP_CONDITION)
    assert again.status == "aborted"
    assert again.revision == terminal.revision
    tracker.pulse("progress")
    tracker.declare_wait("review")
    assert tracker.snapshot().revision == terminal.revision


def test_terminal_status_maps_finish_reasons() -> None:
    """Errors fail, aborts abort, everything else completes."""
    assert terminal_status(FinishReason.ERROR) == "failed"
    assert terminal_status(FinishReason.ABORTED) == "aborted"
    assert terminal_status(FinishReason.BUDGET_EXCEEDED) == "completed"
    assert terminal_status("stop-condition") == "completed"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.pulse("nap"), "pulse kind"),
        (lambda t: t.declare_wait("lunch"), "reason"),
        (lambda t: t.declare_wait("approval", deadline="soon"), "deadline"),
        (lambda t: t.finish("running"), "terminal status"),
        (lambda t: t.subscribe_snapshot(42), "callable"),
        (lambda t: t.snapshots(capacity=0), "capacity"),
    ],
)
def test_tracker_misuse_is_invalid_argument(call: object, message: str) -> None:
    """Bad kinds, reasons, statuses and observers are refused eagerly."""
    tracker = LivenessTracker("run-1", clock=lambda: 0.0)
    with pytest.raises(InvalidArgument, match=message):
        call(tracker)  # type: ignore[operator]


def test_tracker_construction_is_validated() -> None:
    """An empty id, an unknown kind or durability is refused."""
    with pytest.raises(InvalidArgument):
        LivenessTracker("")
    with pytest.raises(InvalidArgument):
        LivenessTracker("x", kind="job")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        LivenessTracker("x", durability="forever")  # type: ignore[arg-type]


def test_a_tracker_works_outside_trio_with_its_own_clock() -> None:
    """The clock is only read when something happens, so any clock works."""
    now = [10.0]
    tracker = LivenessTracker("run-1", clock=lambda: now[0], durability="durable")
    tracker.start()
    now[0] = 12.5
    assert tracker.snapshot().observed_at == 12.5
    assert tracker.snapshot().durability == "durable"


# -- subscriptions --------------------------------------------------------------------


async def test_subscribe_delivers_current_then_each_revision_then_terminal_once() -> None:
    """The current snapshot first, one per revision change, the terminal one once."""
    tracker = LivenessTracker("run-1")
    seen: list[LivenessSnapshot] = []
    subscription = tracker.subscribe_snapshot(seen.append)
    assert [s.status for s in seen] == ["starting"]
    tracker.start()
    tracker.pulse("heartbeat")  # quiet: no delivery
    tracker.pulse("progress", step=1)
    tracker.declare_wait("approval")
    tracker.clear_wait()
    tracker.finish("completed", FinishReason.STOP_CONDITION)
    tracker.finish("failed", FinishReason.ERROR)
    tracker.pulse("progress")
    assert [s.status for s in seen] == [
        "starting",
        "running",
        "running",
        "waiting",
        "running",
        "completed",
    ]
    revisions = [s.revision for s in seen]
    assert revisions == sorted(set(revisions))
    assert sum(s.terminal for s in seen) == 1
    assert not subscription.active
    assert subscription.delivered == len(seen)
    assert tracker.statistics()["subscriptions"] == 0


async def test_subscribing_to_finished_work_delivers_the_terminal_snapshot_once() -> None:
    """Already-terminal work: exactly one delivery, and the subscription is over."""
    tracker = LivenessTracker("run-1")
    tracker.finish("failed", FinishReason.ERROR)
    seen: list[LivenessSnapshot] = []
    subscription = tracker.subscribe_snapshot(seen.append)
    tracker.finish("completed")
    assert [s.status for s in seen] == ["failed"]
    assert not subscription.active


async def test_unsubscribe_stops_delivery() -> None:
    """unsubscribe() (or leaving the with block) ends delivery at once."""
    tracker = LivenessTracker("run-1")
    seen: list[LivenessSnapshot] = []
    with tracker.subscribe_snapshot(seen.append) as subscription:
        tracker.start()
    tracker.pulse("progress")
    assert len(seen) == 2
    assert not subscription.active
    subscription.unsubscribe()  # again: nothing happens


async def test_a_raising_observer_is_counted_and_does_not_break_the_work() -> None:
    """An observer that raises is logged and counted; other observers still get theirs."""
    tracker = LivenessTracker("run-1")

    def broken(snapshot: LivenessSnapshot) -> None:
        raise RuntimeError("observer bug")

    seen: list[LivenessSnapshot] = []
    tracker.subscribe_snapshot(broken)
    tracker.subscribe_snapshot(seen.append)
    tracker.start()
    assert tracker.observer_errors == 2
    assert len(seen) == 2


async def test_an_observer_that_changes_the_tracker_sees_revisions_in_order() -> None:
    """Nested changes made from inside a callback never deliver a revision backwards."""
    tracker = LivenessTracker("run-1")
    seen: list[int] = []

    def observer(snapshot: LivenessSnapshot) -> None:
        seen.append(snapshot.revision)
        if snapshot.status == "running" and snapshot.step == 0:
            tracker.pulse("progress", step=1)

    tracker.subscribe_snapshot(observer)
    tracker.start()
    tracker.finish("completed")
    assert seen == sorted(set(seen))
    assert seen[-1] == tracker.revision


async def test_snapshot_stream_yields_until_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The async variant yields the current snapshot, each change, and ends after terminal."""
    tracker = LivenessTracker("run-1")
    seen: list[str] = []

    async def consume() -> None:
        seen.extend([snapshot.status async for snapshot in tracker.snapshots()])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.sleep(1)
        tracker.start()
        await trio.sleep(1)
        with tracker.waiting("approval"):
            await trio.sleep(1)
        await trio.sleep(1)
        tracker.finish("completed")
    assert seen == ["starting", "running", "waiting", "running", "completed"]


async def test_snapshot_stream_drops_the_oldest_never_the_terminal() -> None:
    """A consumer that falls behind misses old snapshots, never the last one."""
    tracker = LivenessTracker("run-1")
    stream = tracker.snapshots(capacity=2)
    async with stream:
        for step in range(1, 6):
            tracker.pulse("progress", step=step)
        tracker.finish("completed")
        got = [snapshot async for snapshot in stream]
    assert [s.status for s in got] == ["running", "completed"]
    assert got[-1].terminal
    assert stream.dropped == 5


async def test_snapshot_stream_aclose_unsubscribes() -> None:
    """Leaving a stream early lets go of the tracker."""
    tracker = LivenessTracker("run-1")
    stream = tracker.snapshots()
    async for snapshot in stream:
        assert snapshot.status == "starting"
        break
    await stream.aclose()
    assert tracker.statistics()["subscriptions"] == 0
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


# -- the stall watchdog ---------------------------------------------------------------


def test_stall_policy_is_validated() -> None:
    """Durations are positive and finite; unreachable comes after stalled."""
    for bad in (0, -1, float("inf"), True, "60"):
        with pytest.raises(InvalidArgument):
            StallPolicy(stall_after=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="at least stall_after"):
        StallPolicy(stall_after=60, unreachable_after=30)
    with pytest.raises(InvalidArgument):
        StallPolicy(stall_after=60, abort_when_stalled="yes")  # type: ignore[arg-type]
    assert StallPolicy(stall_after=60, unreachable_after=60).unreachable_after == 60


def test_create_stall_watchdog_is_validated() -> None:
    """Wrong types, and an aborting policy without on_abort, are refused."""
    tracker = LivenessTracker("run-1", clock=lambda: 0.0)
    policy = StallPolicy(stall_after=1)
    with pytest.raises(InvalidArgument):
        create_stall_watchdog("tracker", policy)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        create_stall_watchdog(tracker, 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        create_stall_watchdog(tracker, policy, on_abort="stop")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="on_abort"):
        create_stall_watchdog(tracker, StallPolicy(stall_after=1, abort_when_stalled=True))


async def test_an_hour_long_stall_in_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No pulse for an hour: stalled at 60 s, unreachable at 300 s, 60 missed pulses."""
    tracker = LivenessTracker("run-1")
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=60, unreachable_after=300))
    seen: list[tuple[float, str, int]] = []
    start = trio.current_time()
    tracker.subscribe_snapshot(
        lambda s: seen.append((s.observed_at - start, s.status, s.missed_pulse_count))
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        await trio.sleep(3601)
        snapshot = tracker.snapshot()
        assert snapshot.status == "unreachable"
        assert snapshot.reachability == "unreachable"
        assert snapshot.missed_pulse_count == 60
        tracker.finish("aborted", FinishReason.ABORTED)
    assert (60.0, "stalled", 1) in seen
    assert (300.0, "unreachable", 5) in seen
    assert [status for _, status, _ in seen[:3]] == ["starting", "running", "stalled"]
    # It slept from deadline to deadline: about one wake per missed pulse, no polling.
    assert watchdog.wakeups <= 62


async def test_progress_clears_a_stall_and_heartbeats_keep_it_reachable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Heartbeats prove life (reachable, still stalled); progress makes it running again."""
    tracker = LivenessTracker("run-1")
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=10, unreachable_after=30))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        for _ in range(10):  # 95 s of heartbeats, no progress
            await trio.sleep(9.5)
            tracker.pulse("heartbeat")
        assert status(tracker) == "stalled"
        assert tracker.snapshot().missed_pulse_count == 9
        assert tracker.snapshot().reachability == "reachable"
        await trio.sleep(31)
        assert status(tracker) == "unreachable"
        tracker.pulse("heartbeat")
        assert status(tracker) == "stalled"
        tracker.pulse("progress", step=2)
        assert status(tracker) == "running"
        assert tracker.snapshot().missed_pulse_count == 0
        await trio.sleep(9.5)
        assert status(tracker) == "running"
        await trio.sleep(1)
        assert status(tracker) == "stalled"
        tracker.finish("completed")


async def test_regular_progress_never_stalls(autojump_clock: trio.testing.MockClock) -> None:
    """Work that pulses progress more often than stall_after stays running all day."""
    tracker = LivenessTracker("run-1")
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=60, unreachable_after=120))
    statuses: set[str] = set()
    tracker.subscribe_snapshot(lambda s: statuses.add(s.status))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        for step in range(1, 24 * 60):
            await trio.sleep(59)
            tracker.pulse("progress", step=step)
        tracker.finish("completed")
    assert statuses == {"starting", "running", "completed"}
    # Pulses do not wake it: it wakes at stale deadlines only (about one per pulse here).
    assert watchdog.wakeups <= 24 * 60 + 1


async def test_the_watchdog_is_paused_during_a_declared_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ten hours waiting for approval is not a stall; the clock restarts when it ends."""
    tracker = LivenessTracker("run-1")
    aborts: list[str] = []
    policy = StallPolicy(stall_after=60, unreachable_after=120, abort_when_stalled=True)
    watchdog = create_stall_watchdog(tracker, policy, on_abort=aborts.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        await trio.sleep(30)
        with tracker.waiting("approval", detail="call-7"):
            await trio.sleep(10 * 3600)
            snapshot = tracker.snapshot()
            assert snapshot.status == "waiting"
            assert snapshot.missed_pulse_count == 0
            assert snapshot.declared_wait is not None
            assert snapshot.declared_wait.detail == "call-7"
        await trio.sleep(59)
        assert status(tracker) == "running"
        assert aborts == []
        await trio.sleep(1.5)
        assert status(tracker) == "stalled"
        tracker.finish("aborted", FinishReason.ABORTED)
    assert len(aborts) == 1


async def test_a_wait_excuses_silence_only_until_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Past a declared wait's deadline the stall clock runs from the deadline."""
    tracker = LivenessTracker("run-1")
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=60))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        start = trio.current_time()
        tracker.declare_wait("review", deadline=start + 600)
        await trio.sleep(659)
        assert status(tracker) == "waiting"
        await trio.sleep(1.5)
        snapshot = tracker.snapshot()
        assert snapshot.status == "stalled"
        assert snapshot.declared_wait is not None
        tracker.finish("completed")


async def test_abort_when_stalled_calls_on_abort_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stalled run is aborted once, with a reason naming the policy."""
    tracker = LivenessTracker("run-1")
    aborts: list[str] = []
    policy = StallPolicy(stall_after=5, abort_when_stalled=True)
    watchdog = create_stall_watchdog(tracker, policy, on_abort=aborts.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        tracker.start()
        await trio.sleep(100)
        assert watchdog.aborted
        tracker.finish("aborted", FinishReason.ABORTED)
    assert len(aborts) == 1
    assert "no progress for 5s" in aborts[0]


async def test_on_abort_may_finish_the_work_and_a_raising_one_is_logged(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An on_abort that finishes the tracker ends the watchdog; one that raises is logged."""
    tracker = LivenessTracker("run-1")

    def finish(reason: str) -> None:
        tracker.finish("aborted", FinishReason.ABORTED)

    policy = StallPolicy(stall_after=5, abort_when_stalled=True)
    with trio.fail_after(10):
        await create_stall_watchdog(tracker, policy, on_abort=finish).run()
    assert status(tracker) == "aborted"

    other = LivenessTracker("run-2")

    def broken(reason: str) -> None:
        raise RuntimeError("abort failed")

    watchdog = create_stall_watchdog(other, policy, on_abort=broken)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        await trio.sleep(6)
        assert status(other) == "stalled"
        other.finish("completed")


async def test_the_watchdog_returns_when_the_work_finishes_and_when_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """finish() ends run() at once; cancellation ends it promptly; it runs once at a time."""
    tracker = LivenessTracker("run-1")
    watchdog = create_stall_watchdog(tracker, StallPolicy(stall_after=3600))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        await trio.sleep(1)
        with pytest.raises(InvalidArgument, match="already running"):
            await watchdog.run()
        tracker.finish("completed")
        start = trio.current_time()
    assert trio.current_time() == start

    other = LivenessTracker("run-2")
    with trio.move_on_after(5) as scope:
        await create_stall_watchdog(other, StallPolicy(stall_after=3600)).run()
    assert scope.cancelled_caught
    assert status(other) == "starting"

    await watchdog.run()  # the tracker is already terminal: returns at once
    assert watchdog.statistics()["aborted"] == 0


# -- a property: any interleaving keeps the promises -----------------------------------

STALL = 10.0
UNREACHABLE = 25.0

Operation = tuple[str, float]

operations = st.lists(
    st.one_of(
        st.tuples(st.just("sleep"), st.sampled_from([0.3, 1.7, 4.1, 9.9, 13.3, 26.2, 61.9])),
        st.tuples(st.sampled_from(["progress", "heartbeat", "declare", "clear"]), st.just(0.0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations)
def test_any_interleaving_of_pulses_waits_and_silence_keeps_the_promises(
    script: list[Operation],
) -> None:
    """Waiting never stalls; silence stalls on time; one terminal snapshot, in order."""

    async def main() -> None:
        tracker = LivenessTracker("run-p")
        delivered: list[LivenessSnapshot] = []
        tracker.subscribe_snapshot(delivered.append)
        policy = StallPolicy(stall_after=STALL, unreachable_after=UNREACHABLE)
        watchdog = create_stall_watchdog(tracker, policy)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog.run)
            tracker.start()
            quiet = heard = trio.current_time()
            waits: list[DeclaredWait] = []
            for kind, seconds in script:
                now = trio.current_time()
                if kind == "sleep":
                    await trio.sleep(seconds)
                elif kind == "progress":
                    tracker.pulse("progress")
                    quiet = heard = now
                elif kind == "heartbeat":
                    tracker.pulse("heartbeat")
                    heard = now
                elif kind == "declare":
                    waits.append(tracker.declare_wait("approval"))
                    quiet = heard = now
                elif waits:
                    tracker.clear_wait(waits.pop(0))
                    quiet = heard = now
                await trio.testing.wait_all_tasks_blocked()
                _check_model(tracker.snapshot(), waits, quiet, heard)
            tracker.finish("completed")
        revisions = [s.revision for s in delivered]
        assert revisions == sorted(set(revisions))
        assert [s.terminal for s in delivered].count(True) == 1
        assert delivered[-1].terminal

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _check_model(
    snapshot: LivenessSnapshot, waits: list[DeclaredWait], quiet: float, heard: float
) -> None:
    if waits:
        assert snapshot.status == "waiting"
        assert snapshot.missed_pulse_count == 0
        assert snapshot.declared_wait is waits[0]
        return
    silent = (snapshot.observed_at - quiet) / STALL
    if abs(silent - round(silent)) < 1e-6:
        return  # exactly at a deadline: either order of wake-ups is right
    assert snapshot.missed_pulse_count == int(silent)
    unreachable = snapshot.observed_at - heard >= UNREACHABLE
    assert snapshot.reachability == ("unreachable" if unreachable else "reachable")
    if unreachable:
        assert snapshot.status == "unreachable"
    elif silent >= 1:
        assert snapshot.status == "stalled"
    else:
        assert snapshot.status == "running"
