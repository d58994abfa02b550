"""Operative conversations to Responses API parameters, and Responses bodies back.

Everything here works on plain JSON (dicts), so the non-streamed body and the one a
stream assembles go through the same :func:`response_from_body` and give equal answers.

Reasoning models return ``reasoning`` output items that must be sent back, before the
items that followed them, on the next turn. The adapter keeps the answer's output order
in ``metadata["openai"]["output"]`` (reasoning items whole; message and function-call
items by id, since their text and arguments are in the message itself), and
:func:`build_input` replays it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..._core._errors import InvalidArgument
from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, ToolSpec, Usage
from ...conversation import ContentPart, FilePart, ImagePart, Message, TextPart
from .._common import cached_within, count_of, data_url, is_error_outcome, parse_arguments
from .._output_modes import (
    OUTPUT_TOOL_NAME,
    TOOL_FORMAT,
    OutputFormats,
    output_hint,
    output_tool,
    with_system_text,
)
from ._convert import METADATA_KEY

__all__ = [
    "apply_output_format",
    "build_input",
    "build_text_format",
    "build_tools",
    "normalise_settings",
    "response_from_body",
    "responses_formats",
    "usage_from_body",
]

_ERROR_PREFIX = {
    "error": "Tool error",
    "denied": "Tool call denied",
    "cancelled": "Tool call cancelled",
}

# Fields of a reasoning item the API takes back as input (``status`` is output-only).
_REASONING_INPUT = ("id", "summary", "encrypted_content")


def normalise_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Chat-style names the Responses API spells differently, renamed in one layer.

    ``max_tokens`` (what ``reduce_max_tokens()`` changes) becomes ``max_output_tokens``
    and ``reasoning_effort`` becomes ``reasoning.effort``, unless the layer already sets
    the Responses name.
    """
    out = dict(settings)
    if "input" in out:
        raise InvalidArgument("input= is built from the conversation; remove it")
    if "max_tokens" in out:
        value = out.pop("max_tokens")
        out.setdefault("max_output_tokens", value)
    if "reasoning_effort" in out:
        effort = out.pop("reasoning_effort")
        reasoning = dict(out.get("reasoning") or {})
        reasoning.setdefault("effort", effort)
        out["reasoning"] = reasoning
    return out


# -- request --------------------------------------------------------------------------


def _input_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
    assert isinstance(part, FilePart)
    return {"type": "input_file", "file_id": part.file_id}


def _input_content(message: Message) -> str | list[dict[str, Any]]:
    content = message.content
    if isinstance(content, str):
        return content
    if all(isinstance(part, TextPart) for part in content):
        return message.text
    return [_input_part(part) for part in content]


def _arguments(call: ToolCall) -> str:
    arguments = call.arguments
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _function_call(call: ToolCall, item_id: str | None) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": _arguments(call),
    }
    if item_id:
        wire["id"] = item_id
    return wire


def _assistant_text(text: str, item_id: str | None) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    if item_id:
        wire["id"] = item_id
    return wire


def _reasoning(item: Mapping[str, Any], *, keep_id: bool) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "reasoning"}
    for key in _REASONING_INPUT:
        if item.get(key) is not None and (key != "id" or keep_id):
            wire[key] = item[key]
    wire.setdefault("summary", [])
    if not wire.get("encrypted_content") and item.get("content"):
        wire["content"] = item["content"]  # open-weight servers send reasoning text back
    return wire


def _assistant_items(message: Message, *, keep_ids: bool) -> list[dict[str, Any]]:
    """An assistant turn as input items, in the order the API produced them."""
    items: list[dict[str, Any]] = []
    text = message.text
    calls = {call.id: call for call in message.tool_calls}
    sent: set[str] = set()
    text_sent = not text
    extra = message.metadata.get(METADATA_KEY)
    output = extra.get("output") if isinstance(extra, Mapping) else None
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type")
        item_id = item.get("id") if keep_ids else None
        if kind == "reasoning":
            items.append(_reasoning(item, keep_id=keep_ids))
        elif kind == "message" and not text_sent:
            items.append(_assistant_text(text, item_id))
            text_sent = True
        elif kind == "function_call":
            call = calls.get(str(item.get("call_id")))
            if call is not None and call.id not in sent:
                items.append(_function_call(call, item_id))
                sent.add(call.id)
    if not text_sent:
        items.append(_assistant_text(text, None))
    items.extend(_function_call(call, None) for call in message.tool_calls if call.id not in sent)
    return items


def _tool_output(message: Message) -> str | list[dict[str, Any]]:
    prefix = _ERROR_PREFIX.get(message.outcome or "") if is_error_outcome(message.outcome) else None
    content = _input_content(message)
    if isinstance(content, str):
        return f"{prefix}: {content}" if prefix else content
    if prefix:
        content.insert(0, {"type": "input_text", "text": f"{prefix}:"})
    return content


def build_input(request: GenerateRequest, *, stateless: bool) -> list[dict[str, Any]]:
    """The transcript as Responses ``input`` items, in order.

    ``stateless`` (the request sets ``store=False``): the API keeps nothing, so item ids
    are left out (it would look them up and fail); reasoning travels as its
    ``encrypted_content``.
    """
    items: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        role = message.role
        if role == "assistant":
            items.extend(_assistant_items(message, keep_ids=not stateless))
        elif role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": _tool_output(message),
                }
            )
        elif role == "system":
            items.append({"type": "message", "role": "system", "content": message.text})
        else:
            items.append({"type": "message", "role": "user", "content": _input_content(message)})
    return items


def build_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Tool specs as Responses function tools (``strict`` off: any JSON Schema works)."""
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.input_schema,
            "strict": False,
        }
        for spec in tools
    ]


def build_text_format(schema: dict[str, Any], *, strict: bool) -> dict[str, Any]:
    """``text.format`` asking for JSON that follows ``schema``."""
    return {"type": "json_schema", "name": "output", "schema": schema, "strict": strict}


def responses_formats() -> OutputFormats:
    """The Responses output formats, with a memory of refusals of its own:
    ``json_schema`` (``text.format``, native), ``json_object`` (JSON mode and the schema
    in the system prompt; ``output_mode="prompted"`` starts here), ``prompt`` (the
    schema in the system prompt only)."""
    return OutputFormats(
        native="json_schema",
        fallbacks=("json_object", "prompt"),
        prompted=("json_object", "prompt"),
        fields=("text", "format", "json_schema", "json_object"),
    )


def apply_output_format(
    params: dict[str, Any], request: GenerateRequest, kind: str | None, *, strict: bool
) -> None:
    """Ask for the request's output in the format ``kind`` (in place); a ``text.format``
    in the settings is sent as given."""
    schema = request.output_schema
    if kind is None or schema is None:
        return
    if kind == TOOL_FORMAT:
        others = bool(params.get("tools"))
        params["tools"] = [*params.get("tools", ()), *build_tools((output_tool(request),))]
        if "tool_choice" not in params:
            params["tool_choice"] = (
                "required" if others else {"type": "function", "name": OUTPUT_TOOL_NAME}
            )
        return
    if kind != "json_schema":
        params["input"] = with_system_text(
            params["input"], output_hint(request), item={"type": "message"}
        )
    text = dict(params.get("text") or {})
    if "format" in text or kind == "prompt":
        return
    if kind == "json_object":
        text["format"] = {"type": "json_object"}
    else:
        text["format"] = build_text_format(schema, strict=strict)
    params["text"] = text


# -- response -------------------------------------------------------------------------


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def usage_from_body(usage: Mapping[str, Any] | None) -> Usage | None:
    """Responses usage. ``input_tokens`` includes cached (and cache-written) tokens: they
    are taken out of ``prompt``, as for Chat Completions. Counts that cannot be right are
    clamped (a negative count is 0, the cached tokens at most ``input_tokens``), with a
    ``ProviderUsageWarning``."""
    if not usage:
        return None
    provider = "openai (Responses)"
    prompt = count_of(provider, "usage.input_tokens", _int(usage.get("input_tokens")))
    completion = count_of(provider, "usage.output_tokens", _int(usage.get("output_tokens")))
    input_details = usage.get("input_tokens_details") or {}
    field = "usage.input_tokens_details.cached_tokens"
    cached = count_of(provider, field, _int(input_details.get("cached_tokens")))
    cached = cached_within(provider, field, cached, "usage.input_tokens", prompt)
    field = "usage.input_tokens_details.cache_write_tokens"
    written = count_of(provider, field, _int(input_details.get("cache_write_tokens")))
    written = cached_within(
        provider, field, written, "usage.input_tokens less its cached_tokens", prompt - cached
    )
    reasoning = count_of(
        provider,
        "usage.output_tokens_details.reasoning_tokens",
        _int((usage.get("output_tokens_details") or {}).get("reasoning_tokens")),
    )
    return Usage(
        prompt=prompt - cached - written,
        completion=completion,
        total=prompt + completion,
        cache_read=cached,
        cache_write=written,
        reasoning=reasoning,
    )


def stop_reason_of(body: Mapping[str, Any]) -> str | None:
    """``incomplete_details.reason`` for an incomplete answer, else the ``status``."""
    details = body.get("incomplete_details")
    if isinstance(details, Mapping) and details.get("reason"):
        return str(details["reason"])
    status = body.get("status")
    return str(status) if status is not None else None


def response_from_body(body: Mapping[str, Any]) -> GenerateResponse:
    """A complete Responses body (``output`` items) as a :class:`GenerateResponse`."""
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    order: list[dict[str, Any]] = []
    reasoned = False
    for item in body.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if part.get("type") == "output_text":
                    texts.append(part.get("text") or "")
                elif part.get("type") == "refusal":
                    refusals.append(part.get("refusal") or "")
            order.append({"type": "message", "id": item.get("id")})
        elif kind == "function_call":
            calls.append(
                ToolCall(
                    id=str(item.get("call_id") or item.get("id") or ""),
                    name=str(item.get("name") or ""),
                    arguments=parse_arguments(item.get("arguments") or ""),
                )
            )
            order.append({"type": "function_call", "id": item.get("id"), "call_id": calls[-1].id})
        elif kind == "reasoning":
            reasoned = True
            order.append({k: v for k, v in item.items() if k != "status"})
    extra: dict[str, Any] = {}
    if reasoned:
        extra["output"] = order
    refusal = "".join(refusals)
    if refusal:
        extra["refusal"] = refusal
    return GenerateResponse(
        content="".join(texts),
        tool_calls=tuple(calls),
        usage=usage_from_body(body.get("usage")),
        model=body.get("model"),
        stop_reason=stop_reason_of(body),
        response_id=body.get("id"),
        metadata={METADATA_KEY: extra} if extra else {},
    )
