"""Chat Completions bodies and chunk streams, as the real API sends them, and as
llama-cpp-python's OpenAI-compatible server sends them (:class:`LlamaCppServer`)."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from ._server import JsonReply, Received, Reply, SseReply, sse_event

__all__ = [
    "LlamaCppServer",
    "completion",
    "llama_cpp_chunks",
    "llama_cpp_format_refusal",
    "stream_chunks",
    "tool_call",
    "usage_of",
]


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


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def llama_cpp_chunks(body: dict[str, Any]) -> list[bytes]:
    """The chunk stream llama-cpp-python's server (0.3.36) sends for the complete ``body``.

    As captured from the real server: every chunk of a tool call repeats the call's
    ``id`` and its whole ``function.name`` beside the next piece of the arguments (and a
    legacy ``function_call`` with the same), fields it has nothing for are ``null``, and
    no usage chunk follows the finish chunk, even when ``stream_options.include_usage``
    asked for one.
    """
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "finish_reason": finish, "logprobs": None, "delta": delta}
        return sse_event({**base, "choices": [choice]})

    choice = body["choices"][0]
    message = choice["message"]
    calls = message.get("tool_calls") or ()
    if not calls:
        events = [chunk({"role": "assistant"})]
        events.extend(chunk({"content": text}) for text in _pieces(message["content"] or ""))
        events.append(chunk({}, choice["finish_reason"]))
    else:
        empty = {"role": None, "content": None, "function_call": None, "tool_calls": None}
        events = [chunk({**empty, "role": "assistant"})]
        for index, call in enumerate(calls):
            name = call["function"]["name"]
            for piece in _pieces(call["function"]["arguments"]):
                function = {"name": name, "arguments": piece}
                wire = {"index": index, "id": call["id"], "type": "function", "function": function}
                events.append(chunk({**empty, "function_call": function, "tool_calls": [wire]}))
        events.append(chunk(empty, choice["finish_reason"]))
    events.append(b"data: [DONE]\n\n")
    return events


def _llama_cpp_refusal(messages: list[dict[str, Any]]) -> JsonReply | None:
    """The 500 llama-cpp-python's server answers for an assistant message it cannot take:
    ``content: null`` fails its request validation, a missing ``content`` its prompt
    template. Its messages, abridged to the lines that matter."""
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        if "content" not in message:
            text = "'dict object' has no attribute 'content'"
        elif not isinstance(message["content"], str | list):
            loc = ("body", "messages", index, "ChatCompletionRequestAssistantMessage", "content")
            text = (
                "7 validation errors:\n  "
                + repr(
                    {
                        "type": "string_type",
                        "loc": loc,
                        "msg": "Input should be a valid string",
                        "input": message["content"],
                    }
                )
                + "\n"
            )
        else:
            continue
        return JsonReply(
            status=500,
            body={
                "error": {
                    "message": text,
                    "type": "internal_server_error",
                    "param": None,
                    "code": None,
                }
            },
        )
    return None


def llama_cpp_format_refusal(request: dict[str, Any]) -> JsonReply | None:
    """The 500 llama-cpp-python's server (0.3.36) answers to a ``response_format`` whose
    type is neither ``text`` nor ``json_object`` (``json_schema``, say): its request
    model allows only those two. As captured, the traceback line abridged."""
    response_format = request.get("response_format")
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind in ("text", "json_object"):
        return None
    error = {
        "type": "literal_error",
        "loc": ("body", "response_format", "type"),
        "msg": "Input should be 'text' or 'json_object'",
        "input": kind,
        "ctx": {"expected": "'text' or 'json_object'"},
    }
    text = (
        f'1 validation error:\n  {error!r}\n\n  File "llama_cpp/server/app.py", line 376, '
        "in create_chat_completion\n    POST /v1/chat/completions"
    )
    body = {"message": text, "type": "internal_server_error", "param": None, "code": None}
    return JsonReply(status=500, body={"error": body})


class LlamaCppServer:
    """A :class:`WireServer` handler that answers as llama-cpp-python's server does.

    Each request takes the next of ``bodies`` (complete chat completions) and gets:

    - HTTP 500 ``Input should be a valid string`` when an assistant message has
      ``"content": null`` (and a template error when it has no ``content``), and HTTP
      500 ``Input should be 'text' or 'json_object'`` for a ``response_format`` of
      another type (:func:`llama_cpp_format_refusal`), without taking a body;
    - for ``stream: true``, :func:`llama_cpp_chunks` (no usage chunk), or with
      ``json_for_stream=True`` the whole body as a ``200 application/json`` answer;
    - otherwise the body as JSON, with its usage.
    """

    __test__ = False

    def __init__(self, *bodies: dict[str, Any], json_for_stream: bool = False) -> None:
        self.bodies = deque(bodies)
        self.json_for_stream = json_for_stream
        self.refused: list[JsonReply] = []
        """The 500s sent, in order."""

    def __call__(self, received: Received) -> Reply:
        request = received.json
        refusal = _llama_cpp_refusal(request.get("messages") or [])
        if refusal is None:
            refusal = llama_cpp_format_refusal(request)
        if refusal is not None:
            self.refused.append(refusal)
            return refusal
        if not self.bodies:
            return JsonReply(status=500, body={"error": {"message": "no reply scripted"}})
        body = self.bodies.popleft()
        if request.get("stream") and not self.json_for_stream:
            return SseReply(events=llama_cpp_chunks(body))
        return JsonReply(body=body)
