"""The stdio transport: a server process, its pipes, and its end.

The server runs in a process group of its own, so everything it starts can be stopped
with it. Its stdout carries JSON-RPC messages (one per line), its stdin takes ours, and
its stderr goes to the ``operative.mcp.stderr`` logger (the last lines also go into the
error raised when the server fails). Ending follows the MCP lifecycle: close stdin, wait
a short grace for the server to exit, then SIGTERM its process group, then SIGKILL; and
whatever the server left running in its group is stopped too. Every wait is bounded and
shielded, so a cancelled block still leaves no process behind.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import attrs
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from ._errors import MCPConnectionError

__all__ = ["ServerProcess", "stdio_transport"]

SHUTDOWN_GRACE = 2.0
"""Seconds a server gets to exit after its stdin closes, and again after SIGTERM."""

_FLUSH_TIMEOUT = 0.5
"""Seconds the writer gets to finish a message it already took before stdin closes."""

_STDERR_LINES = 20
"""How many of the server's last stderr lines an error quotes."""

_stderr_logger = logging.getLogger("operative.mcp.stderr")
_logger = logging.getLogger("operative.mcp")


@attrs.define(eq=False)
class ServerProcess:
    """What the client knows about a running server process."""

    label: str
    pid: int
    stderr_tail: collections.deque[str] = attrs.field(
        factory=lambda: collections.deque(maxlen=_STDERR_LINES)
    )
    returncode: int | None = None
    stopping: bool = False
    exited: trio.Event = attrs.field(factory=trio.Event)

    def describe_exit(self) -> str:
        """Why the server went away, with its last words, for an error message."""
        if self.returncode is None:
            what = "closed its output"
        elif self.returncode < 0:
            what = f"was killed by signal {-self.returncode}"
        else:
            what = f"exited with code {self.returncode}"
        tail = " | ".join(self.stderr_tail)
        said = f"; its stderr ended: {tail}" if tail else ""
        return f"the MCP server {self.label} {what}{said}"


ReadStreams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | Path | None,
    label: str,
) -> AsyncIterator[tuple[ReadStreams, ServerProcess]]:
    """Start ``command`` and yield the session's streams and the process record.

    The environment is the SDK's safe default (``HOME``, ``PATH``, ``USER``, ...) plus
    ``env``: a server does not inherit the host's secrets unless given them.

    Raises:
        MCPConnectionError: the command could not be started.
    """
    environment = get_default_environment() | dict(env or {})
    posix = sys.platform != "win32"
    try:
        process = await trio.lowlevel.open_process(
            [command, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
            cwd=cwd,
            start_new_session=posix,
        )
    except OSError as exc:
        raise MCPConnectionError(
            f"could not start the MCP server {label} ({command!r}): {exc}; check the command, "
            "its arguments and that it is on the PATH given in env="
        ) from exc
    record = ServerProcess(label=label, pid=process.pid)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = trio.Event()

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = b""
        delivering = True
        async with read_send:
            async for chunk in process.stdout:
                if not delivering:
                    continue  # drained, so a server flushing output can still exit
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        await read_send.send(_parse(line))
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        delivering = False
                        break

    async def read_stderr() -> None:
        assert process.stderr is not None
        buffer = b""
        async for chunk in process.stderr:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace").rstrip()
                if line:
                    record.stderr_tail.append(line)
                    _stderr_logger.info("%s: %s", label, line)

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_receive:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the server is gone; its stdout's end tells the session
        finally:
            writer_done.set()

    async def watch() -> None:
        await process.wait()
        record.returncode = process.returncode
        record.exited.set()
        if not record.stopping:
            _logger.warning("%s", record.describe_exit())

    async def stop() -> None:
        record.stopping = True
        write_send.close()
        with trio.move_on_after(_FLUSH_TIMEOUT):
            await writer_done.wait()
        assert process.stdin is not None
        with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await process.stdin.aclose()
        for signum in (None, signal.SIGTERM, signal.SIGKILL):
            if signum is not None:
                _signal(process, signum, posix)
            with trio.move_on_after(SHUTDOWN_GRACE):
                await process.wait()
            if process.returncode is not None:
                break
        else:
            _logger.error("the MCP server %s (pid %d) survived SIGKILL", label, process.pid)
        if posix:
            await _stop_leftovers(process.pid, label)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_stdout)
        nursery.start_soon(read_stderr)
        nursery.start_soon(write_stdin)
        nursery.start_soon(watch)
        try:
            yield (read_receive, write_send), record
        finally:
            with trio.CancelScope(shield=True):
                await stop()
            nursery.cancel_scope.cancel()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc


def _signal(process: trio.Process, signum: int, posix: bool) -> None:
    """Signal the server's whole process group (its own process off POSIX)."""
    if process.returncode is not None:
        return
    if not posix:
        process.kill() if signum == signal.SIGKILL else process.terminate()
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


async def _stop_leftovers(group: int, label: str) -> None:
    """Stop what the server left running in its process group after it exited."""
    if not _group_alive(group):
        return
    _logger.info("the MCP server %s left processes running; stopping them", label)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    with trio.move_on_after(SHUTDOWN_GRACE):
        while _group_alive(group):  # noqa: ASYNC110 - not our children: nothing to wait on
            await trio.sleep(0.01)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
