"""operative's own turn protocol, ``POST /api/turn`` (what ``operative serve``'s page speaks).

The host keeps no conversation in memory between requests. The client holds the
history (without the server's instructions, which the host puts first on every turn)
and POSTs it with every turn; a call that needs approval parks, and its signed
``PendingApproval`` goes to the client with the history. A later request carries the
client's decision and is resumed with that request's own ``RequestContext``, by any
toolbox built with the same approval secret and approval-state store.

``POST /api/turn`` takes one JSON object (:class:`TurnRequest`) and answers with
server-sent events: the run's own events (``generate.delta``, ``step.generated``,
``tools.executing``, ``tool-result.validated``, ``run.completed``/``run.error``/
``run.aborted``, as :func:`operative.streaming.encode_sse` writes them) and the host's
(``approval.resolved``, ``approval.pending``, ``turn.error``, then always
``turn.completed`` last, carrying the history for the client to keep).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec

from .._asgi import Receive, Scope, Send, posted_json, respond_json_error
from .._core._errors import ApprovalError, OperativeError
from .._core._types import PendingApproval, RequestContext
from ..conversation import ConversationHistory, Message, new_message_id, resolve_tool_result
from ..streaming import encode_sse
from ._served import ServedAgent, stream_response

__all__ = ["Decision", "TurnRequest", "sse_frame", "turn_endpoint"]

FORWARDED = (
    "generate.delta",
    "step.generated",
    "tools.executing",
    "tool-result.validated",
    "run.completed",
    "run.error",
    "run.aborted",
)
"""The run events a turn streams to the client."""


class Decision(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A person's decision on one parked call, as the client sends it back."""

    approval: PendingApproval
    """The signed approval exactly as the host sent it."""
    approved: bool
    reason: str = ""
    """Why, for a denial: the model reads it."""


class TurnRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of ``POST /api/turn``: a new message, or decisions on parked calls."""

    history: ConversationHistory | None = None
    """The conversation so far, as the last ``turn.completed`` gave it (none: a new one);
    it holds no system message (the server's instructions are not the client's)."""
    conversation_id: str | None = None
    """The id the host gave the conversation (none: a new one)."""
    message: str | None = None
    decisions: tuple[Decision, ...] = ()


class _BadRequest(Exception):
    pass


def sse_frame(event: str, data: Any) -> bytes:
    """One host event (not a run event) as a server-sent event."""
    return b"event: " + event.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


def _parse(body: bytes) -> TurnRequest:
    try:
        request = msgspec.json.decode(body, type=TurnRequest)
    except msgspec.DecodeError as exc:
        raise _BadRequest(f"the body is not a valid turn request: {exc}") from None
    except OperativeError as exc:  # a record's own check, e.g. an unknown schema version
        raise _BadRequest(f"the body is not a valid turn request: {exc}") from None
    if (request.message is None) == (not request.decisions):
        raise _BadRequest(
            "send either 'message' (a new user message) or 'decisions' (approve or deny "
            "parked calls), not both and not neither"
        )
    if request.message is not None and not request.message.strip():
        raise _BadRequest("'message' is empty")
    if request.decisions and (request.history is None or request.conversation_id is None):
        raise _BadRequest(
            "'decisions' need the 'history' and 'conversation_id' the parked turn returned"
        )
    if request.history is not None:
        for index, message in enumerate(request.history.messages):
            if message.role == "system":
                raise _BadRequest(
                    f"history message {index} is a system message: the server holds the "
                    "instructions; send the history as turn.completed gave it (user, "
                    "assistant and tool messages)"
                )
    return request


def _awaiting(history: ConversationHistory) -> set[str]:
    """The call ids whose result is still ``action-required``."""
    return {
        m.tool_call_id
        for m in history.messages
        if m.role == "tool" and m.outcome == "action-required" and m.tool_call_id is not None
    }


def _without_system(history: ConversationHistory) -> ConversationHistory:
    """The history as the client keeps it: the server's own system messages left out."""
    kept = tuple(m for m in history.messages if m.role != "system")
    return msgspec.structs.replace(history, messages=kept)


Emit = Callable[[bytes], Awaitable[None]]


async def turn_endpoint(served: ServedAgent, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one ``POST /api/turn`` with the turn's server-sent events."""
    body = await posted_json(scope, receive, send, what="a turn request")
    if body is None:
        return
    try:
        request = _parse(body)
    except _BadRequest as exc:
        await respond_json_error(send, 400, str(exc))
        return
    await stream_response(send, receive, lambda emit: _stream_turn(served, request, emit))


async def _stream_turn(served: ServedAgent, request: TurnRequest, emit: Emit) -> None:
    conversation_id = request.conversation_id or uuid.uuid4().hex
    context = served.request_context(conversation_id)
    client = list(request.history.messages) if request.history is not None else []
    if request.message is not None:
        client.append(_user_message(request.message))
    history = served.history(client)
    done: dict[str, Any] = {"conversation_id": conversation_id, "pending": []}
    try:
        if request.decisions:
            history, ok = await _decide(served, history, request.decisions, context, emit)
            if not ok or _awaiting(history):
                done.update(history=history, finish_reason=None, content="")
                return
        history, pending, reason, content = await _run(served, history, context, emit)
        done.update(history=history, pending=pending, finish_reason=reason, content=content)
    except Exception as exc:  # a failure after the stream began: say so, keep the history
        await emit(
            sse_frame(
                "turn.error",
                {"error_type": type(exc).__name__, "reason": None, "message": str(exc)},
            )
        )
        done.update(history=history, finish_reason="error", content="")
    finally:
        if "history" in done:
            done["history"] = _without_system(done["history"])
            await emit(sse_frame("turn.completed", done))


def _user_message(text: str) -> Message:
    return Message(id=new_message_id(), role="user", content=text)


async def _decide(
    served: ServedAgent,
    history: ConversationHistory,
    decisions: Iterable[Decision],
    context: RequestContext,
    emit: Emit,
) -> tuple[ConversationHistory, bool]:
    """Resume or deny each decided call; stop at the first rejected one."""
    for decision in decisions:
        approval = decision.approval
        if approval.call_id not in _awaiting(history):
            await emit(
                sse_frame(
                    "turn.error",
                    {
                        "error_type": "UnknownCall",
                        "reason": "unknown-call",
                        "call_id": approval.call_id,
                        "message": f"call {approval.call_id!r} is not waiting for approval "
                        "in this history (already decided, or another conversation's)",
                    },
                )
            )
            return history, False
        try:
            result = await served.settle(
                approval, approved=decision.approved, reason=decision.reason, context=context
            )
        except ApprovalError as exc:
            await emit(
                sse_frame(
                    "turn.error",
                    {
                        "error_type": type(exc).__name__,
                        "reason": exc.reason,
                        "call_id": approval.call_id,
                        "message": str(exc),
                    },
                )
            )
            return history, False
        history = resolve_tool_result(history, approval.call_id, result)
        await emit(sse_frame("approval.resolved", {"call_id": approval.call_id, "result": result}))
    return history, True


async def _run(
    served: ServedAgent, history: ConversationHistory, context: RequestContext, emit: Emit
) -> tuple[ConversationHistory, list[PendingApproval], str, str]:
    pending: list[PendingApproval] = []
    async with served.open_run(history, context) as run:
        async for event in run.events(*FORWARDED):
            await emit(encode_sse(event))
            if event.type == "tool-result.validated":
                approval = event.result.pending_approval
                if approval is not None:
                    pending.append(approval)
                    await emit(sse_frame("approval.pending", approval))
    result = await run.result()
    return result.conversation.current, pending, str(result.finish_reason), result.content
