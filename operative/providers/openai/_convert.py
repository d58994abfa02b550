"""Operative conversations to Chat Completions parameters, and responses back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, ToolSpec, Usage
from ...conversation import ContentPart, FilePart, ImagePart, Message, TextPart
from .._common import cached_within, count_of, data_url, parse_arguments
from .._output_modes import (
    OUTPUT_TOOL_NAME,
    TOOL_FORMAT,
    OutputFormats,
    output_hint,
    output_tool,
    with_system_text,
)

__all__ = [
    "METADATA_KEY",
    "apply_output_format",
    "build_messages",
    "build_response_format",
    "build_tools",
    "chat_formats",
    "response_from_completion",
    "usage_from",
    "usage_from_dict",
]

METADATA_KEY = "openai"
"""Key of the adapter's entry in ``GenerateResponse.metadata`` (e.g. ``{"refusal": ...}``)."""


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": data_url(part)}}
    assert isinstance(part, FilePart)
    return {"type": "file", "file": {"file_id": part.file_id}}


def _content(message: Message) -> str | list[dict[str, Any]]:
    content = message.content
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return message.text
    return [_part(part) for part in content]


def _arguments(call: ToolCall) -> str:
    arguments = call.arguments
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _message(message: Message) -> dict[str, Any]:
    role = message.role
    if role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    if role == "assistant":
        # "" rather than null when the message is only tool calls: OpenAI takes either,
        # and servers that validate content as a string (llama-cpp-python's) refuse null.
        wire: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments(call)},
                }
                for call in message.tool_calls
            ]
        return wire
    if role == "system":
        return {"role": "system", "content": message.text}
    return {"role": "user", "content": _content(message)}


def build_messages(request: GenerateRequest) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages, in order."""
    return [_message(message) for message in request.conversation.messages]


def build_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Tool specs as function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            },
        }
        for spec in tools
    ]


def chat_formats() -> OutputFormats:
    """The Chat Completions output formats, with a memory of refusals of its own:

    - ``json_schema``: ``response_format`` ``json_schema`` (native);
    - ``json_object_schema``: ``{"type": "json_object", "schema": ...}`` and the schema
      in the system prompt, the form llama-cpp-python's server (and others) constrain
      decoding with; tried first after a refusal of ``json_schema``, so only on servers
      that are not OpenAI's;
    - ``json_object``: JSON mode and the schema in the system prompt
      (``output_mode="prompted"`` starts here);
    - ``prompt``: the schema in the system prompt only.
    """
    return OutputFormats(
        native="json_schema",
        fallbacks=("json_object_schema", "json_object", "prompt"),
        prompted=("json_object", "prompt"),
        fields=("response_format", "json_schema", "json_object"),
    )


def build_response_format(
    schema: dict[str, Any], *, strict: bool, kind: str = "json_schema"
) -> dict[str, Any] | None:
    """``response_format`` asking for JSON that follows ``schema``, in the format
    ``kind`` (one of :func:`chat_formats`; ``None`` for ``"prompt"``)."""
    if kind == "json_object_schema":
        return {"type": "json_object", "schema": schema}
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "prompt":
        return None
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": strict},
    }


def apply_output_format(
    params: dict[str, Any], request: GenerateRequest, kind: str | None, *, strict: bool
) -> None:
    """Ask for the request's output in the format ``kind`` (in place).

    ``"tool"`` adds the final-answer tool and, unless the settings choose a
    ``tool_choice``, forces it (or, beside other tools, requires some tool call); the
    prompted formats put the schema in the system prompt. A ``response_format`` in the
    settings is sent as given.
    """
    schema = request.output_schema
    if kind is None or schema is None:
        return
    if kind == TOOL_FORMAT:
        others = bool(params.get("tools"))
        params["tools"] = [*params.get("tools", ()), *build_tools((output_tool(request),))]
        if "tool_choice" not in params:
            params["tool_choice"] = (
                "required"
                if others
                else {"type": "function", "function": {"name": OUTPUT_TOOL_NAME}}
            )
        return
    if kind != "json_schema":
        params["messages"] = with_system_text(params["messages"], output_hint(request))
    if "response_format" not in params:
        response_format = build_response_format(schema, strict=strict, kind=kind)
        if response_format is not None:
            params["response_format"] = response_format


def usage_from(usage: CompletionUsage | None) -> Usage | None:
    """OpenAI counts cached tokens inside ``prompt_tokens``: they are taken out here."""
    if usage is None:
        return None
    prompt_details = usage.prompt_tokens_details
    cached = (prompt_details.cached_tokens or 0) if prompt_details is not None else 0
    completion_details = usage.completion_tokens_details
    reasoning = (completion_details.reasoning_tokens or 0) if completion_details is not None else 0
    return _usage(usage.prompt_tokens, usage.completion_tokens, cached, reasoning)


def usage_from_dict(usage: Mapping[str, Any] | None) -> Usage | None:
    """:func:`usage_from` for a decoded JSON usage object (streams)."""
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
    return _usage(prompt, completion, cached, reasoning)


_PROVIDER = "openai (Chat Completions)"


def _usage(prompt: int, completion: int, cached: int, reasoning: int) -> Usage:
    """The server's counts, clamped where they cannot be right (a negative count is 0,
    cached tokens are at most ``prompt_tokens``), with a ``ProviderUsageWarning``."""
    prompt = count_of(_PROVIDER, "usage.prompt_tokens", prompt)
    completion = count_of(_PROVIDER, "usage.completion_tokens", completion)
    field = "usage.prompt_tokens_details.cached_tokens"
    cached = cached_within(
        _PROVIDER, field, count_of(_PROVIDER, field, cached), "usage.prompt_tokens", prompt
    )
    reasoning = count_of(_PROVIDER, "usage.completion_tokens_details.reasoning_tokens", reasoning)
    return Usage(
        prompt=prompt - cached,
        completion=completion,
        total=prompt + completion,
        cache_read=cached,
        reasoning=reasoning,
    )


def response_from_completion(completion: ChatCompletion) -> GenerateResponse:
    """A complete chat completion (its first choice) as a :class:`GenerateResponse`."""
    choice = completion.choices[0] if completion.choices else None
    calls: list[ToolCall] = []
    content = ""
    metadata: dict[str, Any] = {}
    if choice is not None:
        message = choice.message
        content = message.content or ""
        for call in message.tool_calls or ():
            if isinstance(call, ChatCompletionMessageFunctionToolCall):
                function = call.function
                calls.append(
                    ToolCall(
                        id=call.id,
                        name=function.name,
                        arguments=parse_arguments(function.arguments),
                    )
                )
        if message.refusal:
            metadata[METADATA_KEY] = {"refusal": message.refusal}
    return GenerateResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=usage_from(completion.usage),
        model=completion.model,
        stop_reason=choice.finish_reason if choice is not None else None,
        response_id=completion.id,
        metadata=metadata,
    )
