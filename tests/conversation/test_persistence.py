"""Histories survive encoding, and damaged bytes are refused with a clear error."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operative._core._codec import decode, encode
from operative._core._errors import CorruptRecordError, SchemaVersionError
from operative.conversation import (
    HISTORY_SCHEMA_VERSION,
    Conversation,
    ConversationHistory,
    Message,
)

from .strategies import histories


@given(histories())
def test_any_history_round_trips(history: ConversationHistory) -> None:
    """Encoding then decoding a history gives an equal history, and an equal live copy."""
    data = encode(history)
    decoded = decode(data, ConversationHistory)
    assert decoded == history
    assert decode(data.decode(), ConversationHistory) == history
    assert Conversation.from_history(decoded).current == history


@given(histories(max_turns=3), st.data())
def test_any_truncation_is_rejected(history: ConversationHistory, data: st.DataObject) -> None:
    """Every strict prefix of valid bytes raises CorruptRecordError, never anything else."""
    encoded = encode(history)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(CorruptRecordError) as caught:
        decode(encoded[:cut], ConversationHistory)
    assert caught.value.what == "ConversationHistory"
    assert "ConversationHistory" in str(caught.value)


@settings(max_examples=50)
@given(histories(max_turns=3), st.data())
def test_damaged_bytes_decode_or_are_rejected(
    history: ConversationHistory, data: st.DataObject
) -> None:
    """A flipped byte either still decodes or raises CorruptRecordError; nothing else."""
    encoded = bytearray(encode(history))
    index = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    encoded[index] = data.draw(st.integers(min_value=0, max_value=255))
    with contextlib.suppress(CorruptRecordError):
        decode(bytes(encoded), ConversationHistory)


def test_the_schema_version_is_always_written() -> None:
    """Even a default history carries its schema version on disk."""
    assert msgspec.json.decode(encode(ConversationHistory()))["schema_version"] == (
        HISTORY_SCHEMA_VERSION
    )


def test_a_history_from_a_newer_operative_asks_for_an_upgrade() -> None:
    """A newer schema version raises SchemaVersionError, saying to upgrade."""
    data = b'{"messages": [], "schema_version": 99}'
    with pytest.raises(SchemaVersionError, match="Upgrade operative") as caught:
        decode(data, ConversationHistory)
    assert (caught.value.found, caught.value.supported) == (99, HISTORY_SCHEMA_VERSION)


def test_a_newer_history_with_unknown_parts_still_asks_for_an_upgrade() -> None:
    """A tag this version does not know, in a newer record, is not called corruption."""
    data = (
        b'{"messages": [{"id": "1", "role": "user", "content": [{"type": "video"}]}],'
        b' "schema_version": 2}'
    )
    with pytest.raises(SchemaVersionError, match="schema version 2"):
        decode(data, ConversationHistory)


def test_a_nested_newer_history_is_detected() -> None:
    """A history inside another record is version-checked too, with its path."""

    class Session(msgspec.Struct):
        history: ConversationHistory

    with pytest.raises(SchemaVersionError) as caught:
        decode(b'{"history": {"schema_version": 3}}', Session)
    assert "$.history" in caught.value.detail


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b'{"messages": [{"id": 1, "role": "user"}]}', r"\$\.messages\[0\]\.id"),
        (b'{"messages": [{"id": "1", "role": "robot"}]}', r"\$\.messages\[0\]\.role"),
        (b'{"messages": [{"role": "user"}]}', "missing required field `id`"),
        (
            b'{"messages": [{"id": "1", "role": "user", "content": [{"type": "video"}]}]}',
            r"\$\.messages\[0\]\.content\[0\]\.type",
        ),
        (b'{"messages": [{"id": "1", "role": "tool"}]}', "tool_call_id"),
        (b'{"messages": [{"id": "\xff", "role": "user"}]}', "UTF-8"),
        (b"", "truncated"),
        (b"[]", "Expected `object`"),
    ],
)
def test_corrupt_bytes_name_the_problem(data: bytes, match: str) -> None:
    """Errors say what was decoded, where the problem is, and what to do."""
    with pytest.raises(CorruptRecordError, match=match) as caught:
        decode(data, ConversationHistory, what="session 's1' history")
    message = str(caught.value)
    assert message.startswith("cannot decode session 's1' history")
    assert "backup" in message
    assert caught.value.what == "session 's1' history"
    assert not isinstance(caught.value, SchemaVersionError)


def test_messages_decode_on_their_own() -> None:
    """A single message is a record too."""
    message = Message(id="1", role="assistant", content="hi")
    assert decode(encode(message), Message) == message
