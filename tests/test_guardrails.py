"""Guardrails: input, output and tool guardrails allow, rewrite or trip a run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    RunResult,
    ToolCall,
    ToolContext,
    ToolResult,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative._core._errors import RunFailed
from operative.errors import HookError
from operative.guardrails import (
    GuardrailTripped,
    InputGuardrail,
    OutputGuardrail,
    ToolGuardrail,
    allow,
    collect_guardrails,
    rewrite,
    trip,
)
from operative.hooks import HookContext
from operative.testing import check_run_invariants

# -- helpers -----------------------------------------------------------------------------


class Model:
    """A scripted model: one answer per step (the last repeats); records what it saw."""

    __test__ = False

    def __init__(self, *answers: GenerateResponse, think: float = 0.0) -> None:
        self.answers = answers
        self.think = think
        self.seen: list[str] = []
        self.started = 0
        self.finished = 0

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        self.started += 1
        self.seen.append(str(request.conversation.messages[-1].content))
        if self.think:
            await trio.sleep(self.think)
        self.finished += 1
        return self.answers[min(request.step, len(self.answers)) - 1]


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def asks(*calls: ToolCall) -> GenerateResponse:
    return GenerateResponse(content="", tool_calls=calls)


def says(text: str) -> GenerateResponse:
    return GenerateResponse(content=text)


def recording_tools(log: list[tuple[str, Any]]) -> list[Any]:
    @tool(mutates=True)
    async def delete(path: str) -> str:
        """Delete a file."""
        log.append(("delete", path))
        return f"deleted {path}"

    @tool
    async def read(path: str) -> str:
        """Read a file."""
        log.append(("read", path))
        return f"contents of {path}"

    return [delete, read]


async def run_with(
    model: Model,
    guardrails: Any,
    *,
    text: str = "hello",
    log: list[tuple[str, Any]] | None = None,
    **options: Any,
) -> tuple[RunResult, list[Any]]:
    conversation = Conversation()
    conversation.append_user_message(text)
    events: list[Any] = []
    async with open_run(
        generate=model,
        conversation=conversation,
        tools=recording_tools(log if log is not None else []),
        stop_when=stop_when.no_tool_calls(),
        guardrails=guardrails,
        **options,
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events)
    return result, events


def kinds(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.type, e.guardrail, e.kind) for e in events if e.type.startswith("guardrail.")]


def tripped(result: RunResult) -> GuardrailTripped:
    assert result.finish_reason == "error"
    assert isinstance(result.error, GuardrailTripped), result.error
    return result.error


# -- input -------------------------------------------------------------------------------


async def test_an_input_guardrail_that_allows_lets_the_run_go_on() -> None:
    """An allowing input guardrail runs once, before the first generate call."""
    calls: list[str] = []

    def polite(text: str, context: HookContext) -> None:
        calls.append(text)

    model = Model(says("hi"))
    result, events = await run_with(model, [InputGuardrail(polite)])
    assert result.finish_reason == "stop-condition"
    assert calls == ["hello"]
    assert kinds(events) == [("guardrail.passed", "polite", "input")]
    types = [e.type for e in events]
    assert types.index("guardrail.passed") < types.index("generate.started")


async def test_an_input_guardrail_rewrites_the_input_the_model_sees() -> None:
    """A rewrite replaces the last user message, in what the model sees and the transcript."""

    async def redact(text: str, context: HookContext) -> Any:
        return rewrite(text.replace("4111", "****"), reason="card number")

    model = Model(says("ok"))
    result, events = await run_with(model, InputGuardrail(redact), text="pay with 4111")
    assert model.seen == ["pay with ****"]
    assert result.conversation.messages[0].content == "pay with ****"
    rewrote = [e for e in events if e.type == "guardrail.rewrote"]
    assert [(e.guardrail, e.reason) for e in rewrote] == [("redact", "card number")]


async def test_an_input_guardrail_that_trips_ends_the_run_before_any_generate() -> None:
    """A trip ends the run with a GuardrailTripped error naming the guardrail and reason."""
    model = Model(says("never"))
    guard = InputGuardrail(lambda text, context: trip("off topic"), name="topic")
    result, events = await run_with(model, [guard])
    error = tripped(result)
    assert (error.guardrail, error.kind, error.reason, error.call_id) == (
        "topic",
        "input",
        "off topic",
        None,
    )
    assert str(error) == "guardrail 'topic' (input) tripped: off topic"
    assert model.started == 0
    assert result.steps == ()
    assert events[-1].type == "run.error"
    assert events[-1].error_type == "GuardrailTripped"
    assert kinds(events) == [("guardrail.tripped", "topic", "input")]


async def test_later_input_guardrails_see_an_earlier_rewrite() -> None:
    """Sequential input guardrails run in order, each on the text the last one left."""
    seen: list[str] = []

    def upper(text: str, context: HookContext) -> Any:
        return rewrite(text.upper())

    def check(text: str, context: HookContext) -> Any:
        seen.append(text)
        return allow()

    await run_with(Model(says("ok")), [InputGuardrail(upper), InputGuardrail(check)])
    assert seen == ["HELLO"]


async def test_a_parallel_input_guardrail_that_trips_cancels_the_generate_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The generate call racing a parallel guardrail is cancelled when it trips."""

    async def slow_check(text: str, context: HookContext) -> Any:
        await trio.sleep(2)
        return trip("jailbreak attempt")

    model = Model(says("a long answer"), think=10)
    start = trio.current_time()
    result, events = await run_with(model, [InputGuardrail(slow_check, run_in_parallel=True)])
    assert trio.current_time() - start == pytest.approx(2)
    assert tripped(result).reason == "jailbreak attempt"
    assert (model.started, model.finished) == (1, 0)
    types = [e.type for e in events]
    assert "generate.completed" not in types
    assert "step.aborted" in types
    assert result.steps == ()
    assert all(m.role != "assistant" for m in result.conversation.messages)


async def test_a_parallel_input_guardrail_does_not_delay_the_generate_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A passing parallel guardrail overlaps the first generate call; the run is as fast."""

    async def slow_check(text: str, context: HookContext) -> None:
        await trio.sleep(3)

    model = Model(says("done"), think=5)
    start = trio.current_time()
    result, _ = await run_with(model, [InputGuardrail(slow_check, run_in_parallel=True)])
    assert result.finish_reason == "stop-condition"
    assert trio.current_time() - start == pytest.approx(5)


async def test_tools_of_the_first_answer_wait_for_a_parallel_input_guardrail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A side-effecting tool never runs before a still-running input guardrail passed."""
    log: list[tuple[str, Any]] = []

    async def slow_check(text: str, context: HookContext) -> None:
        await trio.sleep(7)
        log.append(("passed", trio.current_time()))

    model = Model(asks(call("delete", "c1", path="/tmp/x")), says("done"), think=1)
    result, _ = await run_with(model, [InputGuardrail(slow_check, run_in_parallel=True)], log=log)
    assert result.finish_reason == "stop-condition"
    assert [entry[0] for entry in log] == ["passed", "delete"]


async def test_a_parallel_guardrail_that_trips_while_tools_wait_runs_none_of_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Tools waiting at the gate are cancelled by a trip; each call still has a result."""
    log: list[tuple[str, Any]] = []

    async def slow_check(text: str, context: HookContext) -> Any:
        await trio.sleep(7)
        return trip("no")

    model = Model(
        asks(call("delete", "c1", path="/a"), call("read", "c2", path="/b")), says("done")
    )
    result, _ = await run_with(model, [InputGuardrail(slow_check, run_in_parallel=True)], log=log)
    tripped(result)
    assert log == []
    (step,) = result.steps
    assert step.aborted
    assert [r.outcome for r in step.results] == ["cancelled", "cancelled"]


async def test_a_parallel_input_guardrail_cannot_rewrite() -> None:
    """Rewriting from a parallel guardrail is a HookError that says what to do."""
    guard = InputGuardrail(lambda text, ctx: rewrite("x"), name="late", run_in_parallel=True)
    result, _ = await run_with(Model(says("ok")), [guard])
    assert result.finish_reason == "error"
    assert isinstance(result.error, HookError)
    assert "run_in_parallel=False" in str(result.error)


async def test_a_parallel_guardrail_that_raises_ends_the_run_with_its_error() -> None:
    """A failing guardrail closes the gate: the run ends with that error, unwrapped."""

    async def broken(text: str, context: HookContext) -> None:
        raise ValueError("classifier down")

    model = Model(asks(call("delete", "c1", path="/a")), says("done"))
    log: list[tuple[str, Any]] = []
    result, _ = await run_with(model, [InputGuardrail(broken, run_in_parallel=True)], log=log)
    assert isinstance(result.error, ValueError)
    assert log == []


# -- output ------------------------------------------------------------------------------


async def test_an_output_guardrail_sees_the_final_answer_once() -> None:
    """Output guardrails run on the accepted final answer, not on intermediate steps."""
    seen: list[str] = []

    def check(content: str, context: HookContext) -> None:
        seen.append(content)

    model = Model(asks(call("read", "c1", path="/a")), says("the answer"))
    result, events = await run_with(model, [OutputGuardrail(check)])
    assert result.content == "the answer"
    assert seen == ["the answer"]
    assert kinds(events) == [("guardrail.passed", "check", "output")]


async def test_an_output_guardrail_rewrites_the_answer_and_the_transcript() -> None:
    """A rewrite replaces result.content and the last assistant message."""

    def redact(content: str, context: HookContext) -> Any:
        return rewrite(content.replace("hunter2", "[redacted]"))

    result, _ = await run_with(Model(says("the password is hunter2")), [OutputGuardrail(redact)])
    assert result.finish_reason == "stop-condition"
    assert result.content == "the password is [redacted]"
    assert result.conversation.messages[-1].content == "the password is [redacted]"


async def test_an_output_guardrail_that_trips_ends_the_run_with_an_error() -> None:
    """A tripped output guardrail turns the run into an error naming it."""
    guard = OutputGuardrail(lambda content, ctx: trip("leaks a secret"), name="secrets")
    result, events = await run_with(Model(says("secret")), [guard])
    error = tripped(result)
    assert (error.guardrail, error.kind) == ("secrets", "output")
    assert len(result.steps) == 1
    assert kinds(events)[-1] == ("guardrail.tripped", "secrets", "output")


async def test_an_output_guardrail_also_checks_an_answer_at_maximum_steps() -> None:
    """A run that stops at maximum_steps still has its answer checked."""
    guard = OutputGuardrail(lambda content, ctx: trip("no"), name="no")
    model = Model(asks(call("read", "c1", path="/a")), asks(call("read", "c2", path="/b")))
    result, _ = await run_with(model, [guard], maximum_steps=2)
    assert tripped(result).guardrail == "no"


async def test_an_output_rewrite_is_validated_against_the_output_type() -> None:
    """With output=, the rewritten answer is the one that is validated."""

    class Answer(msgspec.Struct):
        value: int

    def fix(content: str, context: HookContext) -> Any:
        return rewrite('{"value": 2}')

    result, _ = await run_with(Model(says('{"value": 1}')), [OutputGuardrail(fix)], output=Answer)
    assert result.output == Answer(value=2)


# -- tools -------------------------------------------------------------------------------


async def test_a_tool_guardrail_rewrites_a_calls_arguments() -> None:
    """The tool runs with the rewritten arguments."""
    log: list[tuple[str, Any]] = []

    def sandbox(call: ToolCall, context: HookContext) -> Any:
        assert isinstance(call.arguments, dict)
        return rewrite({"path": "/sandbox" + call.arguments["path"]})

    model = Model(asks(call("delete", "c1", path="/etc")), says("done"))
    result, events = await run_with(model, [ToolGuardrail(sandbox)], log=log)
    assert log == [("delete", "/sandbox/etc")]
    assert kinds(events) == [("guardrail.rewrote", "sandbox", "tool-call")]
    assert result.finish_reason == "stop-condition"


async def test_a_tool_guardrail_may_return_a_whole_call() -> None:
    """A rewrite may be a ToolCall with the same id and name."""
    log: list[tuple[str, Any]] = []

    def swap(call: ToolCall, context: HookContext) -> Any:
        return rewrite(msgspec.structs.replace(call, arguments={"path": "/ok"}))

    model = Model(asks(call("delete", "c1", path="/etc")), says("done"))
    await run_with(model, [ToolGuardrail(swap)], log=log)
    assert log == [("delete", "/ok")]


async def test_a_tool_guardrail_that_trips_keeps_the_tool_from_running() -> None:
    """A trip on the call: the tool never runs, the call is denied, the run ends."""
    log: list[tuple[str, Any]] = []

    def no_root(call: ToolCall, context: HookContext) -> Any:
        return trip("touches /") if call.name == "delete" else None

    model = Model(asks(call("delete", "c1", path="/")), says("done"))
    result, _ = await run_with(model, [ToolGuardrail(no_root)], log=log)
    error = tripped(result)
    assert (error.kind, error.call_id) == ("tool-call", "c1")
    assert log == []
    (step,) = result.steps
    assert step.results[0].outcome == "denied"
    assert "touches /" in (step.results[0].error or "")


async def test_a_tool_guardrail_only_applies_to_the_tools_it_names() -> None:
    """tools= limits a guardrail to those tool names."""
    log: list[tuple[str, Any]] = []
    guard = ToolGuardrail(lambda c, ctx: trip("no"), name="deletes", tools="delete")
    model = Model(asks(call("read", "c1", path="/a")), says("done"))
    result, _ = await run_with(model, [guard], log=log)
    assert result.finish_reason == "stop-condition"
    assert log == [("read", "/a")]


async def test_a_result_guardrail_rewrites_what_the_model_sees() -> None:
    """on_result may replace a result (same call id)."""

    def scrub(call: ToolCall, result: ToolResult, context: HookContext) -> Any:
        return rewrite(msgspec.structs.replace(result, value="[scrubbed]"))

    model = Model(asks(call("read", "c1", path="/a")), says("done"))
    result, events = await run_with(model, [ToolGuardrail(on_result=scrub)])
    assert result.steps[0].results[0].value == "[scrubbed]"
    assert kinds(events) == [("guardrail.rewrote", "scrub", "tool-result")]


async def test_a_result_guardrail_that_trips_withholds_the_result() -> None:
    """A trip on a result: the run ends and the model never gets the result."""
    log: list[tuple[str, Any]] = []

    def no_secrets(call: ToolCall, result: ToolResult, context: HookContext) -> Any:
        return trip("contains a key")

    model = Model(asks(call("read", "c1", path="/a")), says("done"))
    result, _ = await run_with(model, [ToolGuardrail(on_result=no_secrets)], log=log)
    assert tripped(result).kind == "tool-result"
    assert log == [("read", "/a")]
    outcome = result.steps[0].results[0]
    assert outcome.outcome == "error"
    assert outcome.value is None
    assert "withheld" in (outcome.error or "")


async def test_a_trip_on_one_call_cancels_its_siblings_waiting_on_their_guardrails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Calls whose guardrails are still running when another trips never execute."""
    log: list[tuple[str, Any]] = []

    async def check(call: ToolCall, context: HookContext) -> Any:
        assert isinstance(call.arguments, dict)
        if call.arguments["path"] == "/bad":
            return trip("bad path")
        await trio.sleep(5)
        return None

    model = Model(
        asks(call("delete", "c1", path="/ok"), call("delete", "c2", path="/bad")), says("done")
    )
    result, _ = await run_with(model, [ToolGuardrail(check)], log=log)
    assert tripped(result).call_id == "c2"
    assert log == []
    assert [r.outcome for r in result.steps[0].results] == ["cancelled", "denied"]


async def test_a_guardrail_returning_nonsense_is_a_hook_error() -> None:
    """A check must return a Verdict or None."""
    guard = OutputGuardrail(lambda content, ctx: "fine", name="sloppy")
    result, _ = await run_with(Model(says("x")), [guard])
    assert isinstance(result.error, HookError)
    assert "sloppy" in str(result.error)


async def test_an_agent_takes_guardrails_too() -> None:
    """create_agent(guardrails=...) applies them to every run."""
    agent = create_agent(
        generate=Model(says("ok")),
        guardrails=[InputGuardrail(lambda t, c: trip("closed"), name="closed")],
    )
    with pytest.raises(RunFailed) as failed:
        await agent.run("hi")
    assert failed.value.__cause__ is failed.value.result.error
    assert tripped(failed.value.result).guardrail == "closed"
    with pytest.raises(GuardrailTripped, match="closed"):
        async with agent.open_run("hi") as run:
            pass
        await run.unwrap()


# -- options -----------------------------------------------------------------------------


def test_guardrails_are_validated_eagerly() -> None:
    """Bad guardrails fail where the agent is defined, with a message that says what to do."""
    model = Model(says("x"))
    with pytest.raises(InvalidArgument, match="guardrails="):
        create_agent(generate=model, guardrails=[lambda text, ctx: None])
    with pytest.raises(InvalidArgument, match="guardrails="):
        create_agent(generate=model, guardrails="no")
    with pytest.raises(InvalidArgument, match="name="):
        InputGuardrail(lambda text, ctx: None)
    with pytest.raises(InvalidArgument, match="callable"):
        OutputGuardrail("nope", name="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="on_call="):
        ToolGuardrail(name="empty")
    with pytest.raises(InvalidArgument, match="tools="):
        ToolGuardrail(lambda c, ctx: None, name="x", tools=[1])
    with pytest.raises(InvalidArgument, match="run_in_parallel"):
        InputGuardrail(print, run_in_parallel="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="reason"):
        trip("")


def test_no_guardrails_cost_nothing() -> None:
    """An empty list is the same as none: the run carries no guardrail machinery."""
    assert collect_guardrails([]) is None
    collected = collect_guardrails(
        [ToolGuardrail(print, on_result=print), InputGuardrail(print, run_in_parallel=True)]
    )
    assert collected is not None
    assert (len(collected.tool_call), len(collected.tool_result)) == (1, 1)
    assert (collected.input, len(collected.parallel_input)) == ((), 1)


# -- the property --------------------------------------------------------------------------

DELAYS = (0.0, 0.5, 1.0, 3.0)


@st.composite
def scripts(draw: st.DrawFn) -> list[list[tuple[str, str]]]:
    """Model answers: each a list of (tool, call id) calls; an empty list is the answer."""
    steps: list[list[tuple[str, str]]] = []
    for step in range(draw(st.integers(1, 4))):
        names = draw(st.lists(st.sampled_from(["delete", "read"]), max_size=3))
        steps.append([(name, f"s{step + 1}c{index}") for index, name in enumerate(names)])
    return steps


@st.composite
def guard_plans(draw: st.DrawFn) -> dict[str, Any]:
    call_ids = [f"s{step}c{index}" for step in range(1, 5) for index in range(3)]
    verdict = st.sampled_from(["allow", "allow", "allow", "trip"])
    return {
        "input": draw(
            st.lists(st.tuples(st.booleans(), st.sampled_from(DELAYS), verdict), max_size=3)
        ),
        "tool": draw(
            st.lists(
                st.tuples(
                    st.sampled_from(DELAYS),
                    st.frozensets(st.sampled_from(call_ids), max_size=2),  # trips on these
                    st.frozensets(st.sampled_from(call_ids), max_size=2),  # rewrites these
                    st.none() | st.just("delete"),
                ),
                max_size=3,
            )
        ),
        "result_trips": draw(st.frozensets(st.sampled_from(call_ids), max_size=1)),
        "output": draw(st.none() | verdict),
        "think": draw(st.sampled_from(DELAYS)),
        "tool_seconds": draw(st.sampled_from(DELAYS)),
        "concurrency": draw(st.none() | st.integers(1, 2)),
    }


def _run_property(script: list[list[tuple[str, str]]], plan: dict[str, Any]) -> None:
    timeline: list[tuple[str, str, str]] = []  # (what, guardrail, call id or "")

    def input_check(name: str, delay: float, verdict: str) -> Callable[..., Any]:
        async def check(text: str, context: HookContext) -> Any:
            await trio.sleep(delay)
            if verdict == "trip":
                timeline.append(("trip", name, ""))
                return trip(f"{name} says no")
            timeline.append(("pass", name, ""))
            return None

        return check

    def call_check(
        name: str, delay: float, trips: frozenset[str], rewrites: frozenset[str]
    ) -> Callable[..., Any]:
        async def check(call: ToolCall, context: HookContext) -> Any:
            await trio.sleep(delay)
            if call.id in trips:
                timeline.append(("trip", name, call.id))
                return trip(f"{name} refuses {call.id}")
            timeline.append(("pass", name, call.id))
            if call.id in rewrites:
                return rewrite({"path": "/rewritten"})
            return None

        return check

    async def result_check(call: ToolCall, result: ToolResult, context: HookContext) -> Any:
        if call.id in plan["result_trips"]:
            timeline.append(("trip", "results", call.id))
            return trip("bad result")
        return None

    guardrails: list[Any] = []
    applies: list[tuple[str, str | None]] = []  # tool guardrails: (name, tool filter)
    inputs: list[str] = []
    for index, (parallel, delay, verdict) in enumerate(plan["input"]):
        name = f"input{index}"
        inputs.append(name)
        guardrails.append(
            InputGuardrail(input_check(name, delay, verdict), name=name, run_in_parallel=parallel)
        )
    for index, (delay, trips, rewrites, only) in enumerate(plan["tool"]):
        name = f"tool{index}"
        applies.append((name, only))
        guardrails.append(
            ToolGuardrail(call_check(name, delay, trips, rewrites), name=name, tools=only)
        )
    if plan["result_trips"]:
        guardrails.append(ToolGuardrail(on_result=result_check, name="results"))
    if plan["output"] is not None:
        output_verdict = plan["output"]

        def output_check(content: str, context: HookContext) -> Any:
            if output_verdict == "trip":
                timeline.append(("trip", "output", ""))
                return trip("bad answer")
            return None

        guardrails.append(OutputGuardrail(output_check, name="output"))

    @tool(mutates=True)
    async def delete(path: str, ctx: ToolContext) -> str:
        """Delete a file."""
        timeline.append(("execute", "delete", ctx.call_id))
        await trio.sleep(plan["tool_seconds"])
        return "deleted"

    @tool
    async def read(path: str, ctx: ToolContext) -> str:
        """Read a file."""
        timeline.append(("execute", "read", ctx.call_id))
        await trio.sleep(plan["tool_seconds"])
        return "text"

    async def generate(request: GenerateRequest) -> GenerateResponse:
        await trio.sleep(plan["think"])
        step = script[min(request.step, len(script)) - 1]
        if not step:
            return GenerateResponse(content=f"answer {request.step}")
        return GenerateResponse(
            content="",
            tool_calls=tuple(
                ToolCall(id=f"s{request.step}c{index}", name=name, arguments={"path": "/p"})
                for index, (name, _) in enumerate(step)
            ),
        )

    async def main() -> tuple[RunResult, list[Any]]:
        events: list[Any] = []
        conversation = Conversation()
        conversation.append_user_message("go")
        async with open_run(
            generate=generate,
            conversation=conversation,
            tools=[delete, read],
            stop_when=stop_when.no_tool_calls(),
            maximum_steps=4,
            tool_concurrency=plan["concurrency"],
            guardrails=guardrails,
        ) as run:
            run.add_listener("*", events.append)
        return await run.result(), events

    result, events = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    check_run_invariants(result, events, maximum_steps=4)

    first_trip = next((i for i, entry in enumerate(timeline) if entry[0] == "trip"), None)
    for position, (what, tool_name, call_id) in enumerate(timeline):
        if what != "execute":
            continue
        before = timeline[:position]
        if first_trip is not None:
            assert position < first_trip, f"{call_id} executed after a trip: {timeline}"
        for name in inputs:
            assert ("pass", name, "") in before, f"{call_id} ran before {name}: {timeline}"
        for name, only in applies:
            if only is None or only == tool_name:
                assert ("pass", name, call_id) in before, f"{call_id} before {name}: {timeline}"
    executed = sum(1 for entry in timeline if entry[0] == "execute")
    event(f"tripped: {first_trip is not None}; tools executed: {min(executed, 3)}")
    if first_trip is not None:
        error = tripped(result)
        assert error.guardrail == timeline[first_trip][1]
    else:
        assert result.finish_reason in ("stop-condition", "maximum-steps"), result.error


@settings(max_examples=200, deadline=None)
@given(script=scripts(), plan=guard_plans())
def test_no_tool_runs_before_its_guardrails_passed_and_none_after_a_trip(
    script: list[list[tuple[str, str]]], plan: dict[str, Any]
) -> None:
    """For any script, verdicts and delays: tools run only after every applicable
    guardrail passed, never after a trip, and the loop invariants hold."""
    _run_property(script, plan)
