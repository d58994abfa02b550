"""The Vercel AI SDK's UI message stream protocol (``ai`` 7.x: ``useChat``,
``DefaultChatTransport``).

The client POSTs ``{id, messages, trigger, messageId?}`` where ``messages`` are its
``UIMessage``\\ s (``parts``); :func:`parse_vercel_request` turns them into an operative
history, and the approvals the user answered into decisions. The answer is server-sent
events, one JSON chunk per ``data:`` line (``start``, ``start-step``, ``text-*``,
``reasoning-*``, ``tool-input-*``, ``tool-output-*``, ``tool-approval-request``,
``finish-step``, ``finish``, ``error``), then ``data: [DONE]``; the response carries
:data:`VERCEL_HEADERS` (``x-vercel-ai-ui-message-stream: v1``).

An approval is the SDK's ``tool-approval-request`` chunk: its ``approvalId`` is the
:class:`~operative.tools.PendingApproval`'s id and its ``signature`` the whole signed approval
(base64url JSON), which the client keeps on the tool part and sends back with the user's
answer (state ``approval-responded``). The host resumes or denies it with that request's
own authority, and the answer continues the same assistant message.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import attrs
import msgspec

from .._core._errors import OperativeError
from .._core._events import Event
from .._core._run import ActiveRun
from .._core._types import PendingApproval, ToolCall, ToolResult, Usage
from ..conversation import (
    Conversation,
    ConversationHistory,
    ImagePart,
    TextPart,
    cancelled_result,
)
from ._sse import DONE, data_frame

__all__ = [
    "VERCEL_EVENTS",
    "VERCEL_HEADERS",
    "VercelChatRequest",
    "VercelDecision",
    "VercelEncoder",
    "VercelRequestError",
    "approval_signature",
    "parse_vercel_request",
    "result_chunk",
    "usage_metadata",
    "vercel_ai_stream",
    "vercel_chunks",
]

VERCEL_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-vercel-ai-ui-message-stream", b"v1"),
    (b"x-accel-buffering", b"no"),
)
"""The response headers of a UI message stream (the SDK's ``UI_MESSAGE_STREAM_HEADERS``)."""

VERCEL_EVENTS = (
    "step.started",
    "generate.delta",
    "generate.retry",
    "step.generated",
    "tool-result.validated",
    "step.completed",
    "step.aborted",
    "run.completed",
    "run.error",
    "run.aborted",
)
"""The run events the stream translates."""

_TRIGGERS = ("submit-message", "regenerate-message")
_IGNORED_PARTS = ("step-start", "source-url", "source-document", "custom", "reasoning-file")


class VercelRequestError(OperativeError, ValueError):
    """The body is not a chat request as ``DefaultChatTransport`` sends it.

    The message names what is wrong; answer it with HTTP 400.
    """


@attrs.frozen(kw_only=True)
class VercelDecision:
    """The user's answer to one parked call, taken from an ``approval-responded`` part."""

    approval: PendingApproval
    approved: bool
    reason: str = ""


@attrs.frozen(kw_only=True)
class VercelChatRequest:
    """A parsed ``POST /api/chat`` body."""

    id: str
    """The chat's id (the client's ``Chat.id``): the conversation the approvals belong to."""
    trigger: str
    history: ConversationHistory
    """The conversation so far, instructions first, as the model will read it."""
    decisions: tuple[VercelDecision, ...] = ()
    """Approvals answered in the last (assistant) message, to resume or deny first."""
    continues: str | None = None
    """The id of the assistant message the answer continues (after approvals), else None."""
    awaiting: tuple[str, ...] = ()
    """Call ids in the last message still waiting for the user's answer."""


def approval_signature(approval: PendingApproval) -> str:
    """The signed approval as the ``signature`` string of a ``tool-approval-request``."""
    return base64.urlsafe_b64encode(msgspec.json.encode(approval)).rstrip(b"=").decode()


def _approval_from(signature: object, call_id: str, approval_id: object) -> PendingApproval:
    if not isinstance(signature, str) or not signature:
        raise VercelRequestError(
            f"the approval of call {call_id!r} has no signature: send the tool part back "
            "with the approval exactly as the stream gave it"
        )
    try:
        raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
        approval = msgspec.json.decode(raw, type=PendingApproval)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise VercelRequestError(
            f"the approval signature of call {call_id!r} does not decode: send it back "
            "exactly as the stream gave it"
        ) from None
    if approval.call_id != call_id or approval.approval_id != approval_id:
        raise VercelRequestError(
            f"the approval sent with call {call_id!r} belongs to another call: send each "
            "tool part back with its own approval"
        )
    return approval


def _object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise VercelRequestError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _string(container: Mapping[str, Any], key: str, what: str) -> str:
    value = container.get(key)
    if not isinstance(value, str):
        raise VercelRequestError(f"{what} needs a string {key!r}")
    return value


def parse_vercel_request(body: bytes, *, instructions: str | None = None) -> VercelChatRequest:
    """The chat request in ``body`` (the JSON ``DefaultChatTransport`` POSTs).

    ``instructions`` become the history's system message; the client's own ``system``
    messages are refused (the server holds the instructions).

    Raises:
        VercelRequestError: the body is not such a request; the message says what to fix.
    """
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise VercelRequestError(f"the body is not JSON: {exc}") from None
    request = _object(raw, "the body")
    chat_id = _string(request, "id", "the body")
    trigger = request.get("trigger", "submit-message")
    if trigger not in _TRIGGERS:
        raise VercelRequestError(
            f"trigger {trigger!r} is not served: send 'submit-message' or "
            "'regenerate-message' (stream resumption is not supported)"
        )
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise VercelRequestError("the body needs 'messages': a non-empty list of UI messages")
    conversation = Conversation()
    if instructions:
        conversation.append_system_message(instructions)
    decisions: list[VercelDecision] = []
    awaiting: list[str] = []
    last = len(messages) - 1
    for index, item in enumerate(messages):
        message = _object(item, f"messages[{index}]")
        role = message.get("role")
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise VercelRequestError(f"messages[{index}] needs 'parts': a list")
        where = f"messages[{index}]"
        if role == "user":
            _user(conversation, parts, where)
        elif role == "assistant":
            _assistant(
                conversation,
                parts,
                where,
                decisions if index == last else None,
                awaiting if index == last else None,
            )
        elif role == "system":
            raise VercelRequestError(
                f"{where} is a system message: the server holds the instructions; send "
                "user and assistant messages only"
            )
        else:
            raise VercelRequestError(f"{where} has role {role!r}: use 'user' or 'assistant'")
    final = _object(messages[last], f"messages[{last}]")
    continues: str | None = None
    if final.get("role") == "assistant":
        if not decisions:
            raise VercelRequestError(
                "the last message is the assistant's and answers no approval: end with a "
                "user message, or answer a tool-approval-request (addToolApprovalResponse)"
            )
        continues = _string(final, "id", f"messages[{last}]")
    return VercelChatRequest(
        id=chat_id,
        trigger=trigger,
        history=conversation.current,
        decisions=tuple(decisions),
        continues=continues,
        awaiting=tuple(awaiting),
    )


def _user(conversation: Conversation, parts: list[Any], where: str) -> None:
    content: list[TextPart | ImagePart] = []
    for number, item in enumerate(parts):
        part = _object(item, f"{where}.parts[{number}]")
        kind = part.get("type")
        if kind == "text":
            content.append(TextPart(text=_string(part, "text", f"{where}.parts[{number}]")))
        elif kind == "file":
            media = _string(part, "mediaType", f"{where}.parts[{number}]")
            if not media.startswith("image/"):
                raise VercelRequestError(
                    f"{where}.parts[{number}] is a {media} file: only images are read; send "
                    "other documents as text"
                )
            url = _string(part, "url", f"{where}.parts[{number}]")
            content.append(ImagePart(url=url, media_type=media))
        elif not isinstance(kind, str):
            raise VercelRequestError(f"{where}.parts[{number}] needs a string 'type'")
        elif not (kind.startswith("data-") or kind in _IGNORED_PARTS):
            raise VercelRequestError(
                f"{where}.parts[{number}] is a {kind!r} part, which a user message cannot hold"
            )
    if not any(isinstance(p, ImagePart) or p.text.strip() for p in content):
        raise VercelRequestError(f"{where} is empty: a user message needs text or an image")
    if all(isinstance(p, TextPart) for p in content):
        conversation.append_user_message("\n".join(p.text for p in content))  # type: ignore[union-attr]
    else:
        conversation.append_user_message(content)


def _assistant(
    conversation: Conversation,
    parts: list[Any],
    where: str,
    decisions: list[VercelDecision] | None,
    awaiting: list[str] | None,
) -> None:
    """One UI assistant message: one operative assistant message (and results) per step."""
    text: list[str] = []
    calls: list[ToolCall] = []
    results: list[ToolResult] = []

    def flush() -> None:
        content = "".join(text)
        if content or calls:
            conversation.append_assistant_message(content, calls)
            for result in results:
                conversation.append_tool_result(result)
        text.clear()
        calls.clear()
        results.clear()

    for number, item in enumerate(parts):
        at = f"{where}.parts[{number}]"
        part = _object(item, at)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise VercelRequestError(f"{at} needs a string 'type'")
        if kind == "step-start":
            flush()
        elif kind == "text":
            text.append(_string(part, "text", at))
        elif kind == "dynamic-tool" or kind.startswith("tool-"):
            name = _string(part, "toolName", at) if kind == "dynamic-tool" else kind[5:]
            call, result = _tool_part(part, name, at, decisions, awaiting)
            calls.append(call)
            results.append(result)
        # reasoning, files, sources and data parts are the model's or the app's, not read back
    flush()


def _tool_part(
    part: Mapping[str, Any],
    name: str,
    at: str,
    decisions: list[VercelDecision] | None,
    awaiting: list[str] | None,
) -> tuple[ToolCall, ToolResult]:
    call_id = _string(part, "toolCallId", at)
    state = _string(part, "state", at)
    given = part.get("input")
    if given is None:
        arguments: dict[str, Any] = {}
    elif isinstance(given, dict):
        arguments = given
    else:
        raise VercelRequestError(f"{at}: the input of tool call {call_id!r} must be an object")
    call = ToolCall(id=call_id, name=name, arguments=arguments)
    approval = part.get("approval")
    if state == "output-available":
        return call, ToolResult(
            call_id=call_id, tool_name=name, outcome="success", value=part.get("output")
        )
    if state == "output-error":
        error = part.get("errorText")
        return call, ToolResult(
            call_id=call_id,
            tool_name=name,
            outcome="error",
            error=error if isinstance(error, str) else "the tool failed",
        )
    if state == "output-denied":
        reason = approval.get("reason") if isinstance(approval, dict) else None
        why = f": {reason}" if isinstance(reason, str) and reason else "."
        return call, ToolResult(
            call_id=call_id,
            tool_name=name,
            outcome="denied",
            error=f"The user denied the call to {name!r}{why}",
        )
    if state in ("approval-requested", "approval-responded"):
        found = _object(approval, f"{at}.approval")
        pending = _approval_from(found.get("signature"), call_id, found.get("id"))
        if state == "approval-responded" and decisions is not None:
            approved = found.get("approved")
            if not isinstance(approved, bool):
                raise VercelRequestError(f"{at}.approval needs a boolean 'approved'")
            reason = found.get("reason")
            decisions.append(
                VercelDecision(
                    approval=pending,
                    approved=approved,
                    reason=reason if isinstance(reason, str) else "",
                )
            )
        elif awaiting is not None:
            awaiting.append(call_id)
        return call, ToolResult(
            call_id=call_id,
            tool_name=name,
            outcome="action-required",
            error=f"The call to {name!r} is waiting for the user's approval.",
            pending_approval=pending,
        )
    if state in ("input-streaming", "input-available"):
        return call, cancelled_result(call, "no result came back")
    raise VercelRequestError(f"{at} has an unknown tool state {state!r}")


# -- the stream ---------------------------------------------------------------------


def _finish_reason(event: Event, pending: bool) -> str:
    if event.type == "run.error":
        return "error"
    if event.type == "run.aborted":
        return "interrupted"
    reason = str(getattr(event, "finish_reason", ""))
    if reason == "stop-condition":
        return "tool-calls" if pending else "stop"
    return "other"


def usage_metadata(usage: Usage) -> dict[str, Any]:
    """A run's usage as the ``finish`` chunk's ``messageMetadata``."""
    return {
        "usage": {
            "inputTokens": usage.prompt,
            "outputTokens": usage.completion,
            "totalTokens": usage.total,
            "cachedInputTokens": usage.cache_read,
            "reasoningTokens": usage.reasoning,
            "estimated": usage.estimated,
        }
    }


def result_chunk(result: ToolResult) -> dict[str, Any]:
    """The chunk that settles a tool part: output, error, denial or approval request."""
    if result.outcome == "success":
        return {
            "type": "tool-output-available",
            "toolCallId": result.call_id,
            "output": result.value,
        }
    if result.outcome == "denied":
        return {"type": "tool-output-denied", "toolCallId": result.call_id}
    approval = result.pending_approval
    if result.outcome == "action-required" and approval is not None:
        return {
            "type": "tool-approval-request",
            "approvalId": approval.approval_id,
            "toolCallId": result.call_id,
            "signature": approval_signature(approval),
        }
    return {
        "type": "tool-output-error",
        "toolCallId": result.call_id,
        "errorText": result.error or f"the call to {result.tool_name!r} did not succeed",
    }


@attrs.define
class VercelEncoder:
    """Turns one run's events into UI message chunks, keeping the open parts' state."""

    _ids: Any = attrs.field(factory=itertools.count)
    _text: str | None = None
    _reasoning: str | None = None
    _streamed: bool = False
    """Whether this step's text came as deltas (else ``step.generated`` carries it)."""
    _step_parts: bool = False
    _inputs: set[str] = attrs.field(factory=set)
    pending: bool = False
    """Whether a call of the run waits for approval."""
    usage: Usage = attrs.field(factory=Usage)
    finish_reason: str = "stop"
    ended: bool = False

    def _close(self) -> list[dict[str, Any]]:
        out = []
        if self._text is not None:
            out.append({"type": "text-end", "id": self._text})
            self._text = None
        if self._reasoning is not None:
            out.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None
        return out

    def chunks(self, event: Event) -> list[dict[str, Any]]:
        """The chunks ``event`` stands for (none for events the protocol has no part for)."""
        kind = event.type
        if kind == "step.started":
            self._streamed = self._step_parts = False
            self._inputs = set()
            return [{"type": "start-step"}]
        if kind == "generate.delta":
            return self._delta(event)
        if kind == "generate.retry":
            out = self._close()
            if self._step_parts:  # the failed attempt's pieces go; the retry streams anew
                out.append({"type": "reset-step"})
            self._streamed = self._step_parts = False
            self._inputs = set()
            return out
        if kind == "step.generated":
            out = self._close()
            content: str = getattr(event, "content", "")
            if content and not self._streamed:
                part = f"text-{next(self._ids)}"
                out += [
                    {"type": "text-start", "id": part},
                    {"type": "text-delta", "id": part, "delta": content},
                    {"type": "text-end", "id": part},
                ]
            for call in getattr(event, "tool_calls", ()):
                if call.id not in self._inputs:
                    out.append(
                        {"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name}
                    )
                    self._inputs.add(call.id)
                arguments = call.arguments
                if isinstance(arguments, str):
                    with contextlib.suppress(msgspec.DecodeError):
                        arguments = msgspec.json.decode(arguments)
                out.append(
                    {
                        "type": "tool-input-available",
                        "toolCallId": call.id,
                        "toolName": call.name,
                        "input": arguments,
                    }
                )
            return out
        if kind == "tool-result.validated":
            result: ToolResult = event.result  # type: ignore[attr-defined]
            if result.outcome == "action-required":
                self.pending = True
            return [result_chunk(result)]
        if kind in ("step.completed", "step.aborted"):
            return [*self._close(), {"type": "finish-step"}]
        if kind in ("run.completed", "run.error", "run.aborted"):
            self.ended = True
            self.usage = getattr(event, "usage", Usage())
            self.finish_reason = _finish_reason(event, self.pending)
            out = self._close()
            if kind == "run.error":
                out.append({"type": "error", "errorText": getattr(event, "error", "")})
            elif kind == "run.aborted":
                out.append({"type": "abort", "reason": getattr(event, "reason", "")})
            return out
        return []

    def _delta(self, event: Event) -> list[dict[str, Any]]:
        piece: str = getattr(event, "text", "")
        delta_kind = getattr(event, "kind", "text")
        out: list[dict[str, Any]] = []
        if delta_kind == "text":
            if self._reasoning is not None:
                out += self._close()
            if self._text is None:
                self._text = f"text-{next(self._ids)}"
                out.append({"type": "text-start", "id": self._text})
            self._streamed = self._step_parts = True
            out.append({"type": "text-delta", "id": self._text, "delta": piece})
        elif delta_kind == "thinking":
            if self._text is not None:
                out += self._close()
            if self._reasoning is None:
                self._reasoning = f"reasoning-{next(self._ids)}"
                out.append({"type": "reasoning-start", "id": self._reasoning})
            self._step_parts = True
            out.append({"type": "reasoning-delta", "id": self._reasoning, "delta": piece})
        elif delta_kind == "tool_arguments":
            call_id = getattr(event, "call_id", None)
            if call_id is None:
                return []  # the call is announced whole at step.generated
            out += self._close()
            if call_id not in self._inputs:
                self._inputs.add(call_id)
                out.append(
                    {
                        "type": "tool-input-start",
                        "toolCallId": call_id,
                        "toolName": getattr(event, "tool_name", None) or "",
                    }
                )
            self._step_parts = True
            out.append({"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": piece})
        return out

    def finish(self) -> dict[str, Any]:
        """The ``finish`` chunk: why the run stopped, and its usage as message metadata."""
        return {
            "type": "finish",
            "finishReason": self.finish_reason,
            "messageMetadata": usage_metadata(self.usage),
        }


async def vercel_chunks(
    run: ActiveRun, encoder: VercelEncoder | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The run's chunks between ``start`` and ``finish`` (read through ``encoder``)."""
    encoder = encoder if encoder is not None else VercelEncoder()
    async with run.events(*VERCEL_EVENTS) as events:
        async for event in events:
            for chunk in encoder.chunks(event):
                yield chunk


async def vercel_ai_stream(
    run: ActiveRun,
    *,
    message_id: str | None = None,
    leading: Iterable[dict[str, Any]] = (),
) -> AsyncIterator[bytes]:
    """The whole UI message stream of ``run`` as SSE bytes: ``start``, ``leading`` chunks
    (e.g. the results of approvals resolved before the run), the run's chunks,
    ``finish`` and ``data: [DONE]``. Send it with :data:`VERCEL_HEADERS`.

    ``message_id`` names the new assistant message; leave it None when the answer
    continues the client's last assistant message.
    """
    start: dict[str, Any] = {"type": "start"}
    if message_id is not None:
        start["messageId"] = message_id
    yield data_frame(start)
    for chunk in leading:
        yield data_frame(chunk)
    encoder = VercelEncoder()
    async for chunk in vercel_chunks(run, encoder):
        yield data_frame(chunk)
    yield data_frame(encoder.finish())
    yield DONE


def sse_chunks(chunks: Sequence[dict[str, Any]]) -> bytes:
    """Several chunks as SSE bytes."""
    return b"".join(data_frame(chunk) for chunk in chunks)
