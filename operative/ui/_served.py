"""The one way an HTTP endpoint runs an agent: :class:`ServedAgent`.

Every endpoint (``/api/turn``, ``/api/chat``, ``/api/agui``) runs the very agent it was
given, with every option it was built with (guardrails, budgets, hooks, ``durable=``,
name, instructions). Per request it adds only what serving needs: the request's
authority, a stop at a parked approval (the person answers in a later request), and for
AG-UI the client's own tools. The server's instructions are always the first message; a
client never sends a system message. A request whose client goes away has its run
cancelled (:func:`stream_response`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import trio

from .._agent import Agent
from .._asgi import Receive, Send
from .._core._errors import InvalidArgument, OperativeError
from .._core._run import ActiveRun
from .._core._types import Authority, PendingApproval, RequestContext, ToolResult
from ..conditions import pending_approval
from ..conversation import Conversation, ConversationHistory, Message
from ..tools import Tool, Toolbox

__all__ = ["SSE_HEADERS", "ClientMessageError", "ServedAgent", "serve_agent", "stream_response"]


class ClientMessageError(OperativeError):
    """A client sent what only the server may say (a system message): the request is
    refused with a 400 that says why."""


@attrs.frozen(kw_only=True)
class ServedAgent:
    """An agent as every endpoint of one app runs it. Build it with :func:`serve_agent`."""

    agent: Agent
    """The user's agent, its toolbox signing with the app's approval secret and state,
    and a parked approval stopping its runs."""
    principal: str = "local-user"
    """Whose authority a request carries. A host with sign-in derives it per request."""
    capabilities: tuple[str, ...] = ()
    """The capabilities a request's authority grants (bound into its approvals)."""
    request_seconds: float = 300.0
    """Each request's own deadline, from when it arrives."""

    @property
    def name(self) -> str:
        return self.agent.name

    @property
    def toolbox(self) -> Toolbox:
        return self.agent.toolbox

    @property
    def instructions(self) -> str:
        return self.agent.instructions or ""

    def request_context(self, conversation_id: str) -> RequestContext:
        """This request's authority, built afresh: never stored between requests."""
        return RequestContext(
            authority=Authority(
                principal_id=self.principal,
                tenant_id="local",
                owner_id=conversation_id,
                capabilities=self.capabilities,
                authorization_revision="1",
            ),
            audience="operative-serve",
            agent_id=self.agent.name,
            run_id=conversation_id,
            deadline=time.time() + self.request_seconds,
        )

    def history(self, messages: Iterable[Message], *, ambient: str = "") -> ConversationHistory:
        """The conversation to run: the server's instructions first, then ``ambient``
        (a system message of the protocol's own, such as AG-UI's context), then the
        client's ``messages``.

        Raises:
            ClientMessageError: a client message has the ``system`` role.
        """
        conversation = Conversation()
        if self.instructions:
            conversation.append_system_message(self.instructions)
        if ambient:
            conversation.append_system_message(ambient)
        client = list(messages)
        refuse_system_messages(client)
        conversation.extend(client)
        return conversation.current

    async def settle(
        self, approval: PendingApproval, *, approved: bool, reason: str, context: RequestContext
    ) -> ToolResult:
        """Run (approved) or deny one parked call, with this request's authority."""
        if approved:
            return await self.toolbox.resume_approval(approval, request_context=context)
        return await self.toolbox.deny_approval(approval, reason=reason, request_context=context)

    def open_run(
        self,
        history: ConversationHistory,
        context: RequestContext,
        *,
        client_tools: Sequence[Tool] = (),
    ) -> AbstractAsyncContextManager[ActiveRun]:
        """The agent's run over ``history`` with this request's authority (and the
        client's own tools, which end the run when called)."""
        agent = self.agent
        changes: dict[str, Any] = {"options": {**agent.options, "request_context": context}}
        if client_tools:
            changes["toolbox"] = agent.toolbox.extended(client_tools)
        return attrs.evolve(agent, **changes).open_run(history)


def refuse_system_messages(messages: Iterable[Message]) -> None:
    """Raise :class:`ClientMessageError` at the first system message."""
    for index, message in enumerate(messages):
        if message.role == "system":
            raise ClientMessageError(
                f"message {index} is a system message: the server holds the instructions; "
                "send user, assistant and tool messages only"
            )


def serve_agent(
    agent: Agent,
    *,
    approval_secret: str | bytes | None = None,
    approval_state: Any = None,
    principal: str = "local-user",
    capabilities: Iterable[str] = (),
    request_seconds: float = 300.0,
) -> ServedAgent:
    """``agent`` as the endpoints run it.

    With ``approval_secret`` or ``approval_state`` its toolbox is rebuilt with them (its
    tools, approval policy, permissions and concurrency kept), so a parked approval
    resumes in any process that holds both. Every run also stops at a parked approval.
    """
    if not isinstance(agent, Agent):
        raise InvalidArgument(
            f"serve an agent made by create_agent(...), got {type(agent).__name__}"
        )
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
    return ServedAgent(
        agent=attrs.evolve(
            agent, toolbox=toolbox, stop_when=(pending_approval(), *agent.stop_when)
        ),
        principal=principal,
        capabilities=tuple(capabilities),
        request_seconds=request_seconds,
    )


SSE_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
)
"""The headers of a server-sent event stream (``x-accel-buffering``: a proxy that
buffers would hold the stream back)."""


async def stream_response(
    send: Send,
    receive: Receive,
    write: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]],
    *,
    headers: Sequence[tuple[bytes, bytes]] = SSE_HEADERS,
) -> None:
    """Answer with a stream: ``await write(emit)`` sends each chunk with ``emit``. The
    work is cancelled when the client goes away (its run with it); the response ends
    when the work does, if the client is still there."""

    async def emit(chunk: bytes) -> None:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})

    await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
    gone = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await write(emit)
        nursery.cancel_scope.cancel()
    if not gone:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
