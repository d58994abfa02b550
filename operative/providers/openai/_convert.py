"""Operative conversations to Chat Completions parameters, and responses back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

from ..._model import GenerateRequest, GenerateResponse
from ..._types import ToolCall, ToolSpec, Usage
from ...conversation import ContentPart, FilePart, ImagePart, Message, TextPart
from .._common import data_url, parse_arguments

__all__ = [
    "METADATA_KEY",
    "build_messages",
    "build_response_format",
    "build_tools",
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


def build_response_format(schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    """``response_format`` asking for JSON that follows ``schema``."""
    return {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema, "strict": strict},
    }


def usage_from(usage: CompletionUsage | None) -> Usage | None:
    """OpenAI counts cached tokens inside ``prompt_tokens``: they are taken out here."""
    if usage is None:
        return None
    prompt_details = usage.prompt_tokens_details
    cached = (prompt_details.cached_tokens or 0) if prompt_details is not None else 0
    completion_details = usage.completion_tokens_details
    reasoning = (completion_details.reasoning_tokens or 0) if completion_details is not None else 0
    return Usage(
        prompt=usage.prompt_tokens - cached,
        completion=usage.completion_tokens,
        total=usage.prompt_tokens + usage.completion_tokens,
        cache_read=cached,
        reasoning=reasoning,
    )


def usage_from_dict(usage: Mapping[str, Any] | None) -> Usage | None:
    """:func:`usage_from` for a decoded JSON usage object (streams)."""
    if not usage:
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
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
