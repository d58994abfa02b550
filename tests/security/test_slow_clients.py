"""Bounded per client: a body that trickles in, and a client that stops reading.

Raw sockets against ``asgi_app`` under hypercorn on loopback, with short deadlines so the
test takes seconds; ``benchmarks/bench_edge.py`` measures the defaults with hundreds of
clients against the real ``operative serve``.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from operative import GenerateResponse, create_agent
from operative._core._deltas import current_delta_sink
from operative.kvstore import MemoryStore
from operative.providers import Delta
from operative.testing import ScriptedModel
from operative.ui import asgi_app


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[tuple[str, int]]:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, app, config)
        host, port = binds[0].removeprefix("http://").rsplit(":", 1)
        try:
            yield host, int(port)
        finally:
            nursery.cancel_scope.cancel()


def quiet_agent() -> Any:
    return create_agent(generate=ScriptedModel(["fine"]))


async def test_a_trickled_body_gets_a_408_at_its_deadline() -> None:
    app = asgi_app(quiet_agent(), approval_state=MemoryStore(), body_seconds=1)
    async with served(app) as (host, port):
        sock = trio.socket.socket()
        await sock.connect((host, port))
        head = (
            f"POST /api/turn HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        await sock.send(head.encode())
        started = trio.current_time()
        answer = b""
        with trio.fail_after(5):
            while True:
                with trio.move_on_after(0.2):
                    chunk = await sock.recv(65536)
                    if not chunk:
                        break
                    answer += chunk
                    continue
                await sock.send(b" ")  # one byte of body every 0.2 s
        took = trio.current_time() - started
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"within 1 s" in answer
    assert 0.9 < took < 3


class Firehose:
    """A model that streams far more than socket buffers hold, until it is cancelled."""

    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = trio.Event()

    async def __call__(self, request: Any) -> GenerateResponse:
        self.calls += 1
        sink = current_delta_sink()
        assert sink is not None
        try:
            while True:
                sink(Delta(kind="text", text="x" * 65536))
                await trio.lowlevel.checkpoint()
        except trio.Cancelled:
            self.cancelled.set()
            raise


async def non_reading_client(host: str, port: int, *, extra: bytes = b"") -> Any:
    """A socket with a tiny receive buffer that POSTs a turn (and ``extra``), then never
    reads."""
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock = trio.socket.from_stdlib_socket(raw)
    await sock.connect((host, port))
    payload = json.dumps({"message": "talk"}).encode()
    head = (
        f"POST /api/turn HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    await sock.send(head.encode() + payload + extra)
    return sock


async def test_a_client_that_stops_reading_has_its_run_cancelled() -> None:
    """The model streams far more than the socket buffers hold; the client never reads.
    The write deadline cancels the run: the model's call is cancelled, no new one starts."""
    model = Firehose()
    agent = create_agent(generate=ScriptedModel(model))
    app = asgi_app(agent, approval_state=MemoryStore(), write_seconds=1)
    async with served(app) as (host, port):
        sock = await non_reading_client(host, port)
        with trio.fail_after(15):
            await model.cancelled.wait()  # and the client never read a byte
        sock.close()
    assert model.calls == 1


async def test_a_client_that_stops_reading_then_leaves_frees_its_connection() -> None:
    """A client that pipelined a byte of its next request, stopped reading and closed:
    once its run is cancelled the server ends the response, reads the close and lets go
    of the socket."""
    model = Firehose()

    def open_descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    agent = create_agent(generate=ScriptedModel(model))
    app = asgi_app(agent, approval_state=MemoryStore(), write_seconds=1)
    async with served(app) as (host, port):
        before = open_descriptors()
        sock = await non_reading_client(host, port, extra=b"\r\n")  # a byte of a next request
        with trio.fail_after(15):
            await model.cancelled.wait()
        sock.close()
        with trio.fail_after(10):
            while open_descriptors() > before:  # noqa: ASYNC110 (the OS says, no event)
                await trio.sleep(0.1)
