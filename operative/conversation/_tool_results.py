"""Tool results in a transcript: recording, resolving and repairing them.

Providers require every assistant tool call to be answered by exactly one tool message.
These functions keep that true: :func:`repair_dangling_tool_calls` answers the calls a
cut-short run left open, and :func:`resolve_tool_result` replaces a placeholder result
(e.g. ``action-required``) instead of adding a second one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from .._core._errors import InvalidArgument, OperativeError
from .._core._types import ToolCall, ToolResult
from ._history import ConversationHistory
from ._message import (
    FilePart,
    ImagePart,
    Message,
    TextPart,
    _encode_json,
    _ids,
    tool_result_content,
)

if TYPE_CHECKING:
    from ._conversation import Conversation

__all__ = [
    "ConversationError",
    "cancelled_result",
    "check_history",
    "find_dangling_tool_calls",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
    "tool_result_message",
]


class ConversationError(OperativeError, ValueError):
    """A transcript operation does not apply to this conversation (e.g. unknown call id)."""


def tool_result_message(result: ToolResult, *, id: str | None = None) -> Message:
    """The tool message that carries ``result`` (with a fresh id unless ``id`` is given)."""
    if id is None:
        ids = _ids  # new_message_id(), inline: one message per tool call
        id = ids._prefix + hex(next(ids._count))
    outcome = result.outcome
    if outcome == "success":  # tool_result_content(result), inline for the common case
        value = result.value
        content = value if value.__class__ is str else _encode_json(value).decode()
    else:
        content = tool_result_content(result)
    return Message(
        id=id,
        role="tool",
        content=content,
        tool_call_id=result.call_id,
        tool_name=result.tool_name,
        outcome=outcome,
    )


def cancelled_result(call: ToolCall, reason: str = "") -> ToolResult:
    """The typed result recorded for a call that never finished."""
    why = f": {reason}" if reason else ""
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome="cancelled",
        error=f"The call to {call.name!r} was cancelled before it finished{why}.",
    )


def find_dangling_tool_calls(
    history: ConversationHistory | Conversation | Sequence[Message],
) -> tuple[ToolCall, ...]:
    """Every assistant tool call that has no tool-result message, oldest first.

    A call id that (wrongly) appears in two assistant messages is listed once.
    """
    messages = _messages_of(history)
    answered = _answered(messages)
    dangling: list[ToolCall] = []
    for message in messages:
        if message.role == "assistant":
            for call in message.tool_calls:
                if call.id not in answered:
                    dangling.append(call)
                    answered.add(call.id)
    return tuple(dangling)


def repair_dangling_tool_calls(
    history: ConversationHistory | Conversation, reason: str = ""
) -> ConversationHistory:
    """Give every dangling tool call a typed ``cancelled`` result.

    Each result is placed right after the tool results that already follow its
    assistant message, where providers expect it; nothing else moves. A
    ``Conversation`` is repaired in place; a ``ConversationHistory`` is left untouched.
    Returns the repaired history (the same object when nothing dangled).
    """
    messages = _messages_of(history)
    repaired = _repaired(messages, reason)
    if isinstance(history, ConversationHistory):
        if repaired is None:
            return history
        return msgspec.structs.replace(history, messages=tuple(repaired))
    if repaired is not None:
        history.replace_messages(repaired)
    return history.current


def resolve_tool_result(
    history: ConversationHistory | Conversation, call_id: str, result: ToolResult
) -> ConversationHistory:
    """A history with ``call_id``'s result replaced, in place, by ``result``.

    Use it after resuming a parked approval: the transcript already holds an
    ``action-required`` result for the call, and appending another would leave two. The
    call is found by id, not position, so this works the same on a history loaded from
    storage. The replacement keeps the old message's id and position. A
    ``ConversationHistory`` is left untouched (a new one is returned); a ``Conversation``
    is changed in place and its new snapshot returned.

    Raises:
        ConversationError: ``result`` is for another call, no assistant message asked
            for ``call_id``, the call has no result to replace, or it has more than one.
        InvalidArgument: ``result`` is not a ``ToolResult``.
    """
    if not isinstance(result, ToolResult):
        raise InvalidArgument(
            f"resolve_tool_result() takes a ToolResult, not {type(result).__name__}"
        )
    if result.call_id != call_id:
        raise ConversationError(
            f"the result is for call {result.call_id!r}, not {call_id!r}: "
            "pass the ToolResult that belongs to this call"
        )
    messages = _messages_of(history)
    if not any(call.id == call_id for m in messages for call in m.tool_calls):
        raise ConversationError(
            f"no assistant message in this history asked for tool call {call_id!r}: "
            "check the call id (a pending approval's call_id names it)"
        )
    positions = [
        i for i, m in enumerate(messages) if m.role == "tool" and m.tool_call_id == call_id
    ]
    if not positions:
        raise ConversationError(
            f"tool call {call_id!r} has no result to replace: append the result instead "
            "(Conversation.append_tool_result)"
        )
    if len(positions) > 1:
        raise ConversationError(
            f"tool call {call_id!r} already has {len(positions)} results; a call must have "
            "exactly one, so remove the extra ones before resolving it"
        )
    index = positions[0]
    replaced = list(messages)
    replaced[index] = tool_result_message(result, id=messages[index].id)
    if isinstance(history, ConversationHistory):
        return msgspec.structs.replace(history, messages=tuple(replaced))
    history.replace_messages(replaced)
    return history.current


_ROLES = frozenset({"system", "user", "assistant", "tool"})
_PARTS = (TextPart, ImagePart, FilePart)


def check_history(messages: Sequence[Message]) -> None:
    """Refuse a transcript no provider accepts and no run can continue, before it is sent.

    What a run starts from must be a transcript a provider accepts: every message a
    ``Message`` with a known role and content of the declared types, every call of an
    assistant message a ``ToolCall`` (str id and name, arguments a mapping or a JSON
    string), and every tool message answering exactly one call asked for earlier in the
    transcript (the nearest one with that id that has no result yet). A call with no
    result is allowed: the run answers it as ``cancelled`` before the model sees it.

    Raises:
        ConversationError: naming the message (by position and id) and what to do.
    """
    unanswered: dict[str, int] = {}
    asked: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise ConversationError(
                f"messages[{index}] is a {type(message).__name__}, not a Message: a "
                "transcript holds Message records"
            )
        role = message.role
        where = f"messages[{index}] (id {message.id!r})"
        if role not in _ROLES:
            raise ConversationError(
                f"{where} has the unknown role {role!r}: a message's role is one of "
                f"{', '.join(sorted(_ROLES))}; fix or remove the message"
            )
        content: object = message.content
        if content.__class__ is not str and not (
            isinstance(content, tuple) and all(isinstance(part, _PARTS) for part in content)
        ):
            raise ConversationError(
                f"{where} has content of type {type(content).__name__}: content is a str "
                "or a tuple of TextPart, ImagePart and FilePart records"
            )
        if role == "assistant":
            for call in message.tool_calls:
                problem = _call_problem(call)
                if problem is not None:
                    raise ConversationError(f"{where}: a tool call {problem}")
                call_id = call.id
                unanswered[call_id] = unanswered.get(call_id, 0) + 1
                asked.add(call_id)
        elif role == "tool":
            call_id = message.tool_call_id  # type: ignore[assignment]
            waiting = unanswered.get(call_id, 0)
            if waiting:
                unanswered[call_id] = waiting - 1
            elif call_id in asked:
                raise ConversationError(
                    f"{where} is a second result for tool call {call_id!r}: a call has "
                    "exactly one result (providers reject more), so remove the extra one "
                    "(resolve_tool_result replaces a result in place)"
                )
            else:
                raise ConversationError(
                    f"{where} is a result for tool call {call_id!r}, which no earlier "
                    "assistant message asked for: remove it, or check its tool_call_id"
                )


def _call_problem(call: object) -> str | None:
    if not isinstance(call, ToolCall):
        return f"is a {type(call).__name__}, not a ToolCall"
    call_id: object = call.id
    name: object = call.name
    arguments: object = call.arguments
    if not isinstance(call_id, str) or not call_id:
        return f"has the id {call_id!r}; a call id is a non-empty str"
    if not isinstance(name, str):
        return f"has the name {name!r}; a tool name is a str"
    if not isinstance(arguments, dict | str):
        return f"{call_id!r} has arguments of type {type(arguments).__name__}"
    return None


def _answered(messages: Sequence[Message]) -> set[str]:
    return {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id is not None}


def _repaired(messages: Sequence[Message], reason: str) -> list[Message] | None:
    answered = _answered(messages)
    if all(
        call.id in answered
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls
    ):
        return None
    out: list[Message] = []
    pending: list[ToolCall] = []
    for message in messages:
        if message.role != "tool" and pending:
            # The run of results after the assistant message ended: answer the rest.
            out.extend(tool_result_message(cancelled_result(c, reason)) for c in pending)
            pending.clear()
        out.append(message)
        if message.role == "assistant":
            pending.extend(c for c in message.tool_calls if c.id not in answered)
            answered.update(c.id for c in message.tool_calls)  # a reused id is answered once
    out.extend(tool_result_message(cancelled_result(c, reason)) for c in pending)
    return out


def _messages_of(
    history: ConversationHistory | Conversation | Sequence[Message],
) -> Sequence[Message]:
    if isinstance(history, ConversationHistory):
        return history.messages
    from ._conversation import Conversation

    if isinstance(history, Conversation):
        return history.messages
    if isinstance(history, Sequence):
        return history
    raise InvalidArgument(
        f"expected a ConversationHistory or a Conversation, not {type(history).__name__}"
    )
