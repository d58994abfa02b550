"""AG-UI 1.0 over HTTP and server-sent events, as ``@ag-ui/client``'s ``HttpAgent`` speaks it.

The client POSTs a ``RunAgentInput`` (the whole thread: ``messages``, the ``tools`` it
runs itself, ``state``, ``context``, and ``resume`` answers to interrupts) and reads
``data:`` events, one JSON object each, framed by a blank line. A run opens with
``RUN_STARTED`` and ends with ``RUN_FINISHED`` or ``RUN_ERROR``; nothing else follows
(no ``[DONE]``: the client would fail the run on it).

Stateless like the chat host: the client holds the history. A call that needs approval
ends the run with an interrupt whose id is the signed :class:`~operative.PendingApproval`
itself (base64url JSON), so any process holding the same approval secret resumes it
from the next run's ``resume[]`` entry. A call of a tool the client declared is never run
here: the run ends with it pending, and the client's ``role: "tool"`` message answers it.
"""

from __future__ import annotations

from collections.abc import (
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import Any

import msgspec
import trio

from .._asgi import BadRequestBody, Receive, Scope, Send, read_json_body, respond_json_error
from .._core._errors import OperativeError
from .._core._types import ToolResult
from ..conversation import Message
from ..conversation._tool_results import tool_result_message
from ..streaming import SSE_CONTENT_TYPE
from ._agui_events import STREAMED, AguiEncoder, agui_stream
from ._agui_input import (
    AguiInput,
    AguiInputError,
    approval_from_interrupt_id,
    frontend_tools,
    interrupt_id,
    parse_agui_input,
)

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


async def agui_endpoint(
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    generate: Any,
    toolbox: Any,
    instructions: str,
    request_context: Callable[[str], Any],
    maximum_steps: int = 8,
    agent_name: str = "operative-agui",
    stop_when: Sequence[Any] = (),
    options: Mapping[str, Any] | None = None,
) -> None:
    """Answer one ``POST /api/agui`` (an ASGI ``http`` scope) with an AG-UI event stream.

    ``toolbox`` holds the server's tools, built with the approval secret and a shared
    approval-state store (any process with both resumes an interrupt); ``request_context``
    builds this request's authority from the thread id. ``stop_when`` are the agent's own
    stop conditions (default: stop at a plain answer; a parked call always stops the
    run), ``options`` its other run options (hooks, settings). The run is cancelled when
    the client disconnects.
    """
    if scope["method"] != "POST":
        await respond_json_error(send, 405, "POST a RunAgentInput (JSON) to this URL", allow="POST")
        return
    try:
        body = await read_json_body(scope, receive, what="the RunAgentInput")
    except BadRequestBody as exc:
        await respond_json_error(send, exc.status, str(exc))
        return
    if body is None:
        return
    try:
        request = parse_agui_input(body)
        clash = sorted(tool.name for tool in request.tools if tool.name in toolbox)
        if clash:
            raise AguiInputError(
                f"tools: {', '.join(clash)} is a server tool; give the client's tool another name"
            )
        offered = toolbox.extended(frontend_tools(request.tools))
    except OperativeError as exc:
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

    gone = trio.Event()

    async def until_disconnected(cancel: trio.CancelScope) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()
        cancel.cancel()  # the run is cancelled: nobody reads it any more

    async with trio.open_nursery() as nursery:
        nursery.start_soon(until_disconnected, nursery.cancel_scope)
        await _run(
            request,
            offered,
            emit,
            generate=generate,
            instructions=instructions,
            request_context=request_context,
            maximum_steps=maximum_steps,
            agent_name=agent_name,
            stop_when=tuple(stop_when),
            options=dict(options or {}),
        )
        nursery.cancel_scope.cancel()
    if not gone.is_set():
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _run(
    request: AguiInput,
    toolbox: Any,
    emit: Callable[[bytes], Awaitable[None]],
    *,
    generate: Any,
    instructions: str,
    request_context: Callable[[str], Any],
    maximum_steps: int,
    agent_name: str,
    stop_when: tuple[Any, ...],
    options: dict[str, Any],
) -> None:
    from .. import ApprovalError, create_agent
    from .. import stop_when as conditions

    encoder = AguiEncoder(request.thread_id, request.run_id, (t.name for t in request.tools))
    await emit(encoder.run_started())
    context = request_context(request.thread_id)
    options["request_context"] = context
    try:
        messages = list(request.messages)
        for decision in request.decisions:
            approval = decision.approval
            result: ToolResult
            if decision.approved:
                result = await toolbox.resume_approval(approval, request_context=context)
            else:
                result = await toolbox.deny_approval(
                    approval, reason=decision.reason, request_context=context
                )
            messages = _answer(messages, result)
            await emit(encoder.tool_result(result))
        history = msgspec.structs.replace(request, messages=tuple(messages)).history(instructions)
        agent = create_agent(
            generate=generate,
            toolbox=toolbox,
            stop_when=[conditions.pending_approval(), *(stop_when or [conditions.no_tool_calls()])],
            maximum_steps=maximum_steps,
            name=agent_name,
            **options,
        )
        async with agent.open_run(history) as run:
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
