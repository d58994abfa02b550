"""faulty_tool and faulty_generate fail, stall, hang and time out exactly per their plan."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from operative import (
    Conversation,
    GenerateResponse,
    InvalidArgument,
    RunResult,
    ToolCall,
    ToolContext,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative.retry import RetryOptions
from operative.testing import (
    Fault,
    FaultHit,
    FaultPlan,
    InjectedError,
    ScriptedModel,
    check_run_invariants,
    faulty_generate,
    faulty_tool,
)


@tool(version="2", timeout=60)
async def lookup(key: str, ctx: ToolContext) -> str:
    """Look a key up."""
    return f"{key}@{ctx.step}"


def calls(*ids: str) -> GenerateResponse:
    return GenerateResponse(
        tool_calls=tuple(ToolCall(id=i, name="lookup", arguments={"key": i}) for i in ids)
    )


async def run(model: Any, tools: list[Any], **options: Any) -> tuple[RunResult, float]:
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    plan: FaultPlan = options.pop("plan", FaultPlan())
    start = trio.current_time()
    async with open_run(
        generate=model,
        conversation=conversation,
        tools=tools,
        stop_when=stop_when.no_tool_calls(),
        **options,
    ) as active:
        active.add_listener("*", events.append)
        await plan.abort_when_due(active)
    result = await active.result()
    check_run_invariants(result, events)
    return result, trio.current_time() - start


def test_the_wrapper_keeps_the_tools_shape() -> None:
    """A faulty tool keeps the name, schema, version and timeout of the tool it wraps."""
    wrapped = faulty_tool(lookup, [Fault.fail()])
    assert wrapped.spec == lookup.spec
    assert (wrapped.version, wrapped.timeout) == ("2", 60)
    with pytest.raises(InvalidArgument):
        faulty_tool(lookup.fn, [])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        FaultPlan(faults=("boom",))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Fault.delay(-1)
    with pytest.raises(InvalidArgument):
        FaultPlan(abort_at=-2)


async def test_tool_failures_by_call_index_and_call_id(autojump_clock: Any) -> None:
    """The call index and call id select which calls fail; the others run normally."""
    log: list[FaultHit] = []
    plan = FaultPlan(faults=[Fault.fail(call=0), Fault.fail(ValueError("bad id"), call_id="c3")])
    model = ScriptedModel([calls("c1"), calls("c2", "c3"), "done"])
    result, _ = await run(model, [faulty_tool(lookup, plan, log=log)])
    outcomes = [(r.call_id, r.outcome) for step in result.steps for r in step.results]
    assert outcomes == [("c1", "error"), ("c2", "success"), ("c3", "error")]
    errors = [r.error for step in result.steps for r in step.results]
    assert "InjectedError" in (errors[0] or "")
    assert "ValueError: bad id" in (errors[2] or "")
    assert [(hit.call_id, hit.step, hit.target) for hit in log] == [
        ("c1", 1, "lookup"),
        ("c3", 2, "lookup"),
    ]
    assert log[0].call == 0
    assert result.steps[1].results[0].value == "c2@2"


async def test_tool_delay_hang_and_timeout(autojump_clock: Any) -> None:
    """delay stalls then succeeds; hang meets the tool's timeout; timeout raises TimeoutError."""
    plan = FaultPlan(
        faults=[Fault.delay(5, step=1), Fault.hang(step=2), Fault.timeout(after=7, step=3)]
    )
    model = ScriptedModel([calls("a"), calls("b"), calls("c"), "done"])
    result, elapsed = await run(model, [faulty_tool(lookup, plan)])
    a, b, c = (step.results[0] for step in result.steps[:3])
    assert a.outcome == "success"
    assert b.outcome == "error"
    assert "timed out after 60 s" in (b.error or "")
    assert c.outcome == "error"
    assert "TimeoutError" in (c.error or "")
    assert elapsed == pytest.approx(5 + 60 + 7)


async def test_a_hang_ends_with_the_plans_abort(autojump_clock: Any) -> None:
    """abort_at aborts the run; the hanging call gets a cancelled result."""
    plan = FaultPlan(faults=[Fault.hang()], abort_at=30)
    forever = faulty_tool(tool(name="lookup")(lookup), plan)
    result, elapsed = await run(ScriptedModel([calls("a")]), [forever], plan=plan)
    assert result.finish_reason == "aborted"
    assert result.steps[0].results[0].outcome == "cancelled"
    assert elapsed == pytest.approx(30)


async def test_generate_faults_with_retries(autojump_clock: Any) -> None:
    """A failed and a timed-out attempt are retried; faults select by call and step."""
    log: list[FaultHit] = []
    plan = [Fault.fail(ConnectionError("reset"), call=0), Fault.timeout(after=20, call=1)]
    model = ScriptedModel([GenerateResponse(content="hello", usage=Usage.of(1, 1))])
    generate = faulty_generate(model, plan, log=log)
    result, elapsed = await run(
        generate, [], retry=RetryOptions(max_attempts=3, initial_delay=1, jitter=False)
    )
    assert result.content == "hello"
    assert [(hit.call, hit.fault.action, hit.target) for hit in log] == [
        (0, "fail", "generate"),
        (1, "timeout", "generate"),
    ]
    assert elapsed >= 20
    failing = faulty_generate(ScriptedModel(["x"]), FaultPlan(faults=[Fault.fail(step=1)]))
    result, _ = await run(failing, [])
    assert result.finish_reason == "error"
    assert isinstance(result.error, InjectedError)


async def test_generate_hang_and_delay(autojump_clock: Any) -> None:
    """A hanging generate is ended by the plan's abort; a delay just takes time."""
    plan = FaultPlan(faults=[Fault.hang(step=1)], abort_at=12)
    result, elapsed = await run(faulty_generate(ScriptedModel(["x"]), plan), [], plan=plan)
    assert (result.finish_reason, result.steps, elapsed) == ("aborted", (), 12)
    slow = faulty_generate(ScriptedModel(["x"]), [Fault.delay(9)])
    result, elapsed = await run(slow, [])
    assert (result.content, elapsed) == ("x", 9)


def test_fault_matching() -> None:
    """Every given selector must match; none means every call; the first fault wins."""
    fault = Fault.hang(call=1, step=2)
    assert fault.matches(call=1, step=2)
    assert not fault.matches(call=1, step=3)
    assert Fault.fail().matches(call=9, call_id="x", step=4)
    plan = FaultPlan(faults=[Fault.delay(1, call_id="a"), Fault.fail()])
    assert plan.fault_for(call=0, call_id="a") is plan.faults[0]
    assert plan.fault_for(call=0, call_id="b") is plan.faults[1]
    assert FaultPlan().fault_for(call=0) is None
    assert fault.describe() == "call=1 step=2"
