"""The official MCP client uses operative's server: real processes, real pipes and sockets.

``clients/official_client.py`` (the SDK's ``ClientSession`` under asyncio, in a process of
its own) lists and calls the tools of ``clients/served_tools.py``, served by ``python -m
operative mcp serve`` over stdio (the client starts the server) and over streamable HTTP
(the test starts it on 127.0.0.1 and stops it by PID). Both transports must give the
same report: annotations, structured output, error results, progress notifications,
a cancellation that reaches the tool, elicitation, approvals asked as forms, an agent
served as one tool, and a client without elicitation told why a call cannot run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

# The official client and operative's server, each a real process: seconds a test.
pytestmark = pytest.mark.heavy

CLIENTS = Path(__file__).with_name("clients")
SERVE = [sys.executable, "-m", "operative", "mcp", "serve", "served_tools:tools"]


async def run_client(*args: str) -> dict[str, Any]:
    """Run the official client script; its JSON report."""
    with trio.fail_after(150):
        done = await trio.run_process(
            [sys.executable, str(CLIENTS / "official_client.py"), *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=CLIENTS,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def check_report(report: dict[str, Any]) -> None:
    """What every transport must show the official client."""
    tools = report["tools"]
    assert set(tools) == {
        "add",
        "save_note",
        "forecast",
        "fail",
        "count",
        "wait_forever",
        "greet",
        "delete_file",
        "writer",
    }
    # Annotations: mutates=False -> readOnlyHint true; mutates=True -> false (and
    # destructive); undeclared -> not read-only; idempotent -> the hint.
    assert tools["add"]["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    assert tools["save_note"]["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
    }
    assert tools["delete_file"]["annotations"]["readOnlyHint"] is False
    assert tools["forecast"]["annotations"]["readOnlyHint"] is False
    assert tools["add"]["description"] == "Add two integers."
    assert tools["add"]["inputSchema"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
    }
    assert tools["add"]["outputSchema"] is None
    assert tools["forecast"]["outputSchema"]["required"] == ["city", "celsius", "sky"]
    # The agent is one tool taking its task; its only tool is read-only, so it is too.
    assert tools["writer"]["inputSchema"]["required"] == ["input"]
    assert tools["writer"]["annotations"]["readOnlyHint"] is True

    assert report["add"] == {
        "content": [{"type": "text", "text": "5"}],
        "structured": None,
        "isError": False,
    }
    forecast = {"city": "Lyon", "celsius": 21.5, "sky": "clear"}
    assert report["forecast"]["structured"] == forecast
    assert json.loads(report["forecast"]["content"][0]["text"]) == forecast
    assert report["fail"]["isError"] is True
    assert report["fail"]["content"][0]["text"] == "Tool 'fail' failed: ValueError: the sky fell"
    assert report["bad_arguments"]["isError"] is True
    assert "Invalid arguments for tool 'add'" in report["bad_arguments"]["content"][0]["text"]
    assert report["unknown"]["code"] == -32602
    assert "no_such_tool" in report["unknown"]["message"]

    assert report["count"]["content"] == [{"type": "text", "text": "counted to 3"}]
    assert report["count_progress"] == [
        [1.0, 3.0, "counted 1"],
        [2.0, 3.0, "counted 2"],
        [3.0, 3.0, "counted 3"],
    ]

    assert report["wait_started"] is True
    assert report["cancelled_locally"] is True
    assert report["cancel_reached_tool"] is True, "notifications/cancelled did not cancel the call"
    assert report["after_cancel"]["content"] == [{"type": "text", "text": "2"}]

    name_form, approve_a, approve_b = report["forms"]
    assert name_form["message"] == "What is your name?"
    assert name_form["schema"] == {
        "type": "object",
        "properties": {"first": {"type": "string"}, "last": {"type": "string", "default": "Smith"}},
        "required": ["first"],
    }
    # The answer gave only "first": the type's default filled in the rest.
    assert report["greet"]["content"] == [{"type": "text", "text": "Hello, Ada Smith!"}]
    assert '"path":"/tmp/a"' in approve_a["message"]
    assert "approve" in approve_a["schema"]["properties"]
    assert '"path":"/tmp/b"' in approve_b["message"]
    assert report["approved"]["content"] == [{"type": "text", "text": "deleted /tmp/a"}]
    assert report["denied"]["isError"] is True
    assert report["denied"]["content"][0]["text"] == (
        "A person denied this call to 'delete_file': not that file"
    )

    assert report["writer"]["content"] == [{"type": "text", "text": "Draft for: a haiku (2 words)"}]
    assert report["writer_progress"] == [
        [1.0, None, "step 1 of the writer agent finished"],
        [2.0, None, "step 2 of the writer agent finished"],
    ]

    unasked = report["without_elicitation"]
    assert unasked["greet"]["isError"] is True
    assert "did not declare the elicitation capability" in unasked["greet"]["content"][0]["text"]
    assert unasked["delete_file"]["isError"] is True
    assert "needs a person's approval" in unasked["delete_file"]["content"][0]["text"]


def processes_with(word: str) -> list[int]:
    """PIDs of live processes whose command line holds ``word``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
            state = (entry / "status").read_text()
        except OSError:
            continue
        if word.encode() in command and "\nState:\tZ" not in state:
            found.append(int(entry.name))
    return found


async def test_official_client_over_stdio(tmp_path: Path) -> None:
    name = f"stdio-{uuid.uuid4().hex}"
    report = await run_client("stdio", str(tmp_path), "--", *SERVE, "--name", name)
    assert report["server"] == name
    assert report["capabilities"] == {"tools": {"list_changed": False}}
    check_report(report)
    # The client closed the server's stdin: the server ended with it.
    assert processes_with(name) == []


async def test_official_client_over_streamable_http(tmp_path: Path) -> None:
    server = await trio.lowlevel.open_process(
        [*SERVE, "--http", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=CLIENTS,
        env={**os.environ, "NO_COLOR": "1"},
    )
    stdout, stderr = server.stdout, server.stderr
    assert stdout is not None
    assert stderr is not None
    output = bytearray()
    errors = bytearray()
    pattern = re.compile(rb"serving MCP at (http://127\.0\.0\.1:\d+/mcp)")
    listening = trio.Event()

    async def drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
        # Read for as long as the server runs, so it never blocks on a full pipe.
        while chunk := await stream.receive_some():
            into += chunk
            if pattern.search(output):
                listening.set()
        listening.set()  # it ended: the wait below finds no address and says why

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, stdout, output)
        nursery.start_soon(drain, stderr, errors)
        try:
            with trio.fail_after(60):
                await listening.wait()
            found = pattern.search(output)
            assert found is not None, errors.decode(errors="replace")
            report = await run_client("http", str(tmp_path), found.group(1).decode())
            assert report["server"] == "operative"
            check_report(report)
        finally:
            os.kill(server.pid, signal.SIGTERM)
            with trio.fail_after(20):
                code = await server.wait()
    assert code == 0, errors.decode(errors="replace")
    assert output.decode().rstrip().endswith("stopped")
