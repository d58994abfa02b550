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

from .._errors import ConversationError, InvalidArgument
from .._types import ToolCall, ToolResult
from ._history import ConversationHistory
from ._message import Message, _encode_json, _ids, tool_result_content

if TYPE_CHECKING:
    from ._conversation import Conversation

__all__ = [
    "cancelled_result",
    "find_dangling_tool_calls",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
    "tool_result_message",
]


def tool_result_message(result: ToolResult, *, id: str | None = None) -> Message:
    """The tool message that carries ``result`` (with a fresh id unless ``id`` is given)."""
    if id is None:
        ids = _ids  # new_message_id(), inline: one message per tool call
        id = f"{ids._prefix}{next(ids._count):08x}"
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
