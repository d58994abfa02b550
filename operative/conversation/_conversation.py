"""The live ``Conversation``: a mutable transcript with a cached immutable snapshot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

from .._core._errors import InvalidArgument
from .._core._types import NO_METADATA, ToolCall, ToolResult, own_metadata
from ._history import HISTORY_SCHEMA_VERSION, ConversationHistory
from ._message import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    Role,
    TextPart,
    new_message_id,
)
from ._tool_results import (
    cancelled_result,
    find_dangling_tool_calls,
    repair_dangling_tool_calls,
    resolve_tool_result,
    tool_result_message,
)

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "Conversation",
    "ConversationHistory",
    "cancelled_result",
    "find_dangling_tool_calls",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
    "tool_result_message",
]

_EMPTY: Mapping[str, Any] = {}


class Conversation:
    """A live, mutable transcript that a run appends to.

    ``current`` returns an immutable :class:`ConversationHistory` snapshot. It is cached
    until the next change (every mutation goes through a method of this class, metadata
    included), so reading it every step costs nothing when nothing changed; after a
    change it costs one shallow copy of the message tuple and of the metadata dict, as
    messages are immutable and shared, never copied.
    """

    __slots__ = ("_messages", "_metadata", "_metadata_copy", "_snapshot")

    def __init__(
        self, messages: Iterable[Message] = (), *, metadata: Mapping[str, Any] | None = None
    ) -> None:
        self._messages: list[Message] = (
            [_checked_message(m) for m in messages] if messages != () else []
        )
        # The shared empty dict until a key is set (``update_metadata`` makes one).
        self._metadata: dict[str, Any] = dict(metadata) if metadata else NO_METADATA
        self._snapshot: ConversationHistory | None = None
        self._metadata_copy: dict[str, Any] | None = None
        """The metadata the last snapshot holds, shared by the next ones until it changes."""

    @classmethod
    def from_history(cls, history: ConversationHistory) -> Conversation:
        """A live conversation starting from ``history`` (which is left untouched)."""
        if not isinstance(history, ConversationHistory):
            raise InvalidArgument(
                f"Conversation.from_history() takes a ConversationHistory, not "
                f"{type(history).__name__}; to copy a live Conversation use "
                "Conversation.from_history(conversation.current)"
            )
        conversation = cls(metadata=history.metadata)  # copied: the caller keeps theirs
        conversation._messages = list(history.messages)
        return conversation

    @property
    def current(self) -> ConversationHistory:
        """An immutable snapshot of the conversation as it is now (cached until a change)."""
        snapshot = self._snapshot
        if snapshot is None:
            metadata = self._metadata_copy
            if metadata is None:
                metadata = self._metadata_copy = own_metadata(self._metadata)
            snapshot = self._snapshot = ConversationHistory(
                messages=tuple(self._messages), metadata=metadata
            )
        return snapshot

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages so far, oldest first (an immutable view)."""
        return self.current.messages

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Caller-defined data about the conversation, as a read-only view.

        Change it with :meth:`update_metadata`, :meth:`remove_metadata` or by assigning a
        new mapping, so the cached snapshot never goes stale.
        """
        return MappingProxyType(self._metadata)

    @metadata.setter
    def metadata(self, value: Mapping[str, Any]) -> None:
        self._metadata = dict(value)  # its own, even empty: update_metadata fills it
        self._snapshot = self._metadata_copy = None

    def update_metadata(self, values: Mapping[str, Any] = _EMPTY, /, **more: Any) -> None:
        """Set metadata keys (like ``dict.update``)."""
        if self._metadata is NO_METADATA:
            self._metadata = {}
        self._metadata.update(values, **more)
        self._snapshot = self._metadata_copy = None

    def remove_metadata(self, *keys: str) -> None:
        """Remove metadata keys; keys that are not set are ignored."""
        for key in keys:
            if key in self._metadata:
                del self._metadata[key]
                self._snapshot = self._metadata_copy = None

    def __len__(self) -> int:
        return len(self._messages)

    def __repr__(self) -> str:
        return f"<Conversation {len(self._messages)} messages>"

    def append(self, message: Message) -> Message:
        """Append a message as it is."""
        self._messages.append(_checked_message(message))
        self._snapshot = None
        return message

    def extend(self, messages: Iterable[Message]) -> None:
        """Append several messages in order."""
        self._messages.extend(_checked_message(m) for m in messages)
        self._snapshot = None

    def _extend_built(self, messages: list[Message]) -> None:
        """Append messages the run loop built itself (``Message`` records by construction)."""
        self._messages.extend(messages)
        self._snapshot = None

    def _append_built(self, message: Message) -> None:
        """Append a message the run loop built itself (a ``Message`` by construction)."""
        self._messages.append(message)
        self._snapshot = None

    def append_system_message(
        self, content: str | Sequence[ContentPart], *, metadata: Mapping[str, Any] | None = None
    ) -> Message:
        """Append a system message (instructions)."""
        return self.append(_new_message("system", content, metadata))

    def append_user_message(
        self, content: str | Sequence[ContentPart], *, metadata: Mapping[str, Any] | None = None
    ) -> Message:
        """Append a user message (text or multi-modal parts)."""
        return self.append(_new_message("user", content, metadata))

    def append_assistant_message(
        self,
        content: str | Sequence[ContentPart] = "",
        tool_calls: Sequence[ToolCall] = (),
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Message:
        """Append what the model said, with the tool calls it asked for."""
        calls = tuple(tool_calls)
        for call in calls:
            if not isinstance(call, ToolCall):
                raise InvalidArgument(
                    f"tool_calls must hold ToolCall records, not {type(call).__name__}"
                )
        return self.append(_new_message("assistant", content, metadata, calls))

    def append_tool_result(self, result: ToolResult) -> Message:
        """Append the tool message that carries one tool call's result."""
        if not isinstance(result, ToolResult):
            raise InvalidArgument(
                f"append_tool_result() takes a ToolResult, not {type(result).__name__}"
            )
        return self.append(tool_result_message(result))

    def replace_messages(self, messages: Iterable[Message]) -> None:
        """Replace the whole transcript (compaction, repair)."""
        self._messages = [_checked_message(m) for m in messages]
        self._snapshot = None


_PART_TYPES = (TextPart, ImagePart, FilePart)


def _new_message(
    role: Role,
    content: str | Sequence[ContentPart],
    metadata: Mapping[str, Any] | None,
    tool_calls: tuple[ToolCall, ...] = (),
) -> Message:
    parts: str | tuple[ContentPart, ...]
    if isinstance(content, str):
        parts = content
    elif isinstance(content, Sequence):
        parts = tuple(cast("Sequence[ContentPart]", content))
        for part in parts:
            if not isinstance(part, _PART_TYPES):
                raise InvalidArgument(
                    "multi-modal content holds TextPart, ImagePart or FilePart records, not "
                    f"{type(part).__name__}"
                )
    else:
        raise InvalidArgument(
            "message content must be a str or a sequence of content parts, not "
            f"{type(content).__name__}"
        )
    return Message(
        id=new_message_id(),
        role=role,
        content=parts,
        tool_calls=tool_calls,
        metadata=dict(metadata) if metadata else {},
    )


def _checked_message(message: Message) -> Message:
    if not isinstance(message, Message):
        raise InvalidArgument(f"a conversation holds Message records, not {type(message).__name__}")
    return message
