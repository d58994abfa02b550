"""One ``tools/call``: sent, its progress relayed, its answer read.

Progress notifications become the run's ``tool.progress`` events, in order and only
while the call is in flight (a value that does not increase is dropped, as the protocol
says progress only grows). A server that answers ``-32042`` (URL elicitation required)
has each URL put to the run's ``on_elicitation``; when the person agrees to every one the
call is sent once more. Cancelling the call (an aborted run, a tool ``timeout=``) makes
the SDK send ``notifications/cancelled`` for it; the session stays open for other calls.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import mcp_types as types
import trio
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from pydantic import ValidationError

from ._elicitation import answer_elicitation
from ._errors import MCPProtocolError, MCPToolError
from ._results import result_value
from ._routing import Call, Route

__all__ = ["send_call"]

_Progress = tuple[float, float | None, str | None]


async def send_call(
    session: ClientSession,
    call: Call,
    remote: str,
    arguments: dict[str, Any],
    *,
    label: str,
    error: Callable[[MCPError], Awaitable[Exception]],
) -> Any:
    """The value the model reads for calling ``remote`` with ``arguments``.

    Raises:
        MCPToolError: the tool reported a failure, or a URL the server needs was refused.
        MCPConnectionError, MCPProtocolError: (from ``error``) the call did not complete.
    """
    send, receive = trio.open_memory_channel[_Progress](math.inf)
    context = call.context

    async def relay() -> None:
        last = -math.inf
        async with receive:
            async for progress, total, message in receive:
                if progress > last:
                    last = progress
                    await context.report_progress(progress, total, message)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            send.send_nowait((progress, total, message))
        await trio.lowlevel.checkpoint()

    results: list[Any] = []
    failures: list[Exception] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay)
        try:
            results.append(await _send(session, call, remote, arguments, on_progress, label, error))
        except Exception as exc:
            failures.append(exc)  # raised below, outside the nursery (not in a group)
        finally:
            send.close()
    if failures:
        raise failures[0]
    return results[0]


async def _send(
    session: ClientSession,
    call: Call,
    remote: str,
    arguments: dict[str, Any],
    on_progress: Any,
    label: str,
    error: Callable[[MCPError], Awaitable[Exception]],
) -> Any:
    asked = False
    while True:
        try:
            result = await session.call_tool(remote, arguments, progress_callback=on_progress)
        except MCPError as exc:
            if exc.code != types.URL_ELICITATION_REQUIRED or asked:
                raise await error(exc) from None
            await _visit_urls(call, exc, label)
            asked = True
            continue
        except ValidationError as exc:
            raise MCPProtocolError(
                f"the MCP server {label} answered the call to {remote!r} with a result that "
                f"does not parse: {exc.errors()[0]['msg']}"
            ) from None
        except RuntimeError as exc:  # the SDK's check of structured content, among others
            raise MCPProtocolError(
                f"the MCP server {label} answered the call to {remote!r} wrongly: {exc}"
            ) from None
        return result_value(result)


async def _visit_urls(call: Call, exc: MCPError, label: str) -> None:
    """Put each URL of a ``-32042`` error to the person; raise unless they agree to all."""
    try:
        elicitations = UrlElicitationRequiredError.from_error(exc.error).elicitations
    except (ValueError, ValidationError):
        raise MCPProtocolError(
            f"the MCP server {label} asked for URL elicitations it did not describe: {exc}",
            code=exc.code,
        ) from None
    route = Route((call,), exact=True, why="the call's own answer asked for it")
    for params in elicitations:
        answer = await answer_elicitation(route, params, label=label)
        if not isinstance(answer, types.ElicitResult) or answer.action != "accept":
            raise MCPToolError(
                f"the server needs a person to open {params.url} ({params.message}), and "
                "nobody agreed to; the call did not run"
            )
