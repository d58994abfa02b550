"""Opening and closing an MCPServer: real processes, found and checked by PID."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from operative import (
    Conversation,
    FinishReason,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    open_run,
)
from operative.mcp import (
    MCPConnectionError,
    MCPNotConnectedError,
    MCPServer,
)
from operative.testing import ScriptedModel

from .conftest import HttpServer, child_pids, pid_alive

FAULTY = str(Path(__file__).with_name("_faulty_server.py"))


def _history() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("hello")
    return conversation


async def test_a_stdio_server_lives_exactly_as_long_as_its_block(
    time_server: tuple[str, list[str]],
) -> None:
    command, args = time_server
    before = child_pids()
    with trio.fail_after(30):
        async with MCPServer.stdio(command, args) as server:
            (pid,) = child_pids() - before
            assert pid_alive(pid)
            assert server.transport == "stdio"
            assert server.name == "'mcp-time'"
            assert "open over stdio" in repr(server)
    assert not pid_alive(pid)
    assert server.transport is None


async def test_server_everything_over_stdio_leaves_no_process_behind(
    everything_stdio: tuple[str, list[str]],
) -> None:
    command, args = everything_stdio
    before = child_pids()
    with trio.fail_after(30):
        async with MCPServer.stdio(command, args) as server:
            started = child_pids() - before
            assert started
            names = [tool.name for tool in await server.list_tools()]
            assert "echo" in names
    assert not [pid for pid in started if pid_alive(pid)]


@pytest.mark.heavy  # a real server process waited out: seconds
async def test_a_server_that_ignores_stdin_closing_is_terminated_after_a_short_grace(
    time_server: tuple[str, list[str]],
) -> None:
    """A shell runs the real server and then keeps running (it ignores the close): the
    block ends after the grace, with its process group stopped."""
    command, _ = time_server
    script = f"{command} -m mcp_server_time; exec sleep 1000"
    before = child_pids()
    async with MCPServer.stdio("sh", ["-c", script]) as server:
        (pid,) = child_pids() - before
        await server.list_tools()
        closing = trio.current_time()
    elapsed = trio.current_time() - closing
    assert not pid_alive(pid)
    assert 1.5 < elapsed < 6, elapsed


@pytest.mark.heavy  # real server processes and their group: seconds
async def test_what_a_server_leaves_running_in_its_group_is_stopped_with_it(
    time_server: tuple[str, list[str]], tmp_path: Path
) -> None:
    command, _ = time_server
    pid_file = tmp_path / "left.pid"
    script = f"sleep 1000 & echo $! > {pid_file}; exec {command} -m mcp_server_time"
    async with MCPServer.stdio("sh", ["-c", script]) as server:
        await server.list_tools()
        left = int(pid_file.read_text())
        assert pid_alive(left)
    assert not pid_alive(left)


async def test_a_command_that_cannot_start_is_a_connection_error() -> None:
    with pytest.raises(MCPConnectionError, match="could not start the MCP server"):
        async with MCPServer.stdio("/nonexistent/mcp-server"):
            pass


async def test_a_server_that_dies_during_the_handshake_says_why() -> None:
    script = "echo 'missing API key' >&2; exit 3"
    with trio.fail_after(30), pytest.raises(MCPConnectionError) as raised:
        async with MCPServer.stdio("sh", ["-c", script]):
            pass
    message = str(raised.value)
    assert "exited with code 3" in message
    assert "missing API key" in message


async def test_a_server_used_before_its_block_is_a_clear_error(
    time_server: tuple[str, list[str]],
) -> None:
    server = MCPServer.stdio(*time_server)
    with pytest.raises(MCPNotConnectedError, match="async with server"):
        await server.list_tools()
    model = ScriptedModel(["never"])
    async with open_run(generate=model, conversation=_history(), tools=[server]) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.ERROR
    assert isinstance(result.error, MCPNotConnectedError)
    assert model.requests == []


async def test_a_server_killed_mid_session_fails_its_calls_with_a_typed_error(
    time_server: tuple[str, list[str]],
) -> None:
    before = child_pids()
    async with MCPServer.stdio(*time_server) as server:
        (pid,) = child_pids() - before
        model = ScriptedModel(
            [
                GenerateResponse(
                    tool_calls=(
                        ToolCall(id="c1", name="get_current_time", arguments={"timezone": "UTC"}),
                    )
                ),
                "done",
            ]
        )
        tools = await server.list_tools()
        os.kill(pid, signal.SIGKILL)
        with trio.fail_after(10):
            async with open_run(generate=model, conversation=_history(), tools=tools) as run:
                pass
        (settled,) = (await run.result()).steps[0].results
        assert settled.outcome == "error"
        assert settled.error is not None
        assert "MCPConnectionError" in settled.error
        assert "killed by signal 9" in settled.error
        with pytest.raises(MCPConnectionError):
            await server.list_tools()


async def test_an_http_server_killed_mid_session_fails_the_call_not_the_block(
    everything_http: HttpServer,
) -> None:
    async with MCPServer.http(everything_http.url) as server:
        assert server.transport == "streamable-http"
        tools = {tool.name: tool for tool in await server.list_tools()}
        os.kill(everything_http.pid, signal.SIGKILL)
        model = ScriptedModel(
            [
                GenerateResponse(
                    tool_calls=(ToolCall(id="c1", name="echo", arguments={"message": "hi"}),)
                ),
                "done",
            ]
        )
        with trio.fail_after(10):
            async with open_run(
                generate=model, conversation=_history(), tools=[tools["echo"]]
            ) as run:
                pass
        (settled,) = (await run.result()).steps[0].results
        assert settled.outcome == "error"
        assert settled.error is not None
        assert "MCPConnectionError" in settled.error
        await trio.lowlevel.checkpoint()  # the block goes on


async def test_an_sse_only_server_is_reached_over_sse(everything_sse: HttpServer) -> None:
    with trio.fail_after(30):
        async with MCPServer.http(everything_sse.url) as server:
            assert server.transport == "sse"
            echo = {tool.name: tool for tool in await server.list_tools()}["echo"]
            model = ScriptedModel(
                [
                    GenerateResponse(
                        tool_calls=(ToolCall(id="c1", name="echo", arguments={"message": "sse"}),)
                    ),
                    "done",
                ]
            )
            async with open_run(generate=model, conversation=_history(), tools=[echo]) as run:
                pass
    assert (await run.result()).steps[0].results[0].value == "Echo: sse"


async def test_nothing_listening_is_a_connection_error_at_once() -> None:
    with trio.fail_after(10), pytest.raises(MCPConnectionError, match="ConnectError"):
        async with MCPServer.http("http://127.0.0.1:9/mcp"):
            pass


async def test_a_server_opens_once_at_a_time_and_again_after_its_block() -> None:
    server = MCPServer.stdio(sys.executable, [FAULTY])
    async with server:
        with pytest.raises(InvalidArgument, match="already open"):
            async with server:
                pass
    async with server:
        assert server.transport == "stdio"


def test_options_are_checked_when_the_server_is_described() -> None:
    with pytest.raises(InvalidArgument, match="prefix"):
        MCPServer.stdio("x", prefix="")
    with pytest.raises(InvalidArgument, match="timeout"):
        MCPServer.stdio("x", timeout=0)
    with pytest.raises(InvalidArgument, match="args"):
        MCPServer.stdio("x", "not a list")
    with pytest.raises(InvalidArgument, match="url"):
        MCPServer.http("ftp://example.com")
    with pytest.raises(InvalidArgument, match="sampling"):
        MCPServer.http("http://127.0.0.1/mcp", sampling="model")  # type: ignore[arg-type]
