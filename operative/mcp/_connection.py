"""The connection to one server: opened over its transports, held, and described when
it is lost.

It runs in a task of its own (under ``async with server:``), so a transport that fails
after the handshake ends the connection (calls in flight get an error saying why), not
the block around it. An HTTP server is tried over streamable HTTP first, then over the
legacy SSE transport when the endpoint answered but not in streamable HTTP's terms.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import mcp_types as types
import trio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from ._errors import MCPConnectionError, MCPProtocolError
from ._stdio import ServerProcess
from ._transports import Target, open_streams

__all__ = ["CLIENT_INFO", "Connection", "error_for", "hold_connection"]

_logger = logging.getLogger("operative.mcp")

_EXIT_WAIT = 1.0
"""Seconds a closed connection's process gets to be seen exit, so the error says how."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("operative")
    except PackageNotFoundError:
        return "0"


CLIENT_INFO = types.Implementation(name="operative", version=_version())
"""How the client introduces itself to servers."""


@attrs.define(eq=False)
class Connection:
    """An open session and what is known about its transport."""

    session: ClientSession
    transport: str
    process: ServerProcess | None
    closing: trio.Event = attrs.field(factory=trio.Event)
    failure: BaseException | None = None

    @property
    def lost(self) -> bool:
        """The server went away (its process exited, or the transport failed)."""
        process = self.process
        return self.failure is not None or (process is not None and process.returncode is not None)

    def describe_loss(self, label: str) -> str:
        if self.process is not None and self.process.returncode is not None:
            return self.process.describe_exit()
        if self.failure is not None:
            return f"the connection to the MCP server {label} failed: {_describe(self.failure)}"
        return f"the MCP server {label} closed the connection"


async def hold_connection(
    target: Target,
    label: str,
    session: Callable[[Any, Any], ClientSession],
    *,
    connect_timeout: float,
    task_status: Any,
) -> None:
    """Connect, hand the :class:`Connection` to ``task_status``, hold it until it is
    told to close (``connection.closing``).

    Raises:
        MCPConnectionError: no transport connected (each one's failure is named).
    """
    failures: list[str] = []
    for transport in target.transports:
        connection: Connection | None = None
        started: list[ServerProcess | None] = []
        try:
            with trio.CancelScope(deadline=trio.current_time() + connect_timeout) as scope:
                async with open_streams(target, transport, label) as ((read, write), process):
                    started.append(process)
                    async with session(read, write) as opened:
                        await opened.initialize()
                        scope.deadline = math.inf
                        connection = Connection(opened, transport, process)
                        task_status.started(connection)
                        await connection.closing.wait()
        except Exception as exc:
            if connection is not None:
                connection.failure = exc
                _logger.warning("%s", connection.describe_loss(label))
                return
            failures.append(f"over {transport}: {_describe(exc, started)}")
            if any(isinstance(leaf, MCPError) for leaf in _leaves(exc)):
                continue  # it answered, but not in this transport's terms
            break  # nothing answers there: another transport will not either
        if connection is not None:
            return
        failures.append(f"over {transport}: no answer within {connect_timeout:g} s")
        break
    raise MCPConnectionError(f"could not connect to the MCP server {label} ({'; '.join(failures)})")


async def error_for(
    exc: MCPError, connection: Connection, label: str, what: str
) -> MCPConnectionError | MCPProtocolError:
    """A JSON-RPC error as the operative error that says what happened (for a closed
    connection, why: a server process that is going away gets a moment to be seen go)."""
    if exc.code == types.CONNECTION_CLOSED:
        process = connection.process
        if process is not None:
            with trio.move_on_after(_EXIT_WAIT):
                await process.exited.wait()
        return MCPConnectionError(f"{what} failed: {connection.describe_loss(label)}")
    await trio.lowlevel.checkpoint()
    return MCPProtocolError(
        f"{what} failed: the MCP server {label} answered with error {exc.code}: {exc.message}",
        code=exc.code,
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside ``exc``'s groups (the SDK's task groups wrap them)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException, started: Sequence[ServerProcess | None] = ()) -> str:
    """Why connecting failed: the errors, and what a server process said as it died."""
    described = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in _leaves(exc))
    process = started[0] if started else None
    if process is not None and process.returncode is not None:
        described += f" ({process.describe_exit()})"
    return described
