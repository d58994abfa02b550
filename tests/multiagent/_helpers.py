"""Shared helpers for the multi-agent tests."""

from __future__ import annotations

from typing import Any

import trio

from operative import GenerateResponse, RunResult, ToolCall, Usage


def call(name: str, call_id: str, **arguments: Any) -> GenerateResponse:
    """A response that calls one tool."""
    return GenerateResponse(
        content="", tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),)
    )


def answer(text: str, tokens: int = 0) -> GenerateResponse:
    """A plain answer that reports ``tokens`` total tokens."""
    usage = Usage(prompt=tokens, completion=0, total=tokens) if tokens else None
    return GenerateResponse(content=text, usage=usage)


def live_tasks() -> list[trio.lowlevel.Task]:
    """Every task alive except the current one, its ancestors and trio's system tasks."""
    me = trio.lowlevel.current_task()
    ancestors: set[trio.lowlevel.Task] = set()
    task: trio.lowlevel.Task | None = me
    while task is not None:
        ancestors.add(task)
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    found: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                if child not in ancestors and not child.name.startswith("<"):
                    found.append(child)
                walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return [t for t in found if not t.name.startswith("trio.")]


def unwrap(events: list[Any], child_run_id: str) -> list[Any]:
    """The events of one child run, taken out of their ``subagent.event`` wrappers."""
    return [
        e.event for e in events if e.type == "subagent.event" and e.child_run_id == child_run_id
    ]


class Capture:
    """An ``on_run_end`` hook keeping every result it sees."""

    def __init__(self) -> None:
        self.results: list[RunResult] = []

    def __call__(self, result: RunResult) -> None:
        self.results.append(result)
