"""Where a server is, and the streams that reach it.

A stdio server is a command to start (``_stdio``); an HTTP server is a URL, spoken to
over streamable HTTP, or over the legacy HTTP+SSE transport when the endpoint turns out
to have only that (the client tries streamable HTTP first, as the protocol asks).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
from mcp.client.sse import sse_client
from mcp.shared._httpx_utils import create_mcp_http_client

from ._http import streamable_http
from ._stdio import ServerProcess, stdio_transport

__all__ = ["HttpTarget", "StdioTarget", "Target", "open_streams"]


@attrs.frozen
class StdioTarget:
    """A server started as a process, spoken to over its stdin and stdout."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] | None
    cwd: str | Path | None

    transports = ("stdio",)

    @property
    def label(self) -> str:
        words = [Path(word).name if "/" in word else word for word in (self.command, *self.args)]
        label = " ".join(words)
        return repr(label if len(label) <= 80 else label[:77] + "...")


@attrs.frozen
class HttpTarget:
    """A server at a URL."""

    url: str
    headers: Mapping[str, str] | None

    transports = ("streamable-http", "sse")

    @property
    def label(self) -> str:
        return f"at {self.url}"


Target = StdioTarget | HttpTarget


@asynccontextmanager
async def open_streams(
    target: Target, transport: str, label: str
) -> AsyncIterator[tuple[tuple[Any, Any], ServerProcess | None]]:
    """The session's read and write streams over ``transport`` (and the process, for
    stdio)."""
    if isinstance(target, StdioTarget):
        async with stdio_transport(
            target.command, target.args, env=target.env, cwd=target.cwd, label=label
        ) as (streams, process):
            yield streams, process
        return
    headers = dict(target.headers) if target.headers else None
    if transport == "streamable-http":
        async with (
            create_mcp_http_client(headers=headers) as client,
            streamable_http(target.url, client) as streams,
        ):
            yield streams, None
        return
    async with sse_client(target.url, headers=headers) as streams:
        yield streams, None
