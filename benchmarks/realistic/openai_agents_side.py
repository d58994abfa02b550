"""openai-agents, realistic-adapter variant: ``peers/openai_agents_side.py``'s ``Agent``
and tools (tracing off) over a ``Model`` whose ``get_response`` builds a fresh
``ModelResponse`` each step (a ``ResponseFunctionToolCall``, whose arguments are the
wire's JSON string, or a ``ResponseOutputMessage``, and a ``Usage``), as an
openai-agents model class converting a provider's JSON does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import Agent  # type: ignore[import-not-found,unused-ignore]
from agents.items import ModelResponse  # type: ignore[import-not-found,unused-ignore]
from agents.models.interface import Model  # type: ignore[import-not-found,unused-ignore]
from agents.usage import Usage  # type: ignore[import-not-found,unused-ignore]
from openai.types.responses import (  # type: ignore[import-not-found,unused-ignore]
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from peers.openai_agents_side import CALLS, _responses_so_far, _run, add, answer

from . import ANSWER, usage

__all__ = ["CALLS", "NAME", "RUNNER", "answer", "make_steps", "sleep"]

NAME = "openai-agents, realistic adapter"
RUNNER = "asyncio"
sleep = asyncio.sleep


def respond(step: int, steps: int) -> Any:
    """Step ``step``'s response, built now."""
    prompt, completion, total = usage(step)
    spent = Usage(requests=1, input_tokens=prompt, output_tokens=completion, total_tokens=total)
    output: Any
    if step < steps:
        output = ResponseFunctionToolCall(
            arguments=f'{{"a": {step}, "b": 1}}',
            call_id=f"call-{step}",
            name="add",
            type="function_call",
            id=f"fc-{step}",
            status="completed",
        )
    else:
        output = ResponseOutputMessage(
            id=f"msg-{step}",
            content=[ResponseOutputText(text=ANSWER, type="output_text", annotations=[])],
            role="assistant",
            status="completed",
            type="message",
        )
    return ModelResponse(output=[output], usage=spent, response_id=f"resp-{step}")


class RealisticModel(Model):  # type: ignore[misc,unused-ignore]
    """Builds step ``k``'s response, ``k`` read off the input; sleeps ``latency`` first."""

    def __init__(self, steps: int, latency: float) -> None:
        self.steps = steps
        self.latency = latency

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        items = kwargs.get("input", args[1] if len(args) > 1 else "")
        return respond(_responses_so_far(items) + 1, self.steps)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    agent = Agent(
        name="bench",
        instructions="Answer.",
        model=RealisticModel(steps, latency),
        tools=[add],
    )
    return lambda: _run(agent)
