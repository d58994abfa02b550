"""Tool sources: tools that come from elsewhere and are read when a run starts.

An object with ``async def list_tools(self) -> list[Tool]`` (an
:class:`operative.mcp.MCPServer`, for one) may stand in ``tools=[...]`` beside ordinary
tools. The kernel reads every source when each run starts, so a source whose tools
change (an MCP server that sends ``tools/list_changed``) offers the current ones to the
next run; caching between runs is the source's own business.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ._tool import Tool

__all__ = ["ToolSource", "split_tool_sources"]


@runtime_checkable
class ToolSource(Protocol):
    """Tools offered by something outside the process (an MCP server)."""

    async def list_tools(self) -> list[Tool]:
        """The tools to offer now (raise an ``OperativeError`` when they cannot be read)."""
        ...


def split_tool_sources(tools: Any) -> tuple[Any, tuple[ToolSource, ...]]:
    """``tools=`` without its tool sources, and the sources (in order)."""
    if not isinstance(tools, Sequence) or isinstance(tools, str | bytes | Mapping):
        return tools, ()
    sources = tuple(t for t in tools if not isinstance(t, Tool) and isinstance(t, ToolSource))
    if not sources:
        return tools, ()
    return [t for t in tools if not isinstance(t, ToolSource) or isinstance(t, Tool)], sources
