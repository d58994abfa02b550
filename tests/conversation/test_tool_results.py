"""Tool results in a transcript: find, repair and resolve."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given

from operative._core._errors import InvalidArgument
from operative._core._types import ToolCall, ToolResult
from operative.conversation import (
    Conversation,
    ConversationError,
    ConversationHistory,
    Message,
    cancelled_result,
    find_dangling_tool_calls,
    repair_dangling_tool_calls,
    resolve_tool_result,
    tool_result_message,
)

from .strategies import histories

SEARCH = ToolCall(id="c1", name="search", arguments={"q": "x"})
FETCH = ToolCall(id="c2", name="fetch", arguments='{"url": "u"}')


def _result(call: ToolCall, outcome: str = "success", **fields: object) -> ToolResult:
    return ToolResult(call_id=call.id, tool_name=call.name, outcome=outcome, **fields)  # type: ignore[arg-type]


def _parked() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("go")
    conversation.append_assistant_message("", [SEARCH, FETCH])
    conversation.append_tool_result(_result(SEARCH, "action-required", error="needs approval"))
    conversation.append_tool_result(_result(FETCH))
    conversation.append_assistant_message("waiting for approval")
    return conversation


def test_resolve_replaces_the_result_in_place() -> None:
    """The resolved result takes the old one's place and id; the input is untouched."""
    history = _parked().current
    old = history.messages[2]
    resolved = resolve_tool_result(history, "c1", _result(SEARCH, value="found"))
    assert len(resolved.messages) == len(history.messages)
    new = resolved.messages[2]
    assert (new.id, new.tool_call_id, new.outcome, new.content) == (
        old.id,
        "c1",
        "success",
        "found",
    )
    assert resolved.messages[:2] == history.messages[:2]
    assert resolved.messages[3:] == history.messages[3:]
    assert history.messages[2] is old
    assert resolved.metadata == history.metadata


def test_resolve_on_a_live_conversation_changes_it() -> None:
    """A Conversation is resolved in place and its new snapshot returned."""
    conversation = _parked()
    resolved = resolve_tool_result(conversation, "c1", _result(SEARCH, "denied"))
    assert conversation.current is resolved
    assert conversation.messages[2].outcome == "denied"


def test_resolve_works_on_a_decoded_history() -> None:
    """Calls are found by id, so a history loaded from bytes resolves the same way."""
    from operative._core._codec import decode, encode

    history = decode(encode(_parked().current), ConversationHistory)
    resolved = resolve_tool_result(history, "c1", _result(SEARCH))
    assert resolved.messages[2].outcome == "success"


def test_resolve_unknown_call_id() -> None:
    """An id no assistant message asked for is refused, naming the id."""
    with pytest.raises(ConversationError, match="'nope'"):
        resolve_tool_result(
            _parked().current, "nope", ToolResult(call_id="nope", tool_name="x", outcome="error")
        )


def test_resolve_call_without_a_result() -> None:
    """A call that has no result yet must be appended, not resolved."""
    conversation = Conversation()
    conversation.append_assistant_message("", [SEARCH])
    with pytest.raises(ConversationError, match="no result to replace"):
        resolve_tool_result(conversation.current, "c1", _result(SEARCH))


def test_resolve_call_with_two_results() -> None:
    """Two results for one call is ambiguous and refused."""
    conversation = _parked()
    conversation.append_tool_result(_result(SEARCH))
    with pytest.raises(ConversationError, match="already has 2 results"):
        resolve_tool_result(conversation.current, "c1", _result(SEARCH))


def test_resolve_result_for_another_call() -> None:
    """The result must belong to the call being resolved."""
    with pytest.raises(ConversationError, match="not 'c1'"):
        resolve_tool_result(_parked().current, "c1", _result(FETCH))


def test_resolve_needs_a_tool_result() -> None:
    """Anything but a ToolResult is misuse."""
    with pytest.raises(InvalidArgument):
        resolve_tool_result(_parked().current, "c1", "done")  # type: ignore[arg-type]


def test_find_dangling_tool_calls() -> None:
    """Calls without a result are found, oldest first, in any container."""
    conversation = Conversation()
    conversation.append_assistant_message("", [SEARCH, FETCH])
    conversation.append_tool_result(_result(FETCH))
    third = ToolCall(id="c3", name="search")
    conversation.append_assistant_message("", [third])
    for container in (conversation, conversation.current, conversation.messages):
        assert find_dangling_tool_calls(container) == (SEARCH, third)


def test_find_rejects_other_types() -> None:
    """A wrong container is reported, not iterated."""
    with pytest.raises(InvalidArgument):
        find_dangling_tool_calls(42)  # type: ignore[arg-type]


def test_repair_places_results_after_existing_ones() -> None:
    """Cancelled results go right after the assistant message's existing results."""
    conversation = Conversation()
    conversation.append_assistant_message("", [SEARCH, FETCH])
    conversation.append_tool_result(_result(FETCH))
    conversation.append_user_message("stop")
    history = conversation.current
    repaired = repair_dangling_tool_calls(history, "aborted by the user")
    assert [(m.role, m.tool_call_id, m.outcome) for m in repaired.messages] == [
        ("assistant", None, None),
        ("tool", "c2", "success"),
        ("tool", "c1", "cancelled"),
        ("user", None, None),
    ]
    assert "aborted by the user" in repaired.messages[2].text
    assert len(history.messages) == 3  # the input history is untouched


def test_repair_at_the_end_and_in_place() -> None:
    """A Conversation is repaired in place; a complete history is returned as it is."""
    conversation = Conversation()
    conversation.append_assistant_message("", [SEARCH])
    repaired = repair_dangling_tool_calls(conversation)
    assert conversation.current is repaired
    assert repaired.messages[-1].outcome == "cancelled"
    assert repair_dangling_tool_calls(repaired) is repaired
    assert repair_dangling_tool_calls(conversation) is repaired


def test_cancelled_result_is_typed() -> None:
    """The placeholder for an unfinished call is a ``cancelled`` ToolResult."""
    result = cancelled_result(SEARCH, "deadline")
    assert (result.call_id, result.tool_name, result.outcome) == ("c1", "search", "cancelled")
    assert result.error is not None
    assert "deadline" in result.error
    message = tool_result_message(result, id="fixed")
    assert message.id == "fixed"


def _result_counts(messages: tuple[Message, ...]) -> Counter[str]:
    return Counter(m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id)


@given(histories())
def test_repair_answers_every_call_once_and_moves_nothing(history: ConversationHistory) -> None:
    """After repair every call has exactly one result, and only cancelled results were added."""
    repaired = repair_dangling_tool_calls(history, "cut short")
    calls = [c for m in repaired.messages for c in m.tool_calls]
    counts = _result_counts(repaired.messages)
    assert all(counts[c.id] == 1 for c in calls)
    assert find_dangling_tool_calls(repaired) == ()
    original_ids = {m.id for m in history.messages}
    kept = tuple(m for m in repaired.messages if m.id in original_ids)
    added = [m for m in repaired.messages if m.id not in original_ids]
    assert kept == history.messages
    assert {m.tool_call_id for m in added} == {c.id for c in find_dangling_tool_calls(history)}
    assert all(m.outcome == "cancelled" for m in added)
    assert repaired.metadata == history.metadata
    assert repair_dangling_tool_calls(repaired) is repaired


@given(histories())
def test_repaired_results_follow_their_assistant_message(history: ConversationHistory) -> None:
    """Between a call and its result there are only tool messages."""
    messages = repair_dangling_tool_calls(history).messages
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            (position,) = [
                i for i, m in enumerate(messages) if m.role == "tool" and m.tool_call_id == call.id
            ]
            assert position > index
            assert all(m.role == "tool" for m in messages[index + 1 : position])


@given(histories(answer_every_call=True))
def test_complete_histories_need_no_repair(history: ConversationHistory) -> None:
    """A history whose calls are all answered has nothing dangling."""
    assert find_dangling_tool_calls(history) == ()
    assert repair_dangling_tool_calls(history) is history
