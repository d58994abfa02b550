"""Ollama ``/api/chat`` bodies and NDJSON streams, as the real server sends them."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["chat", "ndjson_lines", "tool_call"]


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"function": {"name": name, "arguments": arguments}}


def chat(
    content: str = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    thinking: str | None = None,
    model: str = "llama-test",
    done_reason: str = "stop",
    prompt_eval_count: int = 10,
    eval_count: int = 5,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if thinking is not None:
        message["thinking"] = thinking
    return {
        "model": model,
        "created_at": "2025-01-01T00:00:00Z",
        "message": message,
        "done": True,
        "done_reason": done_reason,
        "total_duration": 1000,
        "load_duration": 10,
        "prompt_eval_count": prompt_eval_count,
        "prompt_eval_duration": 100,
        "eval_count": eval_count,
        "eval_duration": 500,
    }


def _line(value: dict[str, Any]) -> bytes:
    return (json.dumps(value) + "\n").encode()


def ndjson_lines(body: dict[str, Any]) -> list[bytes]:
    """The chunks the server streams for the complete reply ``body`` (one per line)."""
    head = {"model": body["model"], "created_at": body["created_at"], "done": False}
    message = body["message"]
    lines: list[bytes] = []
    thinking = message.get("thinking") or ""
    for i in range(0, len(thinking), 3):
        piece = {"role": "assistant", "content": "", "thinking": thinking[i : i + 3]}
        lines.append(_line({**head, "message": piece}))
    text = message["content"]
    lines.extend(
        _line({**head, "message": {"role": "assistant", "content": text[i : i + 4]}})
        for i in range(0, len(text), 4)
    )
    if message.get("tool_calls"):
        piece = {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]}
        lines.append(_line({**head, "message": piece}))
    last = {**body, "message": {"role": "assistant", "content": ""}}
    lines.append(_line(last))
    return lines
