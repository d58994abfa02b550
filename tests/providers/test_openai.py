"""openai_generate (Chat Completions): the real SDK over a socket to a local server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
import trio

pytest.importorskip("openai")

import openai
from _doubles import add, get_weather

from operative import (
    Conversation,
    GenerateRequest,
    ImagePart,
    InvalidArgument,
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
from operative.providers.openai import OpenAIGenerate, openai_generate
from operative.retry import RetryOptions

from ._openai_wire import LlamaCppServer, completion, stream_chunks, tool_call, usage_of
from ._server import JsonReply, SseReply, WireServer, sse_event


@pytest.fixture
async def generate(wire_server: WireServer) -> AsyncIterator[OpenAIGenerate]:
    async with openai_generate(
        model="gpt-test", api_key="test-key", base_url=f"{wire_server.base_url}/v1"
    ) as g:
        yield g


def reply(server: WireServer, body: dict[str, Any], *, stream: bool) -> None:
    if stream:
        server.reply(SseReply(events=stream_chunks(body), headers={"x-request-id": "req_s"}))
    else:
        server.reply(JsonReply(body=body, headers={"x-request-id": "req_j"}))


def request_of(*messages: str, **kw: Any) -> GenerateRequest:
    conversation = Conversation()
    for text in messages:
        conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, **kw)


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_round_trip_through_an_agent(wire_server: WireServer, stream: bool) -> None:
    """The model calls a tool, reads its result as a role=tool message, and answers."""
    deltas: list[Delta] = []
    reply(
        wire_server,
        completion(
            None,
            tool_calls=[tool_call("call_1", "get_weather", {"city": "Oslo"})],
            finish_reason="tool_calls",
            usage=usage_of(20, 7),
        ),
        stream=stream,
    )
    reply(wire_server, completion("It is sunny in Oslo.", id="chatcmpl-2"), stream=stream)
    async with openai_generate(
        model="gpt-test",
        api_key="test-key",
        base_url=f"{wire_server.base_url}/v1",
        stream=stream,
        on_delta=deltas.append,
        temperature=0.2,
    ) as generate:
        agent = create_agent(generate=generate, instructions="Be brief.", tools=[get_weather])
        result = await agent.run("Weather in Oslo?")

    assert result.error is None, result.error
    assert result.content == "It is sunny in Oslo."
    assert result.steps[0].tool_calls == (
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo"}),
    )
    assert result.usage.prompt == 30
    assert result.usage.completion == 12
    first, second = (r.json for r in wire_server.received)
    assert wire_server.received[0].path == "/v1/chat/completions"
    assert wire_server.received[0].headers["authorization"] == "Bearer test-key"
    assert first["model"] == "gpt-test"
    assert first["temperature"] == 0.2
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    assert first["tools"][0]["type"] == "function"
    assert first["tools"][0]["function"]["name"] == "get_weather"
    assert first["tools"][0]["function"]["parameters"]["properties"]["city"]["type"] == "string"
    if stream:
        assert first["stream"] is True
        assert first["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in first
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny in Oslo"},
    ]
    if stream:
        assert "".join(d.text for d in deltas if d.kind == "text") == "It is sunny in Oslo."
        arguments = [d for d in deltas if d.kind == "tool_arguments"]
        assert "".join(d.text for d in arguments) == '{"city": "Oslo"}'
        assert {(d.call_id, d.tool_name) for d in arguments} == {("call_1", "get_weather")}
    else:
        assert deltas == []


def _force_add_first(request: GenerateRequest) -> GenerateRequest | None:
    """prepare_step: the first step must call ``add`` (a small model needs it forced)."""
    if request.step != 1:
        return None
    forced = {"type": "function", "function": {"name": "add"}}
    return msgspec.structs.replace(request, settings={**request.settings, "tool_choice": forced})


@pytest.mark.parametrize("mode", ["not streamed", "streamed", "JSON answer to a stream"])
async def test_tool_round_trip_against_llama_cpp_quirks(wire_server: WireServer, mode: str) -> None:
    """Against llama-cpp-python's behaviour (names repeated in every chunk, 500 on a null
    assistant content, JSON answers to streamed requests, no streamed usage) a forced
    tool round trip completes, and the second request carries ``"content": ""``."""
    first = completion(
        None,
        tool_calls=[tool_call("call__0_add_cmpl-1", "add", {"a": 2, "b": 3})],
        finish_reason="tool_calls",
        usage=usage_of(26, 12),
    )
    second = completion("2 + 3 = 5", id="chatcmpl-2", usage=usage_of(64, 8))
    server = LlamaCppServer(first, second, json_for_stream=mode == "JSON answer to a stream")
    wire_server.handler = server
    deltas: list[Delta] = []
    async with openai_generate(
        model="smollm2",
        base_url=f"{wire_server.base_url}/v1",
        stream=mode != "not streamed",
        on_delta=deltas.append,
    ) as generate:
        agent = create_agent(generate=generate, tools=[add], prepare_step=_force_add_first)
        result = await agent.run("What is 2 + 3?")

    assert server.refused == []
    assert result.error is None, result.error
    assert result.steps[0].tool_calls == (
        ToolCall(id="call__0_add_cmpl-1", name="add", arguments={"a": 2, "b": 3}),
    )
    assert result.steps[0].results[0].value == 5
    assert result.content == "2 + 3 = 5"
    first_sent, second_sent = (r.json for r in wire_server.received)
    assert first_sent["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert "tool_choice" not in second_sent
    assert second_sent["messages"][-2]["content"] == ""
    assert second_sent["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call__0_add_cmpl-1",
        "content": "5",
    }
    if mode != "not streamed":
        assert "".join(d.text for d in deltas if d.kind == "text") == "2 + 3 = 5"
        arguments = [d for d in deltas if d.kind == "tool_arguments"]
        assert "".join(d.text for d in arguments) == '{"a": 2, "b": 3}'
        assert {d.tool_name for d in arguments} == {"add"}
    else:
        assert deltas == []


async def test_streamed_tool_name_repeated_in_every_chunk_is_set_once(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """llama-cpp-python repeats function.name in each chunk of a call: the name is the
    tool's, not the name written once per chunk."""
    body = completion(
        None,
        tool_calls=[tool_call("call_1", "get_weather", {"city": "Oslo, Norway"})],
        finish_reason="tool_calls",
    )
    wire_server.handler = LlamaCppServer(body)
    response = await generate(request_of("weather?", settings={"stream": True}))
    assert response.tool_calls == (
        ToolCall(id="call_1", name="get_weather", arguments={"city": "Oslo, Norway"}),
    )


async def test_streamed_tool_name_split_over_chunks_is_joined(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """A name a server sends in pieces is joined; the id and arguments as usual."""
    base = {"id": "chatcmpl-3", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse_event(
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        )

    def call(**fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": 0, **fields}]}

    wire_server.reply(
        SseReply(
            events=[
                chunk(call(id="call_9", type="function", function={"name": "get_"})),
                chunk(call(function={"name": "weather", "arguments": '{"city"'})),
                chunk(call(function={"arguments": ': "Oslo"}'})),
                chunk({}, "tool_calls"),
                b"data: [DONE]\n\n",
            ]
        )
    )
    response = await generate(request_of("weather?", settings={"stream": True}))
    assert response.tool_calls == (
        ToolCall(id="call_9", name="get_weather", arguments={"city": "Oslo"}),
    )


@pytest.mark.parametrize(
    ("content", "refusal"),
    [(None, "Input should be a valid string"), ("absent", "no attribute 'content'")],
)
async def test_llama_cpp_double_refuses_what_the_real_server_refuses(
    wire_server: WireServer, content: str | None, refusal: str
) -> None:
    """The double answers an assistant message with null or no content as the real
    server does (HTTP 500), so the round trip above catches a return to either."""
    wire_server.handler = LlamaCppServer(completion("unused"))
    assistant: dict[str, Any] = {
        "role": "assistant",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
    }
    if content != "absent":
        assistant["content"] = content
    client = openai.AsyncOpenAI(api_key="k", base_url=wire_server.base_url, max_retries=0)
    try:
        with pytest.raises(openai.InternalServerError, match=refusal):
            await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "go"}, assistant],  # type: ignore[list-item]
            )
    finally:
        await client.close()


@pytest.mark.parametrize("json_for_stream", [False, True])
async def test_missing_streamed_usage_is_estimated_not_zero(
    wire_server: WireServer, generate: OpenAIGenerate, json_for_stream: bool
) -> None:
    """No usage chunk (llama-cpp-python sends none even with include_usage): the usage is
    an estimate, flagged as one, never a silent zero; a JSON answer to the stream
    carries the server's own usage."""
    body = completion("hello", usage=usage_of(7, 3))
    wire_server.handler = LlamaCppServer(body, json_for_stream=json_for_stream)
    response = await generate(request_of("hi", settings={"stream": True}))
    assert wire_server.last.json["stream_options"] == {"include_usage": True}
    assert response.content == "hello"
    assert response.usage is not None
    if json_for_stream:
        assert (response.usage.prompt, response.usage.completion) == (7, 3)
        assert not response.usage.estimated
    else:
        assert response.usage.estimated
        assert response.usage.prompt > 0
        assert response.usage.completion > 0
        assert response.usage.total == response.usage.prompt + response.usage.completion


async def test_json_answer_to_a_stream_is_the_answer(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """A 200 application/json body to a streamed request is read as the non-streamed
    answer (refusal, stop reason, id) instead of a cut stream; an error object in it is
    the server's error."""
    body = completion("partial", finish_reason="length", id="chatcmpl-j")
    body["choices"][0]["message"]["refusal"] = "no"
    wire_server.reply(JsonReply(body=body))
    response = await generate(request_of("hi", settings={"stream": True}))
    assert (response.content, response.stop_reason, response.response_id) == (
        "partial",
        "length",
        "chatcmpl-j",
    )
    assert response.metadata == {"openai": {"refusal": "no"}}

    wire_server.reply(JsonReply(body={"error": {"message": "model is loading"}}))
    with pytest.raises(ProviderUnavailableError, match="model is loading"):
        await generate(request_of("hi", settings={"stream": True}))


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_subtracts_cached_tokens(
    wire_server: WireServer, generate: OpenAIGenerate, stream: bool
) -> None:
    """Cached tokens are taken out of prompt; reasoning stays inside completion."""
    reply(
        wire_server,
        completion("hi", id="chatcmpl-9", usage=usage_of(120, 30, cached=100, reasoning=20)),
        stream=stream,
    )
    response = await generate(request_of("hello", settings={"stream": stream}))
    assert response.content == "hi"
    assert response.usage is not None
    assert (response.usage.prompt, response.usage.cache_read) == (20, 100)
    assert (response.usage.completion, response.usage.reasoning) == (30, 20)
    assert response.usage.total == 150
    assert (response.model, response.stop_reason, response.response_id) == (
        "gpt-test",
        "stop",
        "chatcmpl-9",
    )


async def test_images_as_image_url(wire_server: WireServer, generate: OpenAIGenerate) -> None:
    """URL images pass through; bytes become data: URLs."""
    reply(wire_server, completion("two images"), stream=False)
    conversation = Conversation()
    conversation.append_user_message(
        [
            TextPart(text="compare"),
            ImagePart(url="https://example.test/a.png"),
            ImagePart(data=b"\x89PNG", media_type="image/png"),
        ]
    )
    await generate(GenerateRequest(conversation=conversation.current))
    encoded = base64.b64encode(b"\x89PNG").decode()
    assert wire_server.last.json["messages"][0]["content"] == [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}},
    ]


async def test_tool_results_and_raw_arguments(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Each result is a role=tool message; raw-string arguments are sent unchanged."""
    reply(wire_server, completion("ok"), stream=False)
    conversation = Conversation()
    conversation.append_user_message("go")
    calls = [
        ToolCall(id="a", name="f", arguments='{"x": 1}'),
        ToolCall(id="b", name="f", arguments={"y": [1, 2]}),
    ]
    conversation.append_assistant_message("thinking aloud", calls)
    conversation.append_tool_result(
        ToolResult(call_id="a", tool_name="f", outcome="success", value={"ok": 1})
    )
    conversation.append_tool_result(
        ToolResult(call_id="b", tool_name="f", outcome="denied", error="no")
    )
    await generate(GenerateRequest(conversation=conversation.current))
    messages = wire_server.last.json["messages"]
    assert messages[1]["content"] == "thinking aloud"
    assert [c["function"]["arguments"] for c in messages[1]["tool_calls"]] == [
        '{"x": 1}',
        '{"y":[1,2]}',
    ]
    assert messages[2:] == [
        {"role": "tool", "tool_call_id": "a", "content": '{"ok":1}'},
        {"role": "tool", "tool_call_id": "b", "content": "no"},
    ]


async def test_structured_output_sends_response_format(wire_server: WireServer) -> None:
    """An output schema goes out as response_format json_schema (strict when asked)."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for strict in (False, True):
        reply(wire_server, completion('{"n": 1}'), stream=False)
        async with openai_generate(
            model="m", api_key="k", base_url=wire_server.base_url, strict_output=strict
        ) as g:
            response = await g(request_of("count", output_schema=schema))
        assert response.content == '{"n": 1}'
        assert wire_server.last.json["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": strict},
        }


async def test_unknown_settings_still_reach_the_wire(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Settings the SDK does not declare (a compatible server's own) go in the body."""
    reply(wire_server, completion("x"), stream=False)
    await generate(request_of("hi", settings={"model": "other", "top_k": 3, "max_tokens": 9}))
    body = wire_server.last.json
    assert (body["model"], body["top_k"], body["max_tokens"]) == ("other", 3, 9)


ERRORS = [
    (400, ProviderRequestError, False),
    (401, ProviderAuthenticationError, False),
    (403, ProviderAuthenticationError, False),
    (404, ProviderRequestError, False),
    (408, ProviderTimeoutError, True),
    (409, ProviderUnavailableError, True),
    (429, ProviderRateLimitError, True),
    (500, ProviderUnavailableError, True),
    (503, ProviderUnavailableError, True),
]


@pytest.mark.parametrize(("status", "cls", "retryable"), ERRORS)
async def test_http_errors_are_typed(
    wire_server: WireServer,
    generate: OpenAIGenerate,
    status: int,
    cls: type[ProviderError],
    retryable: bool,
) -> None:
    """Each status maps to its ProviderError subclass with status, request id and retry_after."""
    wire_server.reply(
        JsonReply(
            status=status,
            body={"error": {"message": f"boom {status}", "type": "x", "code": None}},
            headers={"x-request-id": f"req_{status}", "retry-after": "3"},
        )
    )
    with pytest.raises(cls) as caught:
        await generate(request_of("hi"))
    error = caught.value
    assert type(error) is cls
    assert (error.provider, error.model, error.status) == ("openai", "gpt-test", status)
    assert error.request_id == f"req_{status}"
    assert error.retryable is retryable
    assert error.retry_after == 3.0
    assert f"boom {status}" in str(error)
    if status == 401:
        assert "OPENAI_API_KEY" in str(error)


async def test_error_object_inside_a_stream(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """An error object mid-stream is a retryable provider error."""
    events = stream_chunks(completion("partial answer"))[:2]
    events.append(sse_event({"error": {"message": "server melted", "type": "server_error"}}))
    wire_server.reply(SseReply(events=events))
    with pytest.raises(ProviderUnavailableError, match="server melted") as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable


@pytest.mark.parametrize("drop_after", [2, None])
async def test_stream_cut_off_is_retryable(
    wire_server: WireServer, generate: OpenAIGenerate, drop_after: int | None
) -> None:
    """A socket cut mid-body, or a body that ends before finish_reason, is retryable."""
    events = stream_chunks(completion("abcdef"))
    if drop_after is None:
        events = events[:2]  # a clean end of body, but no finish_reason and no [DONE]
    wire_server.reply(SseReply(events=events, drop_after=drop_after))
    with pytest.raises(ProviderConnectionError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable


async def test_dropped_stream_is_retried_by_the_run(wire_server: WireServer) -> None:
    """The run's retry policy sees the cut stream as transient and the retry succeeds."""
    body = completion("whole answer")
    wire_server.reply(
        SseReply(events=stream_chunks(body), drop_after=2), SseReply(events=stream_chunks(body))
    )
    async with openai_generate(model="m", base_url=wire_server.base_url, stream=True) as g:
        agent = create_agent(generate=g, retry=RetryOptions(initial_delay=0, jitter=False))
        result = await agent.run("hi")
    assert result.content == "whole answer"
    assert len(wire_server.received) == 2


async def test_slow_first_byte_times_out(wire_server: WireServer) -> None:
    """A server silent past the client's timeout gives a retryable ProviderTimeoutError."""
    wire_server.reply(JsonReply(body=completion("late"), delay=0.5))
    async with openai_generate(
        model="m", api_key="k", base_url=wire_server.base_url, timeout=0.1
    ) as g:
        with pytest.raises(ProviderTimeoutError) as caught:
            await g(request_of("hi"))
    assert caught.value.retryable


async def test_abort_mid_stream_closes_the_connection(wire_server: WireServer) -> None:
    """Cancelling a streaming call closes its connection promptly; the server sees it."""
    first_delta = trio.Event()
    wire_server.reply(SseReply(events=stream_chunks(completion("abcdef")), hang_after=2))
    async with openai_generate(
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
    """Without a key, base_url or client, the first call says which variable to set."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with openai_generate(model="m") as g:
        with pytest.raises(ProviderAuthenticationError, match="OPENAI_API_KEY"):
            await g(request_of("hi"))


async def test_client_ownership(wire_server: WireServer) -> None:
    """A client the adapter made is closed by aclose(); a caller's client is left open."""
    reply(wire_server, completion("a"), stream=False)
    reply(wire_server, completion("b"), stream=False)
    owned = openai_generate(model="m", api_key="k", base_url=wire_server.base_url)
    await owned(request_of("hi"))
    client = owned.client
    await owned.aclose()
    assert client.is_closed()

    mine = openai.AsyncOpenAI(api_key="k", base_url=wire_server.base_url, max_retries=0)
    try:
        async with openai_generate(model="m", client=mine) as borrowed:
            assert not borrowed.owns_client
            assert (await borrowed(request_of("hi"))).content == "b"
        assert not mine.is_closed()
    finally:
        await mine.close()


def test_misuse_is_refused_eagerly() -> None:
    """An unknown api or an empty model is refused when the adapter is made."""
    with pytest.raises(InvalidArgument):
        openai_generate(model="m", api="completions")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        openai_generate(model="")


async def test_a_run_without_reported_usage_counts_an_estimate(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Through a server that sends no usage, a run's usage is an estimate (flagged), its
    steps add up to it, and a token budget trips on it instead of never tripping."""
    from operative.budgets import Budget

    @tool
    async def echo(text: str) -> str:
        """Echo."""
        return text * 50

    call = tool_call("c1", "echo", {"text": "a long enough piece of text"})
    wire_server.handler = LlamaCppServer(
        completion("", tool_calls=[call], finish_reason="tool_calls"),
        completion("", tool_calls=[call], finish_reason="tool_calls"),
        completion("done"),
    )
    agent = create_agent(
        generate=generate,
        tools=[echo],
        settings={"stream": True},
        budget=Budget(max_tokens=60),
    )
    result = await agent.run("Echo something, twice.")
    assert result.usage.estimated
    assert result.usage.total > 0
    assert result.usage == sum((s.usage for s in result.steps), start=type(result.usage)())
    assert result.finish_reason == "budget-exceeded"
