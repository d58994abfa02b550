"""The ASGI app that serves chat front ends: the Vercel AI SDK, AG-UI and operative's own.

``POST /api/chat`` speaks the AI SDK's UI message stream (``useChat``), ``POST
/api/agui`` AG-UI, ``POST /api/turn`` operative's own turn protocol (and ``GET /`` its
chat page). Every endpoint is stateless: the client sends the history with each request,
approvals travel signed and are resumed with that request's own authority. A request
whose client goes away has its run cancelled.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from .. import (
    ApprovalError,
    ConversationHistory,
    Toolbox,
    create_agent,
    resolve_tool_result,
    stop_when,
)
from .._agent import Agent
from .._asgi import BadRequestBody, Receive, Scope, Send, read_json_body, respond_json_error
from ..cli._chat_host import HOST_AGENT, ChatHost
from ..conditions import StopCondition
from ._sse import DONE, data_frame
from ._vercel import (
    VERCEL_HEADERS,
    VercelChatRequest,
    VercelEncoder,
    VercelRequestError,
    parse_vercel_request,
    result_chunk,
    vercel_chunks,
)

__all__ = ["UIApp", "asgi_app"]

_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>operative</title>"
    b"<p>This operative agent serves <code>POST /api/chat</code> (Vercel AI SDK), "
    b"<code>POST /api/agui</code> (AG-UI) and <code>POST /api/turn</code>.</p>\n"
)

Emit = Callable[[bytes], Awaitable[None]]


@attrs.frozen(kw_only=True)
class UIApp:
    """The ASGI app: ``await app(scope, receive, send)``; build it with :func:`asgi_app`."""

    host: ChatHost
    """The chat host: model, toolbox, instructions, each request's authority; it serves
    ``/``, ``/api/turn`` and the lifespan."""
    stop_when: tuple[StopCondition, ...] = ()
    """The agent's own stop conditions (a parked approval always stops a run as well)."""
    options: Mapping[str, Any] = attrs.Factory(dict)
    """The agent's run options (hooks, settings, ...), applied to every run."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/api/chat":
            await self._chat(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] == "/api/agui":
            from ._agui import agui_endpoint  # imported per request: its module is optional

            host = self.host
            await agui_endpoint(
                scope,
                receive,
                send,
                generate=host.generate,
                toolbox=host.toolbox,
                instructions=host.instructions,
                request_context=host.request_context,
                maximum_steps=host.maximum_steps,
                stop_when=self.stop_when,
                options=self.options,
            )
        else:
            await self.host(scope, receive, send)

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await respond_json_error(send, 405, "POST a JSON request to /api/chat", allow="POST")
            return
        try:
            body = await read_json_body(scope, receive, what="the request")
            if body is None:
                return
            request = parse_vercel_request(body, instructions=self.host.instructions)
        except BadRequestBody as exc:
            await respond_json_error(send, exc.status, str(exc))
            return
        except VercelRequestError as exc:
            await respond_json_error(send, 400, str(exc))
            return
        await send({"type": "http.response.start", "status": 200, "headers": list(VERCEL_HEADERS)})

        async def emit(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
            await self._stream_chat(request, emit)
            nursery.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _stream_chat(self, request: VercelChatRequest, emit: Emit) -> None:
        """The answer to one chat request: approvals decided first, then the run."""
        start: dict[str, Any] = {"type": "start"}
        if request.continues is None:
            start["messageId"] = f"msg-{uuid.uuid4().hex}"
        await emit(data_frame(start))
        encoder = VercelEncoder()
        try:
            history = await self._decide(request, emit)
            if history is not None and not request.awaiting:
                await self._run(request, history, encoder, emit)
            else:
                encoder.finish_reason = "tool-calls" if history is not None else "error"
        except Exception as exc:  # the stream has begun: say so in the protocol's terms
            await emit(data_frame({"type": "error", "errorText": f"{type(exc).__name__}: {exc}"}))
            encoder.finish_reason = "error"
        await emit(data_frame(encoder.finish()))
        await emit(DONE)

    async def _decide(self, request: VercelChatRequest, emit: Emit) -> ConversationHistory | None:
        """Resume or deny each answered approval; None (after an ``error`` chunk) when one is
        refused."""
        history = request.history
        context = self.host.request_context(request.id)
        toolbox = self.host.toolbox
        for decision in request.decisions:
            approval = decision.approval
            try:
                if decision.approved:
                    result = await toolbox.resume_approval(approval, request_context=context)
                else:
                    result = await toolbox.deny_approval(
                        approval, reason=decision.reason, request_context=context
                    )
            except ApprovalError as exc:
                await emit(
                    data_frame(
                        {
                            "type": "error",
                            "errorText": f"the approval of call {approval.call_id!r} was "
                            f"refused ({exc.reason}): {exc}",
                        }
                    )
                )
                return None
            history = resolve_tool_result(history, approval.call_id, result)
            await emit(data_frame(result_chunk(result)))
        return history

    async def _run(
        self,
        request: VercelChatRequest,
        history: ConversationHistory,
        encoder: VercelEncoder,
        emit: Emit,
    ) -> None:
        host = self.host
        options = dict(self.options)
        options["request_context"] = host.request_context(request.id)
        agent = create_agent(
            generate=host.generate,
            toolbox=host.toolbox,
            stop_when=[stop_when.pending_approval(), *(self.stop_when or _DEFAULT_STOP)],
            maximum_steps=host.maximum_steps,
            name=HOST_AGENT,
            **options,
        )
        async with agent.open_run(history) as run:
            async for chunk in vercel_chunks(run, encoder):
                await emit(data_frame(chunk))


_DEFAULT_STOP = (stop_when.no_tool_calls(),)


async def _cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    """Cancel ``scope`` (the request's run) once the client goes away."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


def asgi_app(
    agent: Agent,
    *,
    approval_secret: str | bytes | None = None,
    approval_state: Any = None,
    principal: str = "local-user",
    request_seconds: float = 300.0,
    page: bytes | None = None,
) -> UIApp:
    """An ASGI app serving ``agent`` to chat front ends (hypercorn serves it, on Trio).

    Endpoints: ``POST /api/chat`` (the Vercel AI SDK's ``useChat``), ``POST /api/agui``
    (AG-UI clients such as CopilotKit), ``POST /api/turn`` (operative's own protocol)
    and ``GET /`` (``page``, or a short note naming the endpoints).

    Approvals are signed by the agent's toolbox. To resume them in any process (several
    workers, a restart), pass ``approval_secret`` (32+ bytes, the same everywhere) and a
    shared durable ``approval_state`` store: the toolbox is then rebuilt with them (its
    tools, approval policy, permissions and concurrency kept). ``principal`` is whose
    authority every request carries; a host with sign-in wraps the app and derives it.
    """
    toolbox = agent.toolbox
    if approval_secret is not None or approval_state is not None:
        toolbox = Toolbox(
            toolbox.tools,
            approval_policy=toolbox.approval_policy,
            approval_secret=approval_secret,
            approval_state=approval_state,
            permissions=toolbox.permissions,
            max_concurrency=toolbox.max_concurrency,
        )
    host = ChatHost(
        generate=agent.generate,
        toolbox=toolbox,
        instructions=agent.instructions or "",
        page=page if page is not None else _PAGE,
        principal=principal,
        request_seconds=request_seconds,
        maximum_steps=agent.maximum_steps,
    )
    return UIApp(host=host, stop_when=tuple(agent.stop_when), options=dict(agent.options))
