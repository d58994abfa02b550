"""``ConversationHistory``: the immutable, serializable transcript."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .._core._codec import check_schema_version
from .._core._types import NO_METADATA, own_metadata
from ._message import Message

__all__ = ["HISTORY_SCHEMA_VERSION", "ConversationHistory"]

HISTORY_SCHEMA_VERSION = 1
"""The version this code writes; it reads every version up to this one."""


class ConversationHistory(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An immutable transcript: safe to share between tasks, store and send.

    Histories share their ``Message`` objects (which are immutable) instead of copying
    them, so taking one costs a shallow tuple copy, never a deep copy. Treat
    ``metadata`` as read-only: it may be shared with other histories.
    """

    messages: tuple[Message, ...] = ()
    """The transcript, oldest first."""
    metadata: Mapping[str, Any] = NO_METADATA
    """Caller-defined, JSON-encodable data about the conversation (always a ``dict``;
    without metadata, the shared empty one, which refuses changes)."""
    schema_version: int = HISTORY_SCHEMA_VERSION
    """Always written, so a reader can tell which rules the bytes follow."""

    def __post_init__(self) -> None:
        if self.schema_version != HISTORY_SCHEMA_VERSION:
            check_schema_version("ConversationHistory", self.schema_version, HISTORY_SCHEMA_VERSION)
        metadata = self.metadata
        if metadata.__class__ is not dict:  # keep it encodable whatever mapping was given
            if metadata is not NO_METADATA:
                msgspec.structs.force_setattr(self, "metadata", own_metadata(metadata))
        elif not metadata:  # an empty dict of its own: share the empty one instead
            msgspec.structs.force_setattr(self, "metadata", NO_METADATA)
