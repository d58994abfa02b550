"""A small HTTP/1.1 server on 127.0.0.1 that speaks a provider's wire format in tests.

Built on ``trio.serve_tcp`` and ``h11``. Each request is answered by the next scripted
:class:`Reply` (or by a handler), and recorded as :class:`Received` so tests can assert
on the JSON the real SDK client sent. Replies can be JSON, a server-sent-event stream,
an error status with headers, a slow first byte, a stream dropped part-way, or a stream
that hangs until the client hangs up.
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import h11
import trio
import trio.lowlevel

__all__ = ["JsonReply", "Received", "Reply", "SseReply", "WireServer", "sse_event"]


@attrs.frozen(kw_only=True)
class Received:
    """One request as the server read it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        """The body, decoded as JSON."""
        return json.loads(self.body)


@attrs.frozen(kw_only=True)
class JsonReply:
    """A complete JSON response (any status), after ``delay`` seconds of silence."""

    body: Any
    status: int = 200
    headers: dict[str, str] = attrs.field(factory=dict)
    delay: float = 0.0


@attrs.frozen(kw_only=True)
class SseReply:
    """A ``text/event-stream`` response, sent event by event in chunked encoding.

    ``drop_after``: close the socket after that many events, mid-body. ``hang_after``:
    after that many events send nothing more and wait for the client to hang up.
    """

    events: Sequence[bytes]
    headers: dict[str, str] = attrs.field(factory=dict)
    delay: float = 0.0
    drop_after: int | None = None
    hang_after: int | None = None


Reply = JsonReply | SseReply


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One server-sent event (``data`` is JSON-encoded unless it is a str)."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {text}\n\n".encode()


class WireServer:
    """Serves scripted replies; see the module docstring."""

    __test__ = False

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.handler: Callable[[Received], Reply] | None = None
        self.received: list[Received] = []
        self.port = 0
        self.connections_closed = 0
        self.client_hung_up = trio.Event()
        """Set when a client closed a connection the server was holding open."""
        self.events_sent = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        self.replies.extend(replies)

    @property
    def last(self) -> Received:
        """The last request received."""
        return self.received[-1]

    async def start(self, nursery: trio.Nursery) -> None:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, self._serve, 0, host="127.0.0.1")
        )
        self.port = listeners[0].socket.getsockname()[1]

    def _next(self, received: Received) -> Reply:
        if self.replies:
            return self.replies.popleft()
        if self.handler is not None:
            return self.handler(received)
        return JsonReply(status=500, body={"error": "the test server has no reply queued"})

    async def _serve(self, stream: trio.SocketStream) -> None:
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                received = await self._read(stream, connection)
                if received is None:
                    return
                self.received.append(received)
                if not await self._send(stream, connection, self._next(received)):
                    return
                if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                    return
                connection.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            self.connections_closed += 1
            await stream.aclose()

    async def _read(self, stream: trio.SocketStream, connection: h11.Connection) -> Received | None:
        request: h11.Request | None = None
        body = bytearray()
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                connection.receive_data(data)
                if not data and request is None:
                    return None
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert request is not None
                return Received(
                    method=request.method.decode(),
                    path=request.target.decode(),
                    headers={k.decode().lower(): v.decode() for k, v in request.headers},
                    body=bytes(body),
                )
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _send(
        self, stream: trio.SocketStream, connection: h11.Connection, reply: Reply
    ) -> bool:
        if reply.delay:
            await trio.sleep(reply.delay)
        if isinstance(reply, JsonReply):
            payload = json.dumps(reply.body).encode()
            headers = [
                ("content-type", "application/json"),
                ("content-length", str(len(payload))),
                *reply.headers.items(),
            ]
            await stream.send_all(
                connection.send(h11.Response(status_code=reply.status, headers=headers))
                + connection.send(h11.Data(data=payload))
                + connection.send(h11.EndOfMessage())
            )
            return True
        headers = [("content-type", "text/event-stream"), *reply.headers.items()]
        await stream.send_all(connection.send(h11.Response(status_code=200, headers=headers)))
        for count, event in enumerate(reply.events):
            if count == reply.drop_after:
                return False  # the socket closes with the chunked body unfinished
            if count == reply.hang_after:
                await self._wait_for_hang_up(stream)
                return False
            await stream.send_all(connection.send(h11.Data(data=event)))
            self.events_sent += 1
            await trio.lowlevel.checkpoint()
        await stream.send_all(connection.send(h11.EndOfMessage()))
        return True

    async def _wait_for_hang_up(self, stream: trio.SocketStream) -> None:
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        self.client_hung_up.set()
