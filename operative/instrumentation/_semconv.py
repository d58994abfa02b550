"""Names and values of the OpenTelemetry GenAI semantic conventions operative emits.

The conventions (v1.41, status *development*) name the spans ``invoke_agent {agent}``,
``chat {model}`` and ``execute_tool {tool}``; everything operative adds beyond them is
under ``operative.*``. Message content is shaped like the conventions' JSON schemas for
``gen_ai.input.messages`` / ``gen_ai.output.messages`` and recorded as JSON strings.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from .._core._model import GenerateRequest, GenerateResponse
from .._core._types import ToolCall, ToolSpec, Usage
from ..conversation import FilePart, ImagePart, Message, TextPart

__all__ = [
    "CONVENTIONS_VERSION",
    "SCHEMA_URL",
    "Conventions",
    "conventions_from_env",
    "input_messages",
    "json_text",
    "output_messages",
    "provider_of",
    "request_attributes",
    "request_model_of",
    "system_instructions",
    "tool_definitions",
    "usage_attributes",
]

CONVENTIONS_VERSION = "1.41.0"
"""The GenAI semantic conventions version operative emits."""
SCHEMA_URL = f"https://opentelemetry.io/schemas/{CONVENTIONS_VERSION}"

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION_ID = "gen_ai.conversation.id"
OUTPUT_TYPE = "gen_ai.output.type"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOKEN_TYPE = "gen_ai.token.type"
ERROR_TYPE = "error.type"

TOKEN_USAGE = "gen_ai.client.token.usage"
OPERATION_DURATION = "gen_ai.client.operation.duration"
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)  # fmt: skip
"""The conventions' advised bucket boundaries for ``gen_ai.client.token.usage``."""
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                    20.48, 40.96, 81.92)  # fmt: skip
"""The conventions' advised bucket boundaries for ``gen_ai.client.operation.duration``."""

RUN_ID = "operative.run.id"
STEP = "operative.step"
ATTEMPT = "operative.attempt"
FINISH_REASON = "operative.finish_reason"
ABORT_REASON = "operative.abort_reason"
STEPS = "operative.steps"
TOOL_OUTCOME = "operative.tool.outcome"
TOOL_CALLS = "operative.tool_calls"
ROUTE_PROVIDER = "operative.route.provider"
PURPOSE = "operative.chat.purpose"
"""Set on a ``chat`` span (and its metrics) made for something other than a step's answer."""
COMPACTION = "compaction"
"""``operative.chat.purpose`` of the call that summarizes older messages for a step."""
RESUMED_AT_STEP = "operative.resumed_at_step"
LINK_KIND = "operative.link"
"""On a recovered run's link to the original run's span: ``resumed_from``."""
"""On a recovered run's span: the step it went on from (earlier ones were replayed)."""

# operative's provider names -> the conventions' well-known values (others pass as they are).
_PROVIDER_NAMES = {"gemini": "gcp.gemini"}
UNKNOWN_PROVIDER = "unknown"

Conventions = Literal["default", "latest"]
OPT_IN_VARIABLE = "OTEL_SEMCONV_STABILITY_OPT_IN"
OPT_IN_LATEST = "gen_ai_latest_experimental"


def conventions_from_env(environ: Mapping[str, str] = os.environ) -> Conventions:
    """Read ``OTEL_SEMCONV_STABILITY_OPT_IN`` the way the GenAI conventions describe it.

    A comma-separated list; ``gen_ai_latest_experimental`` asks for the newest GenAI
    conventions the instrumentation supports. operative's first instrumentation already
    emits v1.41 (it never emitted v1.36 or older, which the transition plan is about),
    so today both answers emit v1.41; the default stays pinned when a later operative
    learns newer conventions, and only the opt-in follows them.
    """
    values = {value.strip() for value in environ.get(OPT_IN_VARIABLE, "").split(",")}
    return "latest" if OPT_IN_LATEST in values else "default"


def provider_of(generate: object) -> str:
    """``gen_ai.provider.name`` for a generate function (its ``provider`` attribute)."""
    provider = getattr(generate, "provider", None)
    if isinstance(provider, str) and provider:
        return _PROVIDER_NAMES.get(provider, provider)
    return UNKNOWN_PROVIDER


def request_model_of(generate: object, settings: Mapping[str, Any]) -> str | None:
    """The model asked for: ``settings["model"]``, else the function's ``model``."""
    model = settings.get("model")
    if isinstance(model, str) and model:
        return model
    model = getattr(generate, "model", None)
    return model if isinstance(model, str) and model else None


# settings key -> (attribute, type it must have)
_SETTINGS: tuple[tuple[str, str, type | tuple[type, ...]], ...] = (
    ("temperature", "gen_ai.request.temperature", (int, float)),
    ("top_p", "gen_ai.request.top_p", (int, float)),
    ("top_k", "gen_ai.request.top_k", (int, float)),
    ("max_tokens", "gen_ai.request.max_tokens", int),
    ("max_output_tokens", "gen_ai.request.max_tokens", int),
    ("max_completion_tokens", "gen_ai.request.max_tokens", int),
    ("frequency_penalty", "gen_ai.request.frequency_penalty", (int, float)),
    ("presence_penalty", "gen_ai.request.presence_penalty", (int, float)),
    ("seed", "gen_ai.request.seed", int),
)


def request_attributes(request: GenerateRequest) -> dict[str, Any]:
    """Request parameters the conventions name, read from the step's model settings."""
    attributes: dict[str, Any] = {}
    settings = request.settings
    if settings:
        for key, name, kind in _SETTINGS:
            value = settings.get(key)
            if isinstance(value, kind) and not isinstance(value, bool):
                attributes[name] = value
        stop = settings.get("stop", settings.get("stop_sequences"))
        if isinstance(stop, str):
            attributes["gen_ai.request.stop_sequences"] = (stop,)
        elif isinstance(stop, list | tuple) and all(isinstance(s, str) for s in stop):
            attributes["gen_ai.request.stop_sequences"] = tuple(stop)
    if request.output_schema is not None:
        attributes[OUTPUT_TYPE] = "json"
    return attributes


def usage_attributes(usage: Usage) -> dict[str, int]:
    """Token counts as the conventions count them.

    operative's ``Usage.prompt`` leaves cached input out; the conventions'
    ``input_tokens`` include it, so cache reads and writes are added back.
    """
    attributes = {
        INPUT_TOKENS: usage.prompt + usage.cache_read + usage.cache_write,
        OUTPUT_TOKENS: usage.completion,
    }
    if usage.cache_read:
        attributes[CACHE_READ_TOKENS] = usage.cache_read
    if usage.cache_write:
        attributes[CACHE_CREATION_TOKENS] = usage.cache_write
    if usage.reasoning:
        attributes[REASONING_TOKENS] = usage.reasoning
    return attributes


def finish_reason_of(response: GenerateResponse) -> str:
    """The provider's stop reason, or what the answer's shape says."""
    if response.stop_reason:
        return response.stop_reason
    return "tool_call" if response.tool_calls else "stop"


# -- content (recorded only when capture is on) -----------------------------------------


def _fallback(value: Any) -> Any:
    return repr(value)


_encoder = msgspec.json.Encoder(enc_hook=_fallback)


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (anything JSON cannot hold becomes its repr)."""
    return _encoder.encode(value).decode()


def _part(part: Any) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "content": part.text}
    if isinstance(part, ImagePart):
        if part.data is not None:
            return {
                "type": "blob",
                "modality": "image",
                "mime_type": part.media_type,
                "content": base64.b64encode(part.data).decode("ascii"),
            }
        return {"type": "uri", "modality": "image", "mime_type": part.media_type, "uri": part.url}
    if isinstance(part, FilePart):
        return {"type": "file", "mime_type": part.media_type, "file_id": part.file_id}
    return {"type": type(part).__name__}


def _call_part(call: ToolCall) -> dict[str, Any]:
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        with contextlib.suppress(msgspec.DecodeError):
            arguments = msgspec.json.decode(arguments)
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": arguments}


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    return [_part(part) for part in content]


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        response: Any = message.content
        if not isinstance(response, str):
            response = [_part(part) for part in response]
        parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": response}]
    else:
        parts = _content_parts(message.content)
        parts.extend(_call_part(call) for call in message.tool_calls)
    return {"role": message.role, "parts": parts}


def input_messages(request: GenerateRequest) -> str:
    """``gen_ai.input.messages``: the transcript sent, system messages left out."""
    messages = request.conversation.messages
    return json_text([_message(m) for m in messages if m.role != "system"])


def system_instructions(request: GenerateRequest) -> str | None:
    """``gen_ai.system_instructions``: the system messages' parts, or None."""
    parts: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        if message.role == "system":
            parts.extend(_content_parts(message.content))
    return json_text(parts) if parts else None


def output_messages(response: GenerateResponse) -> str:
    """``gen_ai.output.messages``: the one answer, with its finish reason."""
    parts = _content_parts(response.content)
    parts.extend(_call_part(call) for call in response.tool_calls)
    message = {"role": "assistant", "parts": parts, "finish_reason": finish_reason_of(response)}
    return json_text([message])


def tool_definitions(tools: tuple[ToolSpec, ...]) -> str:
    """``gen_ai.tool.definitions``: the tools offered, as function definitions."""
    return json_text(
        [
            {
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            }
            for spec in tools
        ]
    )
