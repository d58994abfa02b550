"""Assembling a streamed Messages API answer into the same response as a non-streamed one."""

from __future__ import annotations

from typing import Any

from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
    RedactedThinkingBlock,
    SignatureDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)

from ..._core._model import GenerateResponse
from ..._core._types import ToolCall
from .._common import Delta, DeltaCallback, parse_arguments
from ._convert import METADATA_KEY, usage_from

__all__ = ["StreamAssembler"]


class _Block:
    __slots__ = ("data", "id", "kind", "name", "parts", "signature")

    def __init__(self, kind: str, *, id: str = "", name: str = "", data: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.data = data
        self.parts: list[str] = []
        self.signature = ""


class StreamAssembler:
    """Feeds on raw stream events; :meth:`response` once ``message_stop`` has arrived."""

    __slots__ = (
        "_blocks",
        "_id",
        "_model",
        "_on_delta",
        "_stop_reason",
        "_usage",
        "finished",
    )

    def __init__(self, on_delta: DeltaCallback | None) -> None:
        self._on_delta = on_delta
        self._blocks: dict[int, _Block] = {}
        self._id: str | None = None
        self._model: str | None = None
        self._stop_reason: str | None = None
        self._usage: dict[str, int | None] = {}
        self.finished = False

    def feed(self, event: RawMessageStreamEvent) -> None:
        """Take one event; deltas go to ``on_delta`` as they arrive."""
        if isinstance(event, RawContentBlockDeltaEvent):
            block = self._blocks.get(event.index)
            if block is None:
                return
            delta = event.delta
            on_delta = self._on_delta
            if isinstance(delta, TextDelta):
                block.parts.append(delta.text)
                if on_delta is not None:
                    on_delta(Delta(kind="text", text=delta.text, index=event.index))
            elif isinstance(delta, InputJSONDelta):
                # The API opens every tool_use block with an empty partial_json: not a
                # delta anyone can show (the OpenAI path skips empty arguments too).
                if not delta.partial_json:
                    return
                block.parts.append(delta.partial_json)
                if on_delta is not None:
                    on_delta(
                        Delta(
                            kind="tool_arguments",
                            text=delta.partial_json,
                            index=event.index,
                            call_id=block.id,
                            tool_name=block.name,
                        )
                    )
            elif isinstance(delta, ThinkingDelta):
                block.parts.append(delta.thinking)
                if on_delta is not None:
                    on_delta(Delta(kind="thinking", text=delta.thinking, index=event.index))
            elif isinstance(delta, SignatureDelta):
                block.signature += delta.signature
        elif isinstance(event, RawContentBlockStartEvent):
            start = event.content_block
            if isinstance(start, TextBlock):
                block = _Block("text")
                if start.text:
                    block.parts.append(start.text)
            elif isinstance(start, ToolUseBlock):
                block = _Block("tool_use", id=start.id, name=start.name)
            elif isinstance(start, ThinkingBlock):
                block = _Block("thinking")
                block.parts.append(start.thinking)
                block.signature = start.signature
            elif isinstance(start, RedactedThinkingBlock):
                block = _Block("redacted_thinking", data=start.data)
            else:
                block = _Block("other")
            self._blocks[event.index] = block
        elif isinstance(event, RawMessageStartEvent):
            message = event.message
            self._id = message.id
            self._model = message.model
            usage = message.usage
            self._usage = {
                "input": usage.input_tokens,
                "output": usage.output_tokens,
                "read": usage.cache_read_input_tokens,
                "write": usage.cache_creation_input_tokens,
            }
        elif isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason
            delta_usage = event.usage  # cumulative; fields left out keep their value
            self._usage["output"] = delta_usage.output_tokens
            if delta_usage.input_tokens is not None:
                self._usage["input"] = delta_usage.input_tokens
            if delta_usage.cache_read_input_tokens is not None:
                self._usage["read"] = delta_usage.cache_read_input_tokens
            if delta_usage.cache_creation_input_tokens is not None:
                self._usage["write"] = delta_usage.cache_creation_input_tokens
            details = delta_usage.output_tokens_details
            if details is not None:
                self._usage["thinking"] = details.thinking_tokens
        elif isinstance(event, RawMessageStopEvent):
            self.finished = True

    def response(self) -> GenerateResponse:
        """The assembled answer."""
        texts: list[str] = []
        calls: list[ToolCall] = []
        thinking: list[dict[str, Any]] = []
        for _, block in sorted(self._blocks.items()):
            kind = block.kind
            if kind == "text":
                texts.extend(block.parts)
            elif kind == "tool_use":
                arguments = parse_arguments("".join(block.parts))
                calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
            elif kind == "thinking":
                thinking.append(
                    {
                        "type": "thinking",
                        "thinking": "".join(block.parts),
                        "signature": block.signature,
                    }
                )
            elif kind == "redacted_thinking":
                thinking.append({"type": "redacted_thinking", "data": block.data})
        u = self._usage
        return GenerateResponse(
            content="".join(texts),
            tool_calls=tuple(calls),
            usage=usage_from(
                u.get("input"), u.get("output"), u.get("read"), u.get("write"), u.get("thinking")
            ),
            model=self._model,
            stop_reason=self._stop_reason,
            response_id=self._id,
            metadata={METADATA_KEY: {"thinking": thinking}} if thinking else {},
        )
