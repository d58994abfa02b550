"""Gemini ``generateContent`` bodies and SSE streams, as the real API sends them."""

from __future__ import annotations

from typing import Any

from ._server import sse_event

__all__ = ["function_call", "reply_body", "stream_events", "usage_of"]


def usage_of(
    prompt: int = 10, candidates: int = 5, cached: int = 0, thoughts: int = 0
) -> dict[str, Any]:
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def function_call(name: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}, **extra}


def reply_body(
    parts: list[dict[str, Any]],
    *,
    finish_reason: str = "STOP",
    usage: dict[str, Any] | None = None,
    model_version: str = "gemini-test-001",
    response_id: str = "resp_1",
) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": finish_reason,
                "index": 0,
            }
        ],
        "usageMetadata": usage if usage is not None else usage_of(),
        "modelVersion": model_version,
        "responseId": response_id,
    }


def stream_events(body: dict[str, Any]) -> list[bytes]:
    """The SSE stream for ``body``: text split across chunks, the finish on the last."""
    candidate = body["candidates"][0]
    head = {"modelVersion": body["modelVersion"], "responseId": body["responseId"]}
    events: list[bytes] = []
    for part in candidate["content"]["parts"]:
        pieces = [part]
        text = part.get("text")
        if text and len(text) > 1 and "thoughtSignature" not in part:
            middle = len(text) // 2
            pieces = [{**part, "text": text[:middle]}, {**part, "text": text[middle:]}]
        for piece in pieces:
            chunk = {"candidates": [{"content": {"role": "model", "parts": [piece]}, "index": 0}]}
            events.append(sse_event({**chunk, **head}))
    last = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": ""}]},
                "finishReason": candidate["finishReason"],
                "index": 0,
            }
        ],
        "usageMetadata": body["usageMetadata"],
        **head,
    }
    events.append(sse_event(last))
    return events
