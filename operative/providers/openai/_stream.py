"""Reading a streamed chat completion and assembling the same response as a non-streamed one.

The SSE body is parsed here rather than by the SDK's stream object: that one stops at
``[DONE]`` without closing its inner async generators, which Trio reports (and a
``filterwarnings = error`` suite fails on). Reading the body to its end leaves nothing
open; an abort or a cut connection ends every generator by raising through it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..._core._model import GenerateResponse
from ..._core._types import ToolCall
from .._common import Delta, DeltaCallback, parse_arguments
from ._convert import METADATA_KEY, usage_from_dict

__all__ = ["SseLines", "StreamAssembler"]


class SseLines:
    """An incremental server-sent-events decoder: bytes in, each event's data out."""

    __slots__ = ("_buffer", "_data")

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event completed by ``chunk``."""
        events: list[str] = []
        lines = (self._buffer + chunk).split(b"\n")
        self._buffer = lines.pop()
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append((value[1:] if value.startswith(b" ") else value).decode())
        return events


class _Call:
    __slots__ = ("id", "name", "parts")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.parts: list[str] = []

    def add_name(self, name: str) -> None:
        """Take the ``function.name`` of one chunk.

        OpenAI sends the name once, in a call's first chunk; a server may split it over
        several chunks (each piece is appended) or, like llama-cpp-python's server, repeat
        the whole name in every chunk of the call: a piece equal to the name so far is such
        a repeat and is not appended.
        """
        if name != self.name:
            self.name += name


class StreamAssembler:
    """Feeds on decoded chunks (first choice only); :meth:`response` when done."""

    __slots__ = (
        "_calls",
        "_id",
        "_model",
        "_on_delta",
        "_refusal",
        "_text",
        "_usage",
        "done",
        "error",
        "stop_reason",
    )

    def __init__(self, on_delta: DeltaCallback | None) -> None:
        self._on_delta = on_delta
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, _Call] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._usage: Mapping[str, Any] | None = None
        self.stop_reason: str | None = None
        self.done = False
        """``[DONE]`` arrived."""
        self.error: Mapping[str, Any] | None = None
        """An error object the server sent inside the stream."""

    def feed_data(self, data: str) -> None:
        """Take one event's data (a JSON chunk, an error object, or ``[DONE]``)."""
        if self.done or self.error is not None:
            return
        if data.startswith("[DONE]"):
            self.done = True
            return
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            return
        error = chunk.get("error")
        if error:
            self.error = error if isinstance(error, dict) else {"message": str(error)}
            return
        self.feed(chunk)

    def feed_completion(self, body: object) -> None:
        """Take a whole chat completion: the JSON body some servers send in answer to a
        streamed request. Its message goes through :meth:`feed` as one chunk, so the
        answer is the same as the non-streamed one and ``on_delta`` still sees the text and
        each call's arguments (each in one piece)."""
        if not isinstance(body, Mapping):
            self.error = {"message": f"the JSON answer is not an object: {body!r:.200}"}
            return
        error = body.get("error")
        if error:
            self.error = error if isinstance(error, Mapping) else {"message": str(error)}
            return
        choices: list[dict[str, Any]] = []
        for choice in body.get("choices") or ():
            message = choice.get("message") or {}
            calls = [
                {"index": index, "id": call.get("id"), "function": call.get("function")}
                for index, call in enumerate(message.get("tool_calls") or ())
            ]
            delta = {
                "content": message.get("content"),
                "refusal": message.get("refusal"),
                "tool_calls": calls,
            }
            choices.append(
                {
                    "index": choice.get("index", 0),
                    "delta": delta,
                    "finish_reason": choice.get("finish_reason"),
                }
            )
        self.feed({**body, "choices": choices})
        self.done = True

    def feed(self, chunk: Mapping[str, Any]) -> None:
        """Take one chunk; deltas go to ``on_delta`` as they arrive."""
        self._id = chunk.get("id") or self._id
        self._model = chunk.get("model") or self._model
        usage = chunk.get("usage")
        if usage:
            self._usage = usage
        on_delta = self._on_delta
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if content:
                self._text.append(content)
                if on_delta is not None:
                    on_delta(Delta(kind="text", text=content))
            refusal = delta.get("refusal")
            if refusal:
                self._refusal.append(refusal)
            for piece in delta.get("tool_calls") or ():
                index = piece.get("index", 0)
                call = self._calls.get(index)
                if call is None:
                    call = self._calls[index] = _Call()
                if piece.get("id"):
                    call.id = piece["id"]
                function = piece.get("function") or {}
                name = function.get("name")
                if name:
                    call.add_name(name)
                arguments = function.get("arguments")
                if arguments:
                    call.parts.append(arguments)
                    if on_delta is not None:
                        on_delta(
                            Delta(
                                kind="tool_arguments",
                                text=arguments,
                                index=index,
                                call_id=call.id,
                                tool_name=call.name,
                            )
                        )
            finish = choice.get("finish_reason")
            if finish is not None:
                self.stop_reason = finish

    def response(self) -> GenerateResponse:
        """The assembled answer."""
        calls = tuple(
            ToolCall(id=call.id, name=call.name, arguments=parse_arguments("".join(call.parts)))
            for _, call in sorted(self._calls.items())
        )
        refusal = "".join(self._refusal)
        return GenerateResponse(
            content="".join(self._text),
            tool_calls=calls,
            usage=usage_from_dict(self._usage),
            model=self._model,
            stop_reason=self.stop_reason,
            response_id=self._id,
            metadata={METADATA_KEY: {"refusal": refusal}} if refusal else {},
        )
