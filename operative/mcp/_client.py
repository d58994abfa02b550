"""``MCPServer``: one MCP server's tools, offered to runs like any others."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

import mcp_types as types
import trio
from mcp.client.session import ClientRequestContext, ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError

from .._core._errors import InvalidArgument, ToolDefinitionError
from .._core._model import GenerateFunction
from ..tools import Tool, ToolContext
from ._calls import send_call
from ._connection import CLIENT_INFO, Connection, error_for, hold_connection
from ._elicitation import answer_elicitation
from ._errors import MCPConnectionError, MCPNotConnectedError
from ._routing import CallRouter
from ._sampling import answer_sampling
from ._tools import make_tool
from ._transports import HttpTarget, StdioTarget, Target

__all__ = ["MCPServer"]

_logger = logging.getLogger("operative.mcp")
_server_logger = logging.getLogger("operative.mcp.server")

ToolFilter = Callable[[types.Tool], bool]
"""Given the server's own definition of a tool (before any prefix), keep it or not."""

_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
_MAX_PAGES = 1000


class MCPServer:
    """An MCP server: its tools become operative :class:`~operative.Tool`\\ s.

    Build one with :meth:`stdio` or :meth:`http`, open it with ``async with server:``
    (that starts or reaches the server and initializes the session; leaving the block
    closes it and ends the server process), and pass it in ``tools=[...]`` beside other
    tools, or read its tools with :meth:`list_tools`. The connection's tasks run in the
    block: nothing of the server outlives it.

    Each call runs through the session: the result becomes what the model reads, a tool
    that reports ``isError`` becomes an ``error`` result, and a dead server or a broken
    answer becomes an ``error`` result naming an :class:`MCPServerError`. Requests the
    server makes during a call reach the run that made it: elicitation its
    ``on_elicitation``, sampling the ``sampling=`` generate function, progress its
    ``tool.progress`` events; the server's log messages go to the
    ``operative.mcp.server`` logger.
    """

    def __init__(
        self,
        target: Target,
        *,
        prefix: str | None = None,
        tool_filter: ToolFilter | None = None,
        sampling: GenerateFunction | None = None,
        timeout: float | None = None,
        connect_timeout: float = 60.0,
    ) -> None:
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise InvalidArgument(f"prefix= takes a non-empty str or None, got {prefix!r}")
        for name, value in (("tool_filter", tool_filter), ("sampling", sampling)):
            if value is not None and not callable(value):
                raise InvalidArgument(f"{name}= takes a callable or None, got {value!r}")
        for name, seconds in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if seconds is not None and (
                isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0
            ):
                raise InvalidArgument(f"{name}= takes seconds > 0, got {seconds!r}")
        self._target = target
        self._prefix = prefix
        self._tool_filter = tool_filter
        self._sampling = sampling
        self._timeout = timeout
        self._connect_timeout = float(connect_timeout)
        self._router = CallRouter()
        self._connection: Connection | None = None
        self._nursery: Any = None
        self._tools: list[Tool] | None = None
        self._listed_at = -1
        self._changes = 0
        self._listing = trio.Lock()

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        prefix: str | None = None,
        tool_filter: ToolFilter | None = None,
        sampling: GenerateFunction | None = None,
        timeout: float | None = None,
        connect_timeout: float = 60.0,
    ) -> MCPServer:
        """A server started as ``command args...``, spoken to over its stdin and stdout.

        It gets the SDK's safe environment (``HOME``, ``PATH``, ``USER``, ...) plus
        ``env``, and its own process group; its stderr goes to the
        ``operative.mcp.stderr`` logger. ``prefix`` renames its tools (``prefix_name``),
        ``tool_filter`` keeps the tools it returns true for (it gets the server's own
        definition), ``sampling`` answers the server's sampling requests, ``timeout``
        bounds each call (seconds), ``connect_timeout`` the start and handshake.
        """
        if not isinstance(command, str) or not command:
            raise InvalidArgument(f"command takes a non-empty str, got {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise InvalidArgument(f"args= takes a sequence of str, got {args!r}")
        return cls(
            StdioTarget(command=command, args=tuple(args), env=env, cwd=cwd),
            prefix=prefix,
            tool_filter=tool_filter,
            sampling=sampling,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        prefix: str | None = None,
        tool_filter: ToolFilter | None = None,
        sampling: GenerateFunction | None = None,
        timeout: float | None = None,
        connect_timeout: float = 60.0,
    ) -> MCPServer:
        """A server at ``url``, over streamable HTTP (or the legacy HTTP+SSE transport,
        when the endpoint has only that), sending ``headers`` with every request. The
        other options are as for :meth:`stdio`."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidArgument(f"url takes an http:// or https:// URL, got {url!r}")
        return cls(
            HttpTarget(url=url, headers=headers),
            prefix=prefix,
            tool_filter=tool_filter,
            sampling=sampling,
            timeout=timeout,
            connect_timeout=connect_timeout,
        )

    def __repr__(self) -> str:
        state = f"open over {self.transport}" if self._connection is not None else "closed"
        return f"<MCPServer {self.name} ({state})>"

    @property
    def name(self) -> str:
        """The server's own name once it is open, else where it is."""
        connection = self._connection
        info = connection.session.server_info if connection is not None else None
        return repr(info.name) if info is not None else self._target.label

    @property
    def transport(self) -> str | None:
        """``"stdio"``, ``"streamable-http"`` or ``"sse"`` while open, else ``None``."""
        return self._connection.transport if self._connection is not None else None

    # -- the block ------------------------------------------------------------------

    async def __aenter__(self) -> MCPServer:
        if self._nursery is not None:
            raise InvalidArgument(f"{self!r} is already open; open it once at a time")
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        try:
            self._connection = await nursery.start(self._run_connection)
        except BaseException:
            await manager.__aexit__(None, None, None)
            raise
        self._nursery = manager
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        manager, connection = self._nursery, self._connection
        self._nursery = self._connection = None
        self._tools = None
        assert manager is not None
        assert connection is not None
        connection.closing.set()
        await manager.__aexit__(None, None, None)

    async def _run_connection(self, task_status: Any) -> None:
        """Connect and hold the connection until the block ends (see ``_connection``)."""
        await hold_connection(
            self._target,
            self.name,
            self._session,
            connect_timeout=self._connect_timeout,
            task_status=task_status,
        )

    def _session(self, read: Any, write: Any) -> ClientSession:
        return ClientSession(
            read,
            write,
            sampling_callback=self._on_sampling if self._sampling is not None else None,
            elicitation_callback=self._on_elicitation,
            logging_callback=self._on_log,
            message_handler=self._on_message,
            client_info=CLIENT_INFO,
        )

    # -- tools ----------------------------------------------------------------------

    def _open(self) -> Connection:
        connection = self._connection
        if connection is None:
            raise MCPNotConnectedError(
                f"the MCP server {self.name} is not open: open it with `async with server:` "
                "and start the runs that use it inside that block"
            )
        if connection.lost:
            raise MCPConnectionError(connection.describe_loss(self.name))
        return connection

    async def list_tools(self) -> list[Tool]:
        """The server's tools (the ones ``tool_filter`` keeps), renamed with ``prefix``.

        Read once and kept until the server says its tools changed
        (``notifications/tools/list_changed``); a tool whose input schema is not valid
        JSON Schema is left out, with a warning.

        Raises:
            MCPNotConnectedError: outside the ``async with server:`` block.
            MCPConnectionError, MCPProtocolError: the server could not list them.
        """
        connection = self._open()
        async with self._listing:
            if self._tools is not None and self._listed_at == self._changes:
                return list(self._tools)
            changes = self._changes
            definitions = await self._definitions(connection)
            tools = []
            for definition in definitions:
                if self._tool_filter is not None and not self._tool_filter(definition):
                    continue
                try:
                    tools.append(
                        make_tool(
                            definition, self._call, prefix=self._prefix, timeout=self._timeout
                        )
                    )
                except ToolDefinitionError as exc:
                    _logger.warning("left out a tool of the MCP server %s: %s", self.name, exc)
            self._tools, self._listed_at = tools, changes
        return list(tools)

    async def _definitions(self, connection: Connection) -> list[types.Tool]:
        definitions: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            try:
                page = await connection.session.list_tools(params=params)
            except MCPError as exc:
                raise await error_for(exc, connection, self.name, "tools/list") from None
            definitions.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return definitions

    async def _call(self, remote: str, arguments: dict[str, Any], context: ToolContext) -> Any:
        connection = self._open()
        with self._router.calling(context) as call:
            return await send_call(
                connection.session,
                call,
                remote,
                arguments,
                label=self.name,
                error=partial(
                    error_for,
                    connection=connection,
                    label=self.name,
                    what=f"the call to {remote!r}",
                ),
            )

    # -- what the server asks and tells --------------------------------------------

    async def _on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        return await answer_elicitation(self._router.route(), params, label=self.name)

    async def _on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        assert self._sampling is not None
        return await answer_sampling(self._sampling, self._router.route(), params, label=self.name)

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        await trio.lowlevel.checkpoint()
        data = params.data if isinstance(params.data, str) else repr(params.data)
        source = f"{self.name}/{params.logger}" if params.logger else self.name
        linked = self._router.linked()
        _server_logger.log(
            _LOG_LEVELS.get(params.level, logging.INFO),
            "%s: %s",
            source,
            data,
            extra={
                "mcp_server": self.name,
                "mcp_logger": params.logger,
                "mcp_data": params.data,
                "run_id": linked.context.run_id if linked is not None else None,
                "tool_call_id": linked.context.call_id if linked is not None else None,
            },
        )

    async def _on_message(self, message: IncomingMessage) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(message, types.ToolListChangedNotification):
            self._changes += 1
        elif isinstance(message, Exception):
            _logger.warning("the MCP server %s sent something unreadable: %r", self.name, message)
