"""The ASGI app that serves an agent: chat front ends, operative's own page, the run viewer.

One app, one way to run the agent (:class:`~operative.ui._served.ServedAgent`), behind one
guard (:mod:`operative._edge`): ``POST /api/chat`` speaks the AI SDK's UI message stream
(``useChat``), ``POST /api/agui`` AG-UI, ``POST /api/turn`` operative's own turn protocol,
``GET /`` the chat page, and with a run store ``/runs`` and ``/api/runs`` the run viewer.
Every endpoint is stateless: the client sends the history with each request, approvals
travel signed and are resumed with that request's own authority. A request whose client
goes away has its run cancelled.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from .._agent import Agent
from .._asgi import Receive, Scope, Send, posted_json, respond, respond_json_error
from .._core._errors import ApprovalError
from .._edge import EdgePolicy, guarded
from ..conversation import ConversationHistory, resolve_tool_result
from ._served import ServedAgent, serve_agent, stream_response
from ._sse import DONE, data_frame
from ._turn import turn_endpoint
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
Icons = dict[str, tuple[bytes, str]]


@attrs.frozen(kw_only=True)
class UIApp:
    """The ASGI app: ``await app(scope, receive, send)``; build it with :func:`asgi_app`."""

    agent: ServedAgent
    """The agent every endpoint runs."""
    page: bytes = _PAGE
    """What ``GET /`` answers (HTML)."""
    icons: Icons = attrs.Factory(dict)
    """Other static files: path to (body, content type), e.g. the page's favicon."""
    runs: Any = None
    """The run viewer (``/runs``, ``/api/runs``) over a run store, or None."""
    policy: EdgePolicy = attrs.Factory(EdgePolicy)
    """Who may reach the app: allowed hosts and origins, the token, the deadlines."""
    _edge: Any = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_edge", guarded(self._route, self.policy))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._edge(scope, receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/api/chat":
            await self._chat(scope, receive, send)
        elif path == "/api/agui":
            from ._agui import agui_endpoint  # imported per request: its module is optional

            await agui_endpoint(scope, receive, send, agent=self.agent)
        elif path == "/api/turn":
            await turn_endpoint(self.agent, scope, receive, send)
        elif self.runs is not None and self.runs.serves(path):
            await self.runs(scope, receive, send)
        elif path == "/" or path in self.icons:
            if scope["method"] not in ("GET", "HEAD"):
                await respond(send, 405, b"use GET\n", allow="GET, HEAD")
            elif path == "/":
                await respond(send, 200, self.page, content_type="text/html; charset=utf-8")
            else:
                body, content_type = self.icons[path]
                await respond(send, 200, body, content_type=content_type, cache="max-age=86400")
        else:
            await respond_json_error(
                send,
                404,
                f"nothing at {path}: the page is at /, the APIs at /api/chat, "
                "/api/agui and /api/turn",
            )

    async def _chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await posted_json(scope, receive, send, what="a chat request")
        if body is None:
            return
        try:
            request = parse_vercel_request(body, instructions=self.agent.instructions)
        except VercelRequestError as exc:
            await respond_json_error(send, 400, str(exc))
            return
        await stream_response(
            send, receive, lambda emit: self._stream_chat(request, emit), headers=VERCEL_HEADERS
        )

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
        context = self.agent.request_context(request.id)
        for decision in request.decisions:
            approval = decision.approval
            try:
                result = await self.agent.settle(
                    approval, approved=decision.approved, reason=decision.reason, context=context
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
        context = self.agent.request_context(request.id)
        async with self.agent.open_run(history, context) as run:
            async for chunk in vercel_chunks(run, encoder):
                await emit(data_frame(chunk))


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def asgi_app(
    agent: Agent,
    *,
    approval_secret: str | bytes | None = None,
    approval_state: Any = None,
    principal: str = "local-user",
    capabilities: Iterable[str] = (),
    request_seconds: float = 300.0,
    page: bytes | None = None,
    icons: Icons | None = None,
    runs: Any = None,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    token: str | None = None,
    body_seconds: float = 15.0,
    write_seconds: float = 30.0,
) -> UIApp:
    """An ASGI app serving ``agent`` to chat front ends (hypercorn serves it, on Trio).

    Endpoints: ``POST /api/chat`` (the Vercel AI SDK's ``useChat``), ``POST /api/agui``
    (AG-UI clients such as CopilotKit), ``POST /api/turn`` (operative's own protocol),
    ``GET /`` (``page``, or a short note naming the endpoints) and, given ``runs`` (a
    run store), the run viewer at ``/runs`` and ``/api/runs``. Each runs ``agent`` itself,
    with every option it was defined with (guardrails, budgets, hooks, ``durable=``, its
    name and instructions); a parked approval ends the run, and the person's answer comes
    back in a later request.

    Approvals are signed by the agent's toolbox. To resume them in any process (several
    workers, a restart), pass ``approval_secret`` (32+ bytes, the same everywhere) and a
    shared durable ``approval_state`` store. ``principal`` is whose authority every
    request carries, with ``capabilities``; a host with sign-in wraps the app and
    derives it.

    Safe by default: only requests whose ``Host`` is a loopback name and whose
    ``Origin`` (if any) is the app's own are answered. Behind a reverse proxy or on a
    network, name the hosts clients use in ``allowed_hosts`` (``["*"]``: any) and set a
    ``token`` (clients send ``Authorization: Bearer TOKEN``; a browser opens
    ``/?token=TOKEN`` once). ``allowed_origins`` lets front ends on other origins call in.
    A request body must arrive within ``body_seconds``; a client that stops reading for
    ``write_seconds`` has its request and its run cancelled.
    """
    served = serve_agent(
        agent,
        approval_secret=approval_secret,
        approval_state=approval_state,
        principal=principal,
        capabilities=capabilities,
        request_seconds=request_seconds,
    )
    policy = EdgePolicy.build(
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        token=token,
        body_seconds=body_seconds,
        write_seconds=write_seconds,
    )
    return UIApp(
        agent=served,
        page=page if page is not None else _PAGE,
        icons=dict(icons or {}),
        runs=runs,
        policy=policy,
    )
