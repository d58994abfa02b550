"""Subagents: a child run inside the parent's tool task, tied to its abort, budget and events."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from operative import FinishReason, GenerateResponse, ToolCall, Usage, create_agent, tool
from operative.budgets import Budget
from operative.multiagent import SubagentError, subagent_tool
from operative.testing import HANG, ScriptedModel, check_run_invariants

from ._helpers import Capture, answer, call, live_tasks, unwrap


@tool
async def slow_lookup(query: str) -> str:
    """Look something up (slowly)."""
    await trio.sleep(100)
    return query


async def test_subagent_answer_is_the_tool_result_and_events_are_tagged() -> None:
    """The child's final answer is the call's result; its events arrive wrapped and tagged."""
    child = create_agent(
        name="researcher", instructions="Research.", generate=ScriptedModel([answer("found it", 7)])
    )
    parent = create_agent(
        generate=ScriptedModel([call("researcher", "c1", input="look"), answer("done", 3)]),
        tools=[subagent_tool(child)],
    )
    events: list[Any] = []
    async with parent.open_run("hi") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert result.content == "done"
    tool_message = result.conversation.messages[-2]
    assert tool_message.role == "tool"
    assert tool_message.content == "found it"
    child_id = f"{run.run_id}/c1"
    inner = unwrap(events, child_id)
    assert next(e.type for e in inner) == "run.started"
    assert inner[-1].type == "run.completed"
    assert all(e.run_id == child_id for e in inner)
    wrapper = next(e for e in events if e.type == "subagent.event")
    assert wrapper.run_id == run.run_id
    assert wrapper.step == 1
    assert wrapper.call_id == "c1"
    assert wrapper.agent_name == "researcher"
    assert wrapper.tool_name == "researcher"
    # The child's usage is the parent's too, in the run and in the step that called it.
    assert result.usage.total == 10
    assert result.steps[0].usage.total == 7
    completed = next(e for e in events if e.type == "subagent.completed")
    assert completed.usage.total == 7
    assert completed.finish_reason == "stop-condition"
    check_run_invariants(result, events)


async def test_nested_subagents_wrap_once_per_level() -> None:
    """A grandchild's events reach the top run wrapped twice."""
    leaf = create_agent(name="leaf", generate=ScriptedModel(["leaf answer"]))
    middle = create_agent(
        name="middle",
        generate=ScriptedModel([call("leaf", "m1", input="go"), "middle answer"]),
        tools=[subagent_tool(leaf)],
    )
    top = create_agent(
        generate=ScriptedModel([call("middle", "t1", input="go"), "top answer"]),
        tools=[subagent_tool(middle)],
    )
    events: list[Any] = []
    async with top.open_run("hi") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert result.content == "top answer"
    middle_events = unwrap(events, f"{run.run_id}/t1")
    leaf_events = unwrap(middle_events, f"{run.run_id}/t1/m1")
    assert leaf_events[-1].type == "run.completed"
    assert leaf_events[-1].content == "leaf answer"
    check_run_invariants(result, events)


async def test_parent_abort_mid_subagent_leaves_no_task_and_repaired_transcripts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Aborting the parent while the child's tool runs cancels the child; both transcripts
    answer every call and no task is left."""
    child_ends = Capture()
    child = create_agent(
        name="researcher",
        generate=ScriptedModel([call("slow_lookup", "k1", query="x"), "never"]),
        tools=[slow_lookup],
        on_run_end=child_ends,
    )
    parent = create_agent(
        generate=ScriptedModel([call("researcher", "c1", input="look"), "never"]),
        tools=[subagent_tool(child)],
    )
    events: list[Any] = []
    async with parent.open_run("hi") as run:
        run.add_listener("*", events.append)
        await trio.sleep(5)
        run.abort("the user left")
    assert live_tasks() == []
    result = await run.result()
    assert result.finish_reason is FinishReason.ABORTED
    check_run_invariants(result, events)
    parent_results = [m for m in result.conversation.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.outcome) for m in parent_results] == [("c1", "cancelled")]
    [child_result] = child_ends.results
    assert child_result.finish_reason is FinishReason.ABORTED
    check_run_invariants(child_result, unwrap(events, f"{run.run_id}/c1"))
    child_results = [m for m in child_result.conversation.messages if m.role == "tool"]
    assert [(m.tool_call_id, m.outcome) for m in child_results] == [("k1", "cancelled")]


async def test_child_inherits_the_parents_remaining_token_budget() -> None:
    """The child stops with budget-exceeded where the parent's budget runs out; the parent
    pays for what the child spent and ends the same way."""
    child_ends = Capture()

    def looping(request: Any) -> GenerateResponse:
        return GenerateResponse(
            content="",
            tool_calls=(ToolCall(id=f"k{request.step}", name="note", arguments={"text": "x"}),),
            usage=Usage(prompt=40, total=40),
        )

    @tool
    async def note(text: str) -> str:
        """Take a note."""
        return text

    child = create_agent(
        name="worker", generate=ScriptedModel(looping), tools=[note], on_run_end=child_ends
    )
    parent = create_agent(
        generate=ScriptedModel(
            [
                GenerateResponse(
                    content="",
                    tool_calls=(ToolCall(id="c1", name="worker", arguments={"input": "go"}),),
                    usage=Usage(prompt=30, total=30),
                ),
                "never",
            ]
        ),
        tools=[subagent_tool(child)],
        budget=Budget(max_tokens=100),
    )
    events: list[Any] = []
    async with parent.open_run("hi") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    [child_result] = child_ends.results
    assert child_result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert child_result.usage.total == 80  # 40 + 40 > the 70 the parent had left
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    assert result.usage.total == 110
    check_run_invariants(result, events)


async def test_child_gets_what_is_left_of_the_parents_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A parent with 10 s left bounds a hanging child: both end at t=10."""
    child_ends = Capture()
    child = create_agent(name="sleeper", generate=ScriptedModel([HANG]), on_run_end=child_ends)
    parent = create_agent(
        generate=ScriptedModel([call("sleeper", "c1", input="wait"), "never"]),
        tools=[subagent_tool(child)],
        budget=Budget(max_duration=10),
    )
    start = trio.current_time()
    result = await parent.run("hi")
    assert trio.current_time() - start == 10
    assert result.finish_reason is FinishReason.BUDGET_EXCEEDED
    [child_result] = child_ends.results
    assert child_result.finish_reason in (FinishReason.BUDGET_EXCEEDED, FinishReason.ABORTED)
    assert live_tasks() == []


async def test_a_failed_child_is_an_error_result_for_the_parent() -> None:
    """A child that errs makes the call an error result; the parent goes on."""
    child = create_agent(name="broken", generate=ScriptedModel([RuntimeError("model down")]))
    parent = create_agent(
        generate=ScriptedModel([call("broken", "c1", input="go"), "recovered"]),
        tools=[subagent_tool(child)],
    )
    result = await parent.run("hi")
    assert result.content == "recovered"
    [step] = [s for s in result.steps if s.results]
    assert step.results[0].outcome == "error"
    assert "SubagentError" in (step.results[0].error or "")
    assert "model down" in (step.results[0].error or "")


async def test_subagent_tool_outside_a_run_is_a_plain_run() -> None:
    """Executed by a host with no run, the tool just runs the agent."""
    child = create_agent(name="helper", generate=ScriptedModel(["plain"]))
    helper = subagent_tool(child, name="ask_helper", description="Ask the helper.")
    from operative import Toolbox

    result = await Toolbox([helper]).execute(
        ToolCall(id="x", name="ask_helper", arguments={"input": "hi"})
    )
    assert result.outcome == "success"
    assert result.value == "plain"
    assert helper.spec.description == "Ask the helper."
    assert issubclass(SubagentError, Exception)
