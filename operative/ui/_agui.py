"""AG-UI 1.0 over HTTP and server-sent events, as ``@ag-ui/client``'s ``HttpAgent`` speaks it.

The client POSTs a ``RunAgentInput`` (the whole thread: ``messages``, the ``tools`` it
runs itself, ``state``, ``context``, and ``resume`` answers to interrupts) and reads
``data:`` events, one JSON object each, framed by a blank line. A run opens with
``RUN_STARTED`` and ends with ``RUN_FINISHED`` or ``RUN_ERROR``; nothing else follows
(no ``[DONE]``: the client would fail the run on it).

Stateless like the chat host: the client holds the history. A call that needs approval
ends the run with an interrupt whose id is the signed :class:`~operative.tools.PendingApproval`
itself (base64url JSON), so any process holding the same approval secret resumes it
from the next run's ``resume[]`` entry. A call of a tool the client declared is never run
here: the run ends with it pending, and the client's ``role: "tool"`` message answers it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .._asgi import Receive, Scope, Send, posted_json, respond_json_error
from .._core._errors import ApprovalError, OperativeError
from .._core._types import ToolResult
from ..conversation import Message
from ..conversation._tool_results import tool_result_message
from ._agui_events import STREAMED, AguiEncoder, agui_stream
from ._agui_input import (
    AguiInput,
    AguiInputError,
    approval_from_interrupt_id,
    frontend_tools,
    interrupt_id,
    parse_agui_input,
)
from ._served import ServedAgent, refuse_system_messages, stream_response

__all__ = [
    "AguiEncoder",
    "AguiInput",
    "AguiInputError",
    "agui_endpoint",
    "agui_stream",
    "approval_from_interrupt_id",
    "frontend_tools",
    "interrupt_id",
    "parse_agui_input",
]

# -- the ASGI handler ---------------------------------------------------------------------


async def agui_endpoint(scope: Scope, receive: Receive, send: Send, *, agent: ServedAgent) -> None:
    """Answer one ``POST /api/agui`` (an ASGI ``http`` scope) with an AG-UI event stream.

    ``agent`` (from :func:`serve_agent`) is run as it was defined, with the request's
    authority from the thread id and the client's own tools beside its own; a parked
    call or a call of a client tool ends the run. The run is cancelled when the client
    disconnects. A client system or developer message is refused (400): the server
    holds the instructions.
    """
    body = await posted_json(scope, receive, send, what="a RunAgentInput")
    if body is None:
        return
    try:
        request = parse_agui_input(body)
        refuse_system_messages(request.messages)
        clash = sorted(tool.name for tool in request.tools if tool.name in agent.toolbox)
        if clash:
            raise AguiInputError(
                f"tools: {', '.join(clash)} is a server tool; give the client's tool another name"
            )
        client_tools = frontend_tools(request.tools)
    except OperativeError as exc:
        await respond_json_error(send, 400, str(exc))
        return
    await stream_response(send, receive, lambda emit: _run(agent, request, client_tools, emit))


async def _run(
    agent: ServedAgent,
    request: AguiInput,
    client_tools: Sequence[Any],
    emit: Callable[[bytes], Awaitable[None]],
) -> None:
    encoder = AguiEncoder(request.thread_id, request.run_id, (t.name for t in request.tools))
    await emit(encoder.run_started())
    context = agent.request_context(request.thread_id)
    try:
        messages = list(request.messages)
        for decision in request.decisions:
            result: ToolResult = await agent.settle(
                decision.approval,
                approved=decision.approved,
                reason=decision.reason,
                context=context,
            )
            messages = _answer(messages, result)
            await emit(encoder.tool_result(result))
        history = agent.history(messages, ambient=request.ambient())
        async with agent.open_run(history, context, client_tools=client_tools) as run:
            async for event in run.events(*STREAMED):
                for chunk in encoder.encode(event):
                    await emit(chunk)
        if not encoder.finished:
            await emit(encoder.run_error("the run ended without a result", "RunEnded"))
    except ApprovalError as exc:
        await emit(encoder.run_error(str(exc), f"approval-{exc.reason}"))
    except Exception as exc:  # after the stream began, a failure is the run's error event
        if not encoder.finished:
            await emit(encoder.run_error(str(exc) or type(exc).__name__, type(exc).__name__))


def _answer(messages: list[Message], result: ToolResult) -> list[Message]:
    """``messages`` with ``result`` placed after the tool messages that follow its call."""
    for index, message in enumerate(messages):
        if any(call.id == result.call_id for call in message.tool_calls):
            at = index + 1
            while at < len(messages) and messages[at].role == "tool":
                at += 1
            return [*messages[:at], tool_result_message(result), *messages[at:]]
    raise AguiInputError(f"no assistant message asked for call {result.call_id!r}")
