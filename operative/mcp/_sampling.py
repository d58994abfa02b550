"""An MCP server's ``sampling/createMessage`` answered by a generate function.

The server's request becomes a :class:`~operative.GenerateRequest`:

- ``systemPrompt`` is a system message, then each message in order (text and images;
  audio and tool blocks are refused: no provider adapter takes them as input);
- ``maxTokens`` is ``settings["max_tokens"]`` and ``temperature``
  ``settings["temperature"]``, the names the provider adapters pass on;
- the server's model preferences (hints, cost/speed/intelligence priorities) and stop
  sequences are in the conversation's ``metadata`` under ``"mcp.model_preferences"`` and
  ``"mcp.stop_sequences"`` (advisory, per the protocol: a generate function that picks a
  model may read them; adapters never send conversation metadata to a provider).

The answer's text goes back with the name of the model that gave it (``"unknown"`` when
the generate function does not say) and its stop reason in MCP's words. When the request
can be tied to a run (see ``_routing``) its usage is charged to that run.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import mcp_types as types

from .._core._model import (
    GenerateFunction,
    GenerateRequest,
    GenerateResponse,
    checked_response,
)
from ..conversation import ConversationHistory, ImagePart, Message, TextPart, new_message_id
from ._routing import Route

__all__ = ["answer_sampling", "generate_request"]

_logger = logging.getLogger("operative.mcp")

_STOP_REASONS = {
    "end_turn": "endTurn",
    "stop": "endTurn",
    "STOP": "endTurn",
    "max_tokens": "maxTokens",
    "length": "maxTokens",
    "MAX_TOKENS": "maxTokens",
    "stop_sequence": "stopSequence",
    "tool_use": "toolUse",
    "tool_calls": "toolUse",
}


class _Refused(ValueError):
    """The request holds something operative cannot send to a model."""


async def answer_sampling(
    generate: GenerateFunction,
    route: Route,
    params: types.CreateMessageRequestParams,
    *,
    label: str,
) -> types.CreateMessageResult | types.ErrorData:
    """Ask ``generate`` and answer the server."""
    context = route.context
    try:
        request = generate_request(
            params, label=label, run_id=context.run_id if context is not None else ""
        )
    except _Refused as exc:
        return types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))
    try:
        response = checked_response(await generate(request))
    except Exception as exc:
        _logger.warning("sampling for the MCP server %s failed: %r", label, exc)
        return types.ErrorData(
            code=types.INTERNAL_ERROR,
            message=f"the client's model failed ({type(exc).__name__}: {exc})",
        )
    charge = getattr(context.execution.run, "charge", None) if context is not None else None
    if charge is not None and response.usage is not None:
        assert context is not None
        charge(response.usage, step=context.step)
    text = response.content if isinstance(response.content, str) else _joined(response)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=text),
        model=response.model or "unknown",
        stop_reason=_STOP_REASONS.get(response.stop_reason or "", response.stop_reason),
    )


def generate_request(
    params: types.CreateMessageRequestParams, *, label: str, run_id: str = ""
) -> GenerateRequest:
    """The server's sampling request as a generate request (see the module's rules)."""
    messages: list[Message] = []
    if params.system_prompt:
        messages.append(Message(id=new_message_id(), role="system", content=params.system_prompt))
    for message in params.messages:
        parts: list[TextPart | ImagePart] = []
        for block in message.content_as_list:
            if isinstance(block, types.TextContent):
                parts.append(TextPart(text=block.text))
            elif isinstance(block, types.ImageContent):
                parts.append(
                    ImagePart(data=base64.b64decode(block.data), media_type=block.mime_type)
                )
            else:
                raise _Refused(
                    f"this client samples text and images only, not {block.type!r} content"
                )
        single = len(parts) == 1 and isinstance(parts[0], TextPart)
        content: Any = parts[0].text if single else tuple(parts)  # type: ignore[union-attr]
        messages.append(Message(id=new_message_id(), role=message.role, content=content))
    settings: dict[str, Any] = {"max_tokens": params.max_tokens}
    if params.temperature is not None:
        settings["temperature"] = params.temperature
    metadata: dict[str, Any] = {"mcp.server": label}
    preferences = params.model_preferences
    if preferences is not None:
        metadata["mcp.model_preferences"] = preferences.model_dump(mode="json", exclude_none=True)
    if params.stop_sequences:
        metadata["mcp.stop_sequences"] = list(params.stop_sequences)
    return GenerateRequest(
        conversation=ConversationHistory(messages=tuple(messages), metadata=metadata),
        settings=settings,
        run_id=run_id,
    )


def _joined(response: GenerateResponse) -> str:
    return "".join(part.text for part in response.content if isinstance(part, TextPart))
