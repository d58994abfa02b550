"""Random scripts for the multi-agent property tests: plans, strategies and their players.

A plan is plain data (frozen dataclasses) that hypothesis draws and shrinks; the players
turn it into generate functions and tools that follow it on trio's clock. Every duration
is a whole number of virtual seconds, while aborts land on half seconds and budget
deadlines on quarter seconds, so an abort or a deadline never ties with the work it cuts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio
from hypothesis import strategies as st

from operative import GenerateRequest, GenerateResponse, Tool, ToolCall, ToolContext, Usage

ToolKind = Literal["ok", "fail"]
ChildEndKind = Literal["answer", "raise", "invalid", "hang"]
Generate = Callable[[GenerateRequest], Awaitable[Any]]

SAFETY_ABORT = 100_000.5
"""When no abort is planned, a hanging child is ended by this late abort (virtual time)."""


# -- plans ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolUse:
    """A call of the plain ``work`` tool: sleep ``seconds``, then return or raise."""

    kind: ToolKind
    seconds: int


@dataclass(frozen=True)
class ChildStep:
    """One step of a child run that calls tools."""

    delay: int
    tokens: int
    calls: tuple[ToolUse, ...]


@dataclass(frozen=True)
class ChildEnd:
    """How a child run's last generate call goes."""

    kind: ChildEndKind
    delay: int
    tokens: int


@dataclass(frozen=True)
class ChildPlan:
    steps: tuple[ChildStep, ...]
    end: ChildEnd


@dataclass(frozen=True)
class SubagentUse:
    """A call of one of the parent's subagent tools, with the child's whole script."""

    tool: Literal["alpha", "ask_beta"]
    child: ChildPlan


@dataclass(frozen=True)
class ParentStep:
    delay: int
    tokens: int
    calls: tuple[ToolUse | SubagentUse, ...]


@dataclass(frozen=True)
class TreePlan:
    """A parent run that calls subagents and plain tools, and how it may be cut short."""

    steps: tuple[ParentStep, ...]
    final_delay: int
    final_tokens: int
    abort_at: float | None
    max_tokens: int | None
    max_duration: float | None
    tool_concurrency: int | None


@dataclass(frozen=True)
class WorkerJob:
    """One task of a supervisor's plan: which worker, and how its run goes."""

    worker: str
    kind: Literal["ok", "raise", "invalid", "tool-error"]
    delay: int
    tokens: int


@dataclass(frozen=True)
class SupervisorPlan:
    jobs: tuple[WorkerJob, ...]
    policy: Literal["isolate", "cancel_siblings"]
    max_concurrency: int
    abort_at: float | None
    plan_tokens: int


@dataclass(frozen=True)
class HandoffPlan:
    """Triage works for ``before`` steps, hands off in the next one, billing finishes."""

    before: tuple[ParentStep, ...]
    handoff_extras: tuple[ToolUse | SubagentUse, ...]
    second_handoff: bool
    after: tuple[ParentStep, ...]
    stop_on_handoff: bool
    abort_at: float | None


# -- strategies ----------------------------------------------------------------------------

tool_uses = st.builds(ToolUse, kind=st.sampled_from(["ok", "fail"]), seconds=st.integers(0, 6))

child_plans = st.builds(
    ChildPlan,
    steps=st.lists(
        st.builds(
            ChildStep,
            delay=st.integers(0, 4),
            tokens=st.integers(0, 30),
            calls=st.lists(tool_uses, min_size=1, max_size=3).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
    end=st.builds(
        ChildEnd,
        kind=st.sampled_from(["answer", "answer", "raise", "invalid", "hang"]),
        delay=st.integers(0, 8),
        tokens=st.integers(0, 30),
    ),
)

subagent_uses = st.builds(
    SubagentUse, tool=st.sampled_from(["alpha", "ask_beta"]), child=child_plans
)


def parent_steps(
    calls: st.SearchStrategy[ToolUse | SubagentUse], max_size: int
) -> st.SearchStrategy[tuple[ParentStep, ...]]:
    return st.lists(
        st.builds(
            ParentStep,
            delay=st.integers(0, 3),
            tokens=st.integers(0, 40),
            calls=st.lists(calls, min_size=1, max_size=4).map(tuple),
        ),
        min_size=0,
        max_size=max_size,
    ).map(tuple)


mixed_calls: st.SearchStrategy[ToolUse | SubagentUse] = st.one_of(subagent_uses, tool_uses)
half_seconds = st.integers(0, 40).map(lambda n: n + 0.5)

tree_plans = st.builds(
    TreePlan,
    steps=parent_steps(mixed_calls, 3),
    final_delay=st.integers(0, 3),
    final_tokens=st.integers(0, 40),
    abort_at=st.none() | half_seconds,
    max_tokens=st.none() | st.integers(0, 300),
    max_duration=st.none() | st.integers(0, 40).map(lambda n: n + 0.25),
    tool_concurrency=st.none() | st.integers(1, 3),
)

supervisor_plans = st.builds(
    SupervisorPlan,
    jobs=st.lists(
        st.builds(
            WorkerJob,
            worker=st.sampled_from(["north", "south", "east", "nobody"]),
            kind=st.sampled_from(["ok", "ok", "raise", "invalid", "tool-error"]),
            delay=st.integers(0, 10),
            tokens=st.integers(0, 30),
        ),
        min_size=1,
        max_size=6,
    ).map(tuple),
    policy=st.sampled_from(["isolate", "cancel_siblings"]),
    max_concurrency=st.integers(1, 6),
    abort_at=st.none() | half_seconds,
    plan_tokens=st.integers(0, 40),
)

handoff_plans = st.builds(
    HandoffPlan,
    before=parent_steps(mixed_calls, 2),
    handoff_extras=st.lists(mixed_calls, max_size=2).map(tuple),
    second_handoff=st.booleans(),
    after=parent_steps(tool_uses, 2),
    stop_on_handoff=st.booleans(),
    abort_at=st.none() | half_seconds,
)


# -- players -------------------------------------------------------------------------------


def usage(tokens: int) -> Usage:
    return Usage(prompt=tokens, completion=0, total=tokens)


@dataclass
class ToolRecords:
    """What every ``work`` tool body did: started, then done, failed or cancelled."""

    started: list[tuple[str, str]] = field(default_factory=list)
    ended: dict[tuple[str, str], str] = field(default_factory=dict)

    def unfinished(self) -> list[tuple[str, str]]:
        return [key for key in self.started if key not in self.ended]


def work_tool(records: ToolRecords) -> Tool:
    """The plain tool: sleeps ``seconds`` of virtual time, then answers or raises."""

    async def work(kind: str, seconds: int, context: ToolContext) -> str:
        """Do some work."""
        key = (context.execution.run_id, context.call_id)
        records.started.append(key)
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            records.ended[key] = "cancelled"
            raise
        if kind == "fail":
            records.ended[key] = "failed"
            raise RuntimeError(f"work {context.call_id} failed")
        records.ended[key] = "done"
        return f"worked {seconds}"

    return Tool(work, name="work", description="Do some work.")


def tool_call(call_id: str, use: ToolUse | SubagentUse, key: str) -> ToolCall:
    if isinstance(use, ToolUse):
        return ToolCall(
            id=call_id, name="work", arguments={"kind": use.kind, "seconds": use.seconds}
        )
    return ToolCall(id=call_id, name=use.tool, arguments={"input": key})


def child_key(prefix: str, step: int, index: int) -> str:
    """The input a parent's call gives its child; it names the child's plan."""
    return f"{prefix}{step}.{index}"


def child_plans_of(steps: tuple[ParentStep, ...], prefix: str) -> dict[str, ChildPlan]:
    return {
        child_key(prefix, number, index): use.child
        for number, step in enumerate(steps, 1)
        for index, use in enumerate(step.calls)
        if isinstance(use, SubagentUse)
    }


def call_id_of(prefix: str, step: int, index: int) -> str:
    return f"{prefix}{step}_{index}"


def step_response(prefix: str, number: int, step: ParentStep) -> GenerateResponse:
    return GenerateResponse(
        content=f"step {number}",
        tool_calls=tuple(
            tool_call(call_id_of(prefix, number, index), use, child_key(prefix, number, index))
            for index, use in enumerate(step.calls)
        ),
        usage=usage(step.tokens),
    )


def scripted_parent(
    steps: tuple[ParentStep, ...],
    final: tuple[int, int, str],
    prefix: str = "p",
    first_step: int = 1,
) -> Generate:
    """A parent's model: ``steps`` from ``first_step`` on, then ``final`` (delay, tokens,
    answer)."""

    async def generate(request: GenerateRequest) -> GenerateResponse:
        index = request.step - first_step
        if index < len(steps):
            step = steps[index]
            await trio.sleep(step.delay)
            return step_response(prefix, request.step, step)
        delay, tokens, text = final
        await trio.sleep(delay)
        return GenerateResponse(content=text, usage=usage(tokens))

    return generate


def user_input(request: GenerateRequest) -> str:
    return next(str(m.content) for m in request.conversation.messages if m.role == "user")


def child_answer(key: str) -> str:
    return f"answer of {key}"


def scripted_children(plans: dict[str, ChildPlan]) -> Generate:
    """Every child's model: the plan named by the child's input."""

    async def generate(request: GenerateRequest) -> Any:
        key = user_input(request)
        plan = plans[key]
        if request.step <= len(plan.steps):
            step = plan.steps[request.step - 1]
            await trio.sleep(step.delay)
            return GenerateResponse(
                content="",
                tool_calls=tuple(
                    tool_call(f"k{request.step}_{index}", use, "")
                    for index, use in enumerate(step.calls)
                ),
                usage=usage(step.tokens),
            )
        end = plan.end
        await trio.sleep(end.delay)
        if end.kind == "hang":
            await trio.sleep_forever()
        if end.kind == "raise":
            raise RuntimeError(f"model of {key} is down")
        if end.kind == "invalid":
            return {"content": "not a response"}
        return GenerateResponse(content=child_answer(key), usage=usage(end.tokens))

    return generate


def scripted_workers(jobs: dict[str, WorkerJob], running: list[int]) -> Generate:
    """Every worker's model: the job named by its task; ``running`` tracks concurrency
    as ``[now, peak]``."""

    async def generate(request: GenerateRequest) -> Any:
        job = jobs[user_input(request)]
        if request.step > 1:
            return GenerateResponse(content=f"{job.worker} recovered", usage=usage(1))
        running[0] += 1
        running[1] = max(running[1], running[0])
        try:
            await trio.sleep(job.delay)
        finally:
            running[0] -= 1
        if job.kind == "raise":
            raise RuntimeError(f"worker model {job.worker} is down")
        if job.kind == "invalid":
            return ["not", "a", "response"]
        if job.kind == "tool-error":
            # A tool error is a result the worker's model reads; the worker still answers.
            return GenerateResponse(
                content="",
                tool_calls=(
                    ToolCall(id="w1", name="work", arguments={"kind": "fail", "seconds": 0}),
                ),
                usage=usage(job.tokens),
            )
        return GenerateResponse(content=f"{job.worker} did {job.delay}", usage=usage(job.tokens))

    return generate
