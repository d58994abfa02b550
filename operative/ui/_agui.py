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

import base64
import binascii
import json
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import Any, Literal

import msgspec
import trio

from .._core._errors import OperativeError
from .._core._events import Event
from .._core._types import PendingApproval, ToolCall, ToolResult, Usage
from ..conversation import Conversation, ConversationHistory, Message
from ..conversation._message import ImagePart, TextPart, new_message_id, tool_result_content
from ..conversation._tool_results import tool_result_message
from ..streaming import SSE_CONTENT_TYPE

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

MAX_BODY = 4 * 1024 * 1024
"""The largest request body accepted (bytes)."""

STREAMED = (
    "step.started",
    "generate.retry",
    "step.completed",
    "step.aborted",
    "generate.delta",
    "step.generated",
    "tool-result.validated",
    "run.completed",
    "run.error",
    "run.aborted",
)
"""The run events :func:`agui_stream` reads."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AguiInputError(OperativeError, ValueError):
    """A request body that is not a ``RunAgentInput`` operative can run.

    The message names what is wrong; send a body shaped as ``@ag-ui/core``'s
    ``RunAgentInputSchema`` (what ``HttpAgent`` sends).
    """


# -- RunAgentInput ------------------------------------------------------------------------


class _Struct(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class _Function(_Struct, frozen=True, kw_only=True):
    name: str
    arguments: str


class _ToolCall(_Struct, frozen=True, kw_only=True):
    id: str
    type: Literal["function"]
    function: _Function


class _Developer(_Struct, frozen=True, kw_only=True, tag="developer", tag_field="role"):
    id: str
    content: str


class _System(_Struct, frozen=True, kw_only=True, tag="system", tag_field="role"):
    id: str
    content: str


class _User(_Struct, frozen=True, kw_only=True, tag="user", tag_field="role"):
    id: str
    content: str | list[dict[str, Any]]


class _Assistant(_Struct, frozen=True, kw_only=True, tag="assistant", tag_field="role"):
    id: str
    content: str | None = None
    tool_calls: list[_ToolCall] = []


class _ToolMessage(_Struct, frozen=True, kw_only=True, tag="tool", tag_field="role"):
    id: str
    content: str | list[dict[str, Any]]
    tool_call_id: str
    error: str | None = None


class _Activity(_Struct, frozen=True, kw_only=True, tag="activity", tag_field="role"):
    id: str


class _Reasoning(_Struct, frozen=True, kw_only=True, tag="reasoning", tag_field="role"):
    id: str


_AnyMessage = _Developer | _System | _User | _Assistant | _ToolMessage | _Activity | _Reasoning


class AguiTool(_Struct, frozen=True, kw_only=True):
    """A tool the client declared: offered to the model, run by the client."""

    name: str
    description: str
    parameters: dict[str, Any] | None = None


class AguiContext(_Struct, frozen=True, kw_only=True):
    """A named piece of ambient information for the run."""

    description: str
    value: str


class AguiResume(_Struct, frozen=True, kw_only=True):
    """The client's answer to one interrupt."""

    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class _RunAgentInput(_Struct, frozen=True, kw_only=True):
    thread_id: str
    run_id: str
    messages: list[_AnyMessage]
    protocol_version: str | None = None
    parent_run_id: str | None = None
    state: Any = None
    tools: list[AguiTool] = []
    context: list[AguiContext] = []
    forwarded_props: Any = None
    resume: list[AguiResume] = []


class AguiDecision(msgspec.Struct, frozen=True, kw_only=True):
    """A ``resume[]`` entry read as a decision on one parked call."""

    approval: PendingApproval
    approved: bool
    reason: str = ""


class AguiInput(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed ``RunAgentInput``: the operative conversation and the run's options."""

    thread_id: str
    run_id: str
    messages: tuple[Message, ...]
    """The thread as operative messages (the client's ids kept; activity and reasoning
    messages dropped). Calls still waiting for an answer have no tool message."""
    tools: tuple[AguiTool, ...] = ()
    context: tuple[AguiContext, ...] = ()
    state: Any = None
    forwarded_props: Any = None
    decisions: tuple[AguiDecision, ...] = ()
    parent_run_id: str | None = None

    def history(self, instructions: str = "") -> ConversationHistory:
        """The conversation to run: ``instructions``, the context and state (as a system
        message the model reads), then the thread."""
        conversation = Conversation()
        if instructions:
            conversation.append_system_message(instructions)
        ambient = [f"{item.description}: {item.value}" for item in self.context]
        if self.state not in (None, {}, []):
            ambient.append(f"The application's shared state: {json.dumps(self.state)}")
        if ambient:
            conversation.append_system_message("\n".join(ambient))
        conversation.extend(self.messages)
        return conversation.current


def interrupt_id(approval: PendingApproval) -> str:
    """The interrupt id that carries ``approval`` to the client and back (base64url JSON)."""
    return base64.urlsafe_b64encode(msgspec.json.encode(approval)).decode().rstrip("=")


def approval_from_interrupt_id(value: str) -> PendingApproval:
    """The signed approval an :func:`interrupt_id` carries (its signature is checked when
    the call is resumed, not here).

    Raises:
        AguiInputError: ``value`` is not an interrupt id this module made.
    """
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        return msgspec.json.decode(raw, type=PendingApproval)
    except (binascii.Error, ValueError, msgspec.DecodeError, OperativeError):
        raise AguiInputError(
            f"resume[].interruptId {value[:40]!r} is not an interrupt this server sent: "
            "answer the interrupts of the last RUN_FINISHED, with their ids unchanged"
        ) from None


def _text(content: str | list[dict[str, Any]], where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise AguiInputError(f"{where}: only text parts are supported here, not {part!r:.80}")
        texts.append(part["text"])
    return "".join(texts)


def _user_content(content: str | list[dict[str, Any]], where: str) -> Any:
    if isinstance(content, str):
        return content
    parts: list[Any] = []
    for index, part in enumerate(content):
        kind = part.get("type")
        here = f"{where}.content[{index}]"
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(TextPart(text=part["text"]))
        elif kind == "image" and isinstance(part.get("source"), dict):
            source = part["source"]
            value = source.get("value")
            if not isinstance(value, str):
                raise AguiInputError(f"{here}.source.value must be a string")
            if source.get("type") == "url":
                parts.append(ImagePart(url=value))
            elif source.get("type") == "data" and isinstance(source.get("mimeType"), str):
                try:
                    data = base64.b64decode(value, validate=True)
                except binascii.Error:
                    raise AguiInputError(f"{here}.source.value is not base64") from None
                parts.append(ImagePart(data=data, media_type=source["mimeType"]))
            else:
                raise AguiInputError(
                    f"{here}: an image's source must be 'url', or 'data' with a mimeType"
                )
        else:
            raise AguiInputError(
                f"{here}: text and image parts are supported, not {kind!r} (send the "
                "document's text as a text part instead)"
            )
    return tuple(parts)


def _arguments(call: _ToolCall, where: str) -> dict[str, Any]:
    if not call.function.arguments.strip():
        return {}
    try:
        value = json.loads(call.function.arguments)
    except ValueError:
        raise AguiInputError(
            f"{where}: toolCalls {call.id!r} has arguments that are not JSON"
        ) from None
    if not isinstance(value, dict):
        raise AguiInputError(f"{where}: toolCalls {call.id!r} arguments must be a JSON object")
    return value


def _decision(entry: AguiResume, index: int) -> AguiDecision:
    approval = approval_from_interrupt_id(entry.interrupt_id)
    if entry.status == "cancelled":
        return AguiDecision(approval=approval, approved=False, reason="the user cancelled it")
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise AguiInputError(
            f'resume[{index}]: a resolved approval needs payload {{"approved": true}} or '
            '{"approved": false, "reason": "..."}; send status "cancelled" to refuse it'
        )
    reason = payload.get("reason", "")
    if not isinstance(reason, str):
        raise AguiInputError(f"resume[{index}].payload.reason must be a string")
    return AguiDecision(approval=approval, approved=payload["approved"], reason=reason)


def parse_agui_input(body: bytes) -> AguiInput:
    """Read a ``RunAgentInput`` body into the conversation and options of a run.

    Raises:
        AguiInputError: the body is not JSON, not shaped as a ``RunAgentInput``, or holds
            something operative cannot run (a tool message for no call, a non-text part
            in an assistant message, a resume entry for no pending call).
    """
    try:
        request = msgspec.json.decode(body, type=_RunAgentInput)
    except (msgspec.DecodeError, OperativeError) as exc:
        raise AguiInputError(f"the body is not a valid AG-UI RunAgentInput: {exc}") from None
    if not request.thread_id or not request.run_id:
        raise AguiInputError("threadId and runId must be non-empty strings")
    names = [tool.name for tool in request.tools]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise AguiInputError(f"tools: each name once; repeated: {', '.join(duplicated)}")
    messages: list[Message] = []
    calls: dict[str, str] = {}  # call id -> tool name, for the calls asked so far
    answered: set[str] = set()
    for index, item in enumerate(request.messages):
        where = f"messages[{index}]"
        if isinstance(item, _System | _Developer):
            messages.append(Message(id=item.id, role="system", content=item.content))
        elif isinstance(item, _User):
            content = _user_content(item.content, where)
            messages.append(Message(id=item.id, role="user", content=content))
        elif isinstance(item, _Assistant):
            tool_calls = []
            for call in item.tool_calls:
                if call.id in calls:
                    raise AguiInputError(f"{where}: tool call id {call.id!r} is used twice")
                calls[call.id] = call.function.name
                tool_calls.append(
                    ToolCall(id=call.id, name=call.function.name, arguments=_arguments(call, where))
                )
            messages.append(
                Message(
                    id=item.id,
                    role="assistant",
                    content=item.content or "",
                    tool_calls=tuple(tool_calls),
                )
            )
        elif isinstance(item, _ToolMessage):
            if item.tool_call_id not in calls:
                raise AguiInputError(
                    f"{where}: the tool message answers call {item.tool_call_id!r}, which "
                    "no earlier assistant message asked for"
                )
            if item.tool_call_id in answered:
                raise AguiInputError(f"{where}: call {item.tool_call_id!r} is answered twice")
            answered.add(item.tool_call_id)
            text = _text(item.content, where)
            messages.append(
                Message(
                    id=item.id,
                    role="tool",
                    content=text or item.error or "",
                    tool_call_id=item.tool_call_id,
                    tool_name=calls[item.tool_call_id],
                    outcome="error" if item.error else "success",
                )
            )
    decisions = tuple(_decision(entry, i) for i, entry in enumerate(request.resume))
    for decision in decisions:
        call_id = decision.approval.call_id
        if call_id not in calls or call_id in answered:
            raise AguiInputError(
                f"resume: the interrupt for call {call_id!r} does not match a call waiting "
                "in these messages (send the thread's messages as the interrupted run left them)"
            )
    return AguiInput(
        thread_id=request.thread_id,
        run_id=request.run_id,
        messages=tuple(messages),
        tools=tuple(request.tools),
        context=tuple(request.context),
        state=request.state,
        forwarded_props=request.forwarded_props,
        decisions=decisions,
        parent_run_id=request.parent_run_id,
    )


def frontend_tools(tools: Iterable[AguiTool]) -> list[Any]:
    """The client's tools as operative tools the model is offered and the server never runs.

    Each one needs approval, so a call parks and the run stops after its step; the
    stream reports it as pending, not as an interrupt.
    """
    from ..tools import Tool

    made = []
    for declared in tools:

        def never_run(arguments: dict[str, Any]) -> None:  # parked before it could run
            raise AssertionError("a client-side tool is never run by the server")

        schema = declared.parameters or {"type": "object", "properties": {}}
        made.append(
            Tool(
                never_run,
                name=declared.name,
                description=declared.description,
                input_type=dict[str, Any],
                input_schema=schema,
                needs_approval=True,
                version="client",
            )
        )
    return made


# -- events -------------------------------------------------------------------------------


def _frame(event: dict[str, Any]) -> bytes:
    return b"data: " + msgspec.json.encode(event) + b"\n\n"


def _usage(usage: Usage) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "inputTokens": usage.prompt,
        "outputTokens": usage.completion,
        "totalTokens": usage.prompt + usage.completion,
    }
    if usage.reasoning:
        entry["reasoningTokens"] = usage.reasoning
    if usage.cache_read:
        entry["cachedInputTokens"] = usage.cache_read
    if usage.cache_write:
        entry["cacheWriteInputTokens"] = usage.cache_write
    return [entry]


def _iso(milliseconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(milliseconds / 1000))


class AguiEncoder:
    """Turns operative's run events into AG-UI events, one run at a time.

    ``client_tools`` names the tools the client runs: their calls end the run pending
    (``RUN_FINISHED``'s ``pendingToolCallIds``) instead of being interrupts.
    """

    def __init__(self, thread_id: str, run_id: str, client_tools: Iterable[str] = ()) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.client_tools = frozenset(client_tools)
        self.interrupts: list[dict[str, Any]] = []
        self.pending: list[str] = []
        self.finished = False
        self._step: str | None = None
        self._message: str | None = None  # this step's assistant message id
        self._text_open = False
        self._text_sent = False
        self._reasoning: str | None = None  # the open reasoning message's id
        self._calls: dict[str, str] = {}  # streamed call id -> tool name
        self._streamed_by_index: dict[int, str] = {}
        self._ended_calls: set[str] = set()

    def run_started(self, input: dict[str, Any] | None = None) -> bytes:
        """``RUN_STARTED``: always the first event."""
        event: dict[str, Any] = {
            "type": "RUN_STARTED",
            "threadId": self.thread_id,
            "runId": self.run_id,
        }
        if input is not None:
            event["input"] = input
        return _frame(event)

    def tool_result(self, result: ToolResult) -> bytes:
        """``TOOL_CALL_RESULT`` for a settled call."""
        return _frame(
            {
                "type": "TOOL_CALL_RESULT",
                "messageId": new_message_id(),
                "toolCallId": result.call_id,
                "content": tool_result_content(result),
                "role": "tool",
            }
        )

    def run_error(self, message: str, code: str | None = None) -> bytes:
        """``RUN_ERROR``: the run failed (open steps, messages and calls are left open,
        as the protocol allows after an error)."""
        self.finished = True
        event: dict[str, Any] = {"type": "RUN_ERROR", "message": message}
        if code:
            event["code"] = code
        return _frame(event)

    def _message_id(self) -> str:
        if self._message is None:
            self._message = new_message_id()
        return self._message

    def _close_reasoning(self) -> list[bytes]:
        if self._reasoning is None:
            return []
        message, self._reasoning = self._reasoning, None
        return [
            _frame({"type": "REASONING_MESSAGE_END", "messageId": message}),
            _frame({"type": "REASONING_END", "messageId": message}),
        ]

    def _close_text(self) -> list[bytes]:
        if not self._text_open:
            return []
        self._text_open = False
        return [_frame({"type": "TEXT_MESSAGE_END", "messageId": self._message_id()})]

    def _start_call(self, call_id: str, name: str) -> bytes:
        self._calls[call_id] = name
        return _frame(
            {
                "type": "TOOL_CALL_START",
                "toolCallId": call_id,
                "toolCallName": name,
                "parentMessageId": self._message_id(),
            }
        )

    def _close_step(self) -> list[bytes]:
        out = self._close_reasoning() + self._close_text()
        for call_id in self._calls:
            if call_id not in self._ended_calls:
                self._ended_calls.add(call_id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call_id}))
        if self._step is not None:
            out.append(_frame({"type": "STEP_FINISHED", "stepName": self._step}))
            self._step = None
        return out

    def encode(self, event: Event) -> list[bytes]:
        """The AG-UI events for one run event (often none, sometimes several)."""
        kind = event.type
        out: list[bytes] = []
        if kind == "step.started":
            out += self._close_step()
            self._step = f"step {event.step}"
            self._message = None
            self._text_sent = False
            self._calls = {}
            self._streamed_by_index = {}
            out.append(_frame({"type": "STEP_STARTED", "stepName": self._step}))
        elif kind == "generate.delta":
            out += self._delta(event)
        elif kind == "generate.retry":
            out += self._retrying()
        elif kind == "step.generated":
            out += self._generated(event)
        elif kind == "tool-result.validated":
            out += self._result(event.result)  # type: ignore[attr-defined]
        elif kind in ("step.completed", "step.aborted"):
            out += self._close_step()
        elif kind == "run.completed":
            out += self._close_step()
            out.append(self._finished(event))
        elif kind == "run.error":
            out.append(self.run_error(event.error, event.error_type))  # type: ignore[attr-defined]
        elif kind == "run.aborted":
            out += self._close_step()
            self.finished = True
            out.append(
                _frame(
                    {
                        "type": "RUN_FINISHED",
                        "threadId": self.thread_id,
                        "runId": self.run_id,
                        "outcome": {"type": "cancelled"},
                        "usage": _usage(event.usage),  # type: ignore[attr-defined]
                    }
                )
            )
        return out

    def _retrying(self) -> list[bytes]:
        """A failed attempt's streamed pieces stay as they are (AG-UI cannot take them
        back): its message is closed, its calls are ended and answered as never run, and
        the retry streams into a new message."""
        out = self._close_reasoning() + self._close_text()
        for call_id, name in self._calls.items():
            if call_id not in self._ended_calls:
                self._ended_calls.add(call_id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call_id}))
                cut = ToolResult(
                    call_id=call_id,
                    tool_name=name,
                    outcome="cancelled",
                    error="The model's answer failed while writing this call; it did not run.",
                )
                out.append(self.tool_result(cut))
        self._message = None
        self._text_sent = False
        self._calls = {}
        self._streamed_by_index = {}
        return out

    def _delta(self, event: Any) -> list[bytes]:
        out: list[bytes] = []
        if event.kind == "thinking" and event.text:
            if self._reasoning is None:
                self._reasoning = new_message_id()
                out.append(_frame({"type": "REASONING_START", "messageId": self._reasoning}))
                out.append(
                    _frame(
                        {
                            "type": "REASONING_MESSAGE_START",
                            "messageId": self._reasoning,
                            "role": "reasoning",
                        }
                    )
                )
            out.append(
                _frame(
                    {
                        "type": "REASONING_MESSAGE_CONTENT",
                        "messageId": self._reasoning,
                        "delta": event.text,
                    }
                )
            )
            return out
        out += self._close_reasoning()
        if event.kind == "text" and event.text:
            if not self._text_open:
                self._text_open = self._text_sent = True
                out.append(
                    _frame(
                        {
                            "type": "TEXT_MESSAGE_START",
                            "messageId": self._message_id(),
                            "role": "assistant",
                        }
                    )
                )
            out.append(
                _frame(
                    {
                        "type": "TEXT_MESSAGE_CONTENT",
                        "messageId": self._message_id(),
                        "delta": event.text,
                    }
                )
            )
        elif event.kind == "tool_arguments":
            call_id = self._streamed_by_index.get(event.index)
            if call_id is None:
                if event.call_id is None or event.tool_name is None:
                    return out  # not yet known: the whole call is sent at step.generated
                call_id = event.call_id
                self._streamed_by_index[event.index] = call_id
                out.append(self._start_call(call_id, event.tool_name))
            if event.text:
                out.append(
                    _frame({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": event.text})
                )
        return out

    def _generated(self, event: Any) -> list[bytes]:
        out = self._close_reasoning()
        if event.content and not self._text_sent:
            message = self._message_id()
            out.append(
                _frame({"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"})
            )
            out.append(
                _frame(
                    {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": event.content}
                )
            )
            self._text_open = True
        self._text_sent = True
        out += self._close_text()
        for call in event.tool_calls:
            if call.id not in self._calls:
                out.append(self._start_call(call.id, call.name))
                arguments = call.arguments
                text = arguments if isinstance(arguments, str) else json.dumps(arguments)
                out.append(_frame({"type": "TOOL_CALL_ARGS", "toolCallId": call.id, "delta": text}))
            if call.id not in self._ended_calls:
                self._ended_calls.add(call.id)
                out.append(_frame({"type": "TOOL_CALL_END", "toolCallId": call.id}))
        return out

    def _result(self, result: ToolResult) -> list[bytes]:
        if result.outcome == "action-required":
            if result.tool_name in self.client_tools:
                self.pending.append(result.call_id)
                return []
            approval = result.pending_approval
            if approval is not None:
                self.interrupts.append(
                    {
                        "id": interrupt_id(approval),
                        "reason": "tool_approval",
                        "message": f"Allow the call to {approval.tool_name!r}?",
                        "toolCallId": approval.call_id,
                        "expiresAt": _iso(approval.expires_at),
                        "responseSchema": {
                            "type": "object",
                            "properties": {
                                "approved": {"type": "boolean"},
                                "reason": {"type": "string"},
                            },
                            "required": ["approved"],
                        },
                        "metadata": {
                            "toolName": approval.tool_name,
                            "arguments": approval.arguments,
                        },
                    }
                )
                return []
        return [self.tool_result(result)]

    def _finished(self, event: Any) -> bytes:
        self.finished = True
        outcome: dict[str, Any]
        if self.interrupts:
            outcome = {"type": "interrupt", "interrupts": self.interrupts}
        else:
            outcome = {"type": "success"}
            if self.pending:
                outcome["pendingToolCallIds"] = list(self.pending)
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.thread_id,
            "runId": self.run_id,
            "outcome": outcome,
            "usage": _usage(event.usage),
        }
        if event.content and not self.interrupts:
            finished["result"] = event.content
        return _frame(finished)


async def agui_stream(
    run: Any,
    *,
    thread_id: str,
    run_id: str,
    client_tools: Iterable[str] = (),
    started: bool = False,
) -> AsyncIterator[bytes]:
    """The AG-UI events of an active run, as SSE bytes: ``RUN_STARTED`` (unless
    ``started``: the caller sent it) through ``RUN_FINISHED`` or ``RUN_ERROR``.

    ``client_tools``: the names of the tools the client runs (see :func:`frontend_tools`).
    """
    encoder = AguiEncoder(thread_id, run_id, client_tools)
    if not started:
        yield encoder.run_started()
    async for event in run.events(*STREAMED):
        for chunk in encoder.encode(event):
            yield chunk
    if not encoder.finished:  # the run ended without a final event this stream saw
        yield encoder.run_error("the run ended without a result", "RunEnded")


# -- the ASGI handler ---------------------------------------------------------------------


async def _respond_json(send: Send, status: int, message: str, allow: str | None = None) -> None:
    body = json.dumps({"error": message}).encode() + b"\n"
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if allow is not None:
        headers.append((b"allow", allow.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
        await _respond_json(send, 405, "POST a RunAgentInput (JSON) to this URL", allow="POST")
        return
    kind = dict(scope.get("headers", ())).get(b"content-type", b"").split(b";")[0].strip()
    if kind != b"application/json":
        await _respond_json(send, 415, "send the RunAgentInput as Content-Type: application/json")
        return
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            await _respond_json(send, 413, f"the body is larger than {MAX_BODY} bytes")
            return
        if not message.get("more_body", False):
            break
    try:
        request = parse_agui_input(bytes(body))
        clash = sorted(tool.name for tool in request.tools if tool.name in toolbox)
        if clash:
            raise AguiInputError(
                f"tools: {', '.join(clash)} is a server tool; give the client's tool another name"
            )
        offered = toolbox.extended(frontend_tools(request.tools))
    except OperativeError as exc:
        await _respond_json(send, 400, str(exc))
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
