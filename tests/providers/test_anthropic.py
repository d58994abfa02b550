"""anthropic_generate: the real SDK over a socket to a local Messages API server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

pytest.importorskip("anthropic")

import anthropic

from operative import (
    Conversation,
    GenerateRequest,
    ImagePart,
    TextPart,
    ToolCall,
    ToolResult,
    create_agent,
    tool,
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
from operative.providers.anthropic import AnthropicGenerate, anthropic_generate
from operative.retry import RetryOptions
from operative.tools import ToolSpec

from ._anthropic_wire import (
    KeyCheck,
    message,
    stream_events,
    text_block,
    tool_use_block,
    usage_of,
)
from ._server import JsonReply, SseReply, WireServer, sse_event


@pytest.fixture
async def generate(wire_server: WireServer) -> AsyncIterator[AnthropicGenerate]:
    async with anthropic_generate(
        model="claude-test-1", api_key="test-key", base_url=wire_server.base_url
    ) as g:
        yield g


def reply(server: WireServer, body: dict[str, Any], *, stream: bool) -> None:
    if stream:
        server.reply(SseReply(events=stream_events(body), headers={"request-id": "req_s"}))
    else:
        server.reply(JsonReply(body=body, headers={"request-id": "req_j"}))


def request_of(*messages: str, tools: tuple[ToolSpec, ...] = (), **kw: Any) -> GenerateRequest:
    conversation = Conversation()
    for text in messages:
        conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, tools=tools, **kw)


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_round_trip_through_an_agent(wire_server: WireServer, stream: bool) -> None:
    """The model calls a tool, reads its result in a tool_result block, and answers."""
    deltas: list[Delta] = []
    reply(
        wire_server,
        message(
            [
                text_block("Let me look."),
                tool_use_block("toolu_1", "get_weather", {"city": "Oslo"}),
            ],
            stop_reason="tool_use",
            usage=usage_of(20, 7),
        ),
        stream=stream,
    )
    reply(wire_server, message([text_block("It is sunny in Oslo.")], id="msg_02"), stream=stream)
    async with anthropic_generate(
        model="claude-test-1",
        api_key="test-key",
        base_url=wire_server.base_url,
        stream=stream,
        on_delta=deltas.append,
        temperature=0.2,
    ) as generate:
        agent = create_agent(generate=generate, instructions="Be brief.", tools=[get_weather])
        result = await agent.run("Weather in Oslo?")

    assert result.error is None, result.error
    assert result.content == "It is sunny in Oslo."
    assert result.steps[0].tool_calls == (
        ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Oslo"}),
    )
    assert result.steps[0].results[0].value == "sunny in Oslo"
    assert result.usage.prompt == 30
    assert result.usage.completion == 12
    first, second = (r.json for r in wire_server.received)
    assert wire_server.received[0].path == "/v1/messages"
    headers = wire_server.received[0].headers
    key = headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")
    assert key == "test-key"
    assert headers["anthropic-version"]
    assert first["model"] == "claude-test-1"
    assert first["max_tokens"] == 4096
    assert first["temperature"] == 0.2
    assert first["system"] == [{"type": "text", "text": "Be brief."}]
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]}
    ]
    assert first["tools"][0]["name"] == "get_weather"
    assert first["tools"][0]["input_schema"]["properties"]["city"]["type"] == "string"
    assert first.get("stream", False) is stream
    assert second["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "sunny in Oslo"}],
                }
            ],
        },
    ]
    if stream:
        texts = "".join(d.text for d in deltas if d.kind == "text")
        assert texts == "Let me look.It is sunny in Oslo."
        arguments = [d for d in deltas if d.kind == "tool_arguments"]
        assert "".join(d.text for d in arguments) == '{"city": "Oslo"}'
        assert all(d.text for d in deltas), "an empty delta reached on_delta"
        assert {(d.call_id, d.tool_name) for d in arguments} == {("toolu_1", "get_weather")}
    else:
        assert deltas == []


@pytest.mark.parametrize("stream", [False, True])
async def test_response_fields_and_cache_usage(
    wire_server: WireServer, generate: AnthropicGenerate, stream: bool
) -> None:
    """Usage keeps cache reads and writes apart; model, stop reason and id are kept."""
    reply(
        wire_server,
        message(
            [text_block("hi")], id="msg_9", usage=usage_of(3, 4, cache_read=100, cache_write=50)
        ),
        stream=stream,
    )
    response = await generate(request_of("hello", settings={"stream": stream}))
    assert response.content == "hi"
    assert response.usage is not None
    assert (response.usage.prompt, response.usage.completion) == (3, 4)
    assert (response.usage.cache_read, response.usage.cache_write) == (100, 50)
    assert response.usage.total == 157
    assert (response.model, response.stop_reason, response.response_id) == (
        "claude-test-1",
        "end_turn",
        "msg_9",
    )


async def test_images_by_url_and_bytes(
    wire_server: WireServer, generate: AnthropicGenerate
) -> None:
    """URL images become url sources, bytes become base64 sources with their media type."""
    reply(wire_server, message([text_block("two images")]), stream=False)
    conversation = Conversation()
    conversation.append_user_message(
        [
            TextPart(text="compare"),
            ImagePart(url="https://example.test/a.png"),
            ImagePart(data=b"\x89PNG", media_type="image/png"),
        ]
    )
    await generate(GenerateRequest(conversation=conversation.current))
    assert wire_server.last.json["messages"][0]["content"] == [
        {"type": "text", "text": "compare"},
        {"type": "image", "source": {"type": "url", "url": "https://example.test/a.png"}},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(b"\x89PNG").decode(),
            },
        },
    ]


async def test_tool_errors_are_flagged_and_results_merged(
    wire_server: WireServer, generate: AnthropicGenerate
) -> None:
    """Failed, denied and cancelled results carry is_error; consecutive results share a turn."""
    reply(wire_server, message([text_block("ok")]), stream=False)
    conversation = Conversation()
    conversation.append_user_message("go")
    calls = [ToolCall(id=f"t{i}", name="f", arguments={}) for i in range(4)]
    conversation.append_assistant_message("", calls)
    for call, outcome in zip(calls, ["success", "error", "denied", "cancelled"], strict=True):
        conversation.append_tool_result(
            ToolResult(call_id=call.id, tool_name="f", outcome=outcome, value=1, error="no")  # type: ignore[arg-type]
        )
    conversation.append_user_message("and now?")
    await generate(GenerateRequest(conversation=conversation.current))
    turns = wire_server.last.json["messages"]
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    results = turns[2]["content"]
    assert [b.get("is_error", False) for b in results[:4]] == [False, True, True, True]
    assert [b["tool_use_id"] for b in results[:4]] == ["t0", "t1", "t2", "t3"]
    assert results[4] == {"type": "text", "text": "and now?"}
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": f"t{i}", "name": "f", "input": {}} for i in range(4)
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_thinking_blocks_round_trip(
    wire_server: WireServer, generate: AnthropicGenerate, stream: bool
) -> None:
    """Thinking blocks land in metadata and go back first in the next assistant turn."""
    thinking = {"type": "thinking", "thinking": "hmm, weather", "signature": "sig=="}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    reply(
        wire_server,
        message(
            [thinking, redacted, tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})],
            stop_reason="tool_use",
        ),
        stream=stream,
    )
    reply(wire_server, message([text_block("sunny")]), stream=stream)
    async with anthropic_generate(
        model="claude-test-1",
        api_key="k",
        base_url=wire_server.base_url,
        stream=stream,
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as g:
        agent = create_agent(generate=g, tools=[get_weather])
        result = await agent.run("Weather?")
    assert result.content == "sunny"
    assistant = result.conversation.messages[1]
    assert assistant.metadata == {"anthropic": {"thinking": [thinking, redacted]}}
    sent = wire_server.received[1].json
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["messages"][1]["content"][:2] == [thinking, redacted]
    assert sent["messages"][1]["content"][2]["type"] == "tool_use"


async def test_request_settings_override_the_factory(
    wire_server: WireServer, generate: AnthropicGenerate
) -> None:
    """model, max_tokens and sampling settings from the request win over the factory's."""
    reply(wire_server, message([text_block("x")]), stream=False)
    await generate(
        request_of("hi", settings={"model": "claude-other", "max_tokens": 99, "top_k": 5})
    )
    body = wire_server.last.json
    assert (body["model"], body["max_tokens"], body["top_k"]) == ("claude-other", 99, 5)


async def test_structured_output_native_and_prompt(wire_server: WireServer) -> None:
    """An output schema goes out as output_config.format, or as a system instruction."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for mode in ("native", "prompt"):
        reply(wire_server, message([text_block('{"n": 1}')]), stream=False)
        async with anthropic_generate(
            model="m", api_key="k", base_url=wire_server.base_url, structured_output=mode
        ) as g:
            response = await g(request_of("count", output_schema=schema))
        assert response.content == '{"n": 1}'
        body = wire_server.last.json
        if mode == "native":
            assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
            assert "system" not in body
        else:
            assert "output_config" not in body
            assert '"required":["n"]' in body["system"][0]["text"]


ERRORS = [
    (400, "invalid_request_error", ProviderRequestError, False),
    (401, "authentication_error", ProviderAuthenticationError, False),
    (403, "permission_error", ProviderAuthenticationError, False),
    (404, "not_found_error", ProviderRequestError, False),
    (408, "timeout_error", ProviderTimeoutError, True),
    (409, "conflict_error", ProviderUnavailableError, True),
    (429, "rate_limit_error", ProviderRateLimitError, True),
    (500, "api_error", ProviderUnavailableError, True),
    (529, "overloaded_error", ProviderUnavailableError, True),
]


@pytest.mark.parametrize(("status", "kind", "cls", "retryable"), ERRORS)
async def test_http_errors_are_typed(
    wire_server: WireServer,
    generate: AnthropicGenerate,
    status: int,
    kind: str,
    cls: type[ProviderError],
    retryable: bool,
) -> None:
    """Each status maps to its ProviderError subclass with status, request id and retry_after."""
    wire_server.reply(
        JsonReply(
            status=status,
            body={"type": "error", "error": {"type": kind, "message": f"boom {status}"}},
            headers={"request-id": f"req_{status}", "retry-after": "7"},
        )
    )
    with pytest.raises(cls) as caught:
        await generate(request_of("hi"))
    error = caught.value
    assert type(error) is cls
    assert (error.provider, error.model, error.status) == ("anthropic", "claude-test-1", status)
    assert error.request_id == f"req_{status}"
    assert error.retryable is retryable
    assert error.retry_after == 7.0
    assert f"boom {status}" in str(error)
    if status == 401:
        # The key was given (api_key="test-key") and sent: it is reported as rejected.
        assert "rejected the API key from the api_key= argument" in str(error)
        assert "set the ANTHROPIC_API_KEY" not in str(error)
    assert isinstance(error.__cause__, anthropic.APIStatusError)


async def test_empty_tool_argument_deltas_are_skipped(wire_server: WireServer) -> None:
    """The empty partial_json that opens every streamed tool_use block (as the API sends
    it) never reaches on_delta; the call's arguments are whole."""
    deltas: list[Delta] = []
    body = message(
        [tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})], stop_reason="tool_use"
    )
    events = stream_events(body)
    assert b'"partial_json": ""' in b"".join(events)
    wire_server.reply(SseReply(events=events))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, stream=True, on_delta=deltas.append
    ) as g:
        response = await g(request_of("hi"))
    assert response.tool_calls == (
        ToolCall(id="toolu_1", name="get_weather", arguments={"city": "Oslo"}),
    )
    assert [d.text for d in deltas] == ['{"city":', ' "Oslo"}']
    assert {d.kind for d in deltas} == {"tool_arguments"}


async def test_a_rejected_key_is_reported_as_rejected(wire_server: WireServer) -> None:
    """A wrong api_key= gets a 401 that says the key given was sent and rejected, and
    does not tell the user to set ANTHROPIC_API_KEY."""
    wire_server.handler = KeyCheck("right-key")
    async with anthropic_generate(
        model="m", api_key="wrong-key", base_url=wire_server.base_url
    ) as g:
        with pytest.raises(ProviderAuthenticationError) as caught:
            await g(request_of("hi"))
    text = str(caught.value)
    assert "rejected the API key from the api_key= argument, sent in the " in text
    assert _header_named(wire_server.last.headers, "wrong-key") in text
    assert "invalid x-api-key" in text
    assert "set the ANTHROPIC_API_KEY" not in text
    assert caught.value.status == 401
    assert not caught.value.retryable


async def test_a_rejected_environment_key_names_the_variable_it_came_from(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key from ANTHROPIC_API_KEY that the server rejects is named as that variable's
    key, sent and rejected; the right key then works."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "stale-key")
    wire_server.handler = KeyCheck("fresh-key", JsonReply(body=message([text_block("ok")])))
    async with anthropic_generate(model="m", base_url=wire_server.base_url) as g:
        with pytest.raises(ProviderAuthenticationError) as caught:
            await g(request_of("hi"))
    text = str(caught.value)
    assert "rejected the API key from the ANTHROPIC_API_KEY environment variable" in text
    assert _header_named(wire_server.last.headers, "stale-key") in text
    assert "set the ANTHROPIC_API_KEY" not in text
    monkeypatch.setenv("ANTHROPIC_API_KEY", "fresh-key")
    async with anthropic_generate(model="m", base_url=wire_server.base_url) as g:
        assert (await g(request_of("hi"))).content == "ok"


def _header_named(headers: dict[str, str], key: str) -> str:
    """How the message names the header the SDK put ``key`` in."""
    if headers.get("x-api-key") == key:
        return "sent in the x-api-key header"
    assert headers["authorization"] == f"Bearer {key}"
    return "sent in the Authorization header (a bearer token)"


async def test_a_key_in_the_wrong_header_says_where_it_went(wire_server: WireServer) -> None:
    """A client that sends its key as a bearer token to a server that reads only
    x-api-key: the 401 says the key went in the Authorization header, with the server's
    message, and a key in x-api-key is accepted."""
    wire_server.handler = KeyCheck(
        "right-key", JsonReply(body=message([text_block("ok")])), bearer=False
    )
    client = anthropic.AsyncAnthropic(
        auth_token="right-key", base_url=wire_server.base_url, max_retries=0
    )
    try:
        async with anthropic_generate(model="m", client=client) as g:
            with pytest.raises(ProviderAuthenticationError) as caught:
                await g(request_of("hi"))
    finally:
        await client.close()
    assert wire_server.last.headers["authorization"] == "Bearer right-key"
    text = str(caught.value)
    assert "from the client= given to the adapter, sent in the Authorization header" in text
    assert "x-api-key header is required" in text
    assert "set the ANTHROPIC_API_KEY" not in text

    headed = anthropic.AsyncAnthropic(
        api_key="right-key",
        default_headers={"x-api-key": "right-key"},
        base_url=wire_server.base_url,
        max_retries=0,
    )
    try:
        async with anthropic_generate(model="m", client=headed) as g:
            assert (await g(request_of("hi"))).content == "ok"
    finally:
        await headed.close()
    assert wire_server.last.headers["x-api-key"] == "right-key"


async def test_error_event_inside_a_stream(
    wire_server: WireServer, generate: AnthropicGenerate
) -> None:
    """An overloaded_error event mid-stream is a retryable 529."""
    events = stream_events(message([text_block("partial answer")]))[:4]
    events.append(
        sse_event(
            {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}, "error"
        )
    )
    wire_server.reply(SseReply(events=events))
    with pytest.raises(ProviderUnavailableError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.status == 529
    assert caught.value.retryable


async def test_stream_dropped_mid_way_is_retryable(
    wire_server: WireServer, generate: AnthropicGenerate
) -> None:
    """A connection cut part-way through the stream is a retryable connection error."""
    wire_server.reply(SseReply(events=stream_events(message([text_block("abcdef")])), drop_after=4))
    with pytest.raises(ProviderConnectionError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable
    assert isinstance(caught.value, ConnectionError)


async def test_dropped_stream_is_retried_by_the_run(wire_server: WireServer) -> None:
    """The run's retry policy sees the cut stream as transient and the retry succeeds."""
    body = message([text_block("whole answer")])
    wire_server.reply(
        SseReply(events=stream_events(body), drop_after=3), SseReply(events=stream_events(body))
    )
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, stream=True
    ) as g:
        agent = create_agent(generate=g, retry=RetryOptions(initial_delay=0, jitter=False))
        result = await agent.run("hi")
    assert result.content == "whole answer"
    assert len(wire_server.received) == 2


async def test_slow_first_byte_times_out(wire_server: WireServer) -> None:
    """A server silent past the client's timeout gives a retryable ProviderTimeoutError."""
    wire_server.reply(JsonReply(body=message([text_block("late")]), delay=0.5))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, timeout=0.1
    ) as g:
        with pytest.raises(ProviderTimeoutError) as caught:
            await g(request_of("hi"))
    assert caught.value.retryable
    assert isinstance(caught.value, TimeoutError)


async def test_abort_mid_stream_closes_the_connection(wire_server: WireServer) -> None:
    """Cancelling a streaming call closes its connection promptly; the server sees it."""
    first_delta = trio.Event()
    wire_server.reply(SseReply(events=stream_events(message([text_block("abcdef")])), hang_after=4))
    async with anthropic_generate(
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


async def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key or client, the first call says which environment variable to set."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    async with anthropic_generate(model="m") as g:
        with pytest.raises(ProviderAuthenticationError, match="ANTHROPIC_API_KEY"):
            await g(request_of("hi"))


async def test_client_ownership(wire_server: WireServer) -> None:
    """A client the adapter made is closed by aclose(); a caller's client is left open."""
    reply(wire_server, message([text_block("a")]), stream=False)
    reply(wire_server, message([text_block("b")]), stream=False)
    owned = anthropic_generate(model="m", api_key="k", base_url=wire_server.base_url)
    assert owned.owns_client
    await owned(request_of("hi"))
    client = owned.client
    await owned.aclose()
    assert client.is_closed()
    await owned.aclose()

    mine = anthropic.AsyncAnthropic(api_key="k", base_url=wire_server.base_url, max_retries=0)
    try:
        async with anthropic_generate(model="m", client=mine) as borrowed:
            assert not borrowed.owns_client
            assert (await borrowed(request_of("hi"))).content == "b"
        assert not mine.is_closed()
    finally:
        await mine.close()


def test_bad_arguments_are_rejected_eagerly() -> None:
    """Misuse raises InvalidArgument at the factory call."""
    from operative import InvalidArgument

    with pytest.raises(InvalidArgument):
        anthropic_generate(model="")
    with pytest.raises(InvalidArgument):
        anthropic_generate(model="m", max_tokens=0)
    with pytest.raises(InvalidArgument):
        anthropic_generate(model="m", client=anthropic.AsyncAnthropic(api_key="k"), api_key="k")
    with pytest.raises(InvalidArgument):
        anthropic_generate(model="m", structured_output="json")  # type: ignore[arg-type]
