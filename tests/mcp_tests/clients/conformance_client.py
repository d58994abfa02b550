"""operative's MCP client under the conformance suite's client scenarios.

The suite runs ``python conformance_client.py SERVER_URL`` with the scenario's name in
``MCP_CONFORMANCE_SCENARIO``, against a test server it started; its checks look at what
this client sent. Everything goes through :class:`operative.mcp.MCPServer`: the server's
tools are listed as operative tools and called through a :class:`operative.Toolbox`, as
a run calls them, with an ``on_elicitation`` handler that accepts every form without
filling a field in (so the client has to apply the schema's defaults).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import trio

from operative import Toolbox, ToolCall
from operative.mcp import MCPServer
from operative.tools import ElicitationRequest, ElicitationResponse, ExecutionContext

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "tools_call": ("add_numbers", {"a": 5, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}


async def accept_empty(request: ElicitationRequest) -> ElicitationResponse:
    """Accept the form, leaving every field to its default."""
    await trio.lowlevel.checkpoint()
    return ElicitationResponse(
        request_id=request.request_id, tool_call_id=request.tool_call_id, data={}
    )


async def main(url: str, scenario: str) -> int:
    async with MCPServer.http(url, connect_timeout=20) as server:
        tools = await server.list_tools()
        print(f"{scenario}: tools {[tool.name for tool in tools]}")
        toolbox = Toolbox(tools)
        name, arguments = CALLS.get(scenario, ("", {}))
        if not name:
            return 0
        context = ExecutionContext(on_elicitation=accept_empty)
        result = await toolbox.execute(ToolCall(id="1", name=name, arguments=arguments), context)
        print(f"{scenario}: {name} -> {result.outcome}: {result.value or result.error}")
        return 0 if result.outcome == "success" else 1


if __name__ == "__main__":
    sys.exit(trio.run(main, sys.argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))
