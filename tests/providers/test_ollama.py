"""ollama_generate: httpx over a socket to a local /api/chat server (JSON and NDJSON)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import httpx
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
from operative.providers.ollama import OllamaGenerate, ollama_generate
from operative.retry import RetryOptions
from operative.tools import ToolSpec

from ._ollama_wire import chat, ndjson_lines, tool_call
from ._server import JsonReply, SseReply, WireServer


@pytest.fixture
async def generate(wire_server: WireServer) -> AsyncIterator[OllamaGenerate]:
    async with ollama_generate(model="llama-test", base_url=wire_server.base_url) as g:
        yield g


def reply(server: WireServer, body: dict[str, Any], *, stream: bool) -> None:
    if stream:
        server.reply(SseReply(events=ndjson_lines(body)))
    else:
        server.reply(JsonReply(body=body))


def request_of(*messages: str, tools: tuple[ToolSpec, ...] = (), **kw: Any) -> GenerateRequest:
    conversation = Conversation()
    for text in messages:
        conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, tools=tools, **kw)


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_round_trip_through_an_agent(wire_server: WireServer, stream: bool) -> None:
    """The model calls a tool, reads its result in a tool message, and answers."""
    deltas: list[Delta] = []
    reply(
        wire_server,
        chat(
            "Let me look.",
            tool_calls=[tool_call("get_weather", {"city": "Oslo"})],
            prompt_eval_count=20,
            eval_count=7,
        ),
        stream=stream,
    )
    reply(wire_server, chat("It is sunny in Oslo."), stream=stream)
    async with ollama_generate(
        model="llama-test",
        base_url=wire_server.base_url,
        stream=stream,
        on_delta=deltas.append,
        temperature=0.2,
        num_ctx=8192,
        keep_alive="5m",
    ) as generate:
        agent = create_agent(generate=generate, instructions="Be brief.", tools=[get_weather])
        result = await agent.run("Weather in Oslo?")

    assert result.error is None, result.error
    assert result.content == "It is sunny in Oslo."
    (call,) = result.steps[0].tool_calls
    assert (call.name, call.arguments) == ("get_weather", {"city": "Oslo"})
    assert call.id == "call_2_0_get_weather"
    assert result.steps[0].results[0].value == "sunny in Oslo"
    assert result.usage.prompt == 30
    assert result.usage.completion == 12
    assert result.usage.total == 42
    assert [r.path for r in wire_server.received] == ["/api/chat", "/api/chat"]
    first, second = (r.json for r in wire_server.received)
    assert first["model"] == "llama-test"
    assert first["stream"] is stream
    assert first["options"] == {"temperature": 0.2, "num_ctx": 8192}
    assert first["keep_alive"] == "5m"
    assert first["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
    ]
    (spec,) = first["tools"]
    assert spec["type"] == "function"
    assert spec["function"]["name"] == "get_weather"
    assert spec["function"]["description"] == "The weather in a city."
    assert spec["function"]["parameters"]["properties"]["city"]["type"] == "string"
    assert second["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": "sunny in Oslo", "tool_name": "get_weather"},
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
async def test_response_fields_usage_and_thinking(
    wire_server: WireServer, generate: OllamaGenerate, stream: bool
) -> None:
    """Usage comes from prompt_eval_count/eval_count; done_reason and model are kept."""
    reply(
        wire_server,
        chat("hi", thinking="let me see", done_reason="length", prompt_eval_count=3, eval_count=4),
        stream=stream,
    )
    response = await generate(request_of("hello", settings={"stream": stream, "think": True}))
    assert response.content == "hi"
    assert response.usage is not None
    assert (response.usage.prompt, response.usage.completion, response.usage.total) == (3, 4, 7)
    assert (response.model, response.stop_reason) == ("llama-test", "length")
    assert response.metadata == {"ollama": {"thinking": "let me see"}}
    assert wire_server.last.json["think"] is True
    assert "options" not in wire_server.last.json


async def test_several_calls_get_distinct_ids(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """Synthesized ids are unique within a response, even for the same tool twice."""
    reply(
        wire_server,
        chat(tool_calls=[tool_call("f", {"a": 1}), tool_call("f", {"a": 2})]),
        stream=False,
    )
    response = await generate(request_of("go"))
    assert [c.id for c in response.tool_calls] == ["call_1_0_f", "call_1_1_f"]
    assert [c.arguments for c in response.tool_calls] == [{"a": 1}, {"a": 2}]


async def test_images_are_base64(wire_server: WireServer, generate: OllamaGenerate) -> None:
    """Image bytes go in the message's images list; a URL is refused (Ollama needs bytes)."""
    reply(wire_server, chat("an image"), stream=False)
    conversation = Conversation()
    conversation.append_user_message(
        [
            TextPart(text="what is "),
            TextPart(text="this?"),
            ImagePart(data=b"\x89PNG", media_type="image/png"),
        ]
    )
    await generate(GenerateRequest(conversation=conversation.current))
    assert wire_server.last.json["messages"] == [
        {
            "role": "user",
            "content": "what is this?",
            "images": [base64.b64encode(b"\x89PNG").decode()],
        }
    ]
    by_url = Conversation()
    by_url.append_user_message([ImagePart(url="https://example.test/a.png")])
    with pytest.raises(InvalidArgument, match="bytes"):
        await generate(GenerateRequest(conversation=by_url.current))


async def test_structured_output_sets_format(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """An output schema goes out as format."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    reply(wire_server, chat('{"n": 1}'), stream=False)
    response = await generate(request_of("count", output_schema=schema))
    assert response.content == '{"n": 1}'
    assert wire_server.last.json["format"] == schema


async def test_request_settings_override_the_factory(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """model and options from the request win over the factory's."""
    reply(wire_server, chat("x"), stream=False)
    await generate(
        request_of("hi", settings={"model": "other", "options": {"seed": 1}, "top_k": 5})
    )
    body = wire_server.last.json
    assert (body["model"], body["options"]) == ("other", {"seed": 1, "top_k": 5})


ERRORS = [
    (400, ProviderRequestError, False),
    (401, ProviderAuthenticationError, False),
    (404, ProviderRequestError, False),
    (408, ProviderTimeoutError, True),
    (429, ProviderRateLimitError, True),
    (500, ProviderUnavailableError, True),
    (503, ProviderUnavailableError, True),
]


@pytest.mark.parametrize(("status", "cls", "retryable"), ERRORS)
async def test_http_errors_are_typed(
    wire_server: WireServer,
    generate: OllamaGenerate,
    status: int,
    cls: type[ProviderError],
    retryable: bool,
) -> None:
    """Each status maps to its ProviderError subclass, with the server's message."""
    wire_server.reply(
        JsonReply(status=status, body={"error": f"boom {status}"}, headers={"retry-after": "7"})
    )
    with pytest.raises(cls) as caught:
        await generate(request_of("hi"))
    error = caught.value
    assert type(error) is cls
    assert (error.provider, error.model, error.status) == ("ollama", "llama-test", status)
    assert error.retryable is retryable
    assert error.retry_after == 7.0
    assert f"boom {status}" in str(error)
    if status == 401:
        assert "OLLAMA_API_KEY" in str(error)


async def test_api_key_is_a_bearer_token(wire_server: WireServer) -> None:
    """api_key= is sent as Authorization: Bearer (for hosted or proxied servers)."""
    reply(wire_server, chat("x"), stream=False)
    async with ollama_generate(model="m", base_url=wire_server.base_url, api_key="sk") as g:
        await g(request_of("hi"))
    assert wire_server.last.headers["authorization"] == "Bearer sk"


async def test_error_line_inside_a_stream(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """An error line mid-stream is a retryable server error."""
    lines = [*ndjson_lines(chat("partial answer"))[:2], b'{"error": "model crashed"}\n']
    wire_server.reply(SseReply(events=lines))
    with pytest.raises(ProviderUnavailableError, match="model crashed") as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable


async def test_stream_dropped_mid_way_is_retryable(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """A connection cut part-way through the stream is a retryable connection error."""
    wire_server.reply(SseReply(events=ndjson_lines(chat("abcdefghij")), drop_after=2))
    with pytest.raises(ProviderConnectionError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable
    assert isinstance(caught.value, ConnectionError)


async def test_stream_ending_before_done_is_retryable(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """A stream that ends cleanly without its done line is cut, not complete."""
    wire_server.reply(SseReply(events=ndjson_lines(chat("abcdefghij"))[:-1]))
    with pytest.raises(ProviderConnectionError, match="done"):
        await generate(request_of("hi", settings={"stream": True}))


async def test_dropped_stream_is_retried_by_the_run(wire_server: WireServer) -> None:
    """The run's retry policy sees the cut stream as transient and the retry succeeds."""
    body = chat("whole answer")
    wire_server.reply(
        SseReply(events=ndjson_lines(body), drop_after=1), SseReply(events=ndjson_lines(body))
    )
    async with ollama_generate(model="m", base_url=wire_server.base_url, stream=True) as g:
        agent = create_agent(generate=g, retry=RetryOptions(initial_delay=0, jitter=False))
        result = await agent.run("hi")
    assert result.content == "whole answer"
    assert len(wire_server.received) == 2


async def test_slow_first_byte_times_out(wire_server: WireServer) -> None:
    """A server silent past the client's timeout gives a retryable ProviderTimeoutError."""
    wire_server.reply(JsonReply(body=chat("late"), delay=0.5))
    async with ollama_generate(model="m", base_url=wire_server.base_url, timeout=0.1) as g:
        with pytest.raises(ProviderTimeoutError) as caught:
            await g(request_of("hi"))
    assert caught.value.retryable
    assert isinstance(caught.value, TimeoutError)


async def test_abort_mid_stream_closes_the_connection(wire_server: WireServer) -> None:
    """Cancelling a streaming call closes its connection promptly; the server sees it."""
    first_delta = trio.Event()
    wire_server.reply(SseReply(events=ndjson_lines(chat("abcdefghij")), hang_after=2))
    async with ollama_generate(
        model="m",
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
    reply(wire_server, chat("a"), stream=False)
    reply(wire_server, chat("b"), stream=False)
    owned = ollama_generate(model="m", base_url=wire_server.base_url)
    assert owned.owns_client
    await owned(request_of("hi"))
    client = owned.client
    await owned.aclose()
    assert client.is_closed
    await owned.aclose()

    async with httpx.AsyncClient() as mine:
        async with ollama_generate(
            model="m", base_url=wire_server.base_url, http_client=mine
        ) as borrowed:
            assert not borrowed.owns_client
            assert (await borrowed(request_of("hi"))).content == "b"
        assert not mine.is_closed


async def test_tool_call_ids_in_replies_are_kept(
    wire_server: WireServer, generate: OllamaGenerate
) -> None:
    """When the server sends a call id, it is used as is."""
    call = {"id": "call_abc", **tool_call("f", {})}
    reply(wire_server, chat(tool_calls=[call]), stream=False)
    response = await generate(request_of("go"))
    assert response.tool_calls == (ToolCall(id="call_abc", name="f", arguments={}),)


def test_bad_arguments_are_rejected_eagerly() -> None:
    """Misuse raises InvalidArgument at the factory call."""
    with pytest.raises(InvalidArgument):
        ollama_generate(model="")
    with pytest.raises(InvalidArgument):
        ollama_generate(model="m", base_url="localhost:11434")
    with pytest.raises(InvalidArgument):
        ollama_generate(model="m", http_client=object())  # type: ignore[arg-type]
