"""Chat Completions bodies and chunk streams, as the real API sends them."""

from __future__ import annotations

import json
from typing import Any

from ._server import sse_event

__all__ = ["completion", "stream_chunks", "tool_call", "usage_of"]


def usage_of(
    prompt: int = 10, completion: int = 5, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def tool_call(id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def completion(
    content: str | None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str = "stop",
    id: str = "chatcmpl-1",
    model: str = "gpt-test",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": id,
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}
        ],
        "usage": usage if usage is not None else usage_of(),
    }


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def stream_chunks(body: dict[str, Any], *, done: bool = True) -> list[bytes]:
    """The chunk stream (with ``include_usage``) for the complete ``body``."""
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse_event({**base, "choices": [choice]})

    choice = body["choices"][0]
    message = choice["message"]
    events = [chunk({"role": "assistant", "content": ""})]
    events.extend(chunk({"content": text}) for text in _halves(message["content"] or ""))
    for index, call in enumerate(message.get("tool_calls", ())):
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        events.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            for part in _halves(call["function"]["arguments"])
        )
    events.append(chunk({}, choice["finish_reason"]))
    events.append(sse_event({**base, "choices": [], "usage": body["usage"]}))
    if done:
        events.append(b"data: [DONE]\n\n")
    return events
