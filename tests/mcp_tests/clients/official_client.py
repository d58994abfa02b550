"""The official MCP client (the SDK's ``ClientSession``, under asyncio) against operative's
server, as any MCP host would use it; it prints one JSON report of what it saw.

    python official_client.py stdio MARKER_DIR -- COMMAND ARGS...
    python official_client.py http MARKER_DIR URL

It is not operative code (asyncio is fine here): tests/mcp_tests/test_server_official_client.py
runs it in a process of its own and checks the report.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def dump(result: types.CallToolResult) -> dict[str, Any]:
    return {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True)
            for block in result.content
        ],
        "structured": result.structured_content,
        "isError": result.is_error,
    }


async def wait_for(path: Path, seconds: float) -> bool:
    for _ in range(int(seconds / 0.02)):
        if await asyncio.to_thread(path.exists):
            return True
        await asyncio.sleep(0.02)
    return await asyncio.to_thread(path.exists)


class Person:
    """Answers the server's forms: a name, then the approvals in ``decisions`` order."""

    def __init__(self) -> None:
        self.forms: list[dict[str, Any]] = []
        self.decisions: list[dict[str, str | int | float | bool | list[str] | None]] = [
            {"approve": True},
            {"approve": False, "reason": "not that file"},
        ]

    async def __call__(
        self, context: Any, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.forms.append({"message": params.message, "schema": params.requested_schema})
        if "approve" in params.requested_schema.get("properties", {}):
            return types.ElicitResult(action="accept", content=self.decisions.pop(0))
        return types.ElicitResult(action="accept", content={"first": "Ada"})


async def exercise(session: ClientSession, markers: Path, person: Person) -> dict[str, Any]:
    report: dict[str, Any] = {}
    initialized = await session.initialize()
    report["server"] = initialized.server_info.name
    report["capabilities"] = initialized.capabilities.model_dump(mode="json", exclude_none=True)
    listed = await session.list_tools()
    report["tools"] = {
        tool.name: {
            "description": tool.description,
            "inputSchema": tool.input_schema,
            "outputSchema": tool.output_schema,
            "annotations": tool.annotations.model_dump(by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else None,
        }
        for tool in listed.tools
    }
    report["add"] = dump(await session.call_tool("add", {"a": 2, "b": 3}))
    report["forecast"] = dump(await session.call_tool("forecast", {"city": "Lyon"}))
    report["fail"] = dump(await session.call_tool("fail", {"reason": "the sky fell"}))
    report["bad_arguments"] = dump(await session.call_tool("add", {"a": "two", "b": 3}))
    try:
        await session.call_tool("no_such_tool", {})
    except MCPError as error:
        report["unknown"] = {"code": error.code, "message": error.message}

    counted: list[list[Any]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        counted.append([progress, total, message])

    report["count"] = dump(
        await session.call_tool("count", {"n": 3}, progress_callback=on_progress)
    )
    report["count_progress"] = counted

    # Cancel a call in flight: the SDK sends notifications/cancelled, the tool sees it.
    call = asyncio.create_task(session.call_tool("wait_forever", {"marker_dir": str(markers)}))
    report["wait_started"] = await wait_for(markers / "started", 20)
    call.cancel()
    try:
        await call
    except asyncio.CancelledError:
        report["cancelled_locally"] = True
    report["cancel_reached_tool"] = await wait_for(markers / "cancelled", 20)
    report["after_cancel"] = dump(await session.call_tool("add", {"a": 1, "b": 1}))

    report["greet"] = dump(await session.call_tool("greet", {}))
    report["approved"] = dump(await session.call_tool("delete_file", {"path": "/tmp/a"}))
    report["denied"] = dump(await session.call_tool("delete_file", {"path": "/tmp/b"}))
    report["forms"] = person.forms

    steps: list[list[Any]] = []

    async def on_step(progress: float, total: float | None, message: str | None) -> None:
        steps.append([progress, total, message])

    report["writer"] = dump(
        await session.call_tool("writer", {"input": "a haiku"}, progress_callback=on_step)
    )
    report["writer_progress"] = steps
    return report


async def without_elicitation(session: ClientSession) -> dict[str, Any]:
    """A client that cannot be asked anything."""
    await session.initialize()
    return {
        "greet": dump(await session.call_tool("greet", {})),
        "delete_file": dump(await session.call_tool("delete_file", {"path": "/tmp/c"})),
    }


@asynccontextmanager
async def connect(
    mode: str, target: list[str], person: Person | None
) -> AsyncIterator[ClientSession]:
    if mode == "stdio":
        params = StdioServerParameters(
            command=target[0], args=target[1:], cwd=Path(__file__).parent
        )
        transport = stdio_client(params)
    else:
        transport = streamable_http_client(target[0])
    async with (
        transport as streams,
        ClientSession(streams[0], streams[1], elicitation_callback=person) as session,
    ):
        yield session


async def main(mode: str, markers: Path, target: list[str]) -> None:
    person = Person()
    async with connect(mode, target, person) as session:
        report = await exercise(session, markers, person)
    async with connect(mode, target, None) as session:
        report["without_elicitation"] = await without_elicitation(session)
    print(json.dumps(report))


if __name__ == "__main__":
    mode, marker_dir, *rest = sys.argv[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    asyncio.run(asyncio.wait_for(main(mode, Path(marker_dir), rest), 120))
