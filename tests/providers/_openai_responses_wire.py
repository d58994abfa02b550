"""Responses API bodies and event streams, as the real API sends them."""

from __future__ import annotations

import itertools
import json
from typing import Any

from ._server import sse_event

__all__ = [
    "failed_body",
    "function_call_item",
    "message_item",
    "reasoning_item",
    "response_body",
    "rich_body",
    "stream_events",
    "usage_of",
]


def usage_of(
    input: int = 10,
    output: int = 5,
    *,
    cached: int = 0,
    cache_write: int = 0,
    reasoning: int = 0,
) -> dict[str, Any]:
    return {
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output,
    }


def message_item(text: str, *, id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "id": id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def function_call_item(
    call_id: str, name: str, arguments: dict[str, Any] | str, *, id: str = "fc_1"
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "status": "completed",
    }


def reasoning_item(
    *, id: str = "rs_1", summary: str = "Check the weather tool.", encrypted: str | None = "gAAA"
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": id,
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
        "status": "completed",
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def response_body(
    *output: dict[str, Any],
    id: str = "resp_1",
    model: str = "gpt-test",
    usage: dict[str, Any] | None = None,
    incomplete: str | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": 1700000000,
        "model": model,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "error": None,
        "instructions": None,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage if usage is not None else usage_of(),
    }


def failed_body(code: str, message: str) -> dict[str, Any]:
    """A response that failed (a 200 body, or inside ``response.failed``)."""
    body = response_body(usage={})
    return {**body, "status": "failed", "error": {"code": code, "message": message}}


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def _started(item: dict[str, Any]) -> dict[str, Any]:
    """An output item as ``response.output_item.added`` shows it: nothing written yet."""
    kind = item["type"]
    if kind == "message":
        return {**item, "status": "in_progress", "content": []}
    if kind == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    return {**item, "status": "in_progress", "summary": [], "encrypted_content": None}


def stream_events(body: dict[str, Any], *, final: bool = True) -> list[bytes]:
    """The event stream for the complete ``body`` (``final=False``: no closing event)."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, "sequence_number": next(numbers), **fields}, event=kind)

    pending = {**body, "status": "in_progress", "output": [], "usage": None}
    events = [
        event("response.created", response=pending),
        event("response.in_progress", response=pending),
    ]
    for index, item in enumerate(body["output"]):
        at = {"output_index": index, "item_id": item["id"]}
        events.append(event("response.output_item.added", output_index=index, item=_started(item)))
        if item["type"] == "message":
            for part_index, part in enumerate(item["content"]):
                where = {**at, "content_index": part_index}
                key, kind = (
                    ("text", "output_text")
                    if part["type"] == "output_text"
                    else ("refusal", "refusal")
                )
                empty = {**part, key: ""}
                events.append(event("response.content_part.added", **where, part=empty))
                events.extend(
                    event(f"response.{kind}.delta", **where, delta=piece)
                    for piece in _halves(part[key])
                )
                events.append(event(f"response.{kind}.done", **where, **{key: part[key]}))
                events.append(event("response.content_part.done", **where, part=part))
        elif item["type"] == "function_call":
            events.extend(
                event("response.function_call_arguments.delta", **at, delta=piece)
                for piece in _halves(item["arguments"])
            )
            events.append(
                event("response.function_call_arguments.done", **at, arguments=item["arguments"])
            )
        elif item["type"] == "reasoning":
            for summary_index, summary in enumerate(item["summary"]):
                where = {**at, "summary_index": summary_index}
                events.extend(
                    event("response.reasoning_summary_text.delta", **where, delta=piece)
                    for piece in _halves(summary["text"])
                )
                events.append(
                    event("response.reasoning_summary_text.done", **where, text=summary["text"])
                )
        events.append(event("response.output_item.done", output_index=index, item=item))
    if final:
        closing = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        events.append(event(closing, response=body))
    return events


def rich_body() -> dict[str, Any]:
    """Two reasoning items, text, two calls (one with invalid JSON), a refusal."""
    refusal = {
        "type": "message",
        "id": "msg_2",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "Not that part."}],
    }
    return response_body(
        reasoning_item(id="rs_1", summary="First, look.", encrypted="enc-1"),
        message_item("Looking it up. ", id="msg_1"),
        function_call_item("call_a", "get_weather", {"city": "Oslo"}, id="fc_a"),
        reasoning_item(id="rs_2", summary="", encrypted="enc-2"),
        function_call_item("call_b", "get_weather", '{"city": "Ber', id="fc_b"),
        refusal,
        id="resp_rich",
        usage=usage_of(40, 25, cached=8, reasoning=9),
    )
