"""``normalize_calls``: what the loop stores of the calls a model asked for. Whatever the
mix of calls, ids already taken and arguments, every call keeps its place, ids end up
unique in the run, an id is kept unless blank or taken, and too-deep arguments are
refused (recorded as the reason, answered without running)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operative import InvalidResponseError, ToolCall
from operative._core._tool_calls import REFUSED_ARGUMENTS, RefusedCalls, normalize_calls

_DEEP = "[" * 101 + "]" * 101  # nested past MAX_JSON_DEPTH
_IDS = st.sampled_from(["a", "b", "c", ""])
_ARGUMENTS = st.sampled_from(['{"x": 1}', "{}", _DEEP, "[" * 70 + "]" * 70])
_CALL = st.builds(ToolCall, id=_IDS, name=st.sampled_from(["t", "u"]), arguments=_ARGUMENTS)
_ITEM = st.one_of(_CALL, _CALL, _CALL, _CALL, st.just("not a call"))


@settings(max_examples=400, deadline=None)
@given(calls=st.lists(_ITEM, max_size=6), taken=st.sets(_IDS))
def test_every_call_keeps_its_place_and_gets_a_run_unique_id(
    calls: list[Any], taken: set[str]
) -> None:
    seen = set(taken)
    bad = [i for i, call in enumerate(calls) if not isinstance(call, ToolCall)]
    if bad:
        with pytest.raises(InvalidResponseError, match=rf"tool_calls\[{bad[0]}\] is str"):
            normalize_calls(calls, seen)
        return
    out = normalize_calls(calls, seen)
    assert type(out) in (tuple, RefusedCalls)
    assert [c.name for c in out] == [c.name for c in calls]
    ids = [c.id for c in out]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & taken
    assert seen == taken | set(ids)
    used = set(taken)
    for before, after in zip(calls, out, strict=True):
        if before.id and before.id not in used:
            assert after.id == before.id
        else:
            assert re.fullmatch(rf"{re.escape(before.id or 'call')}~[0-9a-f]{{8}}", after.id)
        used.add(after.id)
    refused = getattr(out, "refused", {})
    assert (type(out) is RefusedCalls) == bool(refused)
    for before, after in zip(calls, out, strict=True):
        if before.arguments == _DEEP:
            assert after.arguments == {REFUSED_ARGUMENTS: refused[after.id]}
        else:
            assert after.arguments == before.arguments
            assert after.id not in refused


def test_a_plain_step_returns_the_calls_it_was_given() -> None:
    """Nothing to change: the very tuple goes into the transcript (no copy a step)."""
    calls = (ToolCall(id="a", name="t", arguments="{}"), ToolCall(id="b", name="t", arguments="{}"))
    seen: set[str] = set()
    assert normalize_calls(calls, seen) is calls
    assert seen == {"a", "b"}
