"""The live ``Conversation`` and its immutable snapshot, ``ConversationHistory``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from .._errors import ConversationError
from .._types import ToolCall, ToolResult
from ._message import ContentPart, Message, new_message_id, tool_result_content

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "Conversation",
    "ConversationHistory",
    "cancelled_result",
    "find_dangling_tool_calls",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
]

HISTORY_SCHEMA_VERSION = 1


class ConversationHistory(msgspec.Struct, frozen=True, kw_only=True):
    """An immutable transcript: safe to share, store and send.

    Snapshots share their ``Message`` objects (which are immutable) instead of copying
    them, so taking one costs a shallow tuple copy, never a deep copy.
    """

    messages: tuple[Message, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    schema_version: int = HISTORY_SCHEMA_VERSION
    """Always written, so a reader can tell which rules the bytes follow."""


class Conversation:
    """A live, mutable transcript that a run appends to.

    ``current`` returns an immutable :class:`ConversationHistory` snapshot; it is cached
    until the next change, so reading it every step is free when nothing changed.
    """

    __slots__ = ("_messages", "_snapshot", "metadata")

    def __init__(
        self, messages: Iterable[Message] = (), *, metadata: dict[str, Any] | None = None
    ) -> None:
        self._messages: list[Message] = list(messages)
        self._snapshot: ConversationHistory | None = None
        self.metadata: dict[str, Any] = dict(metadata) if metadata else {}

    @classmethod
    def from_history(cls, history: ConversationHistory) -> Conversation:
        """A live conversation starting from ``history`` (which is left untouched)."""
        conversation = cls(history.messages, metadata=history.metadata)
        return conversation

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages so far, oldest first (an immutable view)."""
        return self.current.messages

    @property
    def current(self) -> ConversationHistory:
        """An immutable snapshot of the conversation as it is now."""
        snapshot = self._snapshot
        if snapshot is None:
            snapshot = self._snapshot = ConversationHistory(
                messages=tuple(self._messages), metadata=dict(self.metadata)
            )
        return snapshot

    def __len__(self) -> int:
        return len(self._messages)

    def __repr__(self) -> str:
        return f"<Conversation {len(self._messages)} messages>"

    def append(self, message: Message) -> Message:
        """Append a message as it is."""
        self._messages.append(message)
        self._snapshot = None
        return message

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages in order."""
        self._messages.extend(messages)
        self._snapshot = None

    def append_system_message(
        self, content: str | Sequence[ContentPart], *, metadata: dict[str, Any] | None = None
    ) -> Message:
        """Append a system message (instructions)."""
        return self.append(_message("system", content, metadata))

    def append_user_message(
        self, content: str | Sequence[ContentPart], *, metadata: dict[str, Any] | None = None
    ) -> Message:
        """Append a user message (text or multi-modal parts)."""
        return self.append(_message("user", content, metadata))

    def append_assistant_message(
        self,
        content: str | Sequence[ContentPart] = "",
        tool_calls: Sequence[ToolCall] = (),
        *,
        metadata: dict[str, Any] | None = None,
    ) -> Message:
        """Append what the model said, with the tool calls it asked for."""
        message = Message(
            id=new_message_id(),
            role="assistant",
            content=content if isinstance(content, str) else tuple(content),
            tool_calls=tuple(tool_calls),
            metadata=metadata or {},
        )
        return self.append(message)

    def append_tool_result(self, result: ToolResult) -> Message:
        """Append the message that carries one tool call's result."""
        return self.append(tool_result_message(result))

    def replace_messages(self, messages: Iterable[Message]) -> None:
        """Replace the whole transcript (compaction, repair)."""
        self._messages = list(messages)
        self._snapshot = None


def _message(role: Any, content: str | Sequence[ContentPart], metadata: Any) -> Message:
    return Message(
        id=new_message_id(),
        role=role,
        content=content if isinstance(content, str) else tuple(content),
        metadata=metadata or {},
    )


def tool_result_message(result: ToolResult) -> Message:
    """The tool message that carries ``result``."""
    return Message(
        id=new_message_id(),
        role="tool",
        content=tool_result_content(result),
        tool_call_id=result.call_id,
        tool_name=result.tool_name,
        outcome=result.outcome,
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


def _result_counts(messages: Sequence[Message]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for message in messages:
        call_id = message.tool_call_id
        if message.role == "tool" and call_id is not None:
            counts[call_id] = counts.get(call_id, 0) + 1
    return counts


def find_dangling_tool_calls(
    history: ConversationHistory | Conversation | Sequence[Message],
) -> tuple[ToolCall, ...]:
    """Every assistant tool call that has no tool-result message, oldest first."""
    messages = _messages_of(history)
    answered = _result_counts(messages)
    return tuple(
        call
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls
        if call.id not in answered
    )


def _repaired(messages: Sequence[Message], reason: str) -> list[Message] | None:
    answered = _result_counts(messages)
    if all(
        call.id in answered
        for message in messages
        if message.role == "assistant"
        for call in message.tool_calls
    ):
        return None
    out: list[Message] = []
    pending: list[ToolCall] = []

    def flush() -> None:
        out.extend(tool_result_message(cancelled_result(call, reason)) for call in pending)
        pending.clear()

    for message in messages:
        if message.role != "tool":
            flush()
        out.append(message)
        if message.role == "assistant":
            pending.extend(call for call in message.tool_calls if call.id not in answered)
    flush()
    return out


def repair_dangling_tool_calls(
    history: ConversationHistory | Conversation, reason: str = ""
) -> ConversationHistory:
    """Give every dangling tool call a typed ``cancelled`` result.

    Each result is placed right after the tool results that already follow its
    assistant message, where providers expect it. A ``Conversation`` is repaired in
    place; a ``ConversationHistory`` is left untouched. Returns the repaired history.
    """
    repaired = _repaired(_messages_of(history), reason)
    if isinstance(history, Conversation):
        if repaired is not None:
            history.replace_messages(repaired)
        return history.current
    if repaired is None:
        return history
    return ConversationHistory(messages=tuple(repaired), metadata=history.metadata)


def resolve_tool_result(
    history: ConversationHistory, call_id: str, result: ToolResult
) -> ConversationHistory:
    """A new history with ``call_id``'s result replaced, in place, by ``result``.

    Use it after resuming a parked approval: the transcript already holds an
    ``action-required`` result for the call; appending another would leave two.

    Raises:
        ConversationError: no assistant message asked for ``call_id``, the call has no
            result to replace, or it already has more than one.
    """
    if result.call_id != call_id:
        raise ConversationError(
            f"the result is for call {result.call_id!r}, not {call_id!r}: "
            "pass the ToolResult that belongs to this call"
        )
    messages = history.messages
    if not any(call.id == call_id for m in messages for call in m.tool_calls):
        raise ConversationError(
            f"no assistant message in this history asked for tool call {call_id!r}: "
            "check the call id (it comes from the pending approval's call_id)"
        )
    positions = [
        i for i, m in enumerate(messages) if m.role == "tool" and m.tool_call_id == call_id
    ]
    if not positions:
        raise ConversationError(
            f"tool call {call_id!r} has no result to replace: append the result instead"
        )
    if len(positions) > 1:
        raise ConversationError(
            f"tool call {call_id!r} already has {len(positions)} results; repair the "
            "history so each call has exactly one before resolving it"
        )
    index = positions[0]
    replaced = list(messages)
    replaced[index] = tool_result_message(result)
    return ConversationHistory(messages=tuple(replaced), metadata=history.metadata)


def _messages_of(
    history: ConversationHistory | Conversation | Sequence[Message],
) -> Sequence[Message]:
    if isinstance(history, ConversationHistory | Conversation):
        return history.messages
    return history
