"""Operative conversations to Anthropic Messages API parameters, and responses back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from anthropic.types import (
    Message as AnthropicMessage,
)
from anthropic.types import (
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
)

from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, ToolSpec, Usage
from ...conversation import ContentPart, FilePart, ImagePart, Message, TextPart
from .._common import (
    count_of,
    image_base64,
    is_error_outcome,
    output_schema_hint,
    parse_arguments,
)
from .._output_modes import OUTPUT_TOOL_NAME, TOOL_FORMAT, output_tool, tool_instruction
from ._cache import CACHE_CONTROL_KEY, cache_control_of

__all__ = [
    "METADATA_KEY",
    "CacheHints",
    "apply_output_format",
    "build_messages",
    "build_tools",
    "response_from_message",
    "usage_from",
]

METADATA_KEY = "anthropic"
"""Key of the adapter's entry in ``GenerateResponse.metadata`` (and so in the assistant
message's metadata): ``{"thinking": [blocks...]}``, sent back on the next turn."""


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.url is not None:
            return {"type": "image", "source": {"type": "url", "url": part.url}}
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part.media_type, "data": image_base64(part)},
        }
    assert isinstance(part, FilePart)
    return {"type": "document", "source": {"type": "file", "file_id": part.file_id}}


def _content_blocks(message: Message) -> list[dict[str, Any]]:
    content = message.content
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [_part(part) for part in content if not (isinstance(part, TextPart) and not part.text)]


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    extra = message.metadata.get(METADATA_KEY)
    if isinstance(extra, Mapping):
        # Thinking blocks go first, unchanged (the signature covers them).
        blocks.extend(dict(block) for block in extra.get("thinking", ()))
    blocks.extend(_content_blocks(message))
    for call in message.tool_calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            parsed = parse_arguments(arguments)
            arguments = parsed if isinstance(parsed, dict) else {}
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": arguments})
    return blocks


def _tool_result_block(message: Message) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": _content_blocks(message) or message.text,
    }
    if is_error_outcome(message.outcome):
        block["is_error"] = True
    return block


CacheHints: TypeAlias = list[tuple[dict[str, Any], dict[str, Any]]]
"""``(block, cache_control)`` for each message that asked for a cache breakpoint."""


def _hint(message: Message, blocks: list[dict[str, Any]], hints: CacheHints) -> None:
    control = cache_control_of(message.metadata.get(CACHE_CONTROL_KEY))
    if control is None:
        return
    for block in reversed(blocks):  # thinking blocks cannot carry a breakpoint
        if block.get("type") not in ("thinking", "redacted_thinking"):
            hints.append((block, control))
            return


def build_messages(
    request: GenerateRequest, *, schema_hint: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], CacheHints]:
    """``(system, messages, hints)``: system text blocks, alternating user/assistant
    turns, and the blocks whose messages carry ``metadata["anthropic.cache_control"]``.

    Consecutive messages that land on the same role (tool results, then a user message)
    are merged into one turn, as the API expects.
    """
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    hints: CacheHints = []
    for message in request.conversation.messages:
        role = message.role
        if role == "system":
            if message.text:
                block = {"type": "text", "text": message.text}
                system.append(block)
                if CACHE_CONTROL_KEY in message.metadata:
                    _hint(message, [block], hints)
            continue
        if role == "assistant":
            blocks = _assistant_blocks(message)
            wire_role = "assistant"
        elif role == "tool":
            blocks = [_tool_result_block(message)]
            wire_role = "user"
        else:
            blocks = _content_blocks(message)
            wire_role = "user"
        if not blocks:
            continue
        if CACHE_CONTROL_KEY in message.metadata:
            _hint(message, blocks, hints)
        if turns and turns[-1]["role"] == wire_role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": wire_role, "content": blocks})
    if schema_hint and request.output_schema is not None:
        system.append({"type": "text", "text": output_schema_hint(request.output_schema)})
    return system, turns, hints


def apply_output_format(params: dict[str, Any], request: GenerateRequest, kind: str | None) -> None:
    """Ask for the request's output in the format ``kind`` (in place).

    ``"json_schema"``: ``output_config.format``; ``"prompt"``: nothing here (the schema
    is in the system prompt :func:`build_messages` built); ``"tool"``: the final-answer
    tool, forced unless the settings choose a ``tool_choice`` (beside other tools,
    ``{"type": "any"}``: some tool must be called). Extended thinking cannot be combined
    with a forced tool, so with ``thinking`` on the tool is only asked for, in the
    system prompt.
    """
    schema = request.output_schema
    if kind is None or schema is None:
        return
    if kind == "json_schema":
        config = dict(params.get("output_config") or {})
        config["format"] = {"type": "json_schema", "schema": schema}
        params["output_config"] = config
        return
    if kind != TOOL_FORMAT:
        return
    others = bool(params.get("tools"))
    params["tools"] = [*params.get("tools", ()), *build_tools((output_tool(request),))]
    if "tool_choice" in params:
        return
    thinking = params.get("thinking")
    if isinstance(thinking, Mapping) and thinking.get("type") not in (None, "disabled"):
        system = params.get("system")
        note = {"type": "text", "text": tool_instruction()}
        if isinstance(system, str):
            params["system"] = [{"type": "text", "text": system}, note] if system else [note]
        else:
            params["system"] = [*(system or ()), note]
        return
    forced = {"type": "tool", "name": OUTPUT_TOOL_NAME}
    params["tool_choice"] = {"type": "any"} if others else forced


def build_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Tool specs as the API's ``tools`` list."""
    return [
        {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}
        for spec in tools
    ]


def usage_from(
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read: int | None,
    cache_write: int | None,
    thinking: int | None = None,
) -> Usage:
    """Anthropic's counts already keep cached input apart from ``input_tokens``. A
    negative count is counted as 0, with a ``ProviderUsageWarning``."""
    provider = "anthropic"
    prompt = count_of(provider, "usage.input_tokens", input_tokens or 0)
    completion = count_of(provider, "usage.output_tokens", output_tokens or 0)
    read = count_of(provider, "usage.cache_read_input_tokens", cache_read or 0)
    write = count_of(provider, "usage.cache_creation_input_tokens", cache_write or 0)
    thought = count_of(provider, "usage.output_tokens_details.thinking_tokens", thinking or 0)
    return Usage(
        prompt=prompt,
        completion=completion,
        total=prompt + completion + read + write,
        cache_read=read,
        cache_write=write,
        reasoning=thought,
    )


def response_from_message(message: AnthropicMessage) -> GenerateResponse:
    """A complete Messages API response as a :class:`GenerateResponse`."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolUseBlock):
            arguments = block.input if isinstance(block.input, dict) else {}
            calls.append(ToolCall(id=block.id, name=block.name, arguments=arguments))
        elif isinstance(block, ThinkingBlock):
            thinking.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
        elif isinstance(block, RedactedThinkingBlock):
            thinking.append({"type": "redacted_thinking", "data": block.data})
    usage = message.usage
    details = usage.output_tokens_details
    return GenerateResponse(
        content="".join(texts),
        tool_calls=tuple(calls),
        usage=usage_from(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
            details.thinking_tokens if details is not None else None,
        ),
        model=message.model,
        stop_reason=message.stop_reason,
        response_id=message.id,
        metadata={METADATA_KEY: {"thinking": thinking}} if thinking else {},
    )
