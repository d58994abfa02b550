"""instrument_generate: the chat span of a bare generate function, outside a run."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from opentelemetry.trace import SpanKind, StatusCode

import operative.providers.instrumentation as module
from operative import (
    Conversation,
    ConversationHistory,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    Usage,
    open_run,
    stop_when,
)
from operative.providers import fallover
from operative.providers.instrumentation import InstrumentedGenerate, instrument_generate
from operative.testing import ScriptedModel

from .conftest import Telemetry


def _request(**settings: Any) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message("hi")
    return GenerateRequest(conversation=conversation.current, settings=settings)


async def test_a_bare_call_is_one_chat_span(telemetry: Telemetry, autojump_clock: Any) -> None:
    """Name, kind, attributes, timing and metrics of one wrapped call."""
    model = ScriptedModel(
        [GenerateResponse(content="hello", usage=Usage.of(8, 2), model="m-1", stop_reason="end")],
        delay=0.25,
    )
    generate = instrument_generate(
        model, instrumentation=telemetry.instrumentation(), provider="anthropic", model="m"
    )
    response = await generate(_request())
    assert response.content == "hello"
    span = telemetry.one("chat m")
    assert span.kind is SpanKind.CLIENT
    assert span.parent is None
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "m",
        "gen_ai.response.model": "m-1",
        "gen_ai.response.finish_reasons": ("end",),
        "gen_ai.usage.input_tokens": 8,
        "gen_ai.usage.output_tokens": 2,
    }
    assert span.end_time is not None
    assert span.start_time is not None
    assert (span.end_time - span.start_time) / 1e9 == pytest.approx(0.25)
    (duration,) = telemetry.metric_points("gen_ai.client.operation.duration")
    assert duration.sum == pytest.approx(0.25)


async def test_names_come_from_the_wrapped_function(telemetry: Telemetry) -> None:
    """Without provider=/model=, the function's own attributes name the call."""

    class Adapter(ScriptedModel):
        __test__ = False
        provider = "gemini"
        model = "gemini-pro"

    generate = instrument_generate(Adapter(["ok"]), instrumentation=telemetry.instrumentation())
    assert generate.provider == "gcp.gemini"
    await generate(_request(model="gemini-flash"))
    span = telemetry.one("chat gemini-flash")
    assert dict(span.attributes or {})["gen_ai.provider.name"] == "gcp.gemini"
    traced = telemetry.instrumentation()
    unnamed = instrument_generate(ScriptedModel(["ok"]), instrumentation=traced)
    assert unnamed.provider == "unknown"
    assert unnamed.model is None
    assert unnamed.name == "ScriptedModel"


async def test_errors_and_cancellation(telemetry: Telemetry, autojump_clock: Any) -> None:
    """A raising call and a cancelled call both end their span in error."""
    generate = instrument_generate(
        ScriptedModel([RuntimeError("boom"), "slow"], delay=10),
        instrumentation=telemetry.instrumentation(),
    )
    with pytest.raises(RuntimeError):
        await generate(_request())
    with trio.move_on_after(1):
        await generate(_request())
    failed, cancelled = sorted(telemetry.named("chat"), key=lambda s: s.start_time or 0)
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["error.type"] == "RuntimeError"
    assert cancelled.status.status_code is StatusCode.ERROR
    assert dict(cancelled.attributes or {})["error.type"] == "cancelled"


async def test_inside_an_instrumented_run_there_is_one_span_per_call(
    telemetry: Telemetry,
) -> None:
    """The run traces the call; the wrapper lends it names and opens no second span."""
    generate = instrument_generate(
        ScriptedModel(["hi"]),
        instrumentation=telemetry.instrumentation(),
        provider="openai",
        model="gpt-x",
    )
    history = ConversationHistory(messages=_request().conversation.messages)
    async with open_run(
        generate=generate,
        conversation=history,
        stop_when=stop_when.no_tool_calls(),
        instrumentation=telemetry.instrumentation(),
    ):
        pass
    assert [span.name for span in telemetry.spans] == [
        "chat gpt-x",
        "step 1",
        "invoke_agent (agent)",
    ]
    agent = telemetry.one("invoke_agent (agent)")
    assert dict(agent.attributes or {})["gen_ai.provider.name"] == "openai"


async def test_it_composes_with_fallover(telemetry: Telemetry) -> None:
    """A traced fallover is named by the provider that answered."""
    generate = instrument_generate(
        fallover([ScriptedModel([ConnectionError("down")]), ScriptedModel(["up"])], retry=None),
        instrumentation=telemetry.instrumentation(),
    )
    await generate(_request())
    span = telemetry.one("chat")
    assert dict(span.attributes or {})["operative.route.provider"] == "ScriptedModel#2"


async def test_aclose_reaches_the_wrapped_function(telemetry: Telemetry) -> None:
    """aclose() closes an adapter; a plain function has nothing to close."""
    closed: list[bool] = []

    class Closable(ScriptedModel):
        __test__ = False

        async def aclose(self) -> None:
            closed.append(True)

    await instrument_generate(Closable([]), instrumentation=telemetry.instrumentation()).aclose()
    assert closed == [True]
    plain = instrument_generate(ScriptedModel([]), instrumentation=telemetry.instrumentation())
    await plain.aclose()
    assert "ScriptedModel" in repr(plain)
    assert isinstance(plain.wrapped, ScriptedModel)


def test_bad_arguments_are_refused() -> None:
    """Everything is checked when the wrapper is made."""
    with pytest.raises(InvalidArgument, match="async function"):
        instrument_generate("model")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="instrumentation="):
        instrument_generate(ScriptedModel([]), instrumentation="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="provider="):
        instrument_generate(ScriptedModel([]), provider="")
    assert isinstance(instrument_generate(ScriptedModel([])), InstrumentedGenerate)
    assert module.__all__ == sorted(module.__all__)
