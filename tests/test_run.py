"""The step loop of open_run: tools, stop conditions, abort, cancellation, errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

import operative
import operative.errors
import operative.tools
from operative import (
    Conversation,
    ConversationHistory,
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative.testing import HANG, ScriptedModel, check_run_invariants


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def nap(seconds: float) -> str:
    """Sleep for a while (virtual time in tests)."""
    await trio.sleep(seconds)
    return f"slept {seconds}"


@tool
async def boom() -> str:
    """Always fails."""
    raise RuntimeError("the tool broke")


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def calls(*items: ToolCall, usage: Usage | None = None) -> GenerateResponse:
    return GenerateResponse(tool_calls=items, usage=usage)


def user(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


class Recorder:
    """Collects every event of a run, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]


async def run_with(
    model: Any, *, abort_after: float | None = None, **options: Any
) -> tuple[operative.RunResult, Recorder]:
    recorder = Recorder()
    options.setdefault("conversation", user("hi"))
    options.setdefault("tools", [add, nap, boom])
    async with open_run(generate=model, **options) as run:
        run.add_listener("*", recorder)
        if abort_after is not None:
            await trio.sleep(abort_after)
            run.abort("test abort")
    result = await run.result()
    check_run_invariants(result, recorder.events, maximum_steps=options.get("maximum_steps"))
    return result, recorder


async def test_plain_answer_stops_on_no_tool_calls() -> None:
    """A text answer under no_tool_calls ends the run after one step."""
    model = ScriptedModel([GenerateResponse(content="hello", usage=Usage.of(3, 2))])
    result, recorder = await run_with(model, stop_when=stop_when.no_tool_calls())
    assert result.finish_reason == "stop-condition"
    assert result.content == "hello"
    assert result.usage == Usage(prompt=3, completion=2, total=5)
    assert [m.role for m in result.conversation.messages] == ["user", "assistant"]
    assert recorder.types == [
        "run.started",
        "step.started",
        "generate.started",
        "generate.completed",
        "usage.accumulated",
        "step.generated",
        "step.completed",
        "run.completed",
    ]


async def test_tool_round_trip() -> None:
    """A tool call runs, its result is appended, and the model sees it next step."""
    model = ScriptedModel([calls(call("add", "c1", a=2, b=3)), "the sum is 5"])
    result, _ = await run_with(model, stop_when=stop_when.no_tool_calls())
    assert result.finish_reason == FinishReason.STOP_CONDITION
    assert len(result.steps) == 2
    (first_result,) = result.steps[0].results
    assert first_result.outcome == "success"
    assert first_result.value == 5
    roles = [m.role for m in result.conversation.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    seen = model.requests[1].conversation.messages[-1]
    assert seen.role == "tool"
    assert seen.tool_call_id == "c1"
    assert seen.content == "5"
    assert [spec.name for spec in model.requests[0].tools] == ["add", "nap", "boom"]


async def test_tools_run_concurrently_and_results_keep_call_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three naps of 30, 20 and 10 s finish in 30 s of virtual time, in call order."""
    model = ScriptedModel(
        [
            calls(
                call("nap", "a", seconds=30),
                call("nap", "b", seconds=20),
                call("nap", "c", seconds=10),
            ),
            "done",
        ]
    )
    start = trio.current_time()
    result, _ = await run_with(model, stop_when=stop_when.no_tool_calls())
    assert trio.current_time() - start == pytest.approx(30)
    assert [r.call_id for r in result.steps[0].results] == ["a", "b", "c"]
    tool_messages = [m for m in result.conversation.messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["a", "b", "c"]


async def test_tool_concurrency_limits_parallelism(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """tool_concurrency=1 runs the calls one after another."""
    model = ScriptedModel(
        [calls(call("nap", "a", seconds=10), call("nap", "b", seconds=10)), "done"]
    )
    start = trio.current_time()
    await run_with(model, stop_when=stop_when.no_tool_calls(), tool_concurrency=1)
    assert trio.current_time() - start == pytest.approx(20)


async def test_tool_failures_are_results_not_crashes() -> None:
    """A failing, unknown or badly-called tool becomes an error result the model reads."""
    model = ScriptedModel(
        [
            calls(
                call("boom", "x"),
                call("nope", "y"),
                call("add", "z", a="two", b=1),
                ToolCall(id="w", name="add", arguments="{not json"),
            ),
            "sorry",
        ]
    )
    result, _ = await run_with(model, stop_when=stop_when.no_tool_calls())
    outcomes = [r.outcome for r in result.steps[0].results]
    assert outcomes == ["error", "error", "error", "error"]
    assert "the tool broke" in (result.steps[0].results[0].error or "")
    assert "$.a" in (result.steps[0].results[2].error or "")
    assert result.finish_reason == "stop-condition"


async def test_maximum_steps_without_stop_condition() -> None:
    """Without stop conditions, open_run runs until maximum_steps."""
    model = ScriptedModel(lambda request: f"step {request.step}")
    result, _ = await run_with(model, maximum_steps=3)
    assert result.finish_reason == FinishReason.MAXIMUM_STEPS
    assert len(result.steps) == 3
    assert result.content == "step 3"


async def test_on_maximum_steps_replaces_content() -> None:
    """on_maximum_steps may replace the final content."""
    model = ScriptedModel(lambda request: "again")
    result, recorder = await run_with(
        model, maximum_steps=2, on_maximum_steps=lambda ctx: f"gave up after {ctx.step}"
    )
    assert result.content == "gave up after 2"
    assert recorder.events[-1].content == "gave up after 2"


@pytest.mark.parametrize(
    ("condition", "steps"),
    [
        (stop_when.tool_called("nap"), 2),
        (stop_when.step_count_is(3), 3),
        (stop_when.usage_exceeds(25), 3),
    ],
)
async def test_stop_conditions(condition: Any, steps: int, autojump_clock: Any) -> None:
    """Each built-in condition stops at the step it describes."""
    script = [
        calls(call("add", "s1", a=1, b=1), usage=Usage.of(5, 5)),
        calls(call("nap", "s2", seconds=1), usage=Usage.of(5, 5)),
        calls(call("add", "s3", a=1, b=1), usage=Usage.of(5, 5)),
        calls(call("add", "s4", a=1, b=1), usage=Usage.of(5, 5)),
    ]
    result, _ = await run_with(ScriptedModel(script), stop_when=condition)
    assert len(result.steps) == steps
    assert result.finish_reason == "stop-condition"


async def test_stop_conditions_are_or_and_may_be_async() -> None:
    """Any condition in the list stops the run; async conditions are awaited."""

    async def after_two(step: operative.StepResult) -> bool:
        await trio.lowlevel.checkpoint()
        return step.step == 2

    model = ScriptedModel(lambda request: calls(call("add", f"c{request.step}", a=1, b=2)))
    result, _ = await run_with(model, stop_when=[stop_when.no_tool_calls(), after_two])
    assert len(result.steps) == 2


@pytest.mark.parametrize("order", ["sync-first", "async-first"])
async def test_each_stop_condition_is_called_once_a_step_in_order(order: str) -> None:
    """Sync and async conditions mixed: each is called once per step, in list order,
    and the ones after the condition that held are not called."""
    seen: list[tuple[str, int]] = []

    def sync_at_three(step: operative.StepResult) -> bool:
        seen.append(("sync", step.step))
        return step.step == 3

    async def async_never(step: operative.StepResult) -> bool:
        seen.append(("async", step.step))
        await trio.lowlevel.checkpoint()
        return False

    conditions = [sync_at_three, async_never]
    if order == "async-first":
        conditions.reverse()
    model = ScriptedModel(lambda request: calls(call("add", f"c{request.step}", a=1, b=2)))
    result, _ = await run_with(model, stop_when=conditions)
    assert len(result.steps) == 3
    names = ["sync", "async"] if order == "sync-first" else ["async", "sync"]
    expected = [(name, step) for step in (1, 2) for name in names]
    expected += [("sync", 3)] if order == "sync-first" else [("async", 3), ("sync", 3)]
    assert seen == expected


async def test_abort_during_generate(autojump_clock: Any) -> None:
    """Abort while the model hangs: the step is dropped, the run ends aborted."""
    model = ScriptedModel([calls(call("add", "c1", a=1, b=1)), HANG])
    result, recorder = await run_with(model, abort_after=5)
    assert result.finish_reason == FinishReason.ABORTED
    assert result.abort_reason == "test abort"
    assert len(result.steps) == 1
    assert recorder.types[-2:] == ["step.aborted", "run.aborted"]
    assert recorder.events[-1].reason == "test abort"


async def test_abort_during_tools_records_cancelled_results(autojump_clock: Any) -> None:
    """Abort mid-tools: finished calls keep their results, the others are cancelled."""
    model = ScriptedModel([calls(call("add", "fast", a=1, b=1), call("nap", "slow", seconds=3600))])
    result, recorder = await run_with(model, abort_after=10)
    assert result.finish_reason == "aborted"
    (step,) = result.steps
    assert step.aborted
    assert [r.outcome for r in step.results] == ["success", "cancelled"]
    assert "test abort" in (step.results[1].error or "")
    assert recorder.types[-2:] == ["step.aborted", "run.aborted"]


async def test_abort_between_steps_from_a_listener() -> None:
    """An abort from a step.completed listener ends the run before the next step."""
    model = ScriptedModel(lambda request: calls(call("add", f"c{request.step}", a=1, b=1)))
    recorder = Recorder()
    async with open_run(generate=model, conversation=user("go"), tools=[add]) as run:
        run.add_listener("*", recorder)
        run.add_listener("step.completed", lambda event: run.abort("enough"))
    result = await run.result()
    check_run_invariants(result, recorder.events)
    assert result.finish_reason == "aborted"
    assert len(result.steps) == 1
    assert model.calls == 1


async def test_abort_before_the_loop_starts() -> None:
    """Aborting at the top of the block still yields run.started then run.aborted."""
    model = ScriptedModel(["never"])
    recorder = Recorder()
    async with open_run(generate=model, conversation=user("go")) as run:
        run.add_listener("*", recorder)
        run.abort("changed my mind")
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert recorder.types == ["run.started", "run.aborted"]
    assert model.calls == 0


async def test_external_cancellation_propagates_after_repair(autojump_clock: Any) -> None:
    """Cancelling the caller repairs the transcript, records aborted, then propagates."""
    model = ScriptedModel([calls(call("nap", "long", seconds=3600))])
    recorder = Recorder()
    captured: list[operative.ActiveRun] = []
    with trio.move_on_after(60) as scope:
        async with open_run(generate=model, conversation=user("go"), tools=[nap]) as run:
            captured.append(run)
            run.add_listener("*", recorder)
    assert scope.cancelled_caught
    result = await captured[0].result()
    check_run_invariants(result, recorder.events)
    assert result.finish_reason == "aborted"
    assert result.steps[0].results[0].outcome == "cancelled"


async def test_exception_in_block_aborts_and_propagates() -> None:
    """An exception raised in the block aborts the run and propagates unwrapped."""
    model = ScriptedModel([HANG])
    captured: list[operative.ActiveRun] = []
    with pytest.raises(KeyError):
        async with open_run(generate=model, conversation=user("go")) as run:
            captured.append(run)
            await trio.lowlevel.checkpoint()
            raise KeyError("boom")
    result = await captured[0].result()
    assert result.finish_reason == "aborted"
    assert "KeyError" in (result.abort_reason or "")


async def test_generate_error_ends_run_with_error() -> None:
    """A generate function that raises ends the run with run.error."""
    model = ScriptedModel([ValueError("provider down")])
    result, recorder = await run_with(model)
    assert result.finish_reason == FinishReason.ERROR
    assert isinstance(result.error, ValueError)
    assert recorder.types[-3:] == ["generate.error", "step.aborted", "run.error"]
    with pytest.raises(ValueError, match="provider down"):
        async with open_run(
            generate=ScriptedModel([ValueError("provider down")]), conversation=user("x")
        ) as run:
            pass
        await run.unwrap()


async def test_generate_returning_the_wrong_type() -> None:
    """A generate function returning a dict fails with InvalidResponseError."""

    async def bad(request: GenerateRequest) -> Any:
        return {"content": "hi"}

    result, _ = await run_with(bad)
    assert isinstance(result.error, operative.errors.InvalidResponseError)


async def test_malformed_tool_call_in_response() -> None:
    """A tool call that is not a ToolCall is an InvalidResponseError, not a crash."""

    async def bad(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(tool_calls=({"name": "add"},))  # type: ignore[arg-type]

    result, _ = await run_with(bad)
    assert result.finish_reason == "error"
    assert isinstance(result.error, operative.errors.InvalidResponseError)
    assert "tool_calls[0] is a dict, not a ToolCall" in str(result.error)


async def test_on_error_can_turn_failure_into_answer() -> None:
    """An on_error hook returning text ends the run well, with the error noted."""
    model = ScriptedModel([RuntimeError("flaky")])
    result, recorder = await run_with(model, on_error=lambda exc, ctx: "fallback answer")
    assert result.finish_reason == "stop-condition"
    assert result.content == "fallback answer"
    assert result.error is None
    assert recorder.events[-1].recovered_error == "RuntimeError: flaky"


async def test_history_input_is_snapshotted_not_mutated() -> None:
    """A ConversationHistory passed in is never mutated; a live Conversation is shared."""
    history = user("hello").current
    before = history.messages
    model = ScriptedModel(["hi"])
    result, _ = await run_with(model, conversation=history, stop_when=stop_when.no_tool_calls())
    assert history.messages is before
    assert len(history.messages) == 1
    assert len(result.conversation.messages) == 2

    live = user("hello")
    await run_with(ScriptedModel(["hi"]), conversation=live, stop_when=stop_when.no_tool_calls())
    assert len(live.messages) == 2


async def test_duplicate_and_missing_call_ids_are_made_unique() -> None:
    """Reused or empty call ids get fresh ids so each call has exactly one result."""
    model = ScriptedModel(
        [
            calls(call("add", "call_0", a=1, b=1), call("add", "call_0", a=2, b=2)),
            calls(call("add", "call_0", a=3, b=3), call("add", "", a=4, b=4)),
            "done",
        ]
    )
    result, _ = await run_with(model, stop_when=stop_when.no_tool_calls())
    ids = [c.id for step in result.steps for c in step.tool_calls]
    assert len(set(ids)) == 4
    assert ids[0] == "call_0"
    assert [r.value for step in result.steps for r in step.results] == [2, 4, 6, 8]


async def test_snapshot_reports_progress() -> None:
    """snapshot() reads the run's state without changing it."""
    model = ScriptedModel(["done"])
    async with open_run(
        generate=model, conversation=user("go"), stop_when=stop_when.no_tool_calls()
    ) as run:
        first = run.snapshot()
        assert first.status == "starting"
        result = await run.result()
    final = run.snapshot()
    assert final.status == "completed"
    assert final.terminal
    assert final.revision > first.revision
    assert final.finish_reason == result.finish_reason


async def test_open_run_validates_options_eagerly() -> None:
    """Bad options raise InvalidArgument before any task starts."""
    model = ScriptedModel(["x"])
    with pytest.raises(operative.InvalidArgument, match="maximum_steps"):
        async with open_run(generate=model, conversation=user("x"), maximum_steps=0):
            pass
    with pytest.raises(
        operative.InvalidArgument, match=r"max_steps= \(did you mean maximum_steps="
    ):
        async with open_run(generate=model, conversation=user("x"), max_steps=3):  # type: ignore[call-arg]
            pass
    with pytest.raises(operative.InvalidArgument, match="conversation"):
        async with open_run(generate=model, conversation="hello"):  # type: ignore[arg-type]
            pass
    with pytest.raises(operative.InvalidArgument, match="not both"):
        async with open_run(
            generate=model, conversation=user("x"), tools=[add], toolbox=operative.Toolbox([add])
        ):
            pass


async def test_listener_errors_are_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    """A listener that raises is logged and counted; the run goes on."""
    model = ScriptedModel(["done"])
    with caplog.at_level(logging.ERROR, logger="operative.events"):
        async with open_run(
            generate=model, conversation=user("go"), stop_when=stop_when.no_tool_calls()
        ) as run:
            run.add_listener("step.started", lambda event: 1 / 0)
    result = await run.result()
    assert result.content == "done"
    assert run.statistics()["listener_errors"] == 1
    assert "ZeroDivisionError" in caplog.text


async def test_settings_and_run_id_reach_generate() -> None:
    """settings and run_id are on every request."""
    model = ScriptedModel(["ok"])
    async with open_run(
        generate=model,
        conversation=user("go"),
        settings={"temperature": 0.1},
        run_id="run-1",
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pass
    assert run.run_id == "run-1"
    assert model.requests[0].settings == {"temperature": 0.1}
    assert model.requests[0].run_id == "run-1"


async def test_history_passed_between_runs_round_trips() -> None:
    """The result's conversation can seed the next turn."""
    model = ScriptedModel(["one", "two"])
    first, _ = await run_with(model, stop_when=stop_when.no_tool_calls())
    history: ConversationHistory = first.conversation.current
    follow = Conversation.from_history(history)
    follow.append_user_message("and again")
    second, _ = await run_with(model, conversation=follow, stop_when=stop_when.no_tool_calls())
    assert [m.text for m in second.conversation.messages] == ["hi", "one", "and again", "two"]


async def test_request_deadline_bounds_the_run(autojump_clock: Any) -> None:
    """A request_context deadline becomes the run scope's deadline, with its reason."""
    import time

    request = operative.tools.RequestContext(
        authority=operative.tools.Authority(principal_id="u", tenant_id="t", owner_id="o"),
        deadline=time.time() + 30,
    )
    start = trio.current_time()
    result, _ = await run_with(
        ScriptedModel([calls(call("nap", "n", seconds=3600))]), request_context=request
    )
    assert trio.current_time() - start == pytest.approx(30, abs=1)
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "the request this run acts for passed its deadline"
    assert result.steps[0].results[0].outcome == "cancelled"


async def test_tools_do_not_run_for_an_expired_request() -> None:
    """A call made for a request whose deadline passed is denied without running."""
    import time

    request = operative.tools.RequestContext(
        authority=operative.tools.Authority(principal_id="u", tenant_id="t", owner_id="o"),
        deadline=time.time() - 1,
    )
    toolbox = operative.Toolbox([add])
    result = await toolbox.execute(
        call("add", "x", a=1, b=2), operative.tools.ExecutionContext(request_context=request)
    )
    assert result.outcome == "denied"
    assert "deadline" in (result.error or "")


async def test_on_run_end_finishes_under_external_cancellation(autojump_clock: Any) -> None:
    """Clean-up hooks run shielded (bounded) even when the caller is cancelled."""
    finished: list[str] = []

    async def slow_commit(result: operative.RunResult) -> None:
        await trio.sleep(2)
        finished.append(result.finish_reason)

    captured: list[operative.ActiveRun] = []
    with trio.move_on_after(5):
        async with open_run(
            generate=ScriptedModel([HANG]), conversation=user("go"), on_run_end=slow_commit
        ) as run:
            captured.append(run)
    assert finished == ["aborted"]
    assert (await captured[0].result()).abort_reason == "the run's caller was cancelled"


async def test_leaving_the_block_waits_for_the_run(autojump_clock: Any) -> None:
    """The block does not exit before the run has ended (it is a nursery)."""
    model = ScriptedModel([calls(call("nap", "n", seconds=100)), "done"])
    async with open_run(
        generate=model, conversation=user("go"), tools=[nap], stop_when=stop_when.no_tool_calls()
    ) as run:
        start = trio.current_time()
    assert trio.current_time() - start == pytest.approx(100)
    assert run.snapshot().terminal
