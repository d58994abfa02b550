"""check_run_invariants catches a hand-built violation of each loop invariant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import trio

from operative import (
    Conversation,
    ConversationHistory,
    FinishReason,
    GenerateResponse,
    RunResult,
    ToolCall,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative.testing import ScriptedModel, check_run_invariants

ONE_RESULT = r"invariant 1 \(every tool call has exactly one result\) broken"
ORDER = r"invariant 2 \(run and step events come once each, in order\) broken"
ACCOUNTING = r"invariant 3 \(usage, step count and finish reason agree\) broken"
ONCE = r"invariant 4 \(a tool call executes at most once\) broken"


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


async def good_run() -> tuple[RunResult, list[Any]]:
    """A two-step run (a tool call, then an answer) and its events."""
    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="a", name="ping"),), usage=Usage.of(5, 1)),
            GenerateResponse(content="done", usage=Usage.of(7, 2)),
        ]
    )
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    async with open_run(
        generate=model,
        conversation=conversation,
        tools=[ping],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events, maximum_steps=2, executions={"a": 1})
    return result, events


def _with_messages(result: RunResult, keep: Callable[[int, Any], bool]) -> RunResult:
    messages = tuple(m for i, m in enumerate(result.conversation.messages) if keep(i, m))
    history = ConversationHistory(messages=messages)
    return msgspec.structs.replace(result, conversation=Conversation.from_history(history))


def _types(events: list[Any]) -> list[str]:
    return [event.type for event in events]


def _index(events: list[Any], kind: str, step: int | None = None) -> int:
    for index, event in enumerate(events):
        if event.type == kind and (step is None or event.step == step):
            return index
    raise LookupError(kind)


async def test_a_good_run_passes() -> None:
    """A real run breaks no invariant (the baseline every case below mutates)."""
    result, events = await good_run()
    assert _types(events)[0] == "run.started"
    assert result.finish_reason == FinishReason.STOP_CONDITION


async def test_a_call_without_a_result() -> None:
    """Invariant 1: a tool call whose result message is missing is reported."""
    result, events = await good_run()
    broken = _with_messages(result, lambda i, m: m.role != "tool")
    with pytest.raises(AssertionError, match=ONE_RESULT + ".*without a result"):
        check_run_invariants(broken, events)


async def test_a_call_with_two_results() -> None:
    """Invariant 1: a second result for one call is reported."""
    result, events = await good_run()
    messages = result.conversation.messages
    tool_message = next(m for m in messages if m.role == "tool")
    copy = msgspec.structs.replace(tool_message, id="another")
    history = ConversationHistory(messages=(*messages, copy))
    broken = msgspec.structs.replace(result, conversation=Conversation.from_history(history))
    with pytest.raises(AssertionError, match=ONE_RESULT + ".*more than one result"):
        check_run_invariants(broken, events)


async def test_a_result_before_its_call() -> None:
    """Invariant 1: a result that precedes its call is reported."""
    result, events = await good_run()
    messages = list(result.conversation.messages)
    call_at = next(i for i, m in enumerate(messages) if m.tool_calls)
    result_at = next(i for i, m in enumerate(messages) if m.role == "tool")
    messages[call_at], messages[result_at] = messages[result_at], messages[call_at]
    history = ConversationHistory(messages=tuple(messages))
    broken = msgspec.structs.replace(result, conversation=Conversation.from_history(history))
    with pytest.raises(AssertionError, match=ONE_RESULT + ".*comes before its call"):
        check_run_invariants(broken, events)


async def test_step_results_that_do_not_match_calls() -> None:
    """Invariant 1: a step whose results do not answer its calls is reported."""
    result, events = await good_run()
    first = msgspec.structs.replace(result.steps[0], results=())
    broken = msgspec.structs.replace(result, steps=(first, *result.steps[1:]))
    with pytest.raises(AssertionError, match=ONE_RESULT + ".*step 1 has calls"):
        check_run_invariants(broken, events)


async def test_run_started_must_come_first() -> None:
    """Invariant 2: a run whose first event is not run.started is reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ORDER + ".*not run.started"):
        check_run_invariants(result, events[1:])


async def test_exactly_one_terminal_event_last() -> None:
    """Invariant 2: two terminal events, or a terminal event not last, are reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ORDER + ".*exactly one terminal"):
        check_run_invariants(result, [*events, events[-1]])
    with pytest.raises(AssertionError, match=ORDER + ".*not the terminal event"):
        check_run_invariants(result, [*events, events[-2]])


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("generate.started", "generate.completed"),
        ("generate.completed", "step.generated"),
        ("step.generated", "tools.executing"),
        ("tools.executing", "tools.executed"),
        ("tools.executed", "step.completed"),
    ],
)
async def test_step_events_out_of_order(first: str, second: str) -> None:
    """Invariant 2: swapping two consecutive stages of step 1 is reported."""
    result, events = await good_run()
    i, j = _index(events, first, 1), _index(events, second, 1)
    swapped = list(events)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    with pytest.raises(AssertionError, match=ORDER + ".*step 1"):
        check_run_invariants(result, swapped)


async def test_step_generated_must_follow_generate_completed() -> None:
    """Invariant 2: a step without step.generated before its tools is reported."""
    result, events = await good_run()
    missing = [e for e in events if not (e.type == "step.generated" and e.step == 1)]
    with pytest.raises(AssertionError, match=ORDER + ".*tools.executing out of order"):
        check_run_invariants(result, missing)


async def test_step_numbers_without_gaps() -> None:
    """Invariant 2: step numbers that skip one are reported."""
    result, events = await good_run()
    renumbered = [
        msgspec.structs.replace(e, step=3) if e.step == 2 and e.type != "run.completed" else e
        for e in events
    ]
    with pytest.raises(AssertionError, match=ORDER + ".*without gaps"):
        check_run_invariants(result, renumbered)


async def test_a_step_that_never_ends() -> None:
    """Invariant 2: a step without step.completed or step.aborted is reported."""
    result, events = await good_run()
    cut = [e for e in events if not (e.type == "step.completed" and e.step == 2)]
    with pytest.raises(AssertionError, match=ORDER + ".*step 2 never ended"):
        check_run_invariants(result, cut)


async def test_a_step_that_ends_twice() -> None:
    """Invariant 2: a second step.completed for one step is reported."""
    result, events = await good_run()
    at = _index(events, "step.completed", 2)
    doubled = [*events[: at + 1], events[at], *events[at + 1 :]]
    with pytest.raises(AssertionError, match=ORDER + ".*after the step ended"):
        check_run_invariants(result, doubled)


async def test_steps_in_the_result_agree_with_the_events() -> None:
    """Invariant 2: result.steps must hold exactly the steps that completed or were cut."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ORDER + ".*missing from result.steps"):
        check_run_invariants(msgspec.structs.replace(result, steps=result.steps[:1]), events)
    aborted = msgspec.structs.replace(result.steps[1], aborted=True)
    with pytest.raises(AssertionError, match=ORDER + ".*is aborted in result.steps"):
        check_run_invariants(
            msgspec.structs.replace(result, steps=(result.steps[0], aborted)), events
        )
    with pytest.raises(AssertionError, match=ORDER + ".*numbered"):
        check_run_invariants(msgspec.structs.replace(result, steps=result.steps[::-1]), events)


async def test_usage_is_the_sum_of_every_attempt() -> None:
    """Invariant 3: a result whose usage is not the sum of the attempts is reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ACCOUNTING + ".*result.usage"):
        check_run_invariants(msgspec.structs.replace(result, usage=Usage.of(1, 1)), events)


async def test_steps_within_maximum_steps() -> None:
    """Invariant 3: more steps than maximum_steps is reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ACCOUNTING + ".*exceed maximum_steps=1"):
        check_run_invariants(result, events, maximum_steps=1)


async def test_finish_reason_agrees_with_the_terminal_event() -> None:
    """Invariant 3: a finish reason the terminal event contradicts is reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ACCOUNTING + ".*terminal event is run.completed"):
        check_run_invariants(
            msgspec.structs.replace(result, finish_reason=FinishReason.ABORTED), events
        )
    with pytest.raises(AssertionError, match=ACCOUNTING + ".*run.completed says"):
        check_run_invariants(
            msgspec.structs.replace(result, finish_reason=FinishReason.MAXIMUM_STEPS), events
        )
    terminal = msgspec.structs.replace(events[-1], steps=5)
    with pytest.raises(AssertionError, match=ACCOUNTING + ".*reports 5 steps"):
        check_run_invariants(result, [*events[:-1], terminal])


async def test_a_call_executed_twice() -> None:
    """Invariant 4: a call id counted twice, or sent to execution twice, is reported."""
    result, events = await good_run()
    with pytest.raises(AssertionError, match=ONCE + ".*'a' ran 2 times"):
        check_run_invariants(result, events, executions={"a": 2})
    executing = events[_index(events, "tools.executing", 1)]
    executed = events[_index(events, "tools.executed", 1)]
    again = [msgspec.structs.replace(e, step=2) for e in (executing, executed)]
    at = _index(events, "step.generated", 2)
    replayed = [*events[: at + 1], *again, *events[at + 1 :]]
    with pytest.raises(AssertionError, match=ONCE + ".*again in step 2"):
        check_run_invariants(result, replayed)


async def test_retried_attempts_are_in_order(autojump_clock: Any) -> None:
    """Failed, retried generate attempts within a step satisfy the checker."""
    from operative.retry import RetryOptions

    model = ScriptedModel(
        [ConnectionError("reset"), GenerateResponse(content="ok", usage=Usage.of(1, 1))]
    )
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    async with open_run(
        generate=model,
        conversation=conversation,
        stop_when=stop_when.no_tool_calls(),
        retry=RetryOptions(max_attempts=3, jitter=False),
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    assert "generate.retry" in _types(events)
    check_run_invariants(result, events)


async def test_a_step_cut_during_its_tools_is_kept_as_aborted(autojump_clock: Any) -> None:
    """An abort while a tool runs leaves an aborted step in result.steps; the checker agrees."""

    @tool
    async def slow() -> str:
        """Take an hour."""
        await trio.sleep(3600)
        return "late"

    model = ScriptedModel([GenerateResponse(tool_calls=(ToolCall(id="s", name="slow"),))])
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    async with open_run(generate=model, conversation=conversation, tools=[slow]) as run:
        run.add_listener("*", events.append)
        await trio.sleep(1)
        run.abort("enough")
    result = await run.result()
    assert result.steps[-1].aborted
    assert _types(events)[-2:] == ["step.aborted", "run.aborted"]
    check_run_invariants(result, events)


async def test_an_abort_during_a_blocked_step_completed_emits_it_once(
    autojump_clock: Any,
) -> None:
    """A listener sees one step.completed per step even when a slow stream blocks the run.

    (A regression test: the run once emitted it again from its clean-up.)
    """

    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="a", name="ping"),)),
            GenerateResponse(tool_calls=(ToolCall(id="b", name="ping"),)),
            "done",
        ]
    )
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    async with open_run(
        generate=model, conversation=conversation, tools=[ping], maximum_steps=5
    ) as run:
        run.add_listener("*", events.append)
        stream = run.events("step.completed", capacity=1)
        stream.__aiter__()  # subscribed, never read: the second step.completed blocks
        await trio.sleep(10)
        run.abort("stop")
    result = await run.result()
    completed = [e.step for e in events if e.type == "step.completed"]
    assert completed == [1, 2]
    check_run_invariants(result, events)
