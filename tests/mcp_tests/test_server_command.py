"""``operative mcp serve MODULE:OBJECT``: what it serves, how it stops, what it refuses."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from operative.cli import main
from operative.cli._mcp import load_object
from operative.mcp._server import served_toolbox

MODULE = textwrap.dedent(
    '''
    import os

    import operative


    @operative.tool
    async def read_stdin() -> str:
        """What a tool reads from file descriptor 0 while the server runs."""
        return repr(os.read(0, 100))


    @operative.tool(mutates=True, version="1")
    def shout(text: str) -> str:
        """A sync tool (it runs in a worker thread)."""
        print("stray output goes to stderr, not to the protocol")
        return text.upper()


    tools = [read_stdin, shout]
    toolbox = operative.Toolbox(tools)


    async def make_tools():
        return tools


    async def greet(request):
        return operative.GenerateResponse(content="hi")


    def make_agent():
        return operative.create_agent(generate=greet, name="greeter")


    not_servable = 42
    '''
)


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory holding ``mytools.py`` (the command runs there, as a user would)."""
    (tmp_path / "mytools.py").write_text(MODULE)
    yield tmp_path
    sys.modules.pop("mytools", None)


class StdioServer:
    """``operative mcp serve`` over real pipes, spoken to one JSON-RPC line at a time."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.pending = b""

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self.pending:
            chunk = await self.process.stdout.receive_some()
            assert chunk, "the server closed its stdout"
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def request(self, id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        return await self.receive()

    async def initialize(self) -> dict[str, Any]:
        answer = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return answer


async def start(cwd: Path, target: str) -> StdioServer:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "operative", "mcp", "serve", target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
    )
    return StdioServer(process)


async def close(process: trio.Process) -> None:
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


async def stderr_of(process: trio.Process) -> str:
    assert process.stderr is not None
    data = b""
    while chunk := await process.stderr.receive_some():
        data += chunk
    return data.decode(errors="replace")


@pytest.mark.heavy  # a real server process: seconds
async def test_stdio_serves_until_stdin_closes(module_dir: Path) -> None:
    server = await start(module_dir, "mytools:tools")
    with trio.fail_after(60):
        answer = await server.initialize()
        assert answer["result"]["serverInfo"]["name"] == "operative"
        listed = await server.request(1, "tools/list", {})
        assert [tool["name"] for tool in listed["result"]["tools"]] == ["read_stdin", "shout"]
        # fd 0 is the null device while serving: a tool cannot read the client's messages.
        read = await server.request(2, "tools/call", {"name": "read_stdin", "arguments": {}})
        assert read["result"]["content"] == [{"type": "text", "text": "b''"}]
        shout = await server.request(
            3, "tools/call", {"name": "shout", "arguments": {"text": "hi"}}
        )
        assert shout["result"]["content"] == [{"type": "text", "text": "HI"}]
        assert server.process.stdin is not None
        await server.process.stdin.aclose()
        assert await server.process.wait() == 0
    assert "stray output goes to stderr" in await stderr_of(server.process)
    await close(server.process)


@pytest.mark.heavy  # a real server process and a real signal: seconds
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
async def test_stdio_stops_at_ctrl_c_or_sigterm(module_dir: Path, signum: int) -> None:
    """Waiting for its client on an open stdin, the server still stops at once."""
    server = await start(module_dir, "mytools:tools")
    with trio.fail_after(60):
        await server.initialize()
        os.kill(server.process.pid, signum)
        assert await server.process.wait() == 0
    await close(server.process)


@pytest.mark.parametrize("target", ["mytools:toolbox", "mytools:make_tools", "mytools:make_agent"])
async def test_targets_a_toolbox_a_function_or_an_agent(
    module_dir: Path, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(module_dir)
    monkeypatch.syspath_prepend(str(module_dir))
    toolbox = served_toolbox(await load_object(target))
    expected = ["greeter"] if target.endswith("agent") else ["read_stdin", "shout"]
    assert [tool.name for tool in toolbox] == expected


def run_command(*args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(["mcp", "serve", *args], stdout=stdout, stderr=stderr, env={"NO_COLOR": "1"})
    assert stdout.getvalue() == ""
    return code, stderr.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mytools"], "'mytools' is not MODULE:OBJECT"),
        (["nowhere:tools"], "cannot import 'nowhere'"),
        (["mytools:missing"], "module 'mytools' has no 'missing'"),
        (["mytools:not_servable"], "serve a Toolbox, a list of tools and agents"),
        (["mytools:tools", "--http", "localhost"], "is not HOST:PORT"),
        (["mytools:tools", "--http", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["mytools:tools", "--http", "203.0.113.9:0"], "not an address of this machine"),
    ],
)
def test_bad_targets_and_addresses_are_usage_errors(
    module_dir: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.syspath_prepend(str(module_dir))
    code, errors = run_command(*args, cwd=module_dir, monkeypatch=monkeypatch)
    assert code == 2, errors
    assert message in errors
    assert errors.startswith("operative: error: ")


def test_a_port_in_use_is_a_usage_error(module_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(module_dir))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, errors = run_command(
            "mytools:tools", "--http", f"127.0.0.1:{port}", cwd=module_dir, monkeypatch=monkeypatch
        )
    assert code == 2
    assert "is in use" in errors
