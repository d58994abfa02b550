"""Worker processes killed with SIGKILL mid-run; long runs that continue as new; the
history's growth. All on the real Temporal dev server."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from operative.durable import ToolSettled
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.temporal import TemporalEngine

from ._agents import hanging_agent, worker_agent
from .conftest import DevServer, start_worker

WORKER = Path(__file__).with_name("_worker_main.py")


async def _spawn_worker(server: DevServer, queue: str, env: dict[str, str]) -> trio.Process:
    process = await trio.lowlevel.open_process(
        [sys.executable, str(WORKER), server.target, queue],
        stdout=subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert process.stdout is not None
    with trio.fail_after(60):
        line = b""
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(64)
            assert chunk, "the worker process ended before it was ready"
            line += chunk
    assert line.strip() == b"ready"
    return process


def _executions(effects: Path) -> collections.Counter[tuple[str, int]]:
    """How often each (run tag, call n) ran, from the effects file (complete lines)."""
    counted: collections.Counter[tuple[str, int]] = collections.Counter()
    if effects.exists():
        for line in effects.read_text().splitlines():
            tag, n, _pid = line.split()
            counted[(tag, int(n))] += 1
    return counted


@pytest.mark.realserver  # the second CI step (see tests/conftest.py)
async def test_a_sigkilled_workers_runs_finish_on_another_worker(
    engine: TemporalEngine,
    temporal_server: DevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    effects = tmp_path / "effects"
    env = {"OPERATIVE_TEST_EFFECTS": str(effects), "OPERATIVE_TEST_WORK_SECONDS": "0.15"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    victim = await _spawn_worker(temporal_server, engine.task_queue, env)
    tags = [f"r{i}" for i in range(4)]
    run_ids = {tag: await engine.start_run("worker", f"steps=6 tag={tag}") for tag in tags}
    with trio.fail_after(60):
        while sum(_executions(effects).values()) < 6:  # noqa: ASYNC110 - a file, polled
            await trio.sleep(0.05)
    victim.kill()  # SIGKILL
    await victim.wait()
    assert victim.returncode == -signal.SIGKILL
    killed_at = trio.current_time()
    async with trio.open_nursery() as nursery:
        survivor = await start_worker(nursery, engine, {"worker": worker_agent()})
        with trio.fail_after(120):
            results = {tag: await engine.result(run_ids[tag]) for tag in tags}
        survivor.cancel()
    recovery = trio.current_time() - killed_at
    executions = _executions(effects)
    for tag, result in results.items():
        assert result.finish_reason == "stop-condition", (tag, result.error)
        assert [step.step for step in result.steps] == list(range(1, 8))
        calls = [m for m in result.conversation.current.messages if m.role == "assistant"]
        answers = [m for m in result.conversation.current.messages if m.role == "tool"]
        assert [m.tool_call_id for m in answers] == [c.id for m in calls for c in m.tool_calls]
        state = await engine.history(run_ids[tag])
        settled = [e.record for e in state.entries if isinstance(e.record, ToolSettled)]
        assert sorted(s.result.call_id for s in settled) == [f"call-{n}" for n in range(6)]
        for record in settled:
            n = int(record.result.call_id.split("-")[1])
            ran = executions[(tag, n)]
            if record.result.outcome == "success":
                assert ran == 1, f"{tag} call {n} ran {ran} times"  # never twice
            else:  # cut by the crash, not idempotent: reported, not repeated
                assert record.result.error == UNKNOWN_OUTCOME
                assert ran <= 1
    assert recovery < 60
    print(f"recovered 4 runs {recovery:.2f}s after SIGKILL (heartbeat {engine.heartbeat_timeout}s)")


async def test_cancel_from_another_process_stops_a_tool_in_flight(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"hanging": hanging_agent()})
        run_id = await engine.start_run("hanging", "go")
        with trio.fail_after(20):
            while True:
                state = await engine.history(run_id)
                if len(state.entries) >= 3:  # started, generated, tool.started
                    break
                await trio.sleep(0.05)
        script = (
            "import sys, trio\n"
            "from operative.temporal import TemporalEngine\n"
            "async def main():\n"
            "    async with TemporalEngine(sys.argv[1], task_queue=sys.argv[2]) as e:\n"
            "        record = await e.cancel(sys.argv[3], 'stopped from elsewhere')\n"
            "        print(record.status, record.cancel_reason)\n"
            "trio.run(main)\n"
        )
        done = await trio.run_process(
            [sys.executable, "-c", script, temporal_server.target, engine.task_queue, run_id],
            capture_stdout=True,
        )
        assert done.stdout.decode().split()[:1] in (["running"], ["aborted"])
        with trio.fail_after(engine.heartbeat_timeout + 10):
            result = await engine.result(run_id)
        worker.cancel()
    assert (result.finish_reason, result.abort_reason) == ("aborted", "stopped from elsewhere")


async def test_a_long_run_continues_as_new_and_keeps_its_journal(
    temporal_server: DevServer, task_queue: str
) -> None:
    async with TemporalEngine(
        temporal_server.target, task_queue=task_queue, heartbeat_timeout=3.0, rollover_events=60
    ) as engine:
        async with trio.open_nursery() as nursery:
            worker = await start_worker(nursery, engine, {"worker": worker_agent()})
            run_id = await engine.start_run("worker", "steps=12")
            seen = [entry async for entry in engine.follow(run_id)]
            result = await engine.result(run_id)
            worker.cancel()
        described = json.loads(
            temporal_server.cli(
                "workflow", "list", "--query", f"WorkflowId = '{run_id}'", "--output", "json"
            )
        )
    assert len(described) >= 3, "the run should have continued as new at least twice"
    assert result.finish_reason == "stop-condition"
    assert result.content == "results: " + ", ".join(f"done-{n}" for n in range(12))
    assert [step.step for step in result.steps] == list(range(1, 14))
    assert [e.seq for e in seen] == list(range(len(seen)))  # follow crossed the rollovers
    assert seen[-1].record.__class__.__name__ == "Finished"


async def test_history_grows_linearly_with_steps(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    sizes = {}
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        for steps in (4, 8, 16):
            run_id = await engine.start_run("worker", f"steps={steps}")
            await engine.result(run_id)
            described = json.loads(
                temporal_server.cli(
                    "workflow", "describe", "--workflow-id", run_id, "--output", "json"
                )
            )
            info = described["workflowExecutionInfo"]
            sizes[steps] = (int(info["historySizeBytes"]), int(info["historyLength"]))
        worker.cancel()
    per_step_a = (sizes[8][0] - sizes[4][0]) / 4
    per_step_b = (sizes[16][0] - sizes[8][0]) / 8
    assert per_step_b == pytest.approx(per_step_a, rel=0.2), sizes  # linear, not quadratic
    events_a = (sizes[8][1] - sizes[4][1]) / 4
    events_b = (sizes[16][1] - sizes[8][1]) / 8
    assert events_a == events_b, sizes
    print(f"history: {per_step_b:.0f} bytes and {events_b:.0f} events per one-call step")


async def test_a_run_whose_worker_died_just_after_finishing_it_closes(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    victim = await _spawn_worker(
        temporal_server, engine.task_queue, {"OPERATIVE_TEST_DIE_AFTER_FINISH": "1"}
    )
    run_id = await engine.start_run("worker", "steps=1")
    await victim.wait()
    assert victim.returncode == -signal.SIGKILL
    # The outcome is journaled; the activity never reported back. The run closes (the
    # workflow gives the activity one heartbeat timeout) instead of retrying forever.
    async with trio.open_nursery() as nursery:
        survivor = await start_worker(nursery, engine, {"worker": worker_agent()})
        with trio.fail_after(engine.heartbeat_timeout + 15):
            result = await engine.result(run_id)
        survivor.cancel()
    assert (result.finish_reason, result.content) == ("stop-condition", "results: done-0")
    record = await engine.get(run_id)
    assert record is not None
    assert record.status == "completed"
