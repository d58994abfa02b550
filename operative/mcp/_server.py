"""Operative tools served over MCP, on the official SDK's low-level server.

Every call goes through one :class:`~operative.Toolbox`, as in a run: arguments are
validated, ``timeout=`` and ``max_concurrency`` hold, and whatever goes wrong settles as
a result (an ``isError`` result for the client) rather than an exception. What a tool
does while it runs reaches the client through the call's
:class:`~operative.tools.ToolContext`: ``report_progress`` becomes
``notifications/progress`` for the call's progress token (nothing when the client gave
none), ``elicit`` an ``elicitation/create`` request. A client's
``notifications/cancelled`` cancels the call's task (the SDK's dispatcher does it), so
an async tool sees ``trio.Cancelled`` where it waits; a sync tool's thread is abandoned,
as for any tool.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from .._agent import RunnableAgent
from .._core._errors import ApprovalError, InvalidArgument
from .._core._events import Event, ToolProgress
from .._core._types import PendingApproval, ToolCall, ToolResult
from ..tools import ExecutionContext, Tool, Toolbox
from ._agent_tool import agent_tool
from ._server_content import call_result, error_result, tool_definition
from ._server_elicitation import ClientQuestions
from ._stdin import stdin_lines

__all__ = ["ServedTools", "build_server", "serve_stdio", "served_toolbox"]

ServedTools: TypeAlias = (
    Toolbox
    | Tool
    | RunnableAgent
    | Sequence[Tool | RunnableAgent]
    | Mapping[str, Tool | RunnableAgent]
)
"""What can be served: a toolbox, or tools and agents (a list, or a name-keyed mapping
whose keys are the names the client sees). An agent becomes :func:`agent_tool`."""


async def serve_stdio(tools: ServedTools, *, name: str = "operative") -> None:
    """Serve ``tools`` over this process's standard input and output until stdin closes.

    The client starts this process and speaks MCP on its pipes (``operative mcp serve
    MODULE:OBJECT`` does it from the command line). While it serves, file descriptor 0
    reads the null device and 1 points at standard error, so neither a stray ``print``
    nor a child process reading its stdin can touch the protocol. Standard input is read
    by Trio itself, so cancelling the call (Ctrl-C) stops the server at once.

    Args:
        tools: a :class:`~operative.Toolbox`, a list of tools and agents, or a
            name-keyed mapping of them (see :data:`ServedTools`).
        name: the server's name, as the client's ``initialize`` reads it.
    """
    server = build_server(tools, name=name)
    async with (
        stdin_lines() as lines,
        stdio_server(stdin=lines) as (read_stream, write_stream),
    ):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def build_server(tools: ServedTools, *, name: str) -> Server[Any]:
    """The SDK server that lists and calls ``tools``."""
    calls = _ToolCalls(served_toolbox(tools))
    return Server(
        name, version=_version(), on_list_tools=calls.list_tools, on_call_tool=calls.call_tool
    )


def served_toolbox(tools: ServedTools) -> Toolbox:
    """``tools`` as one toolbox (a toolbox is served as it is, approvals included)."""
    if isinstance(tools, Toolbox):
        return tools
    if isinstance(tools, Tool | RunnableAgent):
        return Toolbox([_as_tool(tools)])
    if isinstance(tools, Mapping):
        return Toolbox({key: _as_tool(item) for key, item in tools.items()})
    items: Any = tools
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise InvalidArgument(
            "serve a Toolbox, a list of tools and agents, or a name-keyed mapping of "
            f"them, not {type(tools).__name__}"
        )
    return Toolbox([_as_tool(item) for item in items])


def _as_tool(item: object) -> Tool:
    if isinstance(item, Tool):
        return item
    if isinstance(item, RunnableAgent):
        return agent_tool(item)
    raise InvalidArgument(
        f"{item!r} cannot be served over MCP: give operative tools (@tool, Tool(fn)) or agents"
    )


class _ToolCalls:
    """The ``tools/list`` and ``tools/call`` handlers of one served toolbox."""

    def __init__(self, toolbox: Toolbox) -> None:
        self._toolbox = toolbox
        # Definitions never change while serving: built once.
        self._definitions = [tool_definition(tool) for tool in toolbox]

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self._definitions)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in self._toolbox:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"Unknown tool: {params.name!r}; tools/list names the tools",
            )
        session = ctx.session
        questions = ClientQuestions(session, ctx.request_id)

        async def emit(event: Event) -> None:
            if isinstance(event, ToolProgress) and event.progress is not None:
                await session.report_progress(event.progress, event.total, event.message)

        context = ExecutionContext(on_elicitation=questions.on_elicitation, emit=emit)
        # Request ids repeat across connections; a call id is unique to the call.
        call = ToolCall(
            id=f"mcp-{ctx.request_id}-{os.urandom(6).hex()}",
            name=params.name,
            arguments=params.arguments or {},
        )
        result = await self._toolbox.execute(call, context)
        pending = result.pending_approval
        if result.outcome == "action-required" and pending is not None:
            return await self._settle_approval(pending, questions, context)
        return call_result(result)

    async def _settle_approval(
        self, pending: PendingApproval, questions: ClientQuestions, context: ExecutionContext
    ) -> types.CallToolResult:
        decision = await questions.approval(pending)
        if decision is None:
            return error_result(
                f"The call to {pending.tool_name!r} needs a person's approval, and this MCP "
                "client cannot ask for it (it did not declare the elicitation capability); "
                "the call did not run."
            )
        result: ToolResult
        try:
            if decision.approved:
                result = await self._toolbox.resume_approval(pending, context=context)
            else:
                result = await self._toolbox.deny_approval(pending, reason=decision.reason)
        except ApprovalError as exc:
            return error_result(f"The approval of the call to {pending.tool_name!r} failed: {exc}")
        return call_result(result)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("operative")
    except PackageNotFoundError:
        return "0"
