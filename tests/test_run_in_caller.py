"""A run with nothing beside its loop runs in the caller's task (``agent.run``,
``run_to_end``), and keeps every promise the nursery-backed run keeps."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _runs import summary
from hypothesis import given, settings
from hypothesis import strategies as st

import operative
from operative import Conversation, GenerateResponse, ToolCall, create_agent, open_run, stop_when
from operative._core._open_run import run_to_end
from operative.liveness import StallPolicy
from operative.testing.strategies import Step, model_scripts, scripted_model, scripted_tools

_CALL = GenerateResponse(tool_calls=(ToolCall(id="c1", name="where", arguments="{}"),))
_ANSWER = GenerateResponse(content="done")


def _agent(tasks: list[trio.lowlevel.Task], **options: Any) -> operative.Agent:
    @operative.tool
    async def where() -> str:
        """Record the task the tool runs in."""
        tasks.append(trio.lowlevel.current_task())
        return "here"

    script = [_CALL, _ANSWER]

    async def generate(request: operative.GenerateRequest) -> GenerateResponse:
        tasks.append(trio.lowlevel.current_task())
        return script[request.step - 1]

    return create_agent(generate=generate, tools=[where], **options)


async def test_agent_run_runs_the_loop_in_the_callers_task() -> None:
    tasks: list[trio.lowlevel.Task] = []
    result = await _agent(tasks).run("go")
    assert result.finish_reason == "stop-condition"
    assert result.content == "done"
    assert tasks == [trio.lowlevel.current_task()] * 3


@pytest.mark.parametrize(
    "options",
    [{"abort_on": trio.Event()}, {"stall_policy": StallPolicy(stall_after=60.0)}],
    ids=["abort_on", "stall_policy"],
)
async def test_a_run_with_a_task_beside_its_loop_gets_its_nursery(options: Any) -> None:
    tasks: list[trio.lowlevel.Task] = []
    abort_on = options.pop("abort_on", None)
    result = await _agent(tasks, **options).run("go", abort_on=abort_on)
    assert result.finish_reason == "stop-condition"
    assert len(tasks) == 3
    assert trio.lowlevel.current_task() not in tasks
    assert len(set(tasks)) == 1


async def test_a_cancelled_caller_shuts_the_run_down_and_propagates(autojump_clock: Any) -> None:
    ended: list[operative.RunResult] = []

    async def on_run_end(result: operative.RunResult) -> None:
        ended.append(result)

    async def slow(request: operative.GenerateRequest) -> GenerateResponse:
        await trio.sleep(10)
        return _ANSWER

    agent = create_agent(generate=slow, on_run_end=on_run_end)
    with trio.move_on_after(1) as scope:
        await agent.run("go")
    assert scope.cancelled_caught
    [result] = ended
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "the run's caller was cancelled"


async def test_ctrl_c_in_the_loop_comes_out_as_from_the_runs_nursery() -> None:
    @operative.tool
    async def interrupt() -> str:
        """Stand in for Ctrl-C landing in a tool."""
        raise KeyboardInterrupt

    script = [
        GenerateResponse(tool_calls=(ToolCall(id="c1", name="interrupt", arguments="{}"),)),
        _ANSWER,
    ]

    async def generate(request: operative.GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    agent = create_agent(generate=generate, tools=[interrupt])
    with pytest.raises(BaseExceptionGroup) as caught:
        await agent.run("go")
    assert caught.group_contains(KeyboardInterrupt)
    with pytest.raises(BaseExceptionGroup) as caught_open:
        async with agent.open_run("go"):
            pass
    assert caught_open.group_contains(KeyboardInterrupt)


def _run_both(script: list[Step], cancel_at: float | None, maximum_steps: int) -> None:
    async def one(in_caller: bool) -> tuple[Any, ...]:
        executions: dict[str, int] = {}
        ended: list[operative.RunResult] = []

        async def on_run_end(result: operative.RunResult) -> None:
            ended.append(result)

        tools = dict(scripted_tools(executions))

        @operative.tool
        async def compute(n: int, ctx: operative.ToolContext) -> int:
            """Compute (in the run's task: a worker thread would make the virtual
            time a cancellation lands at depend on real time)."""
            executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
            return n * n

        tools["compute"] = compute
        conversation = Conversation()
        conversation.append_user_message("go")
        options: dict[str, Any] = {
            "generate": scripted_model(script),
            "conversation": conversation,
            "tools": tools,
            "stop_when": stop_when.no_tool_calls(),
            "maximum_steps": maximum_steps,
            "on_run_end": on_run_end,
        }
        with trio.CancelScope() as outer:
            if cancel_at is not None:
                outer.deadline = trio.current_time() + cancel_at
            else:
                outer.deadline = trio.current_time() + 1e6  # scripts may hang
            if in_caller:
                await run_to_end(**options)
            else:
                async with open_run(**options) as run:
                    pass
                await run.result()
        [result] = ended
        return summary(result), outer.cancelled_caught, dict(executions)

    async def main() -> None:
        nursery_backed = await one(False)
        in_caller = await one(True)
        assert in_caller == nursery_backed

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=150, deadline=None)
@given(
    script=model_scripts(),
    cancel_at=st.none() | st.floats(min_value=0.0, max_value=5.0),
    maximum_steps=st.integers(min_value=1, max_value=6),
)
def test_the_in_caller_run_ends_as_the_nursery_backed_run(
    script: list[Step], cancel_at: float | None, maximum_steps: int
) -> None:
    _run_both(script, cancel_at, maximum_steps)
