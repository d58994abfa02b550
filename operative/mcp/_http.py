"""Streamable HTTP: the SDK's transport, with each response stream read to its end.

The SDK stops reading a POST's event stream as soon as the response arrives, and leaves
httpx2's stream generators suspended. Under Trio every one of them is then reported with
a ``ResourceWarning`` when it is garbage collected (four per call), which turns into
errors wherever warnings are errors, at whatever later moment the collector runs. Here
the stream is read on until the server closes it (a server closes a POST's stream once
it has answered; past a short bound it is cut, which also ends the generators), so they
all finish. Everything else is the SDK's own: :func:`streamable_http` mirrors
``mcp.client.streamable_http.streamable_http_client`` with this transport in it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import anyio
import httpx2
import trio
from httpx2 import EventSource
from mcp.client.streamable_http import RequestContext, StreamableHTTPTransport
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest

__all__ = ["streamable_http"]

_DRAIN_SECONDS = 5.0
"""How long a response stream may stay open after its response before it is cut."""

_logger = logging.getLogger("operative.mcp")


class _Transport(StreamableHTTPTransport):
    async def _handle_sse_response(self, response: httpx2.Response, ctx: RequestContext) -> None:
        message = ctx.session_message.message
        assert isinstance(message, JSONRPCRequest)
        last_event_id: str | None = None
        retry_interval_ms: int | None = None
        complete = False
        try:
            with trio.CancelScope() as drain:
                async for sse in EventSource(response, max_event_size=self.max_sse_event_size):
                    if sse.id:
                        last_event_id = sse.id
                    if sse.retry is not None:
                        retry_interval_ms = sse.retry
                    if complete:
                        continue  # read on: the server ends the stream
                    complete = await self._handle_sse_event(
                        sse,
                        ctx.read_stream_writer,
                        original_request_id=message.id,
                        resumption_callback=(
                            ctx.metadata.on_resumption_token_update if ctx.metadata else None
                        ),
                    )
                    if complete:
                        drain.deadline = trio.current_time() + _DRAIN_SECONDS
        except httpx2.SSEError as exc:
            if not complete:
                await self._resolve_abandoned_request(
                    ctx.read_stream_writer, message.id, f"SSE stream failed: {exc}"
                )
            return
        except Exception:
            _logger.debug("an MCP response stream ended", exc_info=True)
        if complete:
            return
        if last_event_id is not None:
            await self._handle_reconnection(ctx, last_event_id, retry_interval_ms)
        else:
            await self._resolve_abandoned_request(
                ctx.read_stream_writer, message.id, "SSE stream ended without a response"
            )


@contextlib.asynccontextmanager
async def streamable_http(
    url: str, client: httpx2.AsyncClient
) -> AsyncIterator[tuple[object, object]]:
    """The session's streams over streamable HTTP to ``url`` (``client`` stays open)."""
    transport = _Transport(url)
    read_send, read_receive = create_context_streams[SessionMessage | Exception](0)
    write_send, write_receive = create_context_streams[SessionMessage](0)
    async with read_send, read_receive, write_send, write_receive, anyio.create_task_group() as tg:

        def start_get_stream() -> None:
            tg.start_soon(transport.handle_get_stream, client, read_send)

        writer = transport.post_writer
        tg.start_soon(writer, client, write_receive, read_send, write_send, start_get_stream, tg)
        try:
            yield read_receive, write_send
        finally:
            if transport.session_id:
                with trio.CancelScope(shield=True), trio.move_on_after(_DRAIN_SECONDS):
                    await transport.terminate_session(client)
            tg.cancel_scope.cancel()
