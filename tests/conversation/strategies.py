"""Hypothesis strategies for messages, tool calls and results, and whole histories."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from operative._core._types import ToolCall, ToolOutcome, ToolResult
from operative.conversation import (
    ContentPart,
    ConversationHistory,
    FilePart,
    ImagePart,
    Message,
    Role,
    TextPart,
    new_message_id,
    tool_result_message,
)

OUTCOMES: tuple[ToolOutcome, ...] = ("success", "error", "denied", "action-required", "cancelled")

_ids = itertools.count()

short_text = st.text(max_size=12)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | short_text
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(short_text, children, max_size=3)
    ),
    max_leaves=4,
)
json_objects = st.dictionaries(short_text, json_values, max_size=3)

content_parts: st.SearchStrategy[ContentPart] = st.one_of(
    st.builds(TextPart, text=short_text),
    st.builds(ImagePart, url=st.just("https://example.com/a.png")),
    st.builds(ImagePart, data=st.binary(min_size=1, max_size=8), media_type=st.just("image/png")),
    st.builds(
        FilePart,
        file_id=short_text,
        media_type=st.none() | st.just("application/pdf"),
        name=st.none() | short_text,
    ),
)
contents: st.SearchStrategy[str | tuple[ContentPart, ...]] = (
    short_text
    | st.tuples(content_parts)
    | st.lists(content_parts, min_size=1, max_size=3).map(tuple)
)


def unique_call_id() -> str:
    """A call id no other generated call shares."""
    return f"call_{next(_ids)}"


tool_calls: st.SearchStrategy[ToolCall] = st.builds(
    ToolCall,
    id=st.builds(unique_call_id),
    name=st.sampled_from(["search", "fetch", "write_file"]),
    arguments=json_objects | st.just('{"q": "x"}') | short_text,
)


_outcomes = st.sampled_from(OUTCOMES)
_errors = st.none() | short_text
_metadata: st.SearchStrategy[dict[str, Any]] = st.just({}) | json_objects
_roles: st.SearchStrategy[Role] = st.sampled_from(["system", "user", "assistant"])
_call_lists = st.lists(tool_calls, max_size=3)


@st.composite
def results_for(draw: st.DrawFn, call: ToolCall) -> ToolResult:
    """A result of any outcome for ``call``."""
    outcome = draw(_outcomes)
    success = outcome == "success"
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome=outcome,
        value=draw(json_values) if success else None,
        error=None if success else draw(_errors),
    )


@st.composite
def turns(draw: st.DrawFn, *, answer_every_call: bool) -> list[Message]:
    """A user or system message, or an assistant message followed by its tool results.

    Results follow in any order; when ``answer_every_call`` is false some are missing.
    """
    role = draw(_roles)
    calls = draw(_call_lists) if role == "assistant" else []
    message = Message(
        id=new_message_id(),
        role=role,
        content=draw(contents),
        tool_calls=tuple(calls),
        metadata=draw(_metadata),
    )
    answered = calls if answer_every_call else [c for c in calls if draw(st.booleans())]
    if len(answered) > 1:
        answered = draw(st.permutations(answered))
    results = [tool_result_message(draw(results_for(call))) for call in answered]
    return [message, *results]


_complete_turns = turns(answer_every_call=True)
_any_turns = turns(answer_every_call=False)


@st.composite
def histories(
    draw: st.DrawFn, *, answer_every_call: bool = False, max_turns: int = 6
) -> ConversationHistory:
    """A transcript of several turns; tool calls may dangle unless told otherwise."""
    turn = _complete_turns if answer_every_call else _any_turns
    parts = draw(st.lists(turn, max_size=max_turns))
    return ConversationHistory(
        messages=tuple(m for part in parts for m in part), metadata=draw(_metadata)
    )
