"""openai-agents: an ``Agent`` with ``@function_tool`` tools over a custom scripted ``Model``
(tracing disabled, as an offline benchmark should)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agents import (  # type: ignore[import-not-found,unused-ignore]
    Agent,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.items import ModelResponse  # type: ignore[import-not-found,unused-ignore]
from agents.models.interface import Model  # type: ignore[import-not-found,unused-ignore]
from agents.usage import Usage  # type: ignore[import-not-found,unused-ignore]
from openai.types.responses import (  # type: ignore[import-not-found,unused-ignore]
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

NAME = "openai-agents"
RUNNER = "asyncio"
CALLS = [0]
sleep = asyncio.sleep
set_tracing_disabled(True)


@function_tool  # type: ignore[untyped-decorator,unused-ignore]
async def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS[0] += 1
    return a + b


@function_tool  # type: ignore[untyped-decorator,unused-ignore]
async def wait(ms: int) -> int:
    """Sleep ``ms`` milliseconds."""
    await asyncio.sleep(ms / 1000)
    CALLS[0] += 1
    return ms


def _call(k: int, name: str, arguments: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        arguments=arguments,
        call_id=f"call_{k}",
        name=name,
        type="function_call",
        id=f"fc_{k}",
        status="completed",
    )


def _text(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )


def _responses_so_far(items: Any) -> int:
    """Model turns already in the input: one per distinct batch of function calls."""
    if isinstance(items, str):
        return 0
    turns, previous_was_call = 0, False
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else getattr(item, "type", None)
        is_call = kind == "function_call"
        if is_call and not previous_was_call:
            turns += 1
        previous_was_call = is_call
    return turns


class ScriptedModel(Model):  # type: ignore[misc,unused-ignore]
    """Returns ``script[turn]``, the turn read off the input; sleeps ``latency`` first."""

    def __init__(self, script: list[list[Any]], latency: float) -> None:
        self.script = script
        self.latency = latency

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        items = kwargs.get("input", args[1] if len(args) > 1 else "")
        output = self.script[_responses_so_far(items)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _agent(script: list[list[Any]], latency: float) -> Agent:
    return Agent(
        name="bench",
        instructions="Answer.",
        model=ScriptedModel(script, latency),
        tools=[add, wait],
    )


def _run(agent: Agent) -> Awaitable[Any]:
    return Runner.run(agent, "What is 1 + 1?", max_turns=30)  # type: ignore[no-any-return]


def answer(result: Any) -> str:
    """The run's answer: its final output."""
    return str(result.final_output)


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[Any]]:
    script: list[list[Any]] = [[_call(k, "add", f'{{"a": {k}, "b": 1}}')] for k in range(1, steps)]
    script.append([_text("the answer is 42")])
    agent = _agent(script, latency)
    return lambda: _run(agent)


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[Any]]:
    ms = round(tool_sleep * 1000)
    first = [_call(k, "wait", f'{{"ms": {ms}}}') for k in range(calls)]
    agent = _agent([first, [_text("done")]], 0.0)
    return lambda: _run(agent)
