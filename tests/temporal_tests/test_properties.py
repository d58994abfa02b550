"""The loop's durable invariants on Temporal, under random scripts and random stops.

Each example runs a scripted agent (a random plan of tool calls that succeed or fail) on
the real dev server and, when the n-th journal entry is written, does one of: nothing,
``engine.cancel`` (an abort racing the next journal writes), or a worker shutdown (a new
worker then finishes the run from its journal). Then it checks what was stored against
what the caller got: the record's outcome is the journal's; the journal replays; steps
are 1..k; each call has one result in the transcript and one ``tool.settled`` at most;
no call ran twice, and a call settled as success ran exactly once.
"""

from __future__ import annotations

import collections
import os
from contextlib import aclosing
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operative.durable import Finished, ToolSettled
from operative.durable._replay import replay_journal
from operative.temporal import TemporalEngine

from ._agents import scripted_agent
from .conftest import DevServer, start_worker

pytestmark = pytest.mark.realserver  # the second CI step (see tests/conftest.py)

EXAMPLES = int(os.environ.get("OPERATIVE_TEMPORAL_EXAMPLES", "12"))


def _executions(effects: Path, tag: str) -> collections.Counter[int]:
    counted: collections.Counter[int] = collections.Counter()
    if effects.exists():
        for line in effects.read_text().splitlines():
            their_tag, n, _pid = line.split()
            if their_tag == tag:
                counted[int(n)] += 1
    return counted


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=st.lists(st.sampled_from(["ok", "fail"]), min_size=0, max_size=4),
    cut=st.integers(min_value=1, max_value=18),
    mode=st.sampled_from(["none", "cancel", "shutdown"]),
)
async def test_stored_runs_agree_with_their_results(
    temporal_server: DevServer,
    task_queue: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    plan: list[str],
    cut: int,
    mode: str,
) -> None:
    effects = tmp_path / "effects"
    monkeypatch.setenv("OPERATIVE_TEST_EFFECTS", str(effects))
    tag = os.urandom(4).hex()
    # Each example is a trio.run of its own: the engine is opened in it.
    async with TemporalEngine(
        temporal_server.target, task_queue=task_queue, heartbeat_timeout=3.0
    ) as engine:
        await _example(engine, effects, tag, plan, cut, mode)


async def _example(
    engine: TemporalEngine, effects: Path, tag: str, plan: list[str], cut: int, mode: str
) -> None:
    agents = {"scripted": scripted_agent()}
    text = f"plan={','.join(plan)} tag={tag}" if plan else f"tag={tag}"
    acted = False
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, agents)
        run_id = await engine.start_run("scripted", text)
        async with aclosing(engine.follow(run_id)) as entries:
            async for entry in entries:
                if entry.seq + 1 == cut and not isinstance(entry.record, Finished):
                    acted = True
                    if mode == "cancel":
                        await engine.cancel(run_id, "property abort")
                    elif mode == "shutdown":
                        await worker.stop()
                        worker = await start_worker(nursery, engine, agents)
                    break
        with trio.fail_after(60):
            result = await engine.result(run_id)
        worker.cancel()
    record = await engine.get(run_id)
    state = await engine.history(run_id)
    assert record is not None
    assert record.outcome is not None
    # The stored outcome is the journal's last entry and the caller's result.
    last = state.entries[-1].record
    assert isinstance(last, Finished)
    assert last.outcome == record.outcome
    assert record.outcome.finish_reason == str(result.finish_reason)
    assert record.outcome.content == result.content
    if mode == "cancel" and acted:
        assert result.finish_reason in ("aborted", "stop-condition")
    else:
        assert result.finish_reason == "stop-condition", result.error
        assert result.content == f"{len(plan)} calls"
    # The journal replays, its steps are 1..k.
    replay = replay_journal(run_id, state.entries)
    assert [s.step for s in replay.steps] == list(range(1, len(replay.steps) + 1))
    assert [s.step for s in result.steps] == [s.step for s in replay.steps]
    # One result per call in the transcript; one settled record per call at most.
    messages = result.conversation.current.messages
    calls = [c.id for m in messages if m.role == "assistant" for c in m.tool_calls]
    answered = [m.tool_call_id for m in messages if m.role == "tool"]
    assert answered == calls
    settled = [e.record for e in state.entries if isinstance(e.record, ToolSettled)]
    ids = [s.result.call_id for s in settled]
    assert len(ids) == len(set(ids))
    # No call ran twice; a call settled as success (or as the tool's error) ran once.
    ran = _executions(effects, tag)
    assert all(count == 1 for count in ran.values()), ran
    for record_ in settled:
        n = int(record_.result.call_id.split("-")[1])
        if record_.result.outcome == "success" or record_.result.error == f"unit {n} failed":
            assert ran[n] == 1
