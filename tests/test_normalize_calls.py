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

from operative import ToolCall
from operative._core._tool_calls import REFUSED_ARGUMENTS, RefusedCalls, normalize_calls
from operative.errors import InvalidResponseError

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
    """Every call keeps its place and gets an id no other call in the run has."""
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
    assert set(seen) == taken | set(ids)
    assert len(seen) == len(taken) + len(ids)
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


async def test_ids_stay_unique_across_many_steps_of_a_server_that_repeats_them() -> None:
    """A server that says ``call_0`` on every one of 40 steps (and twice in one step):
    every call in the transcript has its own id, past the point where the run's ids move
    from a list to a set."""
    from operative import GenerateRequest, GenerateResponse, create_agent, stop_when, tool

    @tool
    async def ping(n: int) -> int:
        """Echo."""
        return n

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if request.step > 40:
            return GenerateResponse(content="done")
        calls = [ToolCall(id="call_0", name="ping", arguments={"n": request.step})]
        if request.step % 10 == 0:
            calls.append(ToolCall(id="call_0", name="ping", arguments={"n": -request.step}))
        return GenerateResponse(tool_calls=tuple(calls))

    agent = create_agent(
        generate=generate, tools=[ping], stop_when=stop_when.no_tool_calls(), maximum_steps=50
    )
    result = await agent.run("go")
    asked = [call.id for step in result.steps for call in step.tool_calls]
    answered = [r.call_id for step in result.steps for r in step.results]
    assert len(asked) == 44
    assert len(set(asked)) == 44
    assert answered == asked
    assert asked[0] == "call_0"
