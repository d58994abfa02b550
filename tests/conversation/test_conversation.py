"""The live Conversation: appends, cached snapshots, metadata and eager checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from operative._core._errors import InvalidArgument
from operative._core._types import ToolCall, ToolResult
from operative.conversation import (
    Conversation,
    ConversationHistory,
    FilePart,
    ImagePart,
    Message,
    TextPart,
)


def test_append_helpers_cover_every_role() -> None:
    """Each role has an append helper, and tool messages carry the call they answer."""
    conversation = Conversation()
    conversation.append_system_message("be brief")
    conversation.append_user_message([TextPart(text="look: "), ImagePart(url="https://x/y.png")])
    call = ToolCall(id="c1", name="search", arguments={"q": "trio"})
    conversation.append_assistant_message("let me check", [call])
    conversation.append_tool_result(
        ToolResult(call_id="c1", tool_name="search", outcome="success", value={"hits": 3})
    )
    roles = [m.role for m in conversation.messages]
    assert roles == ["system", "user", "assistant", "tool"]
    tool = conversation.messages[-1]
    assert (tool.tool_call_id, tool.tool_name, tool.outcome) == ("c1", "search", "success")
    assert tool.content == '{"hits":3}'
    assert conversation.messages[1].text == "look: "
    assert conversation.messages[2].tool_calls == (call,)
    assert len(conversation) == 4
    assert len({m.id for m in conversation.messages}) == 4


def test_current_is_cached_until_a_change() -> None:
    """Reading ``current`` twice without a change returns the very same snapshot."""
    conversation = Conversation()
    conversation.append_user_message("hi")
    first = conversation.current
    assert conversation.current is first
    assert conversation.messages is first.messages


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c.append_user_message("more"),
        lambda c: c.append_system_message("rules"),
        lambda c: c.append_assistant_message("ok"),
        lambda c: c.append(Message(id="m", role="user", content="x")),
        lambda c: c.extend([Message(id="m", role="user", content="x")]),
        lambda c: c.replace_messages([]),
        lambda c: c.update_metadata(topic="x"),
        lambda c: c.update_metadata({"topic": "x"}),
        lambda c: c.remove_metadata("kept"),
        lambda c: setattr(c, "metadata", {"new": 1}),
    ],
)
def test_every_mutation_invalidates_the_snapshot(mutate: Any) -> None:
    """Every way of changing a conversation yields a new snapshot, leaving the old one be."""
    conversation = Conversation(metadata={"kept": True})
    conversation.append_user_message("hi")
    before = conversation.current
    encoded = msgspec.json.encode(before)
    mutate(conversation)
    after = conversation.current
    assert after is not before
    assert after != before
    assert msgspec.json.encode(before) == encoded


def test_metadata_is_read_only_and_snapshots_own_theirs() -> None:
    """Metadata cannot be changed behind the cache's back, and snapshots do not share it."""
    conversation = Conversation(metadata={"a": 1})
    with pytest.raises(TypeError):
        conversation.metadata["b"] = 2  # type: ignore[index]
    snapshot = conversation.current
    conversation.update_metadata(b=2)
    assert snapshot.metadata == {"a": 1}
    assert conversation.current.metadata == {"a": 1, "b": 2}
    conversation.remove_metadata("a", "missing")
    assert conversation.metadata == {"b": 2}


def test_removing_absent_metadata_keeps_the_snapshot() -> None:
    """Removing keys that are not set is not a change."""
    conversation = Conversation(metadata={"a": 1})
    snapshot = conversation.current
    conversation.remove_metadata("missing")
    assert conversation.current is snapshot


def test_from_history_leaves_the_history_untouched() -> None:
    """A conversation built from a history copies what it may change."""
    metadata: dict[str, Any] = {"user": "u1"}
    history = ConversationHistory(
        messages=(Message(id="1", role="user", content="hi"),), metadata=metadata
    )
    conversation = Conversation.from_history(history)
    assert conversation.current == history
    conversation.append_assistant_message("hello")
    conversation.update_metadata(user="u2")
    assert len(history.messages) == 1
    assert history.metadata == {"user": "u1"}
    metadata["late"] = True  # a host changing its own object later does not leak in
    assert "late" not in conversation.current.metadata


def test_from_history_rejects_a_live_conversation() -> None:
    """Passing a Conversation where a history is expected says what to do instead."""
    with pytest.raises(InvalidArgument, match=r"conversation\.current"):
        Conversation.from_history(Conversation())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda c: c.append_user_message(42), "str or a sequence"),
        (lambda c: c.append_user_message(["plain string part"]), "TextPart, ImagePart"),
        (lambda c: c.append_assistant_message("", [{"id": "x"}]), "ToolCall"),
        (lambda c: c.append_tool_result({"call_id": "x"}), "ToolResult"),
        (lambda c: c.append("hello"), "Message"),
    ],
)
def test_wrong_arguments_fail_eagerly(call: Any, match: str) -> None:
    """Misuse raises InvalidArgument at the call, not later when encoding."""
    conversation = Conversation()
    with pytest.raises(InvalidArgument, match=match):
        call(conversation)
    assert len(conversation) == 0


def test_messages_are_immutable() -> None:
    """Messages and histories are frozen: snapshots can be shared between tasks."""
    message = Message(id="1", role="user", content=[TextPart(text="a")])  # type: ignore[arg-type]
    assert message.content == (TextPart(text="a"),)
    with pytest.raises(AttributeError):
        message.content = "b"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ConversationHistory().messages = ()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"role": "user", "tool_calls": (ToolCall(id="c", name="t"),)}, "only assistant"),
        ({"role": "tool"}, "tool_call_id"),
    ],
)
def test_message_invariants(fields: dict[str, Any], match: str) -> None:
    """Tool calls belong to assistant messages; a tool message names the call it answers."""
    with pytest.raises(ValueError, match=match):
        Message(id="1", **fields)


@pytest.mark.parametrize(
    "part",
    [
        lambda: ImagePart(),
        lambda: ImagePart(url="https://x", data=b"x", media_type="image/png"),
        lambda: ImagePart(data=b"x"),
    ],
)
def test_image_part_needs_one_source(part: Any) -> None:
    """An image is a URL or inline bytes with a media type."""
    with pytest.raises(ValueError, match="ImagePart"):
        part()


def test_text_joins_text_parts_only() -> None:
    """``Message.text`` skips non-text parts."""
    message = Message(
        id="1",
        role="user",
        content=(TextPart(text="a"), FilePart(file_id="f"), TextPart(text="b")),
    )
    assert message.text == "ab"


def test_metadata_given_as_any_mapping_is_stored_as_a_dict() -> None:
    """Any mapping passed as metadata is kept as a plain (encodable) dict."""
    from types import MappingProxyType

    history = ConversationHistory(metadata=MappingProxyType({"a": 1}))
    message = Message(id="1", role="user", metadata=MappingProxyType({"b": 2}))
    assert type(history.metadata) is dict
    assert type(message.metadata) is dict
    assert msgspec.json.encode(history) == b'{"messages":[],"metadata":{"a":1},"schema_version":1}'


def test_records_without_metadata_share_one_read_only_empty_dict() -> None:
    """A message or history without metadata holds the shared empty dict: it encodes,
    compares and copies as ``{}``, refuses changes with a clear error, and an empty dict
    given (or decoded) is replaced by it, so the encoding is as before."""
    import copy
    import pickle

    from operative._core._types import NO_METADATA

    bare = Message(id="1", role="user", content="hi")
    given = Message(id="2", role="user", content="hi", metadata={})
    decoded = msgspec.json.decode(
        b'{"id":"3","role":"user","content":"hi","metadata":{}}', type=Message
    )
    history = ConversationHistory(messages=(bare,), metadata={})
    for record in (bare, given, decoded, history, ConversationHistory()):
        assert record.metadata is NO_METADATA
        assert isinstance(record.metadata, dict)
        assert record.metadata == {}
    assert msgspec.json.encode(given) == b'{"id":"2","role":"user","content":"hi"}'
    assert pickle.loads(pickle.dumps(bare)).metadata is NO_METADATA
    assert copy.deepcopy(bare).metadata is NO_METADATA
    changes: tuple[Callable[[dict[str, Any]], object], ...] = (
        lambda m: m.__setitem__("k", 1),
        lambda m: m.update(k=1),
        lambda m: m.setdefault("k", 1),
        lambda m: m.pop("k"),
        lambda m: m.clear(),
        lambda m: m.__ior__({"k": 1}),
    )
    for change in changes:
        with pytest.raises(InvalidArgument, match="read-only"):
            change(NO_METADATA)
    assert bare.metadata is NO_METADATA
    # A mapping of another kind is copied into a dict of its own; a non-empty one is kept.
    from types import MappingProxyType

    proxied = Message(id="4", role="user", metadata=MappingProxyType({"k": 1}))
    assert proxied.metadata.__class__ is dict
    assert proxied.metadata == {"k": 1}
    assert Message(id="5", role="user", metadata=MappingProxyType({})).metadata is NO_METADATA


def test_a_conversation_without_metadata_makes_a_dict_on_its_first_key() -> None:
    conversation = Conversation()
    assert conversation.current.metadata is conversation.current.metadata
    conversation.remove_metadata("missing")
    conversation.update_metadata(k=1)
    assert conversation.current.metadata == {"k": 1}
    assert Conversation().current.metadata == {}
