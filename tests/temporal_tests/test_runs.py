"""Runs on the real Temporal dev server, with a worker in this process."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager

import pytest
import trio

from operative import InvalidArgument, OperativeError
from operative.durable import (
    Finished,
    Generated,
    RunNotFoundError,
    StepDone,
    ToolSettled,
    ToolStarted,
)
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.durable._replay import replay_journal
from operative.kvstore import ConflictError
from operative.temporal import TemporalEngine, TemporalRunError
from operative.tools import ApprovalError

from ._agents import approving_agent, hanging_agent, worker_agent
from .conftest import DevServer, start_worker


async def test_a_run_completes_and_reads_back_from_any_engine(
    engine: TemporalEngine, temporal_server: DevServer, task_queue: str
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("worker", "steps=3", session_id="s-1")
        result = await engine.result(run_id)
        worker.cancel()
    assert result.finish_reason == "stop-condition"
    assert result.content == "results: done-0, done-1, done-2"
    assert [step.step for step in result.steps] == [1, 2, 3, 4]
    roles = [m.role for m in result.conversation.current.messages]
    assert roles == ["user"] + ["assistant", "tool"] * 3 + ["assistant"]
    # Another engine (another process, as far as Temporal knows) sees the same run.
    async with TemporalEngine(temporal_server.target, task_queue=task_queue) as other:
        record = await other.get(run_id)
        again = await other.result(run_id)
        listed = await other.list(session_id="s-1")
    assert record is not None
    assert (record.status, record.agent_name, record.session_id) == ("completed", "worker", "s-1")
    assert record.outcome is not None
    assert record.outcome.content == result.content
    assert record.lease_owner is None
    assert record.fence == 1
    assert again.content == result.content
    assert len(again.steps) == 4
    assert [r.run_id for r in listed] == [run_id]


async def test_the_history_holds_each_tool_result_once(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("worker", "steps=2")
        await engine.result(run_id)
        worker.cancel()
    raw = temporal_server.cli("workflow", "show", "--workflow-id", run_id, "--output", "json")
    state = await engine.history(run_id)
    kinds = [type(e.record).__name__ for e in state.entries]
    assert kinds == [
        "Started",
        *["Generated", "ToolStarted", "ToolSettled", "StepDone"] * 2,
        "Generated",
        "StepDone",
        "Finished",
    ]
    done = [e.record for e in state.entries if isinstance(e.record, StepDone)]
    settled = [e.record for e in state.entries if isinstance(e.record, ToolSettled)]
    assert [d.results for d in done[:2]] == [(s.result,) for s in settled]
    decoded = b"".join(base64.b64decode(data) for data in _payload_data(json.loads(raw)))
    assert decoded.count(b'"value":"done-0"') == 1  # one copy of each tool result
    assert decoded.count(b'"value":"done-1"') == 1


def _payload_data(node: object) -> list[str]:
    """Every payload's ``data`` in a history printed as JSON by the ``temporal`` command."""
    if isinstance(node, dict):
        found = [node["data"]] if isinstance(node.get("data"), str) and "metadata" in node else []
        return found + [d for value in node.values() for d in _payload_data(value)]
    if isinstance(node, list):
        return [d for value in node for d in _payload_data(value)]
    return []


async def test_follow_streams_the_journal_until_the_end(engine: TemporalEngine) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("worker", "steps=2")
        seen = [entry async for entry in engine.follow(run_id)]
        worker.cancel()
    assert [e.seq for e in seen] == list(range(len(seen)))
    assert isinstance(seen[1].record, Generated)
    assert isinstance(seen[2].record, ToolStarted)
    assert isinstance(seen[-1].record, Finished)
    replay = replay_journal(run_id, seen)
    assert replay.finished is not None
    assert len(replay.steps) == 3


async def test_cancel_reaches_a_tool_in_flight_within_a_heartbeat(
    engine: TemporalEngine, temporal_server: DevServer, task_queue: str
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"hanging": hanging_agent()})
        run_id = await engine.start_run("hanging", "go")
        async with aclosing(engine.follow(run_id)) as entries:
            async for entry in entries:
                if isinstance(entry.record, ToolStarted):
                    break
        began = trio.current_time()
        async with TemporalEngine(temporal_server.target, task_queue=task_queue) as other:
            await other.cancel(run_id, "operator said stop")
        result = await engine.result(run_id)
        took = trio.current_time() - began
        worker.cancel()
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "operator said stop"
    assert took < engine.heartbeat_timeout + 2
    tool_messages = [m for m in result.conversation.current.messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert "cancel" in tool_messages[0].text.lower()
    record = await engine.get(run_id)
    assert record is not None
    assert record.status == "aborted"
    assert record.cancel_reason == "operator said stop"


async def test_cancel_of_a_run_no_worker_holds_ends_it_before_any_step(
    engine: TemporalEngine,
) -> None:
    run_id = await engine.start_run("worker", "steps=1")
    # No worker polls: the request is recorded in the history at once.
    record = await engine.cancel(run_id, "not needed")
    assert (record.status, record.cancel_reason) == ("running", "not needed")
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        with trio.fail_after(20):
            result = await engine.result(run_id)
        worker.cancel()
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "not needed"
    assert result.steps == ()
    stored = await engine.get(run_id)
    assert stored is not None
    assert stored.status == "aborted"
    # A finished run is returned unchanged.
    again = await engine.cancel(run_id, "twice")
    assert again.status == "aborted"
    assert again.outcome == stored.outcome


async def test_a_worker_shutdown_is_not_an_abort(
    engine: TemporalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPERATIVE_TEST_WORK_SECONDS", "0.3")
    async with trio.open_nursery() as nursery:
        first = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("worker", "steps=4")
        async with aclosing(engine.follow(run_id)) as entries:
            async for entry in entries:
                if isinstance(entry.record, StepDone):
                    break
        await first.stop()  # a shutdown: the run goes on elsewhere
        record = await engine.get(run_id)
        assert record is not None
        assert record.status == "running"
        second = await start_worker(nursery, engine, {"worker": worker_agent()})
        result = await engine.result(run_id)
        second.cancel()
    assert result.finish_reason == "stop-condition"
    # Step 2's call (not idempotent) may have been running when the worker stopped: then
    # it is reported unknown on the second worker, never run twice.
    assert result.content in (
        "results: done-0, done-1, done-2, done-3",
        f"results: done-0, {UNKNOWN_OUTCOME}, done-2, done-3",
    )
    record = await engine.get(run_id)
    assert record is not None
    assert record.fence >= 2


async def test_approve_and_deny_from_another_engine(
    engine: TemporalEngine, temporal_server: DevServer, task_queue: str
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"approving": approving_agent()})
        run_id = await engine.start_run("approving", "steps=2")
        async with TemporalEngine(temporal_server.target, task_queue=task_queue) as other:
            with pytest.raises(ApprovalError, match="waiting"):
                await other.approve(run_id, "call-0", True)  # not parked yet, or ever
            decided = 0
            async for entry in engine.follow(run_id):
                record = entry.record
                if isinstance(record, ToolStarted) and record.parked:
                    await other.approve(run_id, record.call_id, decided == 0)
                    decided += 1
        result = await engine.result(run_id)
        worker.cancel()
    assert decided == 2
    results = [m for m in result.conversation.current.messages if m.role == "tool"]
    assert results[0].text == "done-0"
    assert "denied" in results[1].text.lower() or results[1].metadata
    with pytest.raises(ApprovalError):
        await engine.approve(run_id, "call-1", True)


async def test_a_stale_attempt_is_fenced_out(engine: TemporalEngine) -> None:
    async with workflows_only(engine):  # no activity runs: the claims are the test's
        await _fenced(engine)


@asynccontextmanager
async def workflows_only(engine: TemporalEngine) -> AsyncIterator[None]:
    """A Temporal worker that runs the workflows of ``engine``'s queue, no activity."""
    from temporalio.worker import Worker
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from operative.temporal._workflow import RunWorkflow

    async def make() -> Worker:
        restrictions = SandboxRestrictions.default.with_passthrough_modules("operative", "msgspec")
        return Worker(
            engine.client,
            task_queue=engine.task_queue,
            workflows=[RunWorkflow],
            workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
        )

    worker = await engine.bridge.call(make)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine.bridge.call, worker.run)
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await engine.bridge.call(worker.shutdown)


async def _fenced(engine: TemporalEngine) -> None:
    from operative.temporal._journal import AttemptJournal

    run_id = await engine.start_run("worker", "steps=1")
    first = AttemptJournal(
        engine, run_id=run_id, agent_name="worker", session_id=None, worker_id="a",
        heartbeat=lambda: None,
    )  # fmt: skip
    second = AttemptJournal(
        engine, run_id=run_id, agent_name="worker", session_id=None, worker_id="b",
        heartbeat=lambda: None,
    )  # fmt: skip
    await first.take(f"{run_id}#0", 1)
    await second.take(f"{run_id}#0", 2)
    from operative.durable import LeaseLostError, Started

    with pytest.raises(LeaseLostError, match="another attempt"):
        await first.append(first.lease(3.0), 0, [Started(messages=())])
    with pytest.raises(LeaseLostError):
        await first.take(f"{run_id}#0", 2)  # the same attempt cannot claim twice
    with pytest.raises(ConflictError):
        await second.append(second.lease(3.0), 5, [Started(messages=())])
    await second.append(second.lease(3.0), 0, [Started(messages=())])
    await engine.cancel(run_id, "done with it")


async def test_unknown_agent_ends_the_run_in_error_without_retrying(
    engine: TemporalEngine,
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("nobody", "hi")
        with trio.fail_after(20):
            result = await engine.result(run_id)
        worker.cancel()
    assert result.finish_reason == "error"
    assert isinstance(result.error, TemporalRunError)
    assert "no agent named 'nobody'" in str(result.error)


async def test_bad_input_is_refused_with_clear_errors(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    with pytest.raises(InvalidArgument, match="input takes"):
        await engine.start_run("worker", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        await engine.start_run("", "hi")
    run_id = await engine.start_run("worker", "steps=1", run_id="fixed-id-" + engine.task_queue)
    with pytest.raises(ConflictError):
        await engine.start_run("worker", "again", run_id=run_id)
    await engine.cancel(run_id, "cleanup")
    assert await engine.get("no-such-run") is None
    with pytest.raises(RunNotFoundError):
        await engine.result("no-such-run")
    with pytest.raises(RunNotFoundError):
        await engine.cancel("no-such-run")
    with pytest.raises(InvalidArgument, match="agent_name"):
        await engine.list(agent_name=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="since"):
        await engine.list(since="yesterday")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        TemporalEngine(temporal_server.target, heartbeat_timeout=0)
    closed = TemporalEngine(temporal_server.target)
    with pytest.raises(OperativeError, match="async with"):
        await closed.start_run("worker", "hi")
    with pytest.raises(OperativeError, match="cannot connect"):
        async with TemporalEngine("127.0.0.1:1"):
            pass


async def test_a_temporal_engine_is_not_a_durable_routing(engine: TemporalEngine) -> None:
    from operative.durable import Durable

    with pytest.raises(InvalidArgument, match="start_run"):
        Durable(engine=engine, checkpoint_store=engine)  # type: ignore[arg-type]


async def test_the_starting_engines_heartbeat_timeout_is_the_activitys(
    temporal_server: DevServer, task_queue: str
) -> None:
    async with (
        TemporalEngine(temporal_server.target, task_queue=task_queue, heartbeat_timeout=30) as w,
        TemporalEngine(temporal_server.target, task_queue=task_queue, heartbeat_timeout=4) as s,
        trio.open_nursery() as nursery,
    ):
        worker = await start_worker(nursery, w, {"worker": worker_agent()})
        run_id = await s.start_run("worker", "steps=1")
        await s.result(run_id)
        worker.cancel()
    shown = json.loads(
        temporal_server.cli("workflow", "show", "--workflow-id", run_id, "--output", "json")
    )
    (scheduled,) = [
        event["activityTaskScheduledEventAttributes"]
        for event in shown["events"]
        if "activityTaskScheduledEventAttributes" in event
    ]
    assert scheduled["heartbeatTimeout"] == "4s"


async def test_a_record_over_the_payload_limit_is_refused_before_it_is_sent(
    engine: TemporalEngine,
) -> None:
    from operative import ToolResult
    from operative.temporal._journal import AttemptJournal

    journal = AttemptJournal(
        engine, run_id="r", agent_name="worker", session_id=None, worker_id="w",
        heartbeat=lambda: None,
    )  # fmt: skip
    huge = ToolResult(call_id="c", tool_name="work", outcome="success", value="x" * 2_100_000)
    with pytest.raises(InvalidArgument, match="payload limit"):
        await journal.append(journal.lease(3.0), 4, [ToolSettled(step=1, result=huge)])


async def test_steering_pauses_a_run_at_its_next_step_and_resumes_it(
    engine: TemporalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from operative.steering import Pause, Resume

    monkeypatch.setenv("OPERATIVE_TEST_WORK_SECONDS", "0.2")
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        run_id = await engine.start_run("worker", "steps=3")
        await engine.steer(run_id, Pause(reason="look first"))
        with trio.fail_after(20):
            while not (await engine.history(run_id)).entries:  # noqa: ASYNC110 - a history
                await trio.sleep(0.05)
        await trio.sleep(1.5)  # parked: no step runs while paused
        parked = await engine.history(run_id)
        generated = [e for e in parked.entries if isinstance(e.record, Generated)]
        assert len(generated) <= 1, "a paused run goes no further than its current step"
        assert parked.record().status == "running"
        await engine.steer(run_id, Resume())
        with trio.fail_after(20):
            result = await engine.result(run_id)
        worker.cancel()
    assert result.finish_reason == "stop-condition"
    assert result.content == "results: done-0, done-1, done-2"
    with pytest.raises(InvalidArgument):
        await engine.steer(run_id, "pause")  # type: ignore[arg-type]
