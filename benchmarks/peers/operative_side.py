"""operative: an agent (``create_agent``) with a ``Toolbox`` and a scripted ``generate``,
run by ``agent.run``: the run-to-completion call, as each peer's own ``run``/``invoke``.
A run factory returns that call's own coroutine; ``answer`` reads its result."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from operative import (
    Agent,
    GenerateRequest,
    GenerateResponse,
    RunResult,
    Toolbox,
    ToolCall,
    create_agent,
    stop_when,
    tool,
)

NAME = "operative"
RUNNER = "trio"
CALLS = [0]
sleep = trio.sleep


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS[0] += 1
    return a + b


@tool
async def wait(ms: int) -> int:
    """Sleep ``ms`` milliseconds."""
    await trio.sleep(ms / 1000)
    CALLS[0] += 1
    return ms


TOOLBOX = Toolbox([add, wait])
NO_TOOL_CALLS = stop_when.no_tool_calls()


def _agent(generate: Callable[[GenerateRequest], Awaitable[GenerateResponse]]) -> Agent:
    return create_agent(generate=generate, toolbox=TOOLBOX, stop_when=NO_TOOL_CALLS)


def answer(result: RunResult) -> str:
    """The run's answer, once it ended as the script says it does."""
    if result.finish_reason != "stop-condition":
        raise RuntimeError(f"run ended with {result.finish_reason}: {result.error!r}")
    return result.content


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[RunResult]]:
    script = [
        GenerateResponse(
            tool_calls=(ToolCall(id=f"call_{k}", name="add", arguments=f'{{"a": {k}, "b": 1}}'),)
        )
        for k in range(1, steps)
    ]
    script.append(GenerateResponse(content="the answer is 42"))

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if latency:
            await trio.sleep(latency)
        return script[request.step - 1]

    agent = _agent(generate)
    return lambda: agent.run("What is 1 + 1?")


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[RunResult]]:
    ms = round(tool_sleep * 1000)
    first = GenerateResponse(
        tool_calls=tuple(
            ToolCall(id=f"call_{k}", name="wait", arguments=f'{{"ms": {ms}}}') for k in range(calls)
        )
    )
    script = [first, GenerateResponse(content="done")]

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    agent = _agent(generate)
    return lambda: agent.run("What is 1 + 1?")
