"""operative, realistic-adapter variant: ``peers/operative_side.py``'s agent
(``create_agent`` with a ``Toolbox``, ``stop_when.no_tool_calls()``, run by
``agent.run``) whose ``generate`` builds a fresh ``GenerateResponse`` each step, with its
``ToolCall`` and ``Usage``, as a provider adapter converting the provider's JSON does."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from operative import (
    GenerateRequest,
    GenerateResponse,
    RunResult,
    Toolbox,
    ToolCall,
    Usage,
    create_agent,
    stop_when,
    tool,
)

from . import ANSWER, usage

NAME = "operative, realistic adapter"
RUNNER = "trio"
CALLS = [0]
sleep = trio.sleep


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS[0] += 1
    return a + b


TOOLBOX = Toolbox([add])
NO_TOOL_CALLS = stop_when.no_tool_calls()


def respond(step: int, steps: int) -> GenerateResponse:
    """Step ``step``'s response, built now."""
    prompt, completion, total = usage(step)
    spent = Usage(prompt=prompt, completion=completion, total=total)
    if step < steps:
        call = ToolCall(id=f"call-{step}", name="add", arguments={"a": step, "b": 1})
        return GenerateResponse(content="", tool_calls=(call,), usage=spent)
    return GenerateResponse(content=ANSWER, usage=spent)


def answer(result: RunResult) -> str:
    """The run's answer, once it ended as the script says it does."""
    if result.finish_reason != "stop-condition":
        raise RuntimeError(f"run ended with {result.finish_reason}: {result.error!r}")
    return result.content


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[RunResult]]:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        if latency:
            await trio.sleep(latency)
        return respond(request.step, steps)

    agent = create_agent(generate=generate, toolbox=TOOLBOX, stop_when=NO_TOOL_CALLS)
    return lambda: agent.run("What is 1 + 1?")
