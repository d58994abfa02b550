"""Anthropic Messages API bodies and event streams, as the real API sends them."""

from __future__ import annotations

import json
from typing import Any

from ._server import JsonReply, Received, Reply, sse_event

__all__ = [
    "KeyCheck",
    "authentication_error",
    "message",
    "stream_events",
    "text_block",
    "tool_use_block",
    "usage_of",
]


def usage_of(
    input_tokens: int = 10, output_tokens: int = 5, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": input}


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    id: str = "msg_01",
    model: str = "claude-test-1",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage if usage is not None else usage_of(),
    }


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def stream_events(body: dict[str, Any]) -> list[bytes]:
    """The event stream the API sends for the complete message ``body``."""
    start = {**body, "content": [], "stop_reason": None}
    start["usage"] = {**body["usage"], "output_tokens": 1}
    events = [
        sse_event({"type": "message_start", "message": start}, "message_start"),
        sse_event({"type": "ping"}, "ping"),
    ]
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        if kind == "text":
            empty: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _halves(block["text"])]
        elif kind == "tool_use":
            empty = {**block, "input": {}}
            raw = json.dumps(block["input"])
            # The API opens every tool_use block with an empty partial_json.
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": p} for p in _halves(raw)]
        elif kind == "thinking":
            empty = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": t} for t in _halves(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            empty = block
            deltas = []
        events.append(
            sse_event(
                {"type": "content_block_start", "index": index, "content_block": empty},
                "content_block_start",
            )
        )
        events.extend(
            sse_event(
                {"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta"
            )
            for d in deltas
        )
        events.append(
            sse_event({"type": "content_block_stop", "index": index}, "content_block_stop")
        )
    events.append(
        sse_event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
                "usage": body["usage"],
            },
            "message_delta",
        )
    )
    events.append(sse_event({"type": "message_stop"}, "message_stop"))
    return events


def authentication_error(message: str) -> JsonReply:
    """The API's 401 body."""
    return JsonReply(
        status=401,
        body={"type": "error", "error": {"type": "authentication_error", "message": message}},
        headers={"request-id": "req_auth"},
    )


class KeyCheck:
    """A handler that checks the key as an Anthropic-format server does.

    The key is read from ``x-api-key`` and, with ``bearer=True``, from an
    ``Authorization: Bearer`` header (the SDK sends ``api_key`` there); with
    ``bearer=False`` only ``x-api-key`` counts, as on servers that follow the API
    reference to the letter. No key: 401 ``x-api-key header is required``; another key:
    401 ``invalid x-api-key``; the right key: the next of ``replies``.
    """

    __test__ = False

    def __init__(self, key: str, *replies: Reply, bearer: bool = True) -> None:
        self.key = key
        self.replies = list(replies)
        self.bearer = bearer

    def __call__(self, received: Received) -> Reply:
        sent = received.headers.get("x-api-key")
        authorization = received.headers.get("authorization", "")
        if sent is None and self.bearer and authorization.startswith("Bearer "):
            sent = authorization.removeprefix("Bearer ")
        if sent is None:
            return authentication_error("x-api-key header is required")
        if sent != self.key:
            return authentication_error("invalid x-api-key")
        return self.replies.pop(0)
