"""Messages and their multi-modal content parts."""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import msgspec

from .._core._types import NO_METADATA, ToolCall, ToolOutcome, ToolResult, own_metadata

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "Message",
    "Role",
    "TextPart",
    "new_message_id",
    "tool_result_content",
]

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


class TextPart(msgspec.Struct, frozen=True, kw_only=True, tag="text", tag_field="type"):
    """A run of text inside multi-modal content."""

    text: str


class ImagePart(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="image", tag_field="type"
):
    """An image, by URL or inline bytes (``media_type`` required with bytes)."""

    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("an ImagePart takes exactly one of url= or data=")
        if self.data is not None and not self.media_type:
            raise ValueError("an ImagePart with data= needs media_type= (e.g. 'image/png')")


class FilePart(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="file", tag_field="type"
):
    """A reference to a file the provider or host can resolve (an id or a URI)."""

    file_id: str
    media_type: str | None = None
    name: str | None = None


ContentPart: TypeAlias = TextPart | ImagePart | FilePart


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One message of a transcript; immutable, so transcripts can share it freely.

    ``tool_calls`` is set on assistant messages that asked for tools; ``tool_call_id``,
    ``tool_name`` and ``outcome`` on tool messages, which carry one call's result.
    """

    id: str
    """Unique within a transcript; :func:`new_message_id` makes one."""
    role: Role
    content: str | tuple[ContentPart, ...] = ""
    """Plain text, or a tuple of multi-modal parts."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The tools an assistant message asked for."""
    tool_call_id: str | None = None
    """On a tool message: the id of the call it answers (required there)."""
    tool_name: str | None = None
    """On a tool message: the tool that was called."""
    outcome: ToolOutcome | None = None
    """On a tool message: how the call settled."""
    metadata: Mapping[str, Any] = NO_METADATA
    """Caller-defined, JSON-encodable data (always a ``dict``; treat it as read-only:
    a message without metadata shares one empty ``dict`` that refuses changes)."""

    def __post_init__(self) -> None:
        # Runs on every decode too, so the common case is kept to a few comparisons.
        if self.role == "tool":
            if self.tool_call_id is None:
                raise ValueError(
                    "a tool message needs tool_call_id= (the id of the call it answers)"
                )
        elif self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages carry tool_calls, not {self.role} ones")
        metadata = self.metadata
        if metadata.__class__ is not dict:
            if metadata is not NO_METADATA:
                msgspec.structs.force_setattr(self, "metadata", own_metadata(metadata))
        elif not metadata:  # an empty dict of its own: share the empty one instead
            msgspec.structs.force_setattr(self, "metadata", NO_METADATA)
        content: Any = self.content
        if content.__class__ is list:  # built in Python with a list: keep it immutable
            msgspec.structs.force_setattr(self, "content", tuple(content))
        if self.tool_calls.__class__ is not tuple:
            msgspec.structs.force_setattr(self, "tool_calls", tuple(self.tool_calls))

    @property
    def text(self) -> str:
        """The message's text: ``content`` itself, or its text parts joined."""
        content = self.content
        if isinstance(content, str):
            return content
        return "".join(part.text for part in content if isinstance(part, TextPart))


class _IdSource:
    """Unique ids without a system call each: 64 random bits per process, then a count.

    The count starts at ``2**32`` and is written by ``hex()`` (``0x1`` and eight hex
    digits): a fixed width, so ids of one process sort in the order they were made (up
    to 2**36 of them), at a third of the cost of a formatted count. The random part is
    drawn again in a forked child, so parent and child never share a sequence.
    """

    __slots__ = ("_count", "_prefix")

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count(_FIRST_COUNT)

    def __call__(self) -> str:
        return self._prefix + hex(next(self._count))


_FIRST_COUNT = 2**32
_ids = _IdSource()
os.register_at_fork(after_in_child=_ids.reseed)


def new_message_id() -> str:
    """A fresh message id, unique across processes (64 random bits and a counter)."""
    ids = _ids  # read inline: two messages a step take one
    return ids._prefix + hex(next(ids._count))


_encode_json = msgspec.json.Encoder().encode


def tool_result_content(result: ToolResult) -> str:
    """The text a model reads for a tool result."""
    outcome = result.outcome
    if outcome == "success":
        value = result.value
        if isinstance(value, str):
            return value
        return _encode_json(value).decode()
    if outcome == "action-required":
        approval = result.pending_approval
        suffix = f" (approval {approval.approval_id})" if approval is not None else ""
        return result.error or f"This call needs a human's approval before it runs{suffix}."
    if outcome == "cancelled":
        return result.error or "This call was cancelled before it finished."
    if outcome == "denied":
        return result.error or "This call was denied."
    return result.error or "The tool failed."
