"""Cancelling an MCP call: an aborted run, a tool timeout. The server is told
(``notifications/cancelled``, seen on the wire by a relay in front of the real server),
and the session stays usable."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio

from operative import Conversation, FinishReason, RunResult, open_run
from operative.mcp import MCPServer

from .conftest import HttpServer, run_calls, script

TAP = str(Path(__file__).with_name("_tap.py"))
LONG = ("trigger-long-running-operation", {"duration": 20, "steps": 100})


def _tapped(log: Path, command: tuple[str, list[str]]) -> tuple[str, list[str]]:
    """The server's command behind a relay that records what the client sends."""
    return sys.executable, [TAP, str(log), "--", command[0], *command[1]]


def _sent(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def _aborted_mid_call(server: MCPServer) -> tuple[RunResult, float]:
    """A run whose long call is aborted once its first progress arrived."""
    abort = trio.Event()
    conversation = Conversation()
    conversation.append_user_message("go")
    started = trio.current_time()
    with trio.fail_after(30):
        async with open_run(
            generate=script([LONG]), conversation=conversation, tools=[server], abort_on=abort
        ) as run:
            async for event in run.events():
                if event.type == "tool.progress":
                    abort.set()
    return await run.result(), trio.current_time() - started


async def test_aborting_a_run_mid_call_cancels_it_on_the_server_and_the_session_goes_on(
    everything_stdio: tuple[str, list[str]], tmp_path: Path
) -> None:
    log = tmp_path / "sent.jsonl"
    async with MCPServer.stdio(*_tapped(log, everything_stdio)) as server:
        result, elapsed = await _aborted_mid_call(server)
        after, _ = await run_calls([server], ("echo", {"message": "still here"}))
    assert result.finish_reason is FinishReason.ABORTED
    (cut,) = result.steps[0].results
    assert cut.outcome == "cancelled"
    assert elapsed < 10  # not the call's 20 s
    assert after.steps[0].results[0].value == "Echo: still here"
    sent = _sent(log)
    (call,) = [
        m for m in sent if m.get("method") == "tools/call" and m["params"]["name"] == LONG[0]
    ]
    cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancels] == [call["id"]]


async def test_a_tool_timeout_cancels_the_call_on_the_server(
    everything_stdio: tuple[str, list[str]], tmp_path: Path
) -> None:
    log = tmp_path / "sent.jsonl"
    async with MCPServer.stdio(*_tapped(log, everything_stdio), timeout=0.5) as server:
        result, _ = await run_calls([server], LONG)
        after, _ = await run_calls([server], ("echo", {"message": "again"}))
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert "timed out after 0.5 s" in (settled.error or "")
    assert after.steps[0].results[0].value == "Echo: again"
    assert any(m.get("method") == "notifications/cancelled" for m in _sent(log))


async def test_aborting_a_call_over_http_leaves_the_session_usable(
    everything_http: HttpServer,
) -> None:
    async with MCPServer.http(everything_http.url) as server:
        result, elapsed = await _aborted_mid_call(server)
        after, _ = await run_calls([server], ("echo", {"message": "over http"}))
    assert result.finish_reason is FinishReason.ABORTED
    assert result.steps[0].results[0].outcome == "cancelled"
    assert elapsed < 10
    assert after.steps[0].results[0].value == "Echo: over http"
