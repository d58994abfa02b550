"""pydantic-ai: an ``Agent`` with plain tools over a ``FunctionModel`` (its scripted model)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import Agent, Tool  # type: ignore[import-not-found,unused-ignore]
from pydantic_ai.messages import (  # type: ignore[import-not-found,unused-ignore]
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel  # type: ignore[import-not-found,unused-ignore]

NAME = "pydantic-ai"
RUNNER = "asyncio"
CALLS = [0]
sleep = asyncio.sleep


async def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS[0] += 1
    return a + b


async def wait(ms: int) -> int:
    """Sleep ``ms`` milliseconds."""
    await asyncio.sleep(ms / 1000)
    CALLS[0] += 1
    return ms


TOOLS = [Tool(add, takes_ctx=False), Tool(wait, takes_ctx=False)]


def _step(messages: list[Any]) -> int:
    return 1 + sum(isinstance(m, ModelResponse) for m in messages)


def _agent(script: list[Any], latency: float) -> Agent:
    async def model(messages: list[Any], info: Any) -> Any:
        if latency:
            await asyncio.sleep(latency)
        return script[_step(messages) - 1]

    return Agent(FunctionModel(model), tools=TOOLS)


def answer(result: Any) -> str:
    """The run's answer: its output."""
    return str(result.output)


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    script: list[Any] = [
        ModelResponse(
            parts=[
                ToolCallPart(tool_name="add", args=f'{{"a": {k}, "b": 1}}', tool_call_id=f"c{k}")
            ]
        )
        for k in range(1, steps)
    ]
    script.append(ModelResponse(parts=[TextPart(content="the answer is 42")]))
    agent = _agent(script, latency)
    return lambda: agent.run("What is 1 + 1?")


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[Any]]:
    ms = round(tool_sleep * 1000)
    first = ModelResponse(
        parts=[
            ToolCallPart(tool_name="wait", args=f'{{"ms": {ms}}}', tool_call_id=f"c{k}")
            for k in range(calls)
        ]
    )
    agent = _agent([first, ModelResponse(parts=[TextPart(content="done")])], 0.0)
    return lambda: agent.run("What is 1 + 1?")
