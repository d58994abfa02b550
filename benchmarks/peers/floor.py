"""The floor: a bare hand-written Trio agent loop over plain dicts (as in bench_loop.py),
with the step's tool calls run concurrently in a nursery when there is more than one."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

NAME = "floor (bare trio)"
RUNNER = "trio"
CALLS = [0]
sleep = trio.sleep


async def add(a: int, b: int) -> int:
    CALLS[0] += 1
    return a + b


async def wait(ms: int) -> int:
    await trio.sleep(ms / 1000)
    CALLS[0] += 1
    return ms


TOOLS: dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, type]]] = {
    "add": (add, {"a": int, "b": int}),
    "wait": (wait, {"ms": int}),
}


def _call(k: int) -> dict[str, Any]:
    return {"id": f"call_{k}", "name": "add", "arguments": f'{{"a": {k}, "b": 1}}'}


def answer(result: str) -> str:
    """The run's answer (the loop returns it)."""
    return result


async def _execute(call: dict[str, Any]) -> dict[str, Any]:
    entry = TOOLS.get(call["name"])
    try:
        if entry is None:
            raise LookupError(f"unknown tool {call['name']!r}")
        fn, params = entry
        arguments = json.loads(call["arguments"])
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
    script: list[dict[str, Any]] = [
        {"content": "", "tool_calls": [_call(k)]} for k in range(1, steps)
    ]
    script.append({"content": "the answer is 42", "tool_calls": []})

    async def generate(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
        if latency:
            await trio.sleep(latency)
        return script[step - 1]

    return lambda: _loop(generate)


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[str]]:
    ms = round(tool_sleep * 1000)
    first = {
        "content": "",
        "tool_calls": [
            {"id": f"call_{k}", "name": "wait", "arguments": f'{{"ms": {ms}}}'}
            for k in range(calls)
        ],
    }
    script: list[dict[str, Any]] = [first, {"content": "done", "tool_calls": []}]

    async def generate(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
        return script[step - 1]

    return lambda: _loop(generate)
