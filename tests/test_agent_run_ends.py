"""How ``agent.run`` ends when its caller is cancelled or Ctrl-C lands in the loop."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import operative
from operative import GenerateResponse, ToolCall, create_agent

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


async def test_ctrl_c_in_the_loop_leaves_agent_run_as_itself() -> None:
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
    with pytest.raises(KeyboardInterrupt):  # as itself, not inside a group
        await agent.run("go")
    with pytest.raises(KeyboardInterrupt):  # the open_run block too
        async with agent.open_run("go"):
            pass
