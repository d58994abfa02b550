"""The stateless chat host behind ``operative serve``: a small ASGI app.

The host keeps no conversation in memory between requests. The client holds the
history and POSTs it with every turn; a call that needs approval parks, and its signed
``PendingApproval`` goes to the client with the history. A later request carries the
client's decision and is resumed with that request's own ``RequestContext``, by any
toolbox built with the same approval secret and approval-state store.

``POST /api/turn`` takes one JSON object (:class:`TurnRequest`) and answers with
server-sent events: the run's own events (``generate.delta``, ``step.generated``,
``tools.executing``, ``tool-result.validated``, ``run.completed``/``run.error``/
``run.aborted``, as :func:`operative.streaming.encode_sse` writes them) and the host's
(``approval.resolved``, ``approval.pending``, ``turn.error``, then always
``turn.completed`` last, carrying the history for the client to keep). ``GET /``
serves the chat page, ``/favicon.ico`` and ``/favicon.svg`` its icon.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs
import msgspec

from .. import (
    ApprovalError,
    Authority,
    Conversation,
    ConversationHistory,
    PendingApproval,
    RequestContext,
    Toolbox,
    ToolResult,
    create_agent,
    resolve_tool_result,
    stop_when,
)
from .._asgi import (
    BadRequestBody,
    Receive,
    Scope,
    Send,
    read_json_body,
    respond,
    respond_json_error,
)
from .._core._errors import OperativeError
from ..streaming import SSE_CONTENT_TYPE, encode_sse
from ._chat_page import FAVICON_ICO, FAVICON_SVG

__all__ = ["HOST_AGENT", "ChatHost", "Decision", "TurnRequest", "sse_frame"]

HOST_AGENT = "operative-serve"

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

_ICONS = {
    "/favicon.ico": (FAVICON_ICO, "image/x-icon"),
    "/favicon.svg": (FAVICON_SVG, "image/svg+xml"),
}


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
    """The conversation so far, as the last ``turn.completed`` gave it (none: a new one)."""
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
    return request


def _awaiting(history: ConversationHistory) -> set[str]:
    """The call ids whose result is still ``action-required``."""
    return {
        m.tool_call_id
        for m in history.messages
        if m.role == "tool" and m.outcome == "action-required" and m.tool_call_id is not None
    }


@attrs.frozen(kw_only=True)
class ChatHost:
    """The ASGI app: ``await host(scope, receive, send)``.

    ``toolbox`` is built once per process with the approval secret and a shared,
    durable approval-state store; every request builds its own ``RequestContext``.
    """

    generate: Any
    toolbox: Toolbox
    instructions: str
    page: bytes
    principal: str = "local-user"
    """Whose authority a request carries. A host with sign-in derives it per request."""
    request_seconds: float = 300.0
    """Each request's own deadline, from when it arrives."""
    maximum_steps: int = 8

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        if path == "/":
            if method not in ("GET", "HEAD"):
                await respond(send, 405, b"use GET\n", allow="GET, HEAD")
                return
            await respond(send, 200, self.page, content_type="text/html; charset=utf-8")
        elif path in _ICONS:
            body, content_type = _ICONS[path]
            await respond(send, 200, body, content_type=content_type, cache="max-age=86400")
        elif path == "/api/turn":
            if method != "POST":
                await respond_json_error(
                    send, 405, "POST a turn request (JSON) to /api/turn", allow="POST"
                )
                return
            await self._turn(scope, receive, send)
        else:
            await respond_json_error(
                send, 404, f"nothing at {path}: the page is at /, the API at /api/turn"
            )

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    def request_context(self, conversation_id: str) -> RequestContext:
        """This request's authority, built afresh: never stored between requests."""
        return RequestContext(
            authority=Authority(
                principal_id=self.principal,
                tenant_id="local",
                owner_id=conversation_id,
                capabilities=("notes:write",),
                authorization_revision="1",
            ),
            audience="operative-serve",
            agent_id=HOST_AGENT,
            run_id=conversation_id,
            deadline=time.time() + self.request_seconds,
        )

    async def _turn(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body = await read_json_body(scope, receive, what="the turn request")
        except BadRequestBody as exc:
            await respond_json_error(send, exc.status, str(exc))
            return
        if body is None:
            return
        try:
            request = _parse(body)
        except _BadRequest as exc:
            await respond_json_error(send, 400, str(exc))
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", SSE_CONTENT_TYPE.encode()),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        await self._stream_turn(request, emit)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream_turn(
        self, request: TurnRequest, emit: Callable[[bytes], Awaitable[None]]
    ) -> None:
        conversation_id = request.conversation_id or uuid.uuid4().hex
        history = request.history
        context = self.request_context(conversation_id)
        if request.message is not None:
            conversation = Conversation() if history is None else Conversation.from_history(history)
            if history is None:
                conversation.append_system_message(self.instructions)
            conversation.append_user_message(request.message)
            history = conversation.current
        assert history is not None
        done: dict[str, Any] = {"conversation_id": conversation_id, "pending": []}
        try:
            if request.decisions:
                history, ok = await self._decide(history, request.decisions, context, emit)
                if not ok or _awaiting(history):
                    done.update(history=history, finish_reason=None, content="")
                    return
            history, pending, reason, content = await self._run(history, context, emit)
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
                await emit(sse_frame("turn.completed", done))

    async def _decide(
        self,
        history: ConversationHistory,
        decisions: Iterable[Decision],
        context: RequestContext,
        emit: Callable[[bytes], Awaitable[None]],
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
                result: ToolResult
                if decision.approved:
                    result = await self.toolbox.resume_approval(approval, request_context=context)
                else:
                    result = await self.toolbox.deny_approval(
                        approval, reason=decision.reason, request_context=context
                    )
            except ApprovalError as exc:
                await emit(
                    sse_frame(
                        "turn.error",
                        {
                            "error_type": "ApprovalError",
                            "reason": exc.reason,
                            "call_id": approval.call_id,
                            "message": str(exc),
                        },
                    )
                )
                return history, False
            history = resolve_tool_result(history, approval.call_id, result)
            await emit(
                sse_frame("approval.resolved", {"call_id": approval.call_id, "result": result})
            )
        return history, True

    async def _run(
        self,
        history: ConversationHistory,
        context: RequestContext,
        emit: Callable[[bytes], Awaitable[None]],
    ) -> tuple[ConversationHistory, list[PendingApproval], str, str]:
        agent = create_agent(
            generate=self.generate,
            toolbox=self.toolbox,
            request_context=context,
            stop_when=[stop_when.pending_approval(), stop_when.no_tool_calls()],
            maximum_steps=self.maximum_steps,
            name=HOST_AGENT,
        )
        pending: list[PendingApproval] = []
        async with agent.open_run(history) as run:
            async for event in run.events(*FORWARDED):
                await emit(encode_sse(event))
                if event.type == "tool-result.validated":
                    approval = event.result.pending_approval
                    if approval is not None:
                        pending.append(approval)
                        await emit(sse_frame("approval.pending", approval))
        result = await run.result()
        return result.conversation.current, pending, str(result.finish_reason), result.content
