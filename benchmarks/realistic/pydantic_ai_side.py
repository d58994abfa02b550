"""pydantic-ai, realistic-adapter variant: ``peers/pydantic_ai_side.py``'s ``Agent`` and
tools over a ``FunctionModel`` whose function builds a fresh ``ModelResponse`` each step
(a ``ToolCallPart`` with a mapping of arguments, or a ``TextPart``, and a
``RequestUsage``), as a pydantic-ai model class converting a provider's JSON does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from peers.pydantic_ai_side import CALLS, TOOLS, answer
from pydantic_ai import Agent  # type: ignore[import-not-found,unused-ignore]
from pydantic_ai.messages import (  # type: ignore[import-not-found,unused-ignore]
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import FunctionModel  # type: ignore[import-not-found,unused-ignore]
from pydantic_ai.usage import RequestUsage  # type: ignore[import-not-found,unused-ignore]

from . import ANSWER, usage

__all__ = ["CALLS", "NAME", "RUNNER", "answer", "make_steps", "sleep"]

NAME = "pydantic-ai, realistic adapter"
RUNNER = "asyncio"
sleep = asyncio.sleep


def respond(step: int, steps: int) -> Any:
    """Step ``step``'s response, built now."""
    prompt, completion, _ = usage(step)
    spent = RequestUsage(input_tokens=prompt, output_tokens=completion)
    if step < steps:
        part: Any = ToolCallPart(
            tool_name="add", args={"a": step, "b": 1}, tool_call_id=f"call-{step}"
        )
    else:
        part = TextPart(content=ANSWER)
    return ModelResponse(parts=[part], usage=spent)


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    async def model(messages: list[Any], info: Any) -> Any:
        if latency:
            await asyncio.sleep(latency)
        step = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        return respond(step, steps)

    agent = Agent(FunctionModel(model), tools=TOOLS)
    return lambda: agent.run("What is 1 + 1?")
