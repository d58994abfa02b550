"""The floor, realistic-adapter variant: a bare hand-written Trio loop over plain dicts
(``peers/floor.py``'s: one ``trio.lowlevel.checkpoint()`` a step, each call's arguments
type-checked, one result dict per call, a nursery only for a step with several calls),
whose model builds each step's response as a
fresh dict: content, tool calls (arguments already a mapping) and usage."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from . import ANSWER, usage

NAME = "floor (bare trio), realistic adapter"
RUNNER = "trio"
CALLS = [0]
sleep = trio.sleep


async def add(a: int, b: int) -> int:
    CALLS[0] += 1
    return a + b


TOOLS: dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, type]]] = {
    "add": (add, {"a": int, "b": int}),
}


def respond(step: int, steps: int) -> dict[str, Any]:
    """Step ``step``'s response, built now."""
    prompt, completion, total = usage(step)
    spent = {"prompt": prompt, "completion": completion, "total": total}
    if step < steps:
        call = {"id": f"call-{step}", "name": "add", "arguments": {"a": step, "b": 1}}
        return {"content": "", "tool_calls": [call], "usage": spent}
    return {"content": ANSWER, "tool_calls": [], "usage": spent}


def answer(result: str) -> str:
    """The run's answer (the loop returns it)."""
    return result


async def _execute(call: dict[str, Any]) -> dict[str, Any]:
    entry = TOOLS.get(call["name"])
    try:
        if entry is None:
            raise LookupError(f"unknown tool {call['name']!r}")
        fn, params = entry
        arguments = call["arguments"]
        if not isinstance(arguments, dict) or any(
            type(arguments.get(name)) is not kind for name, kind in params.items()
        ):
            raise TypeError("invalid arguments")
        content = json.dumps(await fn(**arguments))
    except Exception as exc:
        content = f"error: {exc}"
    return {"role": "tool", "tool_call_id": call["id"], "content": content}


async def _execute_into(results: list[dict[str, Any]], i: int, call: dict[str, Any]) -> None:
    results[i] = await _execute(call)


async def _loop(
    generate: Callable[[list[dict[str, Any]], int], Awaitable[dict[str, Any]]],
) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is 1 + 1?"}]
    for step in range(1, 26):
        await trio.lowlevel.checkpoint()
        response = await generate(messages, step)
        calls = response["tool_calls"]
        messages.append({"role": "assistant", "content": response["content"], "tool_calls": calls})
        if not calls:
            return response["content"]  # type: ignore[no-any-return]
        if len(calls) == 1:
            messages.append(await _execute(calls[0]))
            continue
        results: list[dict[str, Any]] = [{}] * len(calls)
        async with trio.open_nursery() as nursery:
            for i, call in enumerate(calls):
                nursery.start_soon(_execute_into, results, i, call)
        messages.extend(results)
    return str(messages[-1]["content"])


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[str]]:
    async def generate(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
        if latency:
            await trio.sleep(latency)
        return respond(step, steps)

    return lambda: _loop(generate)
