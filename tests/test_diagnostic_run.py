"""open_diagnostic_run: a run handle's liveness for a job that is not an agent run."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from operative import FinishReason, InvalidArgument
from operative.liveness import (
    DiagnosticRun,
    LivenessSnapshot,
    StallPolicy,
    open_diagnostic_run,
)


async def test_a_tool_only_job_reports_like_a_run(autojump_clock: trio.testing.MockClock) -> None:
    """starting -> running -> pulses with steps -> completed, delivered to a subscriber."""
    seen: list[LivenessSnapshot] = []
    async with open_diagnostic_run("reindex") as job:
        assert isinstance(job, DiagnosticRun)
        job.subscribe_snapshot(seen.append)
        for step in (1, 2, 3):
            await trio.sleep(1)
            job.pulse("progress", step=step)
        with job.waiting("signal"):
            assert job.snapshot().status == "waiting"
            await trio.sleep(1)
    final = job.snapshot()
    assert final.status == "completed"
    assert final.kind == "run"
    assert final.id == job.run_id == "reindex"
    assert final.step == 3
    assert seen[0].status == "running"
    assert [snapshot.step for snapshot in seen if snapshot.status == "running"][-1] == 3
    assert seen[-1].status == "completed"
    assert [snapshot.status for snapshot in seen].count("completed") == 1
    assert final.revision > seen[0].revision


async def test_abort_cancels_the_job_and_its_tasks(autojump_clock: trio.testing.MockClock) -> None:
    finished: list[str] = []

    async def worker(name: str) -> None:
        await trio.sleep(100)
        finished.append(name)

    async with open_diagnostic_run() as job:
        job.start_soon(worker, "a")
        job.start_soon(worker, "b")
        await trio.sleep(2)
        job.abort("the operator stopped it")
        await trio.sleep(100)  # cancelled: never reached its end
        finished.append("body")
    assert finished == []
    assert job.abort_reason == "the operator stopped it"
    snapshot = job.snapshot()
    assert snapshot.status == "aborted"
    assert snapshot.finish_reason is FinishReason.ABORTED
    assert trio.current_time() == pytest.approx(2)
    with pytest.raises(InvalidArgument, match="has ended"):
        job.start_soon(worker, "late")


async def test_an_aborting_stall_policy_stops_a_silent_job(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The watchdog runs in the handle's nursery and ends with the job."""
    policy = StallPolicy(stall_after=5, abort_when_stalled=True)
    statuses: list[str] = []
    async with open_diagnostic_run(stall_policy=policy) as job:
        job.subscribe_snapshot(lambda snapshot: statuses.append(snapshot.status))
        await trio.sleep(3)
        job.pulse()
        await trio.sleep(1000)  # goes silent
    assert job.snapshot().status == "aborted"
    assert "stalled" in statuses
    assert trio.current_time() == pytest.approx(8)


async def test_a_watched_job_that_finishes_leaves_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_diagnostic_run(stall_policy=StallPolicy(stall_after=5)) as job:
        await trio.sleep(1)
    assert job.snapshot().status == "completed"
    assert trio.current_time() == pytest.approx(1)


async def test_a_failing_job_is_failed_and_the_error_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with pytest.raises(ValueError, match="bad row"):
        async with open_diagnostic_run() as job:
            await trio.sleep(1)
            raise ValueError("bad row")
    snapshot = job.snapshot()
    assert snapshot.status == "failed"
    assert snapshot.finish_reason is FinishReason.ERROR


async def test_a_failing_task_fails_the_job(autojump_clock: trio.testing.MockClock) -> None:
    async def broken() -> None:
        await trio.sleep(1)
        raise ConnectionError("the index went away")

    with pytest.RaisesGroup(ConnectionError):
        async with open_diagnostic_run() as job:
            job.start_soon(broken)
            await trio.sleep(10)
    assert job.snapshot().status == "failed"


async def test_a_cancelled_caller_aborts_the_job_and_is_not_swallowed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.move_on_after(3) as scope:
        async with open_diagnostic_run() as job:
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert job.snapshot().status == "aborted"


async def test_snapshots_iterate_until_the_terminal_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    statuses: list[str] = []
    async with trio.open_nursery() as nursery, open_diagnostic_run() as job:

        async def watch() -> None:
            statuses.extend([snapshot.status async for snapshot in job.snapshots()])

        nursery.start_soon(watch)
        await trio.sleep(1)
        job.pulse(step=1)
        await trio.sleep(1)
    assert statuses[0] == "running"
    assert statuses[-1] == "completed"


async def test_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="run_id"):
        async with open_diagnostic_run(""):
            pass
    with pytest.raises(InvalidArgument, match="stall_policy"):
        async with open_diagnostic_run(stall_policy=5):  # type: ignore[arg-type]
            pass
