"""The spans of two calls outside a step's own answer: a context compaction's summary,
and a durable run resumed from its journal by ``recover()``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.trace import SpanKind, StatusCode

from operative import (
    Conversation,
    ConversationHistory,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    Usage,
    create_agent,
    tool,
)
from operative._core._errors import RunFailed
from operative.context import ContextManagement, summarize
from operative.durable import Durable, SqliteDurable, recover
from operative.instrumentation import conversation_id
from operative.kvstore import MemoryStore
from operative.sessions import create_session_store, open_session
from operative.testing import ScriptedModel

from .conftest import Telemetry


class Model(ScriptedModel):
    """The run's model, named the way provider adapters are."""

    __test__ = False
    provider = "openai"
    model = "gpt-test"


class Summarizer(ScriptedModel):
    """A cheaper model that writes the summaries."""

    __test__ = False
    provider = "anthropic"
    model = "claude-small"


def _long_conversation(turns: int = 6) -> ConversationHistory:
    """A system prompt and ``turns`` long question-and-answer turns, then a question."""
    conversation = Conversation()
    conversation.append_system_message("You answer questions about the weather.")
    for day in range(turns):
        conversation.append_user_message(f"What was the weather on day {day}? " + "x" * 400)
        conversation.append_assistant_message(f"Day {day} was sunny. " + "y" * 400)
    conversation.append_user_message("And tomorrow?")
    return conversation.current


def _agent(summarizer: Any, *, runs: int = 1, **options: Any) -> Any:
    return create_agent(
        generate=Model(
            [GenerateResponse(content="Sunny.", usage=Usage.of(300, 3), model="gpt-test-1")] * runs,
            delay=0.5,
        ),
        name="forecaster",
        context_management=ContextManagement(
            max_tokens=1000,
            reserve=0,
            strategy=summarize(summarizer, keep_last=1, settings={"max_tokens": 200}),
        ),
        **options,
    )


def _summary(text: str = "Days 0 to 5 were sunny.") -> GenerateResponse:
    return GenerateResponse(
        content=text, usage=Usage.of(900, 40), model="claude-small-1", stop_reason="end_turn"
    )


# -- context compaction ------------------------------------------------------------------


async def test_the_summarizing_call_is_a_chat_span_of_its_step(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    summarizer = Summarizer([_summary()], delay=0.25)
    agent = _agent(summarizer, instrumentation=telemetry.instrumentation())
    with conversation_id("conv-7"):
        result = await agent.run(_long_conversation())
    assert result.content == "Sunny."
    assert len(summarizer.requests) == 1
    assert result.usage.prompt == 1200  # the summary is charged to the run
    assert telemetry.tree() == [
        "invoke_agent forecaster",
        "  step 1",
        "    chat claude-small",
        "    chat gpt-test",
    ]
    span = telemetry.one("chat claude-small")
    assert span.kind is SpanKind.CLIENT
    assert telemetry.parent_of(span) is telemetry.one("step 1")
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-small",
        "gen_ai.request.max_tokens": 200,
        "gen_ai.conversation.id": "conv-7",
        "gen_ai.response.model": "claude-small-1",
        "gen_ai.response.finish_reasons": ("end_turn",),
        "gen_ai.usage.input_tokens": 900,
        "gen_ai.usage.output_tokens": 40,
        "operative.run.id": result.run_id,
        "operative.step": 1,
        "operative.chat.purpose": "compaction",
    }
    assert span.end_time is not None
    assert span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 == pytest.approx(0.25)
    answer = telemetry.one("chat gpt-test")
    assert "operative.chat.purpose" not in (answer.attributes or {})
    assert span.end_time <= (answer.start_time or 0)  # the summary is written first

    tokens = {
        (p.attributes["gen_ai.token.type"], p.attributes.get("operative.chat.purpose")): p.sum
        for p in telemetry.metric_points("gen_ai.client.token.usage")
        if p.attributes["gen_ai.provider.name"] == "anthropic"
    }
    assert tokens == {("input", "compaction"): 900, ("output", "compaction"): 40}
    durations = [
        p
        for p in telemetry.metric_points("gen_ai.client.operation.duration")
        if p.attributes.get("operative.chat.purpose") == "compaction"
    ]
    assert [p.count for p in durations] == [1]
    assert durations[0].attributes["gen_ai.request.model"] == "claude-small"


async def test_the_agents_strategy_is_left_as_it_was(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    """Tracing wraps a per-run copy: the agent's options and the summarizer are untouched,
    and each traced run records its own summary span."""
    summarizer = Summarizer([_summary(), _summary()])
    agent = _agent(summarizer, runs=2, instrumentation=telemetry.instrumentation())
    options = agent.options["context_management"]
    strategy = options.strategy
    await agent.run(_long_conversation())
    await agent.run(_long_conversation())
    assert agent.options["context_management"] is options
    assert options.strategy is strategy
    assert strategy.generate is summarizer
    assert len(telemetry.named("chat claude-small")) == 2


async def test_no_span_and_no_tracing_code_when_not_instrumented(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    """Without instrumentation the summarizer is called as it was given."""
    calls: list[GenerateRequest] = []

    async def bare(request: GenerateRequest) -> GenerateResponse:
        calls.append(request)
        return _summary()

    agent = _agent(bare)
    async with agent.open_run(_long_conversation()) as run:
        assert run._control.extensions == ()
        assert run._control.context_manager is not None
        assert (
            run._control.context_manager._strategy is agent.options["context_management"].strategy
        )
        result = await run.result()
    assert result.content == "Sunny."
    assert len(calls) == 1
    assert telemetry.spans == ()
    assert telemetry.metric_points("gen_ai.client.token.usage") == []


async def test_a_summarizer_that_raises_is_an_error_span(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    summarizer = Summarizer([ConnectionError("summarizer unreachable")], delay=0.1)
    agent = _agent(summarizer, instrumentation=telemetry.instrumentation())
    async with agent.open_run(_long_conversation()) as run:
        result = await run.result()
    assert result.finish_reason == "error"
    span = telemetry.one("chat claude-small")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ConnectionError: summarizer unreachable"
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "ConnectionError"
    assert attributes["operative.chat.purpose"] == "compaction"
    assert [event.name for event in span.events] == ["exception"]
    assert telemetry.parent_of(span) is telemetry.one("step 1")
    assert telemetry.named("chat gpt-test") == []  # the step's own call never ran
    run_span = telemetry.one("invoke_agent forecaster")
    assert run_span.status.status_code is StatusCode.ERROR
    assert (run_span.attributes or {})["error.type"] == "ConnectionError"
    durations = telemetry.metric_points("gen_ai.client.operation.duration")
    assert [p.attributes["error.type"] for p in durations] == ["ConnectionError"]
    assert telemetry.metric_points("gen_ai.client.token.usage") == []


async def test_an_empty_summary_ends_the_chat_span_well_and_the_run_in_error(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    """The call itself answered: its span is fine; the run rejects the empty summary."""
    agent = _agent(Summarizer([_summary("  ")]), instrumentation=telemetry.instrumentation())
    with pytest.raises(RunFailed) as failed:
        await agent.run(_long_conversation())
    assert failed.value.result.finish_reason == "error"
    span = telemetry.one("chat claude-small")
    assert span.status.status_code is StatusCode.UNSET
    assert (span.attributes or {})["gen_ai.usage.output_tokens"] == 40
    run_span = telemetry.one("invoke_agent forecaster")
    assert (run_span.attributes or {})["error.type"] == "InvalidResponseError"


async def test_a_cancelled_summary_is_a_cancelled_span(
    telemetry: Telemetry, autojump_clock: trio.testing.MockClock
) -> None:
    summarizer = Summarizer([_summary()], delay=10)
    agent = _agent(summarizer, instrumentation=telemetry.instrumentation())
    async with agent.open_run(_long_conversation()) as run:
        await trio.sleep(1)
        run.abort("the user left")
        result = await run.result()
    assert result.finish_reason == "aborted"
    span = telemetry.one("chat claude-small")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "the user left"
    assert (span.attributes or {})["error.type"] == "cancelled"


# -- durable runs resumed by recover() ---------------------------------------------------


def _durable_agent(entered: trio.Event, gate: trio.Event | None, **options: Any) -> Any:
    @tool(idempotent=True)
    async def look_up(city: str) -> str:
        """Look the weather up."""
        entered.set()
        if gate is not None:
            await gate.wait()
        return "sunny"

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if any(m.role == "tool" for m in request.conversation.messages):
            return GenerateResponse(content="Sunny in Lisbon.", usage=Usage.of(20, 4))
        call = ToolCall(id="call_1", name="look_up", arguments={"city": "Lisbon"})
        return GenerateResponse(tool_calls=(call,), usage=Usage.of(10, 2))

    return create_agent(generate=generate, tools=[look_up], name="worker", **options)


def _database(tmp_path: Path) -> SqliteDurable:
    """A durable SQLite database in a temporary file (its work runs in worker threads,
    so these tests keep the real clock and wait on events, never on time)."""
    return SqliteDurable(tmp_path / "durable.db")


def _conversation_ids(telemetry: Telemetry) -> set[Any]:
    return {
        (span.attributes or {}).get("gen_ai.conversation.id")
        for span in telemetry.spans
        if span.name.startswith(("invoke_agent", "chat"))
    }


async def test_a_recovered_run_keeps_its_conversation_id(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """A run cut mid-tool and resumed by recover() carries the session id recorded with
    it, and says which step it went on from."""
    traced = telemetry.instrumentation()
    entered = trio.Event()
    async with _database(tmp_path) as backend:
        durable = Durable(backend, run_id="r1", session_id="s-9")
        with trio.CancelScope() as scope:
            agent = _durable_agent(entered, trio.Event(), instrumentation=traced)
            async with agent.open_run("Weather in Lisbon?", durable=durable):
                await entered.wait()
                scope.cancel()  # the worker shuts down mid-call
        first = telemetry.spans
        assert {span.name for span in first} >= {"invoke_agent worker", "step 1"}
        assert _conversation_ids(telemetry) == {"s-9"}
        original = telemetry.one("invoke_agent worker")
        assert "operative.resumed_at_step" not in (original.attributes or {})
        assert not original.links
        telemetry.exporter.clear()

        with conversation_id("another conversation"):  # not the recovered run's
            results = await recover(
                backend,
                agents={"worker": _durable_agent(trio.Event(), None, instrumentation=traced)},
            )
    assert results["r1"].content == "Sunny in Lisbon."
    assert telemetry.tree() == [
        "invoke_agent worker",
        "  step 1",
        "    execute_tool look_up",
        "  step 2",
        "    chat",
    ]
    run_span = telemetry.one("invoke_agent worker")
    attributes = dict(run_span.attributes or {})
    assert attributes["gen_ai.conversation.id"] == "s-9"
    assert attributes["operative.run.id"] == "r1"
    assert attributes["operative.resumed_at_step"] == 1
    assert attributes["operative.finish_reason"] == "stop-condition"
    assert _conversation_ids(telemetry) == {"s-9"}
    # A new trace, linked to the span of the run it resumed.
    assert original.context is not None
    assert run_span.context is not None
    assert run_span.context.trace_id != original.context.trace_id
    (link,) = run_span.links
    assert (link.context.trace_id, link.context.span_id) == (
        original.context.trace_id,
        original.context.span_id,
    )
    assert dict(link.attributes or {}) == {"operative.link": "resumed_from"}


async def test_a_durable_run_without_a_session_keeps_the_id_set_around_it(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    """No session recorded: a fresh run carries the id set around it, and the journal
    keeps it for the recovered run (whatever is set around recover())."""
    traced = telemetry.instrumentation()
    entered = trio.Event()
    async with _database(tmp_path) as backend:
        durable = Durable(backend, run_id="r2")
        with trio.CancelScope() as scope, conversation_id("conv-1"):
            agent = _durable_agent(entered, trio.Event(), instrumentation=traced)
            async with agent.open_run("Weather in Lisbon?", durable=durable):
                await entered.wait()
                scope.cancel()
        assert _conversation_ids(telemetry) == {"conv-1"}
        telemetry.exporter.clear()
        agents = {"worker": _durable_agent(trio.Event(), None, instrumentation=traced)}
        with conversation_id("another conversation"):
            results = await recover(backend, agents=agents)
    assert results["r2"].content == "Sunny in Lisbon."
    assert _conversation_ids(telemetry) == {"conv-1"}
    run_span = telemetry.one("invoke_agent worker")
    assert (run_span.attributes or {})["operative.resumed_at_step"] == 1


async def test_a_session_turn_recovered_by_its_session_keeps_the_session_id(
    telemetry: Telemetry, tmp_path: Path
) -> None:
    traced = telemetry.instrumentation()
    entered = trio.Event()
    sessions = create_session_store(MemoryStore())
    async with _database(tmp_path) as backend:
        with trio.CancelScope() as scope:
            async with (
                open_session(
                    "chat-42",
                    store=sessions,
                    agent_name="worker",
                    agent=_durable_agent(entered, trio.Event(), instrumentation=traced),
                    durable=backend,
                ) as handle,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(handle.run, "Weather in Lisbon?")
                await entered.wait()
                scope.cancel()  # the host shuts down
        assert _conversation_ids(telemetry) == {"chat-42"}
        telemetry.exporter.clear()
        async with open_session(
            "chat-42",
            store=sessions,
            agent_name="worker",
            agent=_durable_agent(trio.Event(), None, instrumentation=traced),
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            result = await recovered.result()
    assert result.content == "Sunny in Lisbon."
    assert _conversation_ids(telemetry) == {"chat-42"}
    run_span = telemetry.one("invoke_agent worker")
    assert (run_span.attributes or {})["operative.resumed_at_step"] == 1
