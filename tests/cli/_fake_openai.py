"""An OpenAI-compatible server for the command's tests: Chat Completions, streamed as the
real API streams them, answering each request with the next scripted reply. A reply can
hold part-way until the test releases it (a model that is slow to answer), and a reply
can be an error status."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

__all__ = ["Answer", "Failure", "FakeOpenAI", "open_fake_openai"]


@attrs.frozen(kw_only=True)
class Answer:
    """A streamed text answer, in ``pieces``; with ``hold``, the stream stops after
    ``hold`` pieces until ``released`` is set."""

    pieces: tuple[str, ...]
    model: str = "gpt-test"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    hold: int | None = None
    released: trio.Event = attrs.field(factory=trio.Event)
    usage: bool = True
    """Send the usage chunk (llama.cpp's server sends none)."""


@attrs.frozen(kw_only=True)
class Failure:
    """An error response, as the API sends one."""

    status: int = 400
    message: str = "the request is bad"


class FakeOpenAI:
    __test__ = False

    def __init__(self) -> None:
        self.replies: deque[Answer | Failure] = deque()
        self.requests: list[Any] = []
        self.url = ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.requests.append(json.loads(body or b"null"))
        reply = self.replies.popleft() if self.replies else Failure(message="no reply queued")
        if isinstance(reply, Failure):
            payload = json.dumps({"error": {"message": reply.message, "type": "invalid"}})
            await send(
                {
                    "type": "http.response.start",
                    "status": reply.status,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload.encode()})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )

        async def event(data: Any) -> None:
            text = data if isinstance(data, str) else json.dumps(data)
            chunk = f"data: {text}\n\n".encode()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1}
        base["model"] = reply.model

        def delta(content: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": content, "finish_reason": finish, "logprobs": None}
            return {**base, "choices": [choice]}

        await event(delta({"role": "assistant", "content": ""}))
        for index, piece in enumerate(reply.pieces):
            if index == reply.hold:
                await reply.released.wait()
            await event(delta({"content": piece}))
        await event(delta({}, "stop"))
        usage = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
        if reply.usage:
            await event({**base, "choices": [], "usage": usage})
        await event("[DONE]")
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@asynccontextmanager
async def open_fake_openai() -> AsyncIterator[FakeOpenAI]:
    """The server on a free loopback port, for the block; ``.url`` is its ``/v1``."""
    server = FakeOpenAI()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve, server, config)
        server.url = f"{binds[0]}/v1"
        try:
            yield server
        finally:
            nursery.cancel_scope.cancel()
