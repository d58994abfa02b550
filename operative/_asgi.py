"""The few ASGI pieces every operative endpoint shares: reading a JSON request body with a
size limit, and answering with a small body or a JSON error.

One place for them, so the chat host, the Vercel AI SDK endpoint and the AG-UI endpoint
refuse an oversized or mistyped body the same way.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ._core._codec import MAX_JSON_DEPTH, json_too_deep

__all__ = [
    "MAX_BODY",
    "BadRequestBody",
    "Receive",
    "Scope",
    "Send",
    "posted_json",
    "read_json_body",
    "respond",
    "respond_json_error",
]

# As loose as ASGI servers' own types allow (hypercorn's are TypedDicts): an app typed
# with these is an ASGI app to a type checker too.
Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Any], Awaitable[None]]

MAX_BODY = 4 * 1024 * 1024
"""The largest request body accepted (bytes)."""


class BadRequestBody(Exception):
    """A request body refused before it was parsed: ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_json_body(scope: Scope, receive: Receive, *, what: str) -> bytes | None:
    """The whole body of a JSON request, or None when the client went away first.

    Raises :class:`BadRequestBody` (415) unless the content type is
    ``application/json``, (413) as soon as the body passes :data:`MAX_BODY`, so an
    oversized body is never held whole, and (400) when it nests deeper than the
    decoders take. ``what`` names the body in the messages.
    """
    kind = dict(scope.get("headers", ())).get(b"content-type", b"").split(b";")[0].strip()
    if kind != b"application/json":
        raise BadRequestBody(415, f"send {what} as Content-Type: application/json")
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            raise BadRequestBody(413, f"the body is larger than {MAX_BODY} bytes")
        if not message.get("more_body", False):
            if json_too_deep(bytes(body)):
                raise BadRequestBody(
                    400, f"{what} is JSON nested deeper than {MAX_JSON_DEPTH} levels: flatten it"
                )
            return bytes(body)


async def posted_json(scope: Scope, receive: Receive, send: Send, *, what: str) -> bytes | None:
    """The body of a JSON ``POST``, or None once the request is answered: a 405 for
    another method, the :class:`BadRequestBody` status for a body refused, nothing when
    the client went away first. ``what`` names the body in the messages."""
    if scope["method"] != "POST":
        await respond_json_error(send, 405, f"POST {what} (JSON) to {scope['path']}", allow="POST")
        return None
    try:
        return await read_json_body(scope, receive, what=what)
    except BadRequestBody as exc:
        await respond_json_error(send, exc.status, str(exc))
        return None


async def respond(
    send: Send,
    status: int,
    body: bytes,
    *,
    content_type: str = "text/plain; charset=utf-8",
    allow: str | None = None,
    cache: str | None = None,
) -> None:
    """Answer with one whole body."""
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    if allow is not None:
        headers.append((b"allow", allow.encode()))
    if cache is not None:
        headers.append((b"cache-control", cache.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_json_error(
    send: Send, status: int, message: str, *, allow: str | None = None
) -> None:
    """Answer ``{"error": message}`` with ``status``."""
    body = json.dumps({"error": message}).encode() + b"\n"
    await respond(send, status, body, content_type="application/json", allow=allow)
