"""serve_schedule in virtual time: grid, jitter, overlap policies, missed ticks, cancelling."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest
import trio
import trio.testing

from operative import InvalidArgument
from operative.liveness import LivenessTracker
from operative.schedule import Schedule, ScheduleHandle, Tick, current_tick, serve_schedule


class Recorder:
    """A tick body that records when it ran and for which tick, then works ``busy`` s."""

    __test__ = False

    def __init__(self, busy: float = 0.0) -> None:
        self.busy = busy
        self.ticks: list[Tick] = []
        self.started: list[float] = []
        self.ended: list[tuple[int, str]] = []
        self.concurrent = 0
        self.most_concurrent = 0

    async def __call__(self) -> None:
        tick = current_tick()
        assert tick is not None
        self.ticks.append(tick)
        self.started.append(trio.current_time())
        self.concurrent += 1
        self.most_concurrent = max(self.most_concurrent, self.concurrent)
        how = "cancelled"
        try:
            await trio.sleep(self.busy)
            how = "done"
        finally:
            self.concurrent -= 1
            self.ended.append((tick.number, how))


async def _serve(schedule: Schedule, body: Recorder) -> tuple[float, ScheduleHandle]:
    origin = trio.current_time()
    async with trio.open_nursery() as nursery:
        handle: ScheduleHandle = await nursery.start(serve_schedule, schedule, body)
    return origin, handle


def test_schedules_are_validated() -> None:
    """Bad durations and policies raise InvalidArgument when the Schedule is built."""
    for bad in (
        {"every": 0},
        {"every": float("inf")},
        {"every": 10, "jitter": 10},
        {"every": 10, "jitter": -1},
        {"every": 10, "overlap": "sometimes"},
        {"every": 10, "missed": "never"},
        {"every": 10, "max_ticks": 0},
        {"every": 10, "seed": "x"},
        {"every": 10, "errors": "ignore"},
        {"every": 10, "liveness": object()},
    ):
        with pytest.raises(InvalidArgument):
            Schedule(**bad)


async def test_ticks_follow_the_grid_with_seeded_jitter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Each tick starts within [grid point, grid point + jitter); a seed repeats delays."""
    delays: list[list[float]] = []
    for _ in range(2):
        body = Recorder(busy=4)
        schedule = Schedule(every=10, jitter=3, seed=7, max_ticks=20, overlap="allow")
        origin, handle = await _serve(schedule, body)
        assert [t.number for t in body.ticks] == list(range(1, 21))
        for tick, started in zip(body.ticks, body.started, strict=True):
            assert tick.scheduled_at == pytest.approx(origin + 10 * tick.number)
            assert 0 <= started - tick.scheduled_at < 3
        delays.append([s - t.scheduled_at for t, s in zip(body.ticks, body.started, strict=True)])
        assert handle.statistics()["finished"] == 20
        assert handle.next_tick_at is None
    assert delays[0] == pytest.approx(delays[1])
    assert len(set(delays[0])) > 1


async def test_first_after_zero_ticks_at_once(autojump_clock: trio.testing.MockClock) -> None:
    """first_after=0 runs the first tick immediately."""
    body = Recorder()
    origin, _ = await _serve(Schedule(every=60, first_after=0, max_ticks=2), body)
    assert body.started == [origin, origin + 60]


async def test_overlap_skip(autojump_clock: trio.testing.MockClock) -> None:
    """A tick that comes while a run is going is dropped."""
    body = Recorder(busy=25)
    origin, handle = await _serve(Schedule(every=10, overlap="skip", max_ticks=4), body)
    assert [s - origin for s in body.started] == [10, 40]
    assert handle.statistics()["skipped_overlap"] == 2
    assert body.most_concurrent == 1


async def test_overlap_queue(autojump_clock: trio.testing.MockClock) -> None:
    """A tick waits for the previous run; beyond max_queued ticks are dropped."""
    body = Recorder(busy=25)
    origin, handle = await _serve(
        Schedule(every=10, overlap="queue", max_queued=1, max_ticks=4), body
    )
    assert [s - origin for s in body.started] == [10, 35, 60]
    assert [t.number for t in body.ticks] == [1, 2, 4]
    assert [t.started_at - origin for t in body.ticks] == [10, 35, 60]
    assert handle.statistics()["skipped_overlap"] == 1
    assert body.most_concurrent == 1


async def test_overlap_cancel_previous(autojump_clock: trio.testing.MockClock) -> None:
    """A new tick cancels the running one and starts once it has ended."""
    body = Recorder(busy=25)
    origin, handle = await _serve(Schedule(every=10, overlap="cancel_previous", max_ticks=3), body)
    assert [s - origin for s in body.started] == [10, 20, 30]
    assert body.ended == [(1, "cancelled"), (2, "cancelled"), (3, "done")]
    assert handle.statistics()["cancelled_previous"] == 2
    assert body.most_concurrent == 1


async def test_overlap_allow(autojump_clock: trio.testing.MockClock) -> None:
    """Runs overlap freely."""
    body = Recorder(busy=25)
    origin, _ = await _serve(Schedule(every=10, overlap="allow", max_ticks=3), body)
    assert [s - origin for s in body.started] == [10, 20, 30]
    assert body.most_concurrent == 3
    assert [how for _, how in body.ended] == ["done"] * 3


async def _after_a_suspend(
    clock: trio.testing.MockClock, schedule: Schedule
) -> tuple[float, Recorder, ScheduleHandle]:
    """Tick once, then jump the clock 45 s (four grid points pass unseen), then one more."""
    body = Recorder()
    origin = trio.current_time()
    async with trio.open_nursery() as nursery:
        handle: ScheduleHandle = await nursery.start(serve_schedule, schedule, body)
        clock.jump(10)
        await trio.testing.wait_all_tasks_blocked()
        assert len(body.ticks) == 1
        clock.jump(45)  # now origin + 55: points 20, 30, 40 and 50 are all due
        await trio.testing.wait_all_tasks_blocked()
        clock.jump(5)  # origin + 60: the next point, on time
        await trio.testing.wait_all_tasks_blocked()
        handle.cancel()
    return origin, body, handle


async def test_missed_ticks_run_once(mock_clock: trio.testing.MockClock) -> None:
    """After a suspend, one tick stands for all missed grid points."""
    origin, body, handle = await _after_a_suspend(mock_clock, Schedule(every=10))
    assert [(t.number, t.missed) for t in body.ticks] == [(1, 0), (5, 3), (6, 0)]
    assert body.started[1] - origin == 55
    assert handle.statistics()["missed"] == 3


async def test_missed_ticks_run_all(mock_clock: trio.testing.MockClock) -> None:
    """After a suspend, every missed tick is handed to the overlap policy (here: queue)."""
    schedule = Schedule(every=10, missed="run_all", overlap="queue", max_queued=10)
    _, body, handle = await _after_a_suspend(mock_clock, schedule)
    assert [t.number for t in body.ticks] == [1, 2, 3, 4, 5, 6]
    assert handle.statistics()["missed"] == 0


async def test_missed_ticks_skip(mock_clock: trio.testing.MockClock) -> None:
    """After a suspend, the missed ticks are dropped and the grid resumes."""
    origin, body, handle = await _after_a_suspend(mock_clock, Schedule(every=10, missed="skip"))
    assert [t.number for t in body.ticks] == [1, 6]
    assert body.started[1] - origin == 60
    assert handle.statistics()["missed"] == 4


async def test_cancelling_leaves_no_task(autojump_clock: trio.testing.MockClock) -> None:
    """Cancelling the caller's scope ends serve_schedule and every running tick."""
    body = Recorder(busy=1000)
    with trio.move_on_after(35):
        async with trio.open_nursery() as nursery:
            handle: ScheduleHandle = await nursery.start(
                serve_schedule, Schedule(every=10, overlap="allow"), body
            )
    assert handle.running == 0
    assert sorted(body.ended) == [(1, "cancelled"), (2, "cancelled"), (3, "cancelled")]
    assert body.concurrent == 0


async def test_handle_cancel_returns_normally(autojump_clock: trio.testing.MockClock) -> None:
    """handle.cancel() stops the schedule; serve_schedule returns without raising."""
    body = Recorder(busy=1000)
    async with trio.open_nursery() as nursery:
        handle: ScheduleHandle = await nursery.start(serve_schedule, Schedule(every=10), body)
        await trio.sleep(15)
        assert handle.running == 1
        handle.cancel()
    assert body.ended == [(1, "cancelled")]
    assert current_tick() is None


async def test_errors_raise_or_are_logged(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """errors='raise' ends the schedule with the tick's error; 'log' keeps going."""
    calls = 0

    async def flaky() -> None:
        nonlocal calls
        calls += 1
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"tick {calls} failed")

    with pytest.RaisesGroup(RuntimeError, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_schedule, Schedule(every=10), flaky)
    calls = 0
    with caplog.at_level(logging.ERROR, logger="operative.schedule"):
        async with trio.open_nursery() as nursery:
            handle: ScheduleHandle = await nursery.start(
                serve_schedule, Schedule(every=10, errors="log", max_ticks=3), flaky
            )
    assert calls == 3
    assert handle.statistics()["errors"] == 3
    assert "scheduled tick 3" in caplog.text


async def test_each_tick_pulses_liveness(autojump_clock: trio.testing.MockClock) -> None:
    """A schedule with liveness= records a host-reachability pulse per tick."""
    tracker = LivenessTracker("monitor", kind="session")
    body = Recorder()
    origin, _ = await _serve(Schedule(every=30, max_ticks=2, liveness=tracker), body)
    snapshot = tracker.snapshot()
    assert snapshot.last_progress_at == origin + 60
    assert snapshot.status == "running"


async def test_args_follow_the_callable(autojump_clock: trio.testing.MockClock) -> None:
    """serve_schedule(schedule, fn, *args) calls fn(*args); functools.partial works too."""
    seen: list[Any] = []

    async def record(*args: Any, **kwargs: Any) -> None:
        await trio.lowlevel.checkpoint()
        seen.append((args, kwargs))

    async with trio.open_nursery() as nursery:
        await nursery.start(serve_schedule, Schedule(every=1, max_ticks=1), record, "a", 2)
        await nursery.start(
            serve_schedule, Schedule(every=1, max_ticks=1), functools.partial(record, k="v")
        )
    assert sorted(seen, key=repr) == sorted([(("a", 2), {}), ((), {"k": "v"})], key=repr)
