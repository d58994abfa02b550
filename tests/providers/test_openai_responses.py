"""openai_generate(api="responses"): the real SDK over a socket to a local server."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

pytest.importorskip("openai")

from _doubles import get_weather

from operative import (
    Conversation,
    GenerateRequest,
    ImagePart,
    InvalidArgument,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
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
from operative.providers.openai import OpenAIGenerate, openai_generate
from operative.retry import RetryOptions

from ._openai_responses_wire import (
    failed_body,
    function_call_item,
    message_item,
    reasoning_item,
    response_body,
    rich_body,
    stream_events,
    usage_of,
)
from ._server import JsonReply, SseReply, WireServer, sse_event


@pytest.fixture
async def generate(wire_server: WireServer) -> AsyncIterator[OpenAIGenerate]:
    async with openai_generate(
        model="gpt-test",
        api="responses",
        api_key="test-key",
        base_url=f"{wire_server.base_url}/v1",
    ) as g:
        yield g


def reply(server: WireServer, body: dict[str, Any], *, stream: bool) -> None:
    if stream:
        server.reply(SseReply(events=stream_events(body), headers={"x-request-id": "req_s"}))
    else:
        server.reply(JsonReply(body=body, headers={"x-request-id": "req_j"}))


def request_of(*messages: str, **kw: Any) -> GenerateRequest:
    conversation = Conversation()
    for text in messages:
        conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, **kw)


REASONING = reasoning_item(id="rs_1", summary="Use the weather tool.", encrypted="gAAAAB-opaque")


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_round_trip_through_an_agent(wire_server: WireServer, stream: bool) -> None:
    """Turn two carries the reasoning item, the function_call and its output, in order."""
    deltas: list[Delta] = []
    reply(
        wire_server,
        response_body(
            REASONING,
            function_call_item("call_1", "get_weather", {"city": "Oslo"}, id="fc_1"),
            usage=usage_of(20, 7),
        ),
        stream=stream,
    )
    reply(wire_server, response_body(message_item("It is sunny in Oslo.")), stream=stream)
    async with openai_generate(
        model="gpt-test",
        api="responses",
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
    assert (result.usage.prompt, result.usage.completion) == (30, 12)
    first, second = (r.json for r in wire_server.received)
    assert [r.path for r in wire_server.received] == ["/v1/responses"] * 2
    assert wire_server.received[0].headers["authorization"] == "Bearer test-key"
    assert (first["model"], first["temperature"]) == ("gpt-test", 0.2)
    assert first["input"] == [
        {"type": "message", "role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": "Weather in Oslo?"},
    ]
    (spec,) = first["tools"]
    assert (spec["type"], spec["name"], spec["strict"]) == ("function", "get_weather", False)
    assert spec["description"] == "The weather in a city."
    assert spec["parameters"]["properties"]["city"]["type"] == "string"
    assert first.get("stream") is (True if stream else None)
    assert "stream_options" not in first
    assert second["input"][2:] == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Use the weather tool."}],
            "encrypted_content": "gAAAAB-opaque",
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
            "id": "fc_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Oslo"},
    ]
    assistant = result.conversation.messages[2]
    assert assistant.metadata["openai"]["output"][0]["encrypted_content"] == "gAAAAB-opaque"
    if stream:
        assert "".join(d.text for d in deltas if d.kind == "text") == "It is sunny in Oslo."
        arguments = [d for d in deltas if d.kind == "tool_arguments"]
        assert "".join(d.text for d in arguments) == '{"city": "Oslo"}'
        assert {(d.call_id, d.tool_name, d.index) for d in arguments} == {
            ("call_1", "get_weather", 1)
        }
        thinking = "".join(d.text for d in deltas if d.kind == "thinking")
        assert thinking == "Use the weather tool."
    else:
        assert deltas == []


async def test_stateless_requests_leave_ids_out_and_ask_for_encrypted_reasoning(
    wire_server: WireServer,
) -> None:
    """With store=False nothing is kept server-side: no item ids, encrypted reasoning on."""
    reply(
        wire_server,
        response_body(
            REASONING,
            message_item("Checking.", id="msg_7"),
            function_call_item("call_1", "get_weather", {"city": "Oslo"}),
        ),
        stream=False,
    )
    reply(wire_server, response_body(message_item("Sunny.")), stream=False)
    async with openai_generate(
        model="m", api="responses", base_url=wire_server.base_url, store=False
    ) as generate:
        result = await create_agent(generate=generate, tools=[get_weather]).run("Oslo?")
    assert result.content == "Sunny."
    first, second = (r.json for r in wire_server.received)
    assert (first["store"], first["include"]) == (False, ["reasoning.encrypted_content"])
    assert second["input"][1:4] == [
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Use the weather tool."}],
            "encrypted_content": "gAAAAB-opaque",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Oslo"}',
        },
    ]


async def test_images_as_input_image(wire_server: WireServer, generate: OpenAIGenerate) -> None:
    """URL images pass through; bytes become data: URLs; text parts are input_text."""
    reply(wire_server, response_body(message_item("two images")), stream=False)
    conversation = Conversation()
    conversation.append_user_message(
        [
            TextPart(text="compare"),
            ImagePart(url="https://example.test/a.png"),
            ImagePart(data=b"\x89PNG", media_type="image/png"),
        ]
    )
    response = await generate(GenerateRequest(conversation=conversation.current))
    assert response.content == "two images"
    encoded = base64.b64encode(b"\x89PNG").decode()
    assert wire_server.last.json["input"][0] == {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "compare"},
            {"type": "input_image", "image_url": "https://example.test/a.png", "detail": "auto"},
            {
                "type": "input_image",
                "image_url": f"data:image/png;base64,{encoded}",
                "detail": "auto",
            },
        ],
    }


CANCELLED = "This call was cancelled before it finished."


async def test_history_without_metadata_and_failed_tool_results(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Assistant text is an output_text message; raw arguments go unchanged; a failed,
    denied or cancelled call's output says so."""
    reply(wire_server, response_body(message_item("ok")), stream=False)
    conversation = Conversation()
    conversation.append_user_message("go")
    calls = [
        ToolCall(id="a", name="f", arguments='{"x": 1}'),
        ToolCall(id="b", name="f", arguments={"y": [1, 2]}),
        ToolCall(id="c", name="f", arguments={}),
        ToolCall(id="d", name="f", arguments={}),
    ]
    conversation.append_assistant_message("thinking aloud", calls)
    conversation.append_tool_result(
        ToolResult(call_id="a", tool_name="f", outcome="success", value={"ok": 1})
    )
    conversation.append_tool_result(
        ToolResult(call_id="b", tool_name="f", outcome="denied", error="no")
    )
    conversation.append_tool_result(
        ToolResult(call_id="c", tool_name="f", outcome="error", error="division by zero")
    )
    conversation.append_tool_result(ToolResult(call_id="d", tool_name="f", outcome="cancelled"))
    await generate(GenerateRequest(conversation=conversation.current))
    items = wire_server.last.json["input"]
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "thinking aloud", "annotations": []}],
    }
    assert [(i["type"], i["call_id"], i["arguments"]) for i in items[2:6]] == [
        ("function_call", "a", '{"x": 1}'),
        ("function_call", "b", '{"y":[1,2]}'),
        ("function_call", "c", "{}"),
        ("function_call", "d", "{}"),
    ]
    assert all("id" not in item for item in items[2:6])
    assert [(i["type"], i["call_id"], i["output"]) for i in items[6:]] == [
        ("function_call_output", "a", '{"ok":1}'),
        ("function_call_output", "b", "Tool call denied: no"),
        ("function_call_output", "c", "Tool error: division by zero"),
        ("function_call_output", "d", f"Tool call cancelled: {CANCELLED}"),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_counts_cached_and_reasoning_tokens(
    wire_server: WireServer, generate: OpenAIGenerate, stream: bool
) -> None:
    """Cached and cache-written tokens come out of prompt; reasoning stays in completion."""
    reply(
        wire_server,
        response_body(
            message_item("hi"),
            id="resp_9",
            model="gpt-test-2025",
            usage=usage_of(150, 30, cached=100, cache_write=20, reasoning=12),
        ),
        stream=stream,
    )
    response = await generate(request_of("hello", settings={"stream": stream}))
    assert response.content == "hi"
    assert response.usage == Usage(
        prompt=30, completion=30, total=180, cache_read=100, cache_write=20, reasoning=12
    )
    stop = (response.model, response.stop_reason, response.response_id)
    assert stop == ("gpt-test-2025", "completed", "resp_9")
    assert response.metadata == {}


@pytest.mark.parametrize("stream", [False, True])
async def test_an_incomplete_answer_says_why(
    wire_server: WireServer, generate: OpenAIGenerate, stream: bool
) -> None:
    """status incomplete: stop_reason is incomplete_details.reason; the text is kept."""
    reply(
        wire_server,
        response_body(message_item("cut sho"), incomplete="max_output_tokens"),
        stream=stream,
    )
    response = await generate(request_of("hi", settings={"stream": stream}))
    assert (response.content, response.stop_reason) == ("cut sho", "max_output_tokens")


async def test_streaming_gives_the_same_response_as_not_streaming(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Text, calls (invalid JSON kept raw), reasoning, refusal, usage: all equal."""
    reply(wire_server, rich_body(), stream=False)
    reply(wire_server, rich_body(), stream=True)
    plain = await generate(request_of("hi"))
    streamed = await generate(request_of("hi", settings={"stream": True}))
    assert streamed == plain
    assert plain.content == "Looking it up. "
    assert plain.tool_calls == (
        ToolCall(id="call_a", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(id="call_b", name="get_weather", arguments='{"city": "Ber'),
    )
    extra = plain.metadata["openai"]
    assert extra["refusal"] == "Not that part."
    assert [(item["type"], item["id"]) for item in extra["output"]] == [
        ("reasoning", "rs_1"),
        ("message", "msg_1"),
        ("function_call", "fc_a"),
        ("reasoning", "rs_2"),
        ("function_call", "fc_b"),
        ("message", "msg_2"),
    ]


async def test_a_completed_event_without_output_is_rebuilt_from_the_items(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Some compatible servers close with an empty output list: the items stand in."""
    body = rich_body()
    events = stream_events(body, final=False)
    events.append(sse_event({"type": "response.completed", "response": {**body, "output": []}}))
    wire_server.reply(SseReply(events=events))
    reply(wire_server, body, stream=False)
    streamed = await generate(request_of("hi", settings={"stream": True}))
    assert streamed == await generate(request_of("hi"))


async def test_replayed_reasoning_keeps_the_output_order(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """A turn with two reasoning items goes back in the order it came, with item ids."""
    reply(wire_server, rich_body(), stream=False)
    answer = await generate(request_of("hi"))
    reply(wire_server, response_body(message_item("done")), stream=False)
    conversation = Conversation()
    conversation.append_user_message("hi")
    conversation.append_assistant_message(
        answer.content, answer.tool_calls, metadata=answer.metadata
    )
    for call in answer.tool_calls:
        conversation.append_tool_result(
            ToolResult(call_id=call.id, tool_name=call.name, outcome="success", value="x")
        )
    await generate(GenerateRequest(conversation=conversation.current))
    items = wire_server.last.json["input"][1:]
    assert [(item["type"], item.get("id")) for item in items] == [
        ("reasoning", "rs_1"),
        ("message", "msg_1"),
        ("function_call", "fc_a"),
        ("reasoning", "rs_2"),
        ("function_call", "fc_b"),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    assert items[3] == {
        "type": "reasoning",
        "id": "rs_2",
        "summary": [],
        "encrypted_content": "enc-2",
    }
    assert items[4]["arguments"] == '{"city": "Ber'


async def test_reasoning_text_goes_back_when_there_is_no_encrypted_content(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """Open-weight servers return reasoning as text: it is sent back as it came."""
    reply(wire_server, response_body(message_item("ok")), stream=False)
    thought = {**reasoning_item(id="rs_9", summary="", encrypted=None), "status": "completed"}
    thought["content"] = [{"type": "reasoning_text", "text": "2 + 2 is 4."}]
    conversation = Conversation()
    conversation.append_user_message("2 + 2?")
    conversation.append_assistant_message("4", metadata={"openai": {"output": [thought]}})
    conversation.append_user_message("and 3 + 3?")
    await generate(GenerateRequest(conversation=conversation.current))
    assert wire_server.last.json["input"][1] == {
        "type": "reasoning",
        "id": "rs_9",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "2 + 2 is 4."}],
    }


async def test_structured_output_sends_text_format(wire_server: WireServer) -> None:
    """An output schema goes out as text.format json_schema (strict when asked), next to
    any other text settings; a caller's own format wins."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    for strict in (False, True):
        reply(wire_server, response_body(message_item('{"n": 1}')), stream=False)
        async with openai_generate(
            model="m",
            api="responses",
            base_url=wire_server.base_url,
            strict_output=strict,
            text={"verbosity": "low"},
        ) as g:
            response = await g(request_of("count", output_schema=schema))
        assert response.content == '{"n": 1}'
        assert wire_server.last.json["text"] == {
            "verbosity": "low",
            "format": {"type": "json_schema", "name": "output", "schema": schema, "strict": strict},
        }
    reply(wire_server, response_body(message_item("{}")), stream=False)
    async with openai_generate(
        model="m",
        api="responses",
        base_url=wire_server.base_url,
        text={"format": {"type": "json_object"}},
    ) as g:
        await g(request_of("count", output_schema=schema))
    assert wire_server.last.json["text"] == {"format": {"type": "json_object"}}


async def test_settings_reach_the_wire(wire_server: WireServer) -> None:
    """max_tokens becomes max_output_tokens, reasoning_effort reasoning.effort; settings
    the SDK does not declare still go in the body; a request's settings win."""
    reply(wire_server, response_body(message_item("x")), stream=False)
    reply(wire_server, response_body(message_item("y")), stream=False)
    async with openai_generate(
        model="m",
        api="responses",
        base_url=wire_server.base_url,
        max_output_tokens=1000,
        reasoning_effort="low",
        reasoning={"summary": "auto"},
        instructions="Be terse.",
    ) as g:
        await g(request_of("hi"))
        body = wire_server.last.json
        assert body["max_output_tokens"] == 1000
        assert body["reasoning"] == {"summary": "auto", "effort": "low"}
        assert body["instructions"] == "Be terse."
        await g(request_of("hi", settings={"model": "other", "max_tokens": 9, "top_k": 3}))
    body = wire_server.last.json
    assert (body["model"], body["max_output_tokens"], body["top_k"]) == ("other", 9, 3)
    assert "max_tokens" not in body


def test_misuse_is_refused_eagerly() -> None:
    """Bad arguments fail when the generate function is made."""
    with pytest.raises(InvalidArgument, match="input="):
        openai_generate(model="m", api="responses", input="hi")
    with pytest.raises(InvalidArgument):
        openai_generate(model="m", api="completions")  # type: ignore[arg-type]
    assert repr(openai_generate(model="m", api="responses")) == (
        "openai_generate(model='m', api='responses')"
    )


ERRORS = [
    (400, ProviderRequestError, False),
    (401, ProviderAuthenticationError, False),
    (403, ProviderAuthenticationError, False),
    (404, ProviderRequestError, False),
    (408, ProviderTimeoutError, True),
    (422, ProviderRequestError, False),
    (429, ProviderRateLimitError, True),
    (500, ProviderUnavailableError, True),
    (503, ProviderUnavailableError, True),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "cls", "retryable"), ERRORS)
async def test_http_errors_are_typed(
    wire_server: WireServer,
    generate: OpenAIGenerate,
    status: int,
    cls: type[ProviderError],
    retryable: bool,
    stream: bool,
) -> None:
    """Each status maps to its ProviderError subclass with status, request id and retry_after."""
    wire_server.reply(
        JsonReply(
            status=status,
            body={"error": {"message": f"boom {status}", "type": "x", "param": None, "code": None}},
            headers={"x-request-id": f"req_{status}", "retry-after": "3"},
        )
    )
    with pytest.raises(cls) as caught:
        await generate(request_of("hi", settings={"stream": stream}))
    error = caught.value
    assert type(error) is cls
    assert (error.provider, error.model, error.status) == ("openai", "gpt-test", status)
    assert error.request_id == f"req_{status}"
    assert error.retryable is retryable
    assert error.retry_after == 3.0
    assert f"boom {status}" in str(error)
    if status in (401, 403):
        assert "OPENAI_API_KEY" in str(error)


STREAM_FAILURES = [
    ({"type": "error", "code": "server_error", "message": "melted"}, ProviderUnavailableError),
    (
        {"type": "response.failed", "response": failed_body("rate_limit_exceeded", "melted")},
        ProviderRateLimitError,
    ),
]


@pytest.mark.parametrize(("failure", "cls"), STREAM_FAILURES)
async def test_an_error_inside_a_stream(
    wire_server: WireServer,
    generate: OpenAIGenerate,
    failure: dict[str, Any],
    cls: type[ProviderError],
) -> None:
    """An error event or response.failed mid-stream is a retryable provider error."""
    events = stream_events(response_body(message_item("partial answer")))[:4]
    events.append(sse_event(failure, event=failure["type"]))
    wire_server.reply(SseReply(events=events, headers={"x-request-id": "req_e"}))
    with pytest.raises(cls, match="melted") as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable
    assert caught.value.request_id == "req_e"


async def test_a_failed_response_body_is_an_error(
    wire_server: WireServer, generate: OpenAIGenerate
) -> None:
    """A 200 body with status failed raises, typed like the stream's failure."""
    wire_server.reply(
        JsonReply(body=failed_body("server_error", "oops"), headers={"x-request-id": "req_f"})
    )
    with pytest.raises(ProviderUnavailableError, match="oops") as caught:
        await generate(request_of("hi"))
    assert (caught.value.retryable, caught.value.request_id) == (True, "req_f")


@pytest.mark.parametrize("drop_after", [3, None])
async def test_stream_cut_off_is_retryable(
    wire_server: WireServer, generate: OpenAIGenerate, drop_after: int | None
) -> None:
    """A socket cut mid-body, or a body that ends before response.completed, is retryable."""
    events = stream_events(response_body(message_item("abcdef")))
    if drop_after is None:
        events = events[:-1]  # a clean end of body, but no response.completed
    wire_server.reply(SseReply(events=events, drop_after=drop_after))
    with pytest.raises(ProviderConnectionError) as caught:
        await generate(request_of("hi", settings={"stream": True}))
    assert caught.value.retryable


async def test_dropped_stream_is_retried_by_the_run(wire_server: WireServer) -> None:
    """The run's retry policy sees the cut stream as transient and the retry succeeds."""
    events = stream_events(response_body(message_item("whole answer")))
    wire_server.reply(SseReply(events=events, drop_after=4), SseReply(events=events))
    async with openai_generate(
        model="m", api="responses", base_url=wire_server.base_url, stream=True
    ) as g:
        agent = create_agent(generate=g, retry=RetryOptions(initial_delay=0, jitter=False))
        result = await agent.run("hi")
    assert result.error is None, result.error
    assert result.content == "whole answer"
    assert len(wire_server.received) == 2


async def test_slow_first_byte_times_out(wire_server: WireServer) -> None:
    """A server silent past the client's timeout gives a retryable ProviderTimeoutError."""
    wire_server.reply(JsonReply(body=response_body(message_item("late")), delay=0.5))
    async with openai_generate(
        model="m", api="responses", api_key="k", base_url=wire_server.base_url, timeout=0.1
    ) as g:
        with pytest.raises(ProviderTimeoutError) as caught:
            await g(request_of("hi"))
    assert caught.value.retryable


async def test_abort_mid_stream_closes_the_connection(wire_server: WireServer) -> None:
    """Cancelling a streaming call closes its connection promptly; the server sees it."""
    first_delta = trio.Event()
    events = stream_events(response_body(message_item("abcdef")))
    wire_server.reply(SseReply(events=events, hang_after=5))
    async with openai_generate(
        model="m",
        api="responses",
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


async def test_deltas_become_generate_delta_events(wire_server: WireServer) -> None:
    """A run listening for generate.delta sees every streamed piece, inside its attempt."""
    body = response_body(
        reasoning_item(summary="Hmm."),
        message_item("Hello there"),
        function_call_item("call_1", "get_weather", {"city": "Oslo"}),
    )
    reply(wire_server, body, stream=True)
    reply(wire_server, response_body(message_item("Sunny.")), stream=True)
    async with openai_generate(
        model="m", api="responses", base_url=wire_server.base_url, stream=True
    ) as g:
        agent = create_agent(generate=g, tools=[get_weather])
        seen: list[Any] = []
        types: list[str] = []
        async with agent.open_run("Oslo?") as run:
            run.add_listener("generate.delta", seen.append)
            run.add_listener("*", lambda event: types.append(event.type))
        result = await run.result()
    assert result.content == "Sunny."
    first = [(e.kind, e.text, e.index, e.call_id) for e in seen if e.step == 1]
    assert first == [
        ("thinking", "Hm", 0, None),
        ("thinking", "m.", 0, None),
        ("text", "Hello", 1, None),
        ("text", " there", 1, None),
        ("tool_arguments", '{"city":', 2, "call_1"),
        ("tool_arguments", ' "Oslo"}', 2, "call_1"),
    ]
    assert {e.tool_name for e in seen if e.kind == "tool_arguments"} == {"get_weather"}
    assert types.index("generate.started") < types.index("generate.delta")
    assert types.index("generate.delta") < types.index("generate.completed")
