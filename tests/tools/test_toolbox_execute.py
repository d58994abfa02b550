"""Toolbox.execute: every way a call can settle, limits, progress and cancellation."""

from __future__ import annotations

import threading
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative._core._events import Event, ToolProgress
from operative._core._types import Authority, RequestContext, ToolCall
from operative.tools import ExecutionContext, PermissionPolicy, Tool, Toolbox, ToolContext, tool


@tool
async def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


def call(name: str, arguments: dict[str, Any] | str, id: str = "c1") -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


async def test_success_with_mapping_and_json_arguments() -> None:
    """Mapping and raw JSON arguments both validate and run."""
    box = Toolbox([add])
    result = await box.execute(call("add", {"a": 2, "b": 3}))
    assert (result.outcome, result.value, result.call_id, result.tool_name) == (
        "success",
        5,
        "c1",
        "add",
    )
    result = await box.execute(call("add", '{"a": 2}'))
    assert result.value == 3
    assert result.error is None


async def test_unknown_tool_lists_the_available_ones() -> None:
    """An unknown name is an error result naming every tool."""
    box = Toolbox([add])
    result = await box.execute(call("sub", {}))
    assert result.outcome == "error"
    assert result.tool_name == "sub"
    assert result.error is not None
    assert "'sub'" in result.error
    assert "Available tools: add." in result.error


async def test_malformed_json_is_an_error_result() -> None:
    """Arguments that are not JSON settle as an error, asking for one JSON object."""
    box = Toolbox([add])
    for raw in ['{"a": ', "not json", ""]:
        result = await box.execute(call("add", raw))
        assert result.outcome == "error"
        assert result.error is not None
        assert "JSON" in result.error


@pytest.mark.parametrize(
    ("arguments", "path"),
    [
        ({"a": "two"}, "$.a"),
        ('{"a": 1, "b": "x"}', "$.b"),
        ({}, "a"),
        ({"a": 1, "c": 2}, "c"),
        ("[1, 2]", "object"),
    ],
)
async def test_invalid_arguments_name_the_problem(arguments: Any, path: str) -> None:
    """Validation errors reach the model with the JSON path (or field) at fault."""
    result = await Toolbox([add]).execute(call("add", arguments))
    assert result.outcome == "error"
    assert result.error is not None
    assert result.error.startswith("Invalid arguments for tool 'add'")
    assert path in result.error


async def test_a_raising_tool_becomes_an_error_with_a_traceback_detail() -> None:
    """The model reads the exception type and message; the host gets the traceback."""

    @tool
    async def boom(x: int) -> None:
        """Fail."""
        raise ValueError(f"bad x {x}")

    result = await Toolbox([boom]).execute(call("boom", {"x": 7}))
    assert result.outcome == "error"
    assert result.error == "Tool 'boom' failed: ValueError: bad x 7"
    assert result.detail is not None
    assert "Traceback" in result.detail
    assert "raise ValueError" in result.detail


async def test_timeout_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    """A tool over its time limit is stopped and reported as timed out."""

    @tool(timeout=2.5)
    async def slow() -> str:
        """Sleep."""
        await trio.sleep(3600)
        return "done"

    start = trio.current_time()
    result = await Toolbox([slow]).execute(call("slow", {}))
    assert trio.current_time() - start == pytest.approx(2.5)
    assert result.outcome == "error"
    assert result.error == "Tool 'slow' timed out after 2.5 s and was stopped."


async def test_fast_enough_tool_is_not_timed_out(autojump_clock: trio.testing.MockClock) -> None:
    """A tool within its limit succeeds."""

    @tool(timeout=10)
    async def quick() -> str:
        """Sleep briefly."""
        await trio.sleep(1)
        return "ok"

    result = await Toolbox([quick]).execute(call("quick", {}))
    assert (result.outcome, result.value) == ("success", "ok")


async def test_unencodable_result_names_the_tool() -> None:
    """A value that cannot become JSON is an error naming the tool."""

    @tool
    async def weird() -> object:
        """Return an object."""
        return object()

    result = await Toolbox([weird]).execute(call("weird", {}))
    assert result.outcome == "error"
    assert result.error is not None
    assert "'weird'" in result.error
    assert "cannot be sent to the model" in result.error


class Point(msgspec.Struct, frozen=True):
    """A point."""

    x: int
    y: int


async def test_structured_results_become_builtins() -> None:
    """Structs, tuples and sets come back as JSON-compatible values."""

    @tool
    async def origin() -> Point:
        """Origin."""
        return Point(x=0, y=0)

    result = await Toolbox([origin]).execute(call("origin", {}))
    assert result.value == {"x": 0, "y": 0}


async def test_output_type_is_enforced() -> None:
    """With output_type=, a mismatching value is an error result."""

    async def answer(good: bool) -> Any:
        """A point, or not."""
        return {"x": 1, "y": 2} if good else {"x": "one"}

    box = Toolbox([Tool(answer, output_type=Point)])
    assert (await box.execute(call("answer", {"good": True}))).value == {"x": 1, "y": 2}
    result = await box.execute(call("answer", {"good": False}))
    assert result.outcome == "error"
    assert result.error is not None
    assert "$.x" in result.error


async def test_sync_tool_runs_in_a_worker_thread() -> None:
    """Sync functions run off the trio thread."""
    main = threading.get_ident()

    @tool
    def where(tag: str) -> dict[str, Any]:
        """Report the thread."""
        return {"tag": tag, "other_thread": threading.get_ident() != main}

    result = await Toolbox([where]).execute(call("where", {"tag": "t"}))
    assert result.value == {"tag": "t", "other_thread": True}


async def test_sync_tool_with_explicit_input_and_context() -> None:
    """A sync tool can take an explicit input type and a ToolContext."""

    def handle(point: Point, ctx: ToolContext) -> str:
        """Sum a point's coordinates."""
        return f"{ctx.call_id}:{point.x + point.y}"

    result = await Toolbox([Tool(handle, input_type=Point)]).execute(
        call("handle", {"x": 1, "y": 2}, id="k")
    )
    assert result.value == "k:3"


async def test_sync_tool_timeout_abandons_the_thread() -> None:
    """A sync tool past its limit is abandoned (the thread cannot be cancelled)."""
    release = threading.Event()

    @tool(timeout=0.05)
    def stuck() -> str:
        """Block."""
        release.wait(5)
        return "late"

    try:
        result = await Toolbox([stuck]).execute(call("stuck", {}))
    finally:
        release.set()
    assert result.outcome == "error"
    assert result.error is not None
    assert "timed out" in result.error
    assert "abandoned" in result.error  # not "stopped": a thread cannot be
    assert "was stopped" not in result.error


async def test_async_tool_with_explicit_input() -> None:
    """An async tool receives the validated input object."""

    async def norm(point: Point) -> int:
        """A point's taxicab norm."""
        return abs(point.x) + abs(point.y)

    box = Toolbox([Tool(norm, input_type=Point)])
    assert (await box.execute(call("norm", '{"x": -2, "y": 3}'))).value == 5


async def _max_running(box: Toolbox, name: str, calls: int, counter: dict[str, int]) -> int:
    async with trio.open_nursery() as nursery:
        for i in range(calls):
            nursery.start_soon(box.execute, call(name, {}, id=str(i)))
    return counter["max"]


def _counting_tool(name: str, counter: dict[str, int], **options: Any) -> Tool:
    async def work() -> None:
        """Work for a second."""
        counter["now"] += 1
        counter["max"] = max(counter["max"], counter["now"])
        await trio.sleep(1)
        counter["now"] -= 1

    return Tool(work, name=name, **options)


async def test_per_tool_concurrency_limit(autojump_clock: trio.testing.MockClock) -> None:
    """max_concurrency on a tool bounds its simultaneous calls."""
    counter = {"now": 0, "max": 0}
    box = Toolbox([_counting_tool("work", counter, max_concurrency=2)])
    start = trio.current_time()
    assert await _max_running(box, "work", 6, counter) == 2
    assert trio.current_time() - start == pytest.approx(3)


async def test_per_toolbox_concurrency_limit(autojump_clock: trio.testing.MockClock) -> None:
    """max_concurrency on a toolbox bounds all its calls together."""
    counter = {"now": 0, "max": 0}
    box = Toolbox(
        [_counting_tool("a", counter), _counting_tool("b", counter, max_concurrency=5)],
        max_concurrency=3,
    )
    async with trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(box.execute, call("a", {}, id=f"a{i}"))
            nursery.start_soon(box.execute, call("b", {}, id=f"b{i}"))
    assert counter["max"] == 3


async def test_unlimited_calls_run_together(autojump_clock: trio.testing.MockClock) -> None:
    """Without limits every call runs at once."""
    counter = {"now": 0, "max": 0}
    box = Toolbox([_counting_tool("work", counter)])
    assert await _max_running(box, "work", 6, counter) == 6


async def test_limited_tool_still_times_out(autojump_clock: trio.testing.MockClock) -> None:
    """The time limit counts running time, not time spent waiting for a slot."""
    counter = {"now": 0, "max": 0}
    box = Toolbox([_counting_tool("work", counter, max_concurrency=1, timeout=1.5)])
    results = []

    async def one(i: int) -> None:
        results.append(await box.execute(call("work", {}, id=str(i))))

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    assert [r.outcome for r in results] == ["success"] * 3


async def test_permissions_deny_by_default() -> None:
    """A default PermissionPolicy allows nothing; the model reads why."""
    ran = []

    @tool
    async def read() -> str:
        """Read."""
        ran.append("read")
        return "data"

    box = Toolbox([read], permissions=PermissionPolicy())
    result = await box.execute(call("read", {}))
    assert result.outcome == "denied"
    assert result.error is not None
    assert "'read' is not permitted" in result.error
    assert ran == []


async def test_permissions_allow_listed_and_guard_mutation() -> None:
    """Allowed names run; mutating tools need allow_mutation; denied names never run."""

    @tool
    async def read() -> str:
        """Read."""
        return "data"

    @tool(mutates=True)
    async def write() -> str:
        """Write."""
        return "written"

    policy = PermissionPolicy(allowed_tools=["read", "write"])
    box = Toolbox([read, write], permissions=policy)
    assert (await box.execute(call("read", {}))).outcome == "success"
    result = await box.execute(call("write", {}))
    assert result.outcome == "denied"
    assert result.error is not None
    assert "changes state" in result.error

    box = Toolbox(
        [read, write],
        permissions=PermissionPolicy(
            allowed_tools=None, allow_mutation=True, denied_tools={"read"}
        ),
    )
    assert (await box.execute(call("write", {}))).outcome == "success"
    assert (await box.execute(call("read", {}))).outcome == "denied"


def test_permission_names_must_be_a_collection() -> None:
    """A bare string is not a list of names."""
    from operative._core._errors import InvalidArgument

    with pytest.raises(InvalidArgument):
        PermissionPolicy(allowed_tools="read")


async def test_tool_context_reports_progress_through_emit() -> None:
    """report_progress emits ToolProgress with the call's identity."""
    events: list[Event] = []

    async def emit(event: Event) -> None:
        events.append(event)

    @tool
    async def job(steps: int, ctx: ToolContext) -> str:
        """Work in steps."""
        for i in range(steps):
            await ctx.report_progress(i + 1, total=steps, message=f"step {i + 1}")
        return f"{ctx.run_id}/{ctx.step}/{ctx.agent_id}/{ctx.tool_name}"

    authority = Authority(principal_id="u", tenant_id="t", owner_id="o")
    request = RequestContext(authority=authority)
    context = ExecutionContext(
        run_id="r1", step=4, agent_id="ag", request_context=request, emit=emit
    )
    result = await Toolbox([job]).execute(call("job", {"steps": 2}, id="k"), context)
    assert result.value == "r1/4/ag/job"
    assert [type(e) for e in events] == [ToolProgress, ToolProgress]
    first = events[0]
    assert isinstance(first, ToolProgress)
    assert (first.run_id, first.step, first.call_id, first.tool_name) == ("r1", 4, "k", "job")
    assert (first.progress, first.total, first.message) == (1, 2, "step 1")


async def test_progress_without_an_emitter_is_a_no_op() -> None:
    """With no emitter, reporting progress does nothing (but still checkpoints)."""

    @tool
    async def job(ctx: ToolContext) -> str:
        """Work."""
        assert ctx.request_context is None
        with trio.testing.assert_checkpoints():
            await ctx.report_progress(0.5)
        return "ok"

    assert (await Toolbox([job]).execute(call("job", {}))).value == "ok"


async def test_cancellation_propagates() -> None:
    """execute never turns cancellation into a result."""

    @tool
    async def forever() -> None:
        """Wait forever."""
        await trio.sleep_forever()

    box = Toolbox([forever])
    with trio.move_on_after(0.01) as scope:
        await box.execute(call("forever", {}))
    assert scope.cancelled_caught


async def test_execute_is_a_cancellation_point() -> None:
    """A call started inside a cancelled scope does not run."""
    ran = []

    @tool
    async def note() -> None:
        """Note."""
        ran.append(1)

    box = Toolbox([note])
    with trio.CancelScope() as scope:
        scope.cancel()
        await box.execute(call("note", {}))
    assert ran == []


async def test_base_exceptions_are_not_swallowed() -> None:
    """KeyboardInterrupt and friends propagate."""

    @tool
    async def interrupt() -> None:
        """Interrupt."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await Toolbox([interrupt]).execute(call("interrupt", {}))


async def test_tool_error_groups_are_error_results() -> None:
    """A tool whose nursery fails settles as an error, not a crash."""

    @tool
    async def fan_out() -> None:
        """Fail in a child task."""

        async def fail() -> None:
            raise RuntimeError("child failed")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail)

    result = await Toolbox([fan_out]).execute(call("fan_out", {}))
    assert result.outcome == "error"
    assert result.detail is not None
    assert "child failed" in result.detail


@tool
async def ordered(first: str, second: str = "-", third: str = "+") -> str:
    """Join three words in parameter order."""
    return f"{first}{second}{third}"


@tool
async def keyword_only(first: str, *, second: str, third: str = "+") -> str:
    """Join three words, two of them keyword-only."""
    return f"{first}{second}{third}"


@tool
async def context_first(context: ToolContext, first: str, second: str = "-") -> str:
    """Join two words and the call id (the context comes first)."""
    return f"{first}{second}{context.call_id}"


@tool
async def context_between(first: str, context: ToolContext, second: str = "-") -> str:
    """Join two words and the call id (the context sits between them)."""
    return f"{first}{second}{context.call_id}"


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("ordered", '{"third": "3", "first": "1"}', "1-3"),
        ("ordered", {"second": "2", "first": "1", "third": "3"}, "123"),
        ("keyword_only", '{"second": "2", "first": "1"}', "12+"),
        ("context_first", '{"second": "2", "first": "1"}', "12c1"),
        ("context_between", '{"first": "1"}', "1-c1"),
    ],
)
async def test_arguments_reach_each_parameter_by_name_whatever_the_signature(
    name: str, arguments: dict[str, Any] | str, expected: str
) -> None:
    """Arguments given in any order bind to the parameters they name, whether the tool's
    parameters may be passed by position, some are keyword-only, or a ToolContext sits
    before or between them."""
    box = Toolbox([ordered, keyword_only, context_first, context_between])
    result = await box.execute(call(name, arguments))
    assert (result.outcome, result.value) == ("success", expected)
