"""``normalize_calls`` takes a quick path while every call is plain and gives back what
it took at the first call that is not; it must end exactly where checking each call
alone (``_normalize_each``) ends, whatever the mix of calls and ids already taken."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operative import InvalidResponseError, ToolCall
from operative._core._tool_calls import RefusedCalls, _normalize_each, normalize_calls

_FRESH = re.compile(r"~[0-9a-f]{8}$")


def _masked(call_id: str) -> str:
    """A fresh id's random part hidden (two runs of the check draw different ones)."""
    return _FRESH.sub("~fresh", call_id)


_IDS = st.sampled_from(["a", "b", "c", ""])
_ARGUMENTS = st.sampled_from(['{"x": 1}', "{}", "[" * 70 + "]" * 70, "not json"])
_CALL = st.builds(ToolCall, id=_IDS, name=st.just("t"), arguments=_ARGUMENTS)
_ITEM = st.one_of(_CALL, _CALL, _CALL, st.just("not a call"))


def _outcome(calls: tuple[Any, ...], seen: set[str], check: Any) -> Any:
    try:
        out = check(calls, seen)
    except InvalidResponseError as exc:
        return ("refused", str(exc), sorted(_masked(i) for i in seen))
    refused = getattr(out, "refused", None)
    return (
        [(_masked(c.id), c.name, c.arguments) for c in out],
        None if refused is None else sorted((_masked(k), v) for k, v in refused.items()),
        type(out) is RefusedCalls,
        sorted(_masked(i) for i in seen),
    )


@settings(max_examples=400, deadline=None)
@given(calls=st.lists(_ITEM, max_size=5), taken=st.sets(_IDS))
def test_the_quick_path_ends_where_checking_each_call_ends(
    calls: list[Any], taken: set[str]
) -> None:
    quick = _outcome(tuple(calls), set(taken), normalize_calls)
    each = _outcome(tuple(calls), set(taken), _normalize_each)
    assert quick == each


def test_a_repeated_call_keeps_the_first_id_and_renames_the_second() -> None:
    call = ToolCall(id="a", name="t", arguments="{}")
    seen: set[str] = set()
    first, second = normalize_calls((call, call), seen)
    assert first.id == "a"
    assert second.id.startswith("a~")
    assert seen == {"a", second.id}
