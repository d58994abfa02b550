"""Hypothesis strategies for property-testing agent loops (needs ``hypothesis``).

A *script* is what a model says, step by step; a *fault plan* says which tool calls
fail, hang or run slowly, and where an abort lands. :func:`scripted_tools` gives tools
that follow a plan and count their executions, so a test can check that no call ran
twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs
import trio
from hypothesis import strategies as st

from .._model import GenerateRequest, GenerateResponse
from .._types import ToolCall, Usage
from ..tools import Tool, ToolContext, tool
from ._scripted import ScriptedModel

__all__ = [
    "Interruption",
    "ScriptedCall",
    "Step",
    "ToolBehaviour",
    "interruptions",
    "model_scripts",
    "scripted_model",
    "scripted_tools",
    "usages",
]

ToolBehaviour = Literal["ok", "fail", "slow", "hang", "bad-json", "bad-args", "unknown"]


@attrs.frozen
class ScriptedCall:
    """One tool call in a script and how it behaves."""

    behaviour: ToolBehaviour
    seconds: float = 0.0


@attrs.frozen
class Step:
    """One model response: an answer, calls, a generate error or a hang."""

    kind: Literal["answer", "calls", "error", "hang"]
    calls: tuple[ScriptedCall, ...] = ()
    usage: Usage | None = None
    text: str = ""


@attrs.frozen
class Interruption:
    """Where the run is interrupted: ``abort()`` or cancelling the caller, at ``at`` s."""

    kind: Literal["none", "abort", "cancel"]
    at: float = 0.0


def usages() -> st.SearchStrategy[Usage]:
    """Usage values with a consistent total."""
    return st.builds(Usage.of, prompt=st.integers(0, 10_000), completion=st.integers(0, 10_000))


_calls = st.builds(
    ScriptedCall,
    behaviour=st.sampled_from(["ok", "fail", "slow", "hang", "bad-json", "bad-args", "unknown"]),
    seconds=st.sampled_from([0.0, 0.5, 3.0, 30.0]),
)

_steps = st.one_of(
    st.builds(Step, kind=st.just("answer"), usage=st.none() | usages(), text=st.text(max_size=20)),
    st.builds(
        Step,
        kind=st.just("calls"),
        calls=st.lists(_calls, min_size=1, max_size=4).map(tuple),
        usage=st.none() | usages(),
    ),
    st.builds(Step, kind=st.sampled_from(["error", "hang"])),
)


def model_scripts(max_steps: int = 8) -> st.SearchStrategy[list[Step]]:
    """Scripts of model responses: answers, tool calls, errors and hangs."""
    return st.lists(_steps, min_size=1, max_size=max_steps)


def interruptions() -> st.SearchStrategy[Interruption]:
    """No interruption, or an abort or caller cancellation at some virtual time."""
    return st.one_of(
        st.just(Interruption("none")),
        st.builds(
            Interruption,
            kind=st.sampled_from(["abort", "cancel"]),
            at=st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0, 100.0]),
        ),
    )


def scripted_model(script: list[Step], *, think: float = 1.0) -> ScriptedModel:
    """A model that plays ``script`` (each call takes ``think`` s of virtual time).

    Past the end of the script it answers ``"done"``.
    """

    async def generate(request: GenerateRequest) -> GenerateResponse:
        await trio.sleep(think)
        index = request.step - 1
        if index >= len(script):
            return GenerateResponse(content="done")
        step = script[index]
        if step.kind == "hang":
            await trio.sleep_forever()
        if step.kind == "error":
            raise RuntimeError(f"scripted failure at step {request.step}")
        if step.kind == "answer":
            return GenerateResponse(content=step.text, usage=step.usage)
        calls = tuple(_tool_call(call, f"s{request.step}c{i}") for i, call in enumerate(step.calls))
        return GenerateResponse(tool_calls=calls, usage=step.usage)

    return ScriptedModel(generate)


def _tool_call(call: ScriptedCall, call_id: str) -> ToolCall:
    behaviour = call.behaviour
    if behaviour == "bad-json":
        return ToolCall(id=call_id, name="work", arguments='{"seconds": ')
    if behaviour == "bad-args":
        return ToolCall(id=call_id, name="work", arguments={"seconds": "soon"})
    if behaviour == "unknown":
        return ToolCall(id=call_id, name="no_such_tool", arguments={})
    if behaviour == "fail":
        return ToolCall(id=call_id, name="fail", arguments={})
    if behaviour == "hang":
        return ToolCall(id=call_id, name="hang", arguments={})
    seconds = call.seconds if behaviour == "slow" else 0.0
    return ToolCall(id=call_id, name="work", arguments={"seconds": seconds})


def scripted_tools(executions: dict[str, int]) -> Mapping[str, Tool]:
    """The tools a script calls; each execution is counted in ``executions`` by call id."""

    @tool
    async def work(seconds: float, ctx: ToolContext) -> str:
        """Work for ``seconds``."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        await trio.sleep(seconds)
        return "worked"

    @tool
    async def fail(ctx: ToolContext) -> str:
        """Always fails."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        raise RuntimeError("scripted tool failure")

    @tool
    async def hang(ctx: ToolContext) -> str:
        """Never returns."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    return {"work": work, "fail": fail, "hang": hang}
