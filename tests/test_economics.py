"""Budgets, backpressure and context management, through real runs."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import operative
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative.backpressure import FixedDelay, GenerateLimiter
from operative.budgets import Budget, create_cost_budget_monitor
from operative.context import ContextManagement, keep_last
from operative.retry import RetryOptions
from operative.testing import HANG, ScriptedModel, check_run_invariants


@tool
async def step_tool(n: int) -> int:
    """Echo a number."""
    return n


@tool
async def slow(seconds: float) -> str:
    """Take a while (virtual time)."""
    await trio.sleep(seconds)
    return "done"


def _user(text: str = "go") -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


def _calls(*calls: ToolCall, usage: Usage | None = None) -> GenerateResponse:
    return GenerateResponse(tool_calls=calls, usage=usage)


def _call(call_id: str, n: int = 1) -> ToolCall:
    return ToolCall(id=call_id, name="step_tool", arguments={"n": n})


async def _run(model: Any, **options: Any) -> tuple[operative.RunResult, list[Any]]:
    events: list[Any] = []
    options.setdefault("conversation", _user())
    options.setdefault("tools", [step_tool, slow])
    options.setdefault("stop_when", stop_when.no_tool_calls())
    async with open_run(generate=model, **options) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events, maximum_steps=options.get("maximum_steps"))
    return result, events


async def test_token_budget_stops_before_the_calls_of_the_step_that_crossed_it() -> None:
    """The step that crosses max_tokens is recorded; its tool calls are cancelled."""
    model = ScriptedModel(
        [
            _calls(_call("a"), usage=Usage.of(40, 10)),
            _calls(_call("b"), usage=Usage.of(40, 20)),
            "never",
        ]
    )
    result, events = await _run(model, budget=Budget(max_tokens=100))
    assert result.finish_reason == "budget-exceeded"
    assert result.abort_reason == "budget exceeded: tokens 110 of 100"
    assert [r.outcome for s in result.steps for r in s.results] == ["success", "cancelled"]
    types = [e.type for e in events]
    assert types[-3:] == ["budget.exceeded", "step.aborted", "run.completed"]
    assert events[-1].finish_reason == "budget-exceeded"
    assert "budget.threshold" in types
    assert model.calls == 2


async def test_request_budget_counts_retries(autojump_clock: Any) -> None:
    """Each attempt, retries included, is a request; the run stops before one too many."""
    model = ScriptedModel([ConnectionError("down"), ConnectionError("down"), "never"])
    result, _ = await _run(model, budget=Budget(max_requests=2), retry=RetryOptions(max_attempts=5))
    assert result.finish_reason == "budget-exceeded"
    assert model.calls == 2


async def test_tool_call_budget_is_all_or_nothing() -> None:
    """A step whose calls would pass max_tool_calls runs none of them."""
    model = ScriptedModel([_calls(_call("a"), _call("b"), _call("c")), "never"])
    result, _ = await _run(model, budget=Budget(max_tool_calls=2))
    assert result.finish_reason == "budget-exceeded"
    assert [r.outcome for r in result.steps[0].results] == ["cancelled"] * 3


async def test_duration_budget_is_the_run_deadline(autojump_clock: Any) -> None:
    """max_duration cuts a hanging tool at the deadline, as budget-exceeded."""
    model = ScriptedModel([_calls(ToolCall(id="s", name="slow", arguments={"seconds": 3600}))])
    start = trio.current_time()
    result, events = await _run(model, budget=Budget(max_duration=30))
    assert trio.current_time() - start == pytest.approx(30)
    assert result.finish_reason == "budget-exceeded"
    assert (result.abort_reason or "").startswith("budget exceeded: duration")
    assert result.steps[0].results[0].outcome == "cancelled"
    assert [e.type for e in events][-2:] == ["budget.exceeded", "run.completed"]


async def test_duration_budget_while_the_model_hangs(autojump_clock: Any) -> None:
    """A hanging generate is cut by the duration budget too."""
    result, _ = await _run(ScriptedModel([HANG]), budget=Budget(max_duration=5))
    assert result.finish_reason == "budget-exceeded"
    assert result.steps == ()


async def test_cost_monitor_calls_back_and_stops() -> None:
    """A cost monitor reports thresholds and the overrun through callbacks and events."""
    seen: list[str] = []

    async def on_exceeded(info: Any) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(f"exceeded {info.limit}")

    monitor = create_cost_budget_monitor(
        0.01,
        thresholds=(0.5,),
        on_threshold=lambda info: seen.append(f"threshold {info.fraction}"),
        on_exceeded=on_exceeded,
    )
    big = Usage.of(2_000, 500)
    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(_call("a"),), usage=big, model="claude-sonnet-4-5"),
            GenerateResponse(tool_calls=(_call("b"),), usage=big, model="claude-sonnet-4-5"),
            GenerateResponse(content="never", usage=big, model="claude-sonnet-4-5"),
        ]
    )
    result, _ = await _run(model, budget=monitor)
    assert result.finish_reason == "budget-exceeded"
    assert seen == ["threshold 0.5", "exceeded cost_usd"]


async def test_inactive_budget_changes_nothing() -> None:
    """A generous budget lets the run finish as it would without one."""
    model = ScriptedModel([_calls(_call("a"), usage=Usage.of(5, 5)), "done"])
    result, events = await _run(model, budget=Budget(max_tokens=10_000, max_requests=10))
    assert result.finish_reason == "stop-condition"
    assert not any(e.type.startswith("budget.") for e in events)


async def test_fixed_delay_backpressure(autojump_clock: Any) -> None:
    """FixedDelay waits before each generate call and says so in events."""
    model = ScriptedModel([_calls(_call("a")), "done"])
    start = trio.current_time()
    _, events = await _run(model, backpressure=FixedDelay(2.0))
    assert trio.current_time() - start == pytest.approx(4.0)
    applied = [e for e in events if e.type == "backpressure.applied"]
    released = [e for e in events if e.type == "backpressure.released"]
    assert [e.step for e in applied] == [1, 2]
    assert [e.waited for e in released] == [pytest.approx(2.0)] * 2


async def test_shared_limiter_caps_concurrent_generate_calls(autojump_clock: Any) -> None:
    """One GenerateLimiter(max_concurrent=1) serialises the model calls of many runs."""
    limiter = GenerateLimiter(max_concurrent=1)
    active = 0
    peak = 0

    async def model(request: GenerateRequest) -> GenerateResponse:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await trio.sleep(1)
        active -= 1
        return GenerateResponse(content="ok")

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(lambda: _run(model, backpressure=limiter))
    assert peak == 1
    assert trio.current_time() - start == pytest.approx(4)


async def test_context_management_compacts_what_is_sent_not_what_is_stored() -> None:
    """keep_last trims the request; the run's transcript keeps every message."""
    history = Conversation()
    history.append_system_message("be brief")
    for turn in range(6):
        history.append_user_message(f"question {turn} " + "x" * 2000)
        history.append_assistant_message(f"answer {turn} " + "y" * 2000)
    history.append_user_message("last question")
    model = ScriptedModel(["ok"])
    result, events = await _run(
        model,
        conversation=history.current,
        context_management=ContextManagement(max_tokens=2_000, strategy=keep_last(turns=1)),
    )
    sent = model.requests[0].conversation.messages
    assert [m.role for m in sent] == ["system", "user"]
    assert sent[-1].text == "last question"
    assert len(result.conversation.messages) == 15
    (compacted,) = [e for e in events if e.type == "context.compacted"]
    assert compacted.removed == 12
    assert compacted.tokens_after < compacted.tokens_before


async def test_open_run_refuses_bad_economics_options() -> None:
    """budget=, backpressure= and context_management= are checked eagerly."""
    model = ScriptedModel(["x"])
    bad: list[tuple[str, object]] = [
        ("budget", {"max_tokens": 5}),
        ("backpressure", 1.5),
        ("context_management", 8000),
        ("retry", 3),
    ]
    for option, value in bad:
        options: dict[str, Any] = {option: value}
        with pytest.raises(operative.InvalidArgument, match=option):
            async with open_run(generate=model, conversation=_user(), **options):
                pass


async def test_summarizing_compaction_is_paid_for_and_accounted() -> None:
    """A summary written by compaction counts in the run's usage and passes the checker."""
    from operative.context import summarize

    summarizer = ScriptedModel(
        [GenerateResponse(content="earlier: questions 0-5", usage=Usage.of(30, 5))]
    )
    history = Conversation()
    history.append_system_message("be brief")
    for turn in range(6):
        history.append_user_message(f"question {turn} " + "x" * 2000)
        history.append_assistant_message(f"answer {turn} " + "y" * 2000)
    history.append_user_message("last question")
    model = ScriptedModel([GenerateResponse(content="ok", usage=Usage.of(10, 1))])
    result, events = await _run(
        model,
        conversation=history.current,
        context_management=ContextManagement(
            max_tokens=2_000, strategy=summarize(summarizer, keep_last=1)
        ),
    )
    assert result.usage == Usage.of(40, 6)
    (compacted,) = [e for e in events if e.type == "context.compacted"]
    assert compacted.summarized
    assert "earlier: questions 0-5" in model.requests[0].conversation.messages[1].text
