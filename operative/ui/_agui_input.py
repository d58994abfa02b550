"""AG-UI's request: a ``RunAgentInput`` read into an operative conversation and options.

The client sends the whole thread (``messages``), the ``tools`` it runs itself, ``state``,
``context``, and ``resume`` answers to the interrupts of its last run. An interrupt's id
is the signed :class:`~operative.tools.PendingApproval` itself (base64url JSON).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import (
    Iterable,
)
from typing import Any, Literal

import msgspec

from .._core._errors import OperativeError
from .._core._types import PendingApproval, ToolCall
from ..conversation import Conversation, ConversationHistory, Message
from ..conversation._message import ImagePart, TextPart
from ..tools._schema import check_local_refs

__all__ = [
    "AguiInput",
    "AguiInputError",
    "approval_from_interrupt_id",
    "frontend_tools",
    "interrupt_id",
    "parse_agui_input",
]


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

    def ambient(self) -> str:
        """The context and state, as the system message the model reads after the
        server's instructions ("" when there are none)."""
        ambient = [f"{item.description}: {item.value}" for item in self.context]
        if self.state not in (None, {}, []):
            ambient.append(f"The application's shared state: {json.dumps(self.state)}")
        return "\n".join(ambient)

    def history(self, instructions: str = "") -> ConversationHistory:
        """The conversation to run: ``instructions``, the context and state (as a system
        message the model reads), then the thread."""
        conversation = Conversation()
        if instructions:
            conversation.append_system_message(instructions)
        ambient = self.ambient()
        if ambient:
            conversation.append_system_message(ambient)
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
            in an assistant message, a resume entry for no pending call, a tool whose
            parameters schema has a ``$ref`` pointing outside it: it is never fetched).
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
    for index, declared in enumerate(request.tools):
        if declared.parameters is not None:
            check_local_refs(
                declared.parameters,
                where=f"tools[{index}] ({declared.name!r}): parameters",
                error=AguiInputError,
            )
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
