"""Durable runs with MCP tools: a call is journaled like any tool call, and recovery runs
a call cut mid-flight again only when the server declares the tool idempotent (or
read-only). A relay in front of the real server shows which calls really went out."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent
from operative.durable import (
    Durable,
    SqliteCheckpointStore,
    SqliteEngine,
    Started,
    ToolSettled,
    ToolStarted,
    recover,
)
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.mcp import MCPServer

TAP = str(Path(__file__).with_name("_tap.py"))
CALLS = [("echo", {"message": "again"}), ("toggle-simulated-logging", {})]


def _calls_sent(log: Path) -> list[str]:
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    return [m["params"]["name"] for m in sent if m.get("method") == "tools/call"]


async def _model(request: GenerateRequest) -> GenerateResponse:
    """Deterministic, as a durable agent's model must be: the calls, then an answer."""
    await trio.lowlevel.checkpoint()
    if any(m.role == "tool" for m in request.conversation.messages):
        return GenerateResponse(content="done")
    calls = tuple(ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(CALLS))
    return GenerateResponse(tool_calls=calls)


def _agent(server: MCPServer) -> Any:
    return create_agent(generate=_model, tools=[server], name="worker")


async def test_an_mcp_call_is_journaled_and_recovery_reruns_only_what_may_run_again(
    everything_stdio: tuple[str, list[str]], tmp_path: Path
) -> None:
    first_log, second_log = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    full, cut = tmp_path / "full.db", tmp_path / "cut.db"
    tapped = [TAP, str(first_log), "--", everything_stdio[0], *everything_stdio[1]]
    with trio.fail_after(60):
        async with (
            MCPServer.stdio(sys.executable, tapped) as server,
            SqliteEngine(full) as engine,
            SqliteCheckpointStore(full) as store,
        ):
            durable = Durable(engine=engine, checkpoint_store=store, run_id="r1")
            async with _agent(server).open_run("go", durable=durable) as run:
                reference = await run.result()
            journal = await store.read("r1")
    started = [e.record.call_id for e in journal if isinstance(e.record, ToolStarted)]
    settled = {e.record.result.call_id: e.record.result for e in journal
               if isinstance(e.record, ToolSettled)}  # fmt: skip
    assert sorted(started) == ["c0", "c1"]
    assert settled["c0"].value == "Echo: again"
    assert settled["c1"].outcome == "success"
    assert sorted(_calls_sent(first_log)) == ["echo", "toggle-simulated-logging"]

    # A worker crashed with both calls started and neither settled: its journal ends there.
    last_start = max(i for i, e in enumerate(journal) if isinstance(e.record, ToolStarted))
    prefix = [e for e in journal[: last_start + 1] if not isinstance(e.record, ToolSettled)]
    tapped[1] = str(second_log)
    with trio.fail_after(60):
        async with (
            MCPServer.stdio(sys.executable, tapped) as server,
            SqliteEngine(cut) as engine,
            SqliteCheckpointStore(cut) as store,
        ):
            first = prefix[0].record
            assert isinstance(first, Started)
            lease = await engine.start(first, run_id="r1", worker_id="crashed", lease_seconds=60)
            for number, entry in enumerate(prefix[1:], start=1):
                await store.append(lease, number, [entry.record])
            await engine.release(lease)
            results = await recover(
                engine=engine, checkpoint_store=store, agents={"worker": _agent(server)}
            )
    recovered = {r.tool_name: r for r in results["r1"].steps[0].results}
    assert recovered["echo"].value == "Echo: again"  # read-only: run again
    assert recovered["toggle-simulated-logging"].error == UNKNOWN_OUTCOME  # may have run
    assert _calls_sent(second_log) == ["echo"]
    assert results["r1"].content == reference.content
