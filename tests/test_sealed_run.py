"""A run that nothing but its caller can cancel enters no cancel scope of its own (a
*sealed* run, ``operative/_core/_run_scope.py``), and ends exactly as a run with one."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import trio
import trio.testing
from _runs import ANSWER, add, checked, configure, history, one_call, summary, with_context
from hypothesis import given, settings
from hypothesis import strategies as st

import operative
from operative import (
    Authority,
    Conversation,
    GenerateResponse,
    RequestContext,
    Toolbox,
    ToolCall,
    create_agent,
    open_run,
    stop_when,
)
from operative._core._open_run import _new_run
from operative._core._run import ActiveRun
from operative._core._run_scope import RunScope
from operative._core._run_state import CancelReason
from operative._core._run_task import drive
from operative._core._types import FinishReason
from operative.budgets import Budget
from operative.liveness._tracker import UNREAD
from operative.testing.strategies import Step, model_scripts, scripted_model


class _OwnToolbox(Toolbox):
    """A toolbox of the host's own: its ``execute`` could hand the run to anything."""


async def _sealed_after_run(**options: Any) -> bool:
    """Run as ``run_to_end`` does, and say whether the run entered no scope."""
    config, live = configure(**options)
    run = _new_run(config, live)
    await drive(run, alone=True)
    result = run._outcome()
    assert result.finish_reason == "stop-condition", result.error
    assert result.content == "done"
    return run._scope.sealed


async def test_a_plain_run_in_its_callers_task_enters_no_scope() -> None:
    assert await _sealed_after_run()


def _request(deadline: float | None = None) -> RequestContext:
    who = Authority(principal_id="p", tenant_id="t", owner_id="o")
    return RequestContext(authority=who, deadline=deadline)


def _approve(request: Any) -> Any:
    raise AssertionError("no call needs approval here")


@pytest.mark.parametrize(
    "options",
    [
        {"tools": [with_context]},
        {"tools": [checked]},
        {"toolbox": _OwnToolbox([add])},
        {"request_context": _request(deadline=4e9)},
        {"on_approval": _approve},
        {"budget": Budget(max_tokens=1_000)},
    ],
    ids=[
        "a-tool-given-a-context",
        "a-per-call-approval-check",
        "a-toolbox-subclass",
        "a-request-deadline",
        "an-approval-handler",
        "a-budget",
    ],
)
async def test_a_run_that_something_can_cancel_keeps_its_scope(options: dict[str, Any]) -> None:
    assert not await _sealed_after_run(**options)


async def test_a_run_is_sealed_only_in_its_callers_task() -> None:
    # ``drive`` without ``alone`` is the loop task of ``open_run``: the caller holds the
    # handle, so the scope is always entered.
    config, live = configure()
    run = _new_run(config, live)
    await drive(run)
    assert not run._scope.sealed
    assert run._scope.cancel_scope is not None


async def test_a_request_context_without_a_deadline_still_seals() -> None:
    assert await _sealed_after_run(request_context=_request())


async def test_an_open_run_aborted_before_its_loop_starts_still_aborts() -> None:
    # The scope is made by the abort (before the loop task enters it).
    async with open_run(
        generate=one_call, conversation=history(), tools=[add], stop_when=stop_when.no_tool_calls()
    ) as run:
        run.abort("before the start")
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "before the start"
    assert result.steps == ()


def test_asking_a_sealed_run_to_stop_fails_loudly() -> None:
    scope = RunScope()
    assert scope.enter(True) is None
    assert scope.sealed
    with pytest.raises(AssertionError, match="sealed run"):
        scope.cancel(CancelReason(FinishReason.ABORTED, "no"))
    with pytest.raises(AssertionError, match="sealed run"):
        scope.add_deadline(1.0, CancelReason(FinishReason.ABORTED, "no"))
    scope.end()
    scope.cancel(CancelReason(FinishReason.ABORTED, "after the end: nothing to do"))


def test_a_scope_made_before_the_loop_is_entered_even_when_it_could_seal() -> None:
    scope = RunScope()
    scope.cancel(CancelReason(FinishReason.ABORTED, "early"))
    entered = scope.enter(True)
    assert entered is scope.cancel_scope
    assert not scope.sealed


async def test_a_sealed_run_whose_caller_is_cancelled_ends_aborted(autojump_clock: Any) -> None:
    ended: list[operative.RunResult] = []

    async def on_run_end(result: operative.RunResult) -> None:
        ended.append(result)

    @operative.tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        await trio.sleep(seconds)
        return "slept"

    async def generate(request: operative.GenerateRequest) -> GenerateResponse:
        if request.step == 1:
            return GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="slow", arguments={"seconds": 10}),)
            )
        return ANSWER

    agent = create_agent(generate=generate, tools=[slow], on_run_end=on_run_end)
    with trio.move_on_after(1) as scope:
        await agent.run("go")
    assert scope.cancelled_caught
    [result] = ended
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "the run's caller was cancelled"
    # The call in flight was answered: the transcript is never left with an open call.
    [step] = result.steps
    assert step.aborted
    assert [r.outcome for r in step.results] == ["cancelled"]
    assert [m.role for m in result.conversation.messages] == ["user", "assistant", "tool"]


# -- the sealed run ends as the scoped run, whatever the script ------------------------


def _tools(executions: list[str]) -> list[operative.Tool]:
    """The scripted tools without a context (a context would unseal the run): each
    execution is recorded by tool name (concurrent calls start in any order)."""

    @operative.tool
    async def work(seconds: float) -> str:
        """Work for ``seconds``."""
        executions.append("work")
        await trio.sleep(seconds)
        return "worked"

    @operative.tool
    async def fail() -> str:
        """Always fails."""
        executions.append("fail")
        raise RuntimeError("scripted tool failure")

    @operative.tool
    async def hang() -> str:
        """Never returns."""
        executions.append("hang")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @operative.tool
    async def compute(n: int) -> int:
        """Compute (in the run's task)."""
        executions.append("compute")
        return n * n

    return [work, fail, hang, compute]


def _run_four_ways(script: list[Step], cancel_at: float | None, maximum_steps: int) -> None:
    """Run ``script`` in an ``open_run``, driven alone with a scope, driven alone sealed,
    and through ``agent.run`` (sealed, sharing the agent's configuration and plan, its
    liveness unread): all four must end alike."""

    async def one(how: str) -> tuple[Any, ...]:
        executions: list[str] = []
        ended: list[operative.RunResult] = []

        async def on_run_end(result: operative.RunResult) -> None:
            ended.append(result)

        tools = _tools(executions)
        conversation = Conversation()
        conversation.append_user_message("go")
        options: dict[str, Any] = {
            "generate": scripted_model(script),
            "conversation": conversation,
            "stop_when": stop_when.no_tool_calls(),
            "maximum_steps": maximum_steps,
            "on_run_end": on_run_end,
        }
        if how == "scoped":
            options["toolbox"] = _OwnToolbox(tools)  # a way in: the scope is entered
        else:
            options["tools"] = tools
        run: operative.ActiveRun
        made: list[operative.ActiveRun] = []

        class Spy(ActiveRun):
            __slots__ = ()

            def __init__(self, *args: Any) -> None:
                super().__init__(*args)
                made.append(self)

        with trio.CancelScope() as outer:
            # Scripts may hang: a caller that never cancels still bounds them.
            outer.deadline = trio.current_time() + (cancel_at if cancel_at is not None else 1e6)
            if how == "nursery":
                async with open_run(**options) as run:
                    pass
            elif how == "agent":
                del options["conversation"]
                agent = create_agent(**options)
                with mock.patch.object(operative._agent, "ActiveRun", Spy):
                    try:
                        await agent.run("go")
                    finally:
                        [run] = made
                assert run._liveness is UNREAD
            else:
                config, live = configure(**options)
                run = _new_run(config, live)
                await drive(run, alone=True)
        assert run._scope.sealed == (how in ("sealed", "agent"))
        [result] = ended
        return summary(result), outer.cancelled_caught, sorted(executions)

    async def main() -> None:
        nursery_backed = await one("nursery")
        scoped = await one("scoped")
        sealed = await one("sealed")
        through_agent = await one("agent")
        assert scoped == nursery_backed
        assert sealed == nursery_backed
        assert through_agent == nursery_backed

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=150, deadline=None)
@given(
    script=model_scripts(),
    cancel_at=st.none() | st.floats(min_value=0.0, max_value=5.0),
    maximum_steps=st.integers(min_value=1, max_value=6),
)
def test_the_sealed_run_ends_as_the_scoped_runs(
    script: list[Step], cancel_at: float | None, maximum_steps: int
) -> None:
    _run_four_ways(script, cancel_at, maximum_steps)
