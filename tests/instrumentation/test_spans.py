"""Spans and metrics of instrumented runs, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from operative import (
    Conversation,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    Usage,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative.instrumentation import conversation_id
from operative.instrumentation._semconv import conventions_from_env
from operative.retry import RetryOptions
from operative.testing import HANG, ScriptedModel

from .conftest import Telemetry


class Model(ScriptedModel):
    """A scripted model that names itself the way provider adapters do."""

    __test__ = False
    provider = "openai"
    model = "gpt-test"


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    await trio.sleep(1.0)
    return a + b


@tool
async def slow(seconds: float) -> str:
    """Wait, then answer."""
    await trio.sleep(seconds)
    return "done"


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_system_message("You add numbers.")
    conversation.append_user_message("What is 1 + 2, and 3 + 4?")
    return conversation


def _tool_round_trip() -> Model:
    return Model(
        [
            GenerateResponse(
                tool_calls=(
                    ToolCall(id="call_1", name="add", arguments={"a": 1, "b": 2}),
                    ToolCall(id="call_2", name="add", arguments='{"a": 3, "b": 4}'),
                ),
                usage=Usage(prompt=70, completion=12, total=102, cache_read=20, reasoning=4),
                model="gpt-test-2026",
                response_id="resp_1",
                stop_reason="tool_calls",
            ),
            GenerateResponse(
                content="3 and 7",
                usage=Usage.of(120, 5),
                model="gpt-test-2026",
                response_id="resp_2",
                stop_reason="stop",
            ),
        ],
        delay=0.5,
    )


async def test_tool_round_trip_spans(telemetry: Telemetry, autojump_clock: Any) -> None:
    """A run with two concurrent tool calls: names, kinds, parents and attributes."""
    async with open_run(
        generate=_tool_round_trip(),
        conversation=_conversation(),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
        agent_name="adder",
        instrumentation=telemetry.instrumentation(),
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason == "stop-condition"
    assert telemetry.tree() == [
        "invoke_agent adder",
        "  step 1",
        "    chat gpt-test",
        "    execute_tool add",
        "    execute_tool add",
        "  step 2",
        "    chat gpt-test",
    ]
    agent = telemetry.one("invoke_agent adder")
    step1, step2 = telemetry.one("step 1"), telemetry.one("step 2")
    chat1, chat2 = sorted(telemetry.named("chat gpt-test"), key=lambda s: s.start_time or 0)
    tools = telemetry.named("execute_tool add")
    assert agent.kind is SpanKind.INTERNAL
    assert chat1.kind is SpanKind.CLIENT
    assert all(span.kind is SpanKind.INTERNAL for span in (step1, step2, *tools))
    assert telemetry.parent_of(agent) is None
    assert telemetry.parent_of(step1) == agent
    assert telemetry.parent_of(chat1) == step1
    assert telemetry.parent_of(chat2) == step2
    # Tool calls run as child tasks of the step's nursery and still nest in the step.
    assert all(telemetry.parent_of(span) == step1 for span in tools)
    assert len({span.context.trace_id for span in telemetry.spans}) == 1

    assert dict(agent.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.name": "adder",
        "gen_ai.request.model": "gpt-test",
        "operative.run.id": run.run_id,
        "gen_ai.usage.input_tokens": 210,
        "gen_ai.usage.output_tokens": 17,
        "gen_ai.usage.cache_read.input_tokens": 20,
        "gen_ai.usage.reasoning.output_tokens": 4,
        "operative.steps": 2,
        "operative.finish_reason": "stop-condition",
    }
    assert agent.status.status_code is StatusCode.UNSET
    attributes = dict(chat1.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "operative.run.id": run.run_id,
        "operative.step": 1,
        "operative.attempt": 1,
        "gen_ai.response.model": "gpt-test-2026",
        "gen_ai.response.id": "resp_1",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        # operative's prompt leaves cached input out; the conventions' count holds it.
        "gen_ai.usage.input_tokens": 90,
        "gen_ai.usage.output_tokens": 12,
        "gen_ai.usage.cache_read.input_tokens": 20,
        "gen_ai.usage.reasoning.output_tokens": 4,
    }
    by_id = {dict(span.attributes or {})["gen_ai.tool.call.id"]: span for span in tools}
    assert dict(by_id["call_2"].attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_2",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Add two integers.",
        "operative.run.id": run.run_id,
        "operative.step": 1,
        "operative.tool.outcome": "success",
    }
    # Timestamps follow trio's clock: virtual seconds under MockClock.
    assert chat1.end_time is not None
    assert chat1.start_time is not None
    assert (chat1.end_time - chat1.start_time) / 1e9 == pytest.approx(0.5)
    tool_span = by_id["call_1"]
    assert tool_span.end_time is not None
    assert tool_span.start_time is not None
    assert (tool_span.end_time - tool_span.start_time) / 1e9 == pytest.approx(1.0)


async def test_metrics_follow_the_conventions(telemetry: Telemetry, autojump_clock: Any) -> None:
    """Token usage by type and operation duration, with the conventions' attributes."""
    async with open_run(
        generate=_tool_round_trip(),
        conversation=_conversation(),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    tokens = telemetry.metric_points("gen_ai.client.token.usage")
    by_type = {dict(point.attributes)["gen_ai.token.type"]: point for point in tokens}
    assert by_type["input"].sum == 90 + 120
    assert by_type["output"].sum == 12 + 5
    assert dict(by_type["input"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-test-2026",
        "gen_ai.token.type": "input",
    }
    (duration,) = telemetry.metric_points("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert duration.sum == pytest.approx(1.0)
    assert duration.explicit_bounds[0] == 0.01


async def test_no_content_unless_capture_is_on(telemetry: Telemetry, autojump_clock: Any) -> None:
    """Messages, tool arguments and results appear only with capture_content=True."""
    content_keys = {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    }
    async with open_run(
        generate=_tool_round_trip(),
        conversation=_conversation(),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    for span in telemetry.spans:
        assert content_keys.isdisjoint(span.attributes or {}), span.name
        for value in (span.attributes or {}).values():
            assert "What is 1 + 2" not in str(value)
    telemetry.exporter.clear()

    async with open_run(
        generate=_tool_round_trip(),
        conversation=_conversation(),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(capture_content=True),
    ):
        pass
    chat1 = sorted(telemetry.named("chat gpt-test"), key=lambda s: s.start_time or 0)[0]
    attributes = dict(chat1.attributes or {})
    assert json.loads(str(attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 1 + 2, and 3 + 4?"}]}
    ]
    assert json.loads(str(attributes["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "You add numbers."}
    ]
    output = json.loads(str(attributes["gen_ai.output.messages"]))
    assert output[0]["finish_reason"] == "tool_calls"
    assert output[0]["parts"][1] == {
        "type": "tool_call",
        "id": "call_2",
        "name": "add",
        "arguments": {"a": 3, "b": 4},
    }
    definitions = json.loads(str(attributes["gen_ai.tool.definitions"]))
    assert definitions[0]["name"] == "add"
    assert definitions[0]["type"] == "function"
    second = sorted(telemetry.named("chat gpt-test"), key=lambda s: s.start_time or 0)[1]
    history = json.loads(str(dict(second.attributes or {})["gen_ai.input.messages"]))
    assert history[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call_2", "response": "7"}],
    }
    by_id = {
        dict(span.attributes or {})["gen_ai.tool.call.id"]: dict(span.attributes or {})
        for span in telemetry.named("execute_tool add")
    }
    assert json.loads(str(by_id["call_1"]["gen_ai.tool.call.arguments"])) == {"a": 1, "b": 2}
    assert by_id["call_2"]["gen_ai.tool.call.arguments"] == '{"a": 3, "b": 4}'
    assert by_id["call_2"]["gen_ai.tool.call.result"] == "7"


async def test_a_retry_is_a_failed_chat_span_and_an_event(
    telemetry: Telemetry, autojump_clock: Any
) -> None:
    """Each attempt is a chat span; the retry between them is an event on the step."""
    model = Model([ConnectionError("connection reset"), GenerateResponse(content="fine")])
    async with open_run(
        generate=model,
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
        retry=RetryOptions(initial_delay=2.0, jitter=False),
        instrumentation=telemetry.instrumentation(),
    ) as run:
        pass
    assert (await run.result()).finish_reason == "stop-condition"
    assert telemetry.tree() == [
        "invoke_agent (agent)",
        "  step 1",
        "    chat gpt-test",
        "    chat gpt-test",
    ]
    failed, answered = sorted(telemetry.named("chat gpt-test"), key=lambda s: s.start_time or 0)
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "ConnectionError"
    assert dict(failed.attributes or {})["operative.attempt"] == 1
    assert [event.name for event in failed.events] == ["exception"]
    assert answered.status.status_code is StatusCode.UNSET
    assert dict(answered.attributes or {})["operative.attempt"] == 2
    step = telemetry.one("step 1")
    (retry,) = step.events
    assert retry.name == "generate.retry"
    assert dict(retry.attributes or {}) == {
        "operative.attempt": 2,
        "operative.retry.delay": 2.0,
        "error.type": "ConnectionError",
        "operative.error": "connection reset",
    }
    assert step.status.status_code is StatusCode.UNSET
    assert telemetry.one("invoke_agent (agent)").status.status_code is StatusCode.UNSET
    points = telemetry.metric_points("gen_ai.client.operation.duration")
    errors = {dict(point.attributes).get("error.type"): point.count for point in points}
    assert errors == {"ConnectionError": 1, None: 1}


async def test_an_aborted_run_ends_every_span_with_the_reason(
    telemetry: Telemetry, autojump_clock: Any
) -> None:
    """Abort mid-tool: tool, step and run spans end in error, carrying the reason."""
    model = Model(
        [GenerateResponse(tool_calls=(ToolCall(id="c1", name="slow", arguments={"seconds": 60}),))]
    )
    async with open_run(
        generate=model,
        conversation=_conversation(),
        tools=[slow],
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(),
    ) as run:
        await trio.sleep(5)
        run.abort("the user pressed stop")
    assert (await run.result()).finish_reason == "aborted"
    assert telemetry.tree() == [
        "invoke_agent (agent)",
        "  step 1",
        "    chat gpt-test",
        "    execute_tool slow",
    ]
    tool_span = telemetry.one("execute_tool slow")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert tool_span.status.description == "the user pressed stop"
    assert dict(tool_span.attributes or {})["error.type"] == "cancelled"
    step = telemetry.one("step 1")
    assert step.status.status_code is StatusCode.ERROR
    assert step.status.description == "the user pressed stop"
    agent = telemetry.one("invoke_agent (agent)")
    assert agent.status.status_code is StatusCode.ERROR
    assert agent.status.description == "aborted: the user pressed stop"
    attributes = dict(agent.attributes or {})
    assert attributes["operative.abort_reason"] == "the user pressed stop"
    assert attributes["operative.finish_reason"] == "aborted"
    assert attributes["error.type"] == "aborted"
    assert agent.end_time is not None
    assert agent.start_time is not None
    assert (agent.end_time - agent.start_time) / 1e9 == pytest.approx(5.0)


async def test_an_abort_during_the_model_call_ends_the_chat_span(
    telemetry: Telemetry, autojump_clock: Any
) -> None:
    """A model call cut by an abort is a chat span in error with the abort reason."""
    async with open_run(
        generate=Model([HANG]),
        conversation=_conversation(),
        instrumentation=telemetry.instrumentation(),
    ) as run:
        await trio.sleep(1)
        run.abort("deadline")
    chat = telemetry.one("chat gpt-test")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "deadline"
    assert [span.name for span in telemetry.spans if span.end_time is None] == []
    assert len(telemetry.spans) == 3


async def test_an_error_is_recorded_on_the_chat_and_run_spans(
    telemetry: Telemetry, autojump_clock: Any
) -> None:
    """A model error: exception events, error.type and ERROR status up the tree."""
    async with open_run(
        generate=Model([ValueError("the model is confused")]),
        conversation=_conversation(),
        instrumentation=telemetry.instrumentation(),
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason == "error"
    chat = telemetry.one("chat gpt-test")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "ValueError: the model is confused"
    assert dict(chat.attributes or {})["error.type"] == "ValueError"
    (exception,) = chat.events
    assert dict(exception.attributes or {})["exception.type"] == "ValueError"
    assert telemetry.one("step 1").status.status_code is StatusCode.ERROR
    agent = telemetry.one("invoke_agent (agent)")
    assert agent.status.status_code is StatusCode.ERROR
    assert dict(agent.attributes or {})["error.type"] == "ValueError"
    assert [event.name for event in agent.events] == ["exception"]
    (duration,) = telemetry.metric_points("gen_ai.client.operation.duration")
    assert dict(duration.attributes)["error.type"] == "ValueError"


async def test_a_failing_tool_is_a_span_in_error(telemetry: Telemetry, autojump_clock: Any) -> None:
    """A tool that raises gives an error result, and its span says so."""

    @tool
    async def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk full")

    model = Model([GenerateResponse(tool_calls=(ToolCall(id="c1", name="broken"),)), "gave up"])
    async with open_run(
        generate=model,
        conversation=_conversation(),
        tools=[broken],
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    span = telemetry.one("execute_tool broken")
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "tool_error"
    assert dict(span.attributes or {})["operative.tool.outcome"] == "error"
    assert telemetry.one("invoke_agent (agent)").status.status_code is StatusCode.UNSET


async def test_runs_nest_under_the_callers_span(telemetry: Telemetry) -> None:
    """The caller's current span (or trace_context=) is the run span's parent."""
    tracer = telemetry.tracer_provider.get_tracer("host")
    with tracer.start_as_current_span("request") as request:
        async with open_run(
            generate=Model(["hi"]),
            conversation=_conversation(),
            stop_when=stop_when.no_tool_calls(),
            instrumentation=telemetry.instrumentation(),
        ):
            pass
    agent = telemetry.one("invoke_agent (agent)")
    assert telemetry.parent_of(agent) == telemetry.one("request")

    telemetry.exporter.clear()
    async with open_run(
        generate=Model(["hi"]),
        conversation=_conversation(),
        trace_context=trace.set_span_in_context(request),
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    agent = telemetry.one("invoke_agent (agent)")
    assert agent.parent is not None
    assert agent.parent.span_id == request.get_span_context().span_id

    telemetry.exporter.clear()
    headers = {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01"}
    async with open_run(
        generate=Model(["hi"]),
        conversation=_conversation(),
        trace_context=headers,
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    agent = telemetry.one("invoke_agent (agent)")
    assert agent.context.trace_id == int("ab" * 16, 16)


async def test_the_conversation_id_is_recorded(telemetry: Telemetry) -> None:
    """Runs opened inside conversation_id(...) carry gen_ai.conversation.id."""
    with conversation_id("conv-42"):
        async with open_run(
            generate=Model(["hi"]),
            conversation=_conversation(),
            stop_when=stop_when.no_tool_calls(),
            instrumentation=telemetry.instrumentation(),
        ):
            pass
    for name in ("invoke_agent (agent)", "chat gpt-test"):
        assert dict(telemetry.one(name).attributes or {})["gen_ai.conversation.id"] == "conv-42"


async def test_request_settings_are_recorded(telemetry: Telemetry) -> None:
    """Model settings the conventions name become gen_ai.request.* attributes."""
    async with open_run(
        generate=Model(["hi"]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
        settings={"model": "gpt-big", "temperature": 0.2, "max_tokens": 100, "stop": ["END"]},
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    chat = telemetry.one("chat gpt-big")
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.request.model"] == "gpt-big"
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.request.max_tokens"] == 100
    assert attributes["gen_ai.request.stop_sequences"] == ("END",)


async def test_an_agent_traces_every_run(telemetry: Telemetry) -> None:
    """create_agent(instrumentation=...) and instrument_agent trace the agent's runs."""
    agent = create_agent(
        generate=Model(["one", "two"]),
        name="helper",
        instrumentation=telemetry.instrumentation(),
    )
    await agent.run("first")
    await agent.run("second")
    assert len(telemetry.named("invoke_agent helper")) == 2

    telemetry.exporter.clear()
    plain = create_agent(generate=Model(["three"]), name="plain")
    await plain.run("untraced")
    assert telemetry.spans == ()
    traced = telemetry.instrumentation().instrument_agent(plain)
    assert traced.name == "plain"
    await create_agent(generate=Model(["x"]), name="other").run("still untraced")
    assert telemetry.spans == ()


async def test_an_uninstrumented_run_does_no_tracing_work() -> None:
    """Without instrumentation the run keeps its own generate function and no tracer."""
    model = Model(["hi"])
    async with open_run(generate=model, conversation=_conversation()) as run:
        assert run._control.extensions == ()
        assert run._control.config.generate is model
        assert not run._control.wants("step.started")


def test_bad_arguments_are_refused(telemetry: Telemetry) -> None:
    """instrumentation=, tracer_provider= and capture_content= are checked eagerly."""
    from operative.instrumentation import Instrumentation

    with pytest.raises(InvalidArgument, match="instrumentation="):
        create_agent(generate=Model([]), instrumentation="yes")
    with pytest.raises(InvalidArgument, match="tracer_provider="):
        Instrumentation(tracer_provider="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="meter_provider="):
        Instrumentation(meter_provider=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="capture_content="):
        Instrumentation(capture_content="yes")  # type: ignore[arg-type]


async def test_bad_trace_context_is_refused(telemetry: Telemetry) -> None:
    """trace_context= must be a Context, a Span or trace headers."""
    with pytest.raises(InvalidArgument, match="trace_context="):
        async with open_run(
            generate=Model(["hi"]),
            conversation=_conversation(),
            trace_context=42,
            instrumentation=telemetry.instrumentation(),
        ):
            pass


def test_semconv_stability_opt_in_is_read() -> None:
    """OTEL_SEMCONV_STABILITY_OPT_IN's gen_ai_latest_experimental selects the latest."""
    assert conventions_from_env({}) == "default"
    assert conventions_from_env({"OTEL_SEMCONV_STABILITY_OPT_IN": "http"}) == "default"
    opt_in = {"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"}
    assert conventions_from_env(opt_in) == "latest"


def test_opt_in_reaches_the_instrumentation(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An Instrumentation reads the variable when it is made."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    assert telemetry.instrumentation().conventions == "latest"
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN")
    assert telemetry.instrumentation().conventions == "default"


async def test_a_session_turn_carries_the_session_id(telemetry: Telemetry) -> None:
    """Runs of a session handle record the session id as gen_ai.conversation.id."""
    from operative.kvstore import MemoryStore
    from operative.sessions import create_session_store, open_session

    agent = create_agent(
        generate=Model(["hello"]), name="helper", instrumentation=telemetry.instrumentation()
    )
    sessions = create_session_store(MemoryStore())
    async with open_session("session-7", store=sessions, agent_name="helper", agent=agent) as h:
        await h.run("hi")
    for name in ("invoke_agent helper", "chat gpt-test"):
        attributes = dict(telemetry.one(name).attributes or {})
        assert attributes["gen_ai.conversation.id"] == "session-7"
