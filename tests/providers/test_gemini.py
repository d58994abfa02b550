"""gemini_generate: httpx over a socket to a local generateContent server (JSON and SSE)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from _doubles import get_weather

from operative import (
    Conversation,
    GenerateRequest,
    ImagePart,
    InvalidArgument,
    TextPart,
    ToolCall,
    ToolResult,
    create_agent,
)
from operative.providers import (
    Delta,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from operative.providers.gemini import GeminiGenerate, gemini_generate, gemini_schema
from operative.retry import RetryOptions
from operative.tools import ToolSpec

from ._gemini_wire import function_call, reply_body, stream_events, usage_of
from ._server import JsonReply, SseReply, WireServer, sse_event

PATH = "/v1beta/models/gemini-test:"


@pytest.fixture
async def generate(wire_server: WireServer) -> AsyncIterator[GeminiGenerate]:
    async with gemini_generate(
        model="gemini-test", api_key="test-key", base_url=wire_server.base_url
    ) as g:
        yield g


def reply(server: WireServer, body: dict[str, Any], *, stream: bool) -> None:
    if stream:
        server.reply(SseReply(events=stream_events(body)))
    else:
        server.reply(JsonReply(body=body))


def request_of(*messages: str, tools: tuple[ToolSpec, ...] = (), **kw: Any) -> GenerateRequest:
    conversation = Conversation()
    for text in messages:
        conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, tools=tools, **kw)


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_round_trip_through_an_agent(wire_server: WireServer, stream: bool) -> None:
    """The model calls a function, reads its functionResponse, and answers."""
    deltas: list[Delta] = []
    reply(
        wire_server,
        reply_body(
            [
                {"text": "Let me look."},
                function_call("get_weather", {"city": "Oslo"}, thoughtSignature="sig1"),
            ],
            usage=usage_of(20, 7),
        ),
        stream=stream,
    )
    reply(wire_server, reply_body([{"text": "It is sunny in Oslo."}]), stream=stream)
    async with gemini_generate(
        model="gemini-test",
        api_key="test-key",
        base_url=wire_server.base_url,
        stream=stream,
        on_delta=deltas.append,
        temperature=0.2,
        max_output_tokens=256,
    ) as generate:
        agent = create_agent(generate=generate, instructions="Be brief.", tools=[get_weather])
        result = await agent.run("Weather in Oslo?")

    assert result.error is None, result.error
    assert result.content == "It is sunny in Oslo."
    assert result.steps[0].tool_calls == (
        ToolCall(id="call_2_0_get_weather", name="get_weather", arguments={"city": "Oslo"}),
    )
    assert result.steps[0].results[0].value == "sunny in Oslo"
    assert (result.usage.prompt, result.usage.completion) == (30, 12)
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    assert [r.path for r in wire_server.received] == [PATH + method] * 2
    assert wire_server.received[0].headers["x-goog-api-key"] == "test-key"
    first, second = (r.json for r in wire_server.received)
    assert first["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert first["contents"] == [{"role": "user", "parts": [{"text": "Weather in Oslo?"}]}]
    assert first["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 256}
    (declaration,) = first["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "get_weather"
    assert declaration["description"] == "The weather in a city."
    assert declaration["parameters"]["properties"]["city"]["type"] == "string"
    assert "additionalProperties" not in str(declaration)
    assert second["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Let me look."},
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Oslo"}},
                    "thoughtSignature": "sig1",
                },
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "name": "get_weather",
                        "response": {"result": "sunny in Oslo"},
                    }
                }
            ],
        },
    ]
    if stream:
        texts = "".join(d.text for d in deltas if d.kind == "text")
        assert texts == "Let me look.It is sunny in Oslo."
        arguments = [d for d in deltas if d.kind == "tool_arguments"]
        assert [(d.text, d.call_id, d.tool_name) for d in arguments] == [
            ('{"city": "Oslo"}', "call_2_0_get_weather", "get_weather")
        ]
    else:
        assert deltas == []


@pytest.mark.parametrize("stream", [False, True])
async def test_response_fields_and_usage(
    wire_server: WireServer, generate: GeminiGenerate, stream: bool
) -> None:
    """Cached tokens leave the prompt, thoughts join the completion as reasoning."""
    reply(
        wire_server,
        reply_body(
            [{"text": "pondering", "thought": True}, {"text": "hi"}],
            finish_reason="MAX_TOKENS",
            usage=usage_of(110, 4, cached=100, thoughts=6),
            response_id="resp_9",
        ),
        stream=stream,
    )
    response = await generate(request_of("hello", settings={"stream": stream}))
    assert response.content == "hi"
    assert response.usage is not None
    usage = response.usage
    assert (usage.prompt, usage.completion, usage.cache_read, usage.reasoning) == (10, 10, 100, 6)
    assert usage.total == 120
    assert (response.model, response.stop_reason, response.response_id) == (
        "gemini-test-001",
        "MAX_TOKENS",
        "resp_9",
    )
    assert response.metadata == {"gemini": {"thoughts": "pondering"}}


async def test_ids_synthesized_unique_and_api_ids_kept(
    wire_server: WireServer, generate: GeminiGenerate
) -> None:
    """Two calls of one tool get distinct ids; ids the API sends are used and echoed."""
    reply(
        wire_server,
        reply_body(
            [
                function_call("f", {"a": 1}),
                function_call("f", {"a": 2}),
                {"functionCall": {"name": "g", "args": {}, "id": "api_7"}},
            ]
        ),
        stream=False,
    )
    response = await generate(request_of("go"))
    assert [c.id for c in response.tool_calls] == ["call_1_0_f", "call_1_1_f", "api_7"]
    conversation = Conversation()
    conversation.append_user_message("go")
    conversation.append_assistant_message("", response.tool_calls, metadata=response.metadata)
    for call, outcome in zip(response.tool_calls, ["success", "error", "success"], strict=True):
        conversation.append_tool_result(
            ToolResult(call_id=call.id, tool_name=call.name, outcome=outcome, value=1, error="no")  # type: ignore[arg-type]
        )
    reply(wire_server, reply_body([{"text": "ok"}]), stream=False)
    await generate(GenerateRequest(conversation=conversation.current))
    model_turn, results = wire_server.last.json["contents"][1:]
    assert [p["functionCall"].get("id") for p in model_turn["parts"]] == [None, None, "api_7"]
    responses = [p["functionResponse"] for p in results["parts"]]
    assert [r["name"] for r in responses] == ["f", "f", "g"]
    assert [r.get("id") for r in responses] == [None, None, "api_7"]
    assert "result" in responses[0]["response"]
    assert "error" in responses[1]["response"]


async def test_images_inline_and_by_uri(wire_server: WireServer, generate: GeminiGenerate) -> None:
    """Bytes become inlineData (base64), URLs fileData with fileUri."""
    reply(wire_server, reply_body([{"text": "two images"}]), stream=False)
    conversation = Conversation()
    conversation.append_user_message(
        [
            TextPart(text="compare"),
            ImagePart(url="https://example.test/a.png", media_type="image/png"),
            ImagePart(data=b"\x89PNG", media_type="image/png"),
        ]
    )
    await generate(GenerateRequest(conversation=conversation.current))
    assert wire_server.last.json["contents"][0]["parts"] == [
        {"text": "compare"},
        {"fileData": {"fileUri": "https://example.test/a.png", "mimeType": "image/png"}},
        {"inlineData": {"mimeType": "image/png", "data": base64.b64encode(b"\x89PNG").decode()}},
    ]


async def test_structured_output_request_shape(
    wire_server: WireServer, generate: GeminiGenerate
) -> None:
    """An output schema becomes responseMimeType + a converted responseSchema."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"n": {"type": "integer"}, "tag": {"type": ["string", "null"]}},
        "required": ["n"],
    }
    reply(wire_server, reply_body([{"text": '{"n": 1}'}]), stream=False)
    response = await generate(request_of("count", output_schema=schema))
    assert response.content == '{"n": 1}'
    assert wire_server.last.json["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tag": {"type": "string", "nullable": True}},
            "required": ["n"],
        },
    }


def test_schema_conversion() -> None:
    """$ref is inlined, const/anyOf/null handled, unsupported keywords stripped."""
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": {"Color": {"enum": ["red", "blue"]}},
        "type": "object",
        "properties": {
            "color": {"$ref": "#/$defs/Color"},
            "kind": {"const": "box"},
            "size": {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]},
            "level": {"type": "integer", "enum": [1, 2]},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "additionalProperties": False,
    }
    assert gemini_schema(schema) == {
        "type": "object",
        "properties": {
            "color": {"type": "string", "enum": ["red", "blue"]},
            "kind": {"type": "string", "enum": ["box"]},
            "size": {"type": "number", "nullable": True},
            "level": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }


async def test_settings_placement(wire_server: WireServer, generate: GeminiGenerate) -> None:
    """Top-level settings stay top-level; the rest go in generationConfig, camelCased."""
    reply(wire_server, reply_body([{"text": "x"}]), stream=False)
    await generate(
        request_of(
            "hi",
            settings={
                "model": "gemini-other",
                "max_tokens": 9,
                "thinking_config": {"thinkingBudget": 0},
                "safety_settings": [{"category": "c", "threshold": "t"}],
            },
        )
    )
    assert wire_server.last.path == "/v1beta/models/gemini-other:generateContent"
    body = wire_server.last.json
    assert body["generationConfig"] == {
        "maxOutputTokens": 9,
        "thinkingConfig": {"thinkingBudget": 0},
    }
    assert body["safetySettings"] == [{"category": "c", "threshold": "t"}]


ERRORS = [
    (400, "INVALID_ARGUMENT", ProviderRequestError, False),
    (401, "UNAUTHENTICATED", ProviderAuthenticationError, False),
    (403, "PERMISSION_DENIED", ProviderAuthenticationError, False),
    (404, "NOT_FOUND", ProviderRequestError, False),
    (429, "RESOURCE_EXHAUSTED", ProviderRateLimitError, True),
    (500, "INTERNAL", ProviderUnavailableError, True),
    (503, "UNAVAILABLE", ProviderUnavailableError, True),
]


@pytest.mark.parametrize(("status", "kind", "cls", "retryable"), ERRORS)
async def test_http_errors_are_typed(
    wire_server: WireServer,
    generate: GeminiGenerate,
    status: int,
    kind: str,
    cls: type[ProviderError],
    retryable: bool,
) -> None:
    """Each status maps to its ProviderError subclass, with the API's message."""
    wire_server.reply(
        JsonReply(
            status=status,
            body={"error": {"code": status, "message": f"boom {status}", "status": kind}},
            headers={"retry-after": "7"},
        )
    )
    with pytest.raises(cls) as caught:
        await generate(request_of("hi"))
    error = caught.value
    assert type(error) is cls
    assert (error.provider, error.model, error.status) == ("gemini", "gemini-test", status)
    assert error.retryable is retryable
    assert error.retry_after == 7.0
    assert f"boom {status}" in str(error)
    if status in (401, 403):
        assert "GEMINI_API_KEY" in str(error)


async def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key, the call says which environment variable to set; the env is read."""
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    async with gemini_generate(model="m", base_url="http://127.0.0.1:9") as g:
        with pytest.raises(ProviderAuthenticationError, match="GEMINI_API_KEY"):
            await g(request_of("hi"))


async def test_key_from_environment(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "from-env")
    reply(wire_server, reply_body([{"text": "x"}]), stream=False)
    async with gemini_generate(model="m", base_url=wire_server.base_url) as g:
        await g(request_of("hi"))
    assert wire_server.last.headers["x-goog-api-key"] == "from-env"


async def test_error_event_inside_a_stream(
    wire_server: WireServer, generate: GeminiGenerate
) -> None:
    """An error object mid-stream is typed by its code."""
    events = stream_events(reply_body([{"text": "partial answer"}]))[:1]
    events.append(sse_event({"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}}))
    wire_server.reply(SseReply(events=events))
    with pytest.raises(ProviderUnavailableError, match="busy") as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable


async def test_stream_dropped_mid_way_is_retryable(
    wire_server: WireServer, generate: GeminiGenerate
) -> None:
    """A connection cut part-way through the stream is a retryable connection error."""
    wire_server.reply(
        SseReply(events=stream_events(reply_body([{"text": "abcdef"}])), drop_after=1)
    )
    with pytest.raises(ProviderConnectionError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable
    assert isinstance(caught.value, ConnectionError)


async def test_dropped_stream_is_retried_by_the_run(wire_server: WireServer) -> None:
    """The run's retry policy sees the cut stream as transient and the retry succeeds."""
    body = reply_body([{"text": "whole answer"}])
    wire_server.reply(
        SseReply(events=stream_events(body), drop_after=1), SseReply(events=stream_events(body))
    )
    async with gemini_generate(
        model="m", api_key="k", base_url=wire_server.base_url, stream=True
    ) as g:
        agent = create_agent(generate=g, retry=RetryOptions(initial_delay=0, jitter=False))
        result = await agent.run("hi")
    assert result.content == "whole answer"
    assert len(wire_server.received) == 2


async def test_slow_first_byte_times_out(wire_server: WireServer) -> None:
    """A server silent past the client's timeout gives a retryable ProviderTimeoutError."""
    wire_server.reply(JsonReply(body=reply_body([{"text": "late"}]), delay=0.5))
    async with gemini_generate(
        model="m", api_key="k", base_url=wire_server.base_url, timeout=0.1
    ) as g:
        with pytest.raises(ProviderTimeoutError) as caught:
            await g(request_of("hi"))
    assert caught.value.retryable
    assert isinstance(caught.value, TimeoutError)


async def test_abort_mid_stream_closes_the_connection(wire_server: WireServer) -> None:
    """Cancelling a streaming call closes its connection promptly; the server sees it."""
    first_delta = trio.Event()
    wire_server.reply(
        SseReply(events=stream_events(reply_body([{"text": "abcdef"}])), hang_after=1)
    )
    async with gemini_generate(
        model="m",
        api_key="k",
        base_url=wire_server.base_url,
        stream=True,
        on_delta=lambda delta: first_delta.set(),
    ) as g:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await g(request_of("hi"))

            nursery.start_soon(call)
            with trio.fail_after(2):
                await first_delta.wait()
            nursery.cancel_scope.cancel()
        with trio.fail_after(1):
            await wire_server.client_hung_up.wait()


async def test_client_ownership(wire_server: WireServer) -> None:
    """A client the adapter made is closed by aclose(); a caller's client is left open."""
    import httpx

    reply(wire_server, reply_body([{"text": "a"}]), stream=False)
    reply(wire_server, reply_body([{"text": "b"}]), stream=False)
    owned = gemini_generate(model="m", api_key="k", base_url=wire_server.base_url)
    assert owned.owns_client
    await owned(request_of("hi"))
    client = owned.client
    await owned.aclose()
    assert client.is_closed
    async with httpx.AsyncClient() as mine:
        async with gemini_generate(
            model="m", api_key="k", base_url=wire_server.base_url, http_client=mine
        ) as borrowed:
            assert not borrowed.owns_client
            assert (await borrowed(request_of("hi"))).content == "b"
        assert not mine.is_closed


def test_bad_arguments_are_rejected_eagerly() -> None:
    with pytest.raises(InvalidArgument):
        gemini_generate(model="")
    with pytest.raises(InvalidArgument):
        gemini_generate(model="m", base_url="example.test")
    with pytest.raises(InvalidArgument):
        gemini_generate(model="m", contents=[])
