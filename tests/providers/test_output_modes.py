"""Output modes over the wire: what each adapter sends for ``output_mode`` native, tool
and prompted, how a final-answer tool call becomes the run's output, and the fallback
when a server refuses the native format (llama-cpp-python's 500, reproduced by
:class:`LlamaCppServer`)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from operative import Conversation, GenerateRequest, InvalidArgument, create_agent, tool
from operative._core._errors import RunFailed
from operative.providers import (
    Delta,
    ProviderRequestError,
    ProviderUnavailableError,
)
from operative.providers._errors import names_field, status_error
from operative.providers.anthropic import anthropic_generate
from operative.providers.gemini import gemini_generate
from operative.providers.ollama import ollama_generate
from operative.providers.openai import openai_generate
from operative.retry import RetryOptions

from . import _anthropic_wire as anthropic_wire
from . import _gemini_wire as gemini_wire
from . import _ollama_wire as ollama_wire
from . import _openai_responses_wire as responses_wire
from ._openai_wire import LlamaCppServer, completion, tool_call
from ._server import JsonReply, SseReply, WireServer


class Capital(msgspec.Struct):
    city: str
    population: int


CAPITAL = '{"city": "Paris", "population": 2100000}'
PARIS = Capital(city="Paris", population=2_100_000)
QUESTION = "What is the capital of France?"


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _schema_in(text: str) -> bool:
    """Whether ``text`` carries the output schema the way the prompted formats put it."""
    return "validates against this JSON Schema" in text and '"population"' in text


def _openai(server: WireServer, **options: Any) -> Any:
    return openai_generate(model="smollm2", base_url=f"{server.base_url}/v1", **options)


# -- OpenAI Chat Completions against llama-cpp-python's behaviour ----------------------


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
async def test_unset_mode_falls_back_when_llama_cpp_refuses_json_schema(
    wire_server: WireServer, stream: bool
) -> None:
    """The server's 500 for ``json_schema`` is not retried: the same step is sent again
    at once with ``json_object`` and the schema (in the body and the system prompt), the
    answer validates, and the next run starts there without a refusal."""
    server = LlamaCppServer(completion(CAPITAL), completion(CAPITAL, id="chatcmpl-2"))
    wire_server.handler = server
    async with _openai(wire_server, stream=stream) as generate:
        agent = create_agent(
            generate=generate,
            instructions="Be exact.",
            output=Capital,
            retry=RetryOptions(max_attempts=3, initial_delay=0, jitter=False),
        )
        first = await agent.run(QUESTION)
        second = await agent.run(QUESTION)

    assert first.error is None, first.error
    assert (first.output, second.output) == (PARIS, PARIS)
    assert len(server.refused) == 1
    refused, fallback, again = (r.json for r in wire_server.received)
    assert refused["response_format"]["type"] == "json_schema"
    schema = refused["response_format"]["json_schema"]["schema"]
    for sent in (fallback, again):
        assert sent["response_format"] == {"type": "json_object", "schema": schema}
        system = sent["messages"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("Be exact.\n\n")
        assert _schema_in(system["content"])
        assert [m["role"] for m in sent["messages"]] == ["system", "user"]


async def test_explicit_native_refused_is_one_request_and_says_what_to_use(
    wire_server: WireServer,
) -> None:
    """``output_mode="native"`` does not fall back; the 500 names ``response_format``,
    so it is a request error, not retried though the run has a retry policy."""
    server = LlamaCppServer(completion(CAPITAL))
    wire_server.handler = server
    async with _openai(wire_server) as generate:
        agent = create_agent(
            generate=generate,
            output=Capital,
            output_mode="native",
            retry=RetryOptions(max_attempts=3, initial_delay=0, jitter=False),
        )
        with pytest.raises(RunFailed) as failed:
            await agent.run(QUESTION)
        result = failed.value.result

    assert isinstance(result.error, ProviderRequestError)
    assert result.error.status == 500
    assert not result.error.retryable
    assert "output_mode='prompted'" in str(result.error)
    assert len(wire_server.received) == 1


async def test_prompted_mode_sends_json_object_and_the_schema_in_the_prompt(
    wire_server: WireServer,
) -> None:
    """``output_mode="prompted"``: JSON mode and the schema in a system message of its
    own (the conversation has none), never ``json_schema``."""
    wire_server.handler = LlamaCppServer(completion(CAPITAL))
    async with _openai(wire_server) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="prompted")
        result = await agent.run(QUESTION)

    assert result.output == PARIS
    (sent,) = (r.json for r in wire_server.received)
    assert sent["response_format"] == {"type": "json_object"}
    system, user = sent["messages"]
    assert system["role"] == "system"
    assert _schema_in(system["content"])
    assert user == {"role": "user", "content": QUESTION}


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
async def test_tool_mode_forces_the_final_answer_tool_and_its_arguments_are_the_output(
    wire_server: WireServer, stream: bool
) -> None:
    """``output_mode="tool"``: the schema is the ``final_result`` tool's parameters, the
    tool is forced, and its call ends the run as a text answer (nothing runs)."""
    call = tool_call("call_1", "final_result", json.loads(CAPITAL))
    body = completion(None, tool_calls=[call], finish_reason="tool_calls")
    wire_server.handler = LlamaCppServer(body)
    deltas: list[Delta] = []
    async with _openai(wire_server, stream=stream, on_delta=deltas.append) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="tool")
        result = await agent.run(QUESTION)

    assert result.error is None, result.error
    assert result.finish_reason == "stop-condition"
    assert result.output == PARIS
    (step,) = result.steps
    assert step.tool_calls == ()
    assert step.results == ()
    assert json.loads(step.content) == json.loads(CAPITAL)
    assistant = result.conversation.messages[-1]
    assert (assistant.role, assistant.tool_calls) == ("assistant", ())
    (sent,) = (r.json for r in wire_server.received)
    assert "response_format" not in sent
    (final,) = sent["tools"]
    assert final["function"]["name"] == "final_result"
    parameters = final["function"]["parameters"]
    assert parameters["type"] == "object"
    assert set(parameters["properties"]) == {"city", "population"}
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
    if stream:
        assert {d.tool_name for d in deltas if d.kind == "tool_arguments"} == {"final_result"}


async def test_tool_mode_beside_other_tools_requires_a_call_and_drops_calls_beside_the_answer(
    wire_server: WireServer,
) -> None:
    """Beside the run's tools the choice is ``required``; a final answer given together
    with another call ends the run, and that other call is not run."""
    weather = tool_call("call_w", "get_weather", {"city": "Paris"})
    final = tool_call("call_f", "final_result", json.loads(CAPITAL))
    again = tool_call("call_w2", "get_weather", {"city": "Lyon"})
    wire_server.handler = LlamaCppServer(
        completion(None, tool_calls=[weather], finish_reason="tool_calls"),
        completion(None, tool_calls=[final, again], finish_reason="tool_calls", id="c-2"),
    )
    async with _openai(wire_server) as generate:
        agent = create_agent(
            generate=generate, tools=[get_weather], output=Capital, output_mode="tool"
        )
        result = await agent.run(QUESTION)

    assert result.error is None, result.error
    assert result.output == PARIS
    first, second = result.steps
    assert [r.value for r in first.results] == ["sunny in Paris"]
    assert (second.tool_calls, second.results) == ((), ())
    for sent in (r.json for r in wire_server.received):
        assert [t["function"]["name"] for t in sent["tools"]] == ["get_weather", "final_result"]
        assert sent["tool_choice"] == "required"


async def test_tool_mode_wraps_an_output_that_is_not_an_object(wire_server: WireServer) -> None:
    """A list output is the ``response`` property of the tool's parameters, and is read
    back from it."""
    call = tool_call("call_1", "final_result", {"response": [3, 1, 2]})
    wire_server.handler = LlamaCppServer(
        completion(None, tool_calls=[call], finish_reason="tool_calls")
    )
    async with _openai(wire_server) as generate:
        agent = create_agent(generate=generate, output=list[int], output_mode="tool")
        result = await agent.run("Three numbers?")

    assert result.output == [3, 1, 2]
    parameters = wire_server.last.json["tools"][0]["function"]["parameters"]
    assert parameters == {
        "type": "object",
        "properties": {"response": {"type": "array", "items": {"type": "integer"}}},
        "required": ["response"],
    }


async def test_tool_mode_arguments_that_do_not_validate_are_sent_back(
    wire_server: WireServer,
) -> None:
    """Arguments of the wrong shape are validated like a text answer: the model is told
    what is wrong, and answers again through the tool."""
    bad = tool_call("call_1", "final_result", {"city": "Paris"})
    good = tool_call("call_2", "final_result", json.loads(CAPITAL))
    wire_server.handler = LlamaCppServer(
        completion(None, tool_calls=[bad], finish_reason="tool_calls"),
        completion(None, tool_calls=[good], finish_reason="tool_calls", id="c-2"),
    )
    async with _openai(wire_server) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="tool")
        result = await agent.run(QUESTION)

    assert result.output == PARIS
    assert result.schema_validation is not None
    assert result.schema_validation.attempts == 2
    retry = wire_server.last.json["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"city": "Paris"}'}
    assert retry[-1]["role"] == "user"
    assert "population" in retry[-1]["content"]


async def test_tool_mode_refuses_a_tool_of_the_same_name(wire_server: WireServer) -> None:
    """A run tool named ``final_result`` cannot share the name: the error says so."""

    @tool
    async def final_result(answer: str) -> str:
        """A tool with the output tool's name."""
        return answer

    async with _openai(wire_server) as generate:
        agent = create_agent(
            generate=generate, tools=[final_result], output=Capital, output_mode="tool"
        )
        with pytest.raises(RunFailed) as failed:
            await agent.run(QUESTION)
        result = failed.value.result

    assert isinstance(result.error, InvalidArgument)
    assert "rename that tool" in str(result.error)
    assert wire_server.received == []


async def test_settings_choose_over_the_output_mode(wire_server: WireServer) -> None:
    """A ``tool_choice`` or ``response_format`` in the settings is sent as given."""
    wire_server.handler = LlamaCppServer(
        completion(CAPITAL),
        completion(None, tool_calls=[tool_call("c", "final_result", json.loads(CAPITAL))]),
    )
    async with _openai(wire_server) as generate:
        prompted = create_agent(
            generate=generate,
            output=Capital,
            output_mode="prompted",
            settings={"response_format": {"type": "text"}},
        )
        assert (await prompted.run(QUESTION)).output == PARIS
        assert wire_server.last.json["response_format"] == {"type": "text"}
        forced = create_agent(
            generate=generate, output=Capital, output_mode="tool", settings={"tool_choice": "auto"}
        )
        assert (await forced.run(QUESTION)).output == PARIS
        assert wire_server.last.json["tool_choice"] == "auto"


# -- error classification ---------------------------------------------------------------


def _error(status: int, message: str, fields: list[str]) -> Any:
    return status_error(
        provider="openai",
        model="m",
        status=status,
        message=message,
        headers={},
        request_id=None,
        key_variable="OPENAI_API_KEY",
        sent_fields=fields,
    )


SENT = ["model", "messages", "response_format", "temperature"]


@pytest.mark.parametrize(
    "message",
    [
        "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', "
        "'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
        "7 validation errors: {'type': 'string_type', 'loc': ('body', 'messages', 1, "
        "'content'), 'msg': 'Input should be a valid string'}",
        "messages[1].content: Input should be a valid string",
        "response_format json_schema is not supported",
    ],
    ids=["quoted in a location", "a plain name quoted", "a plain name in a path", "underscored"],
)
def test_a_server_error_naming_a_sent_field_is_a_request_error(message: str) -> None:
    """A 500 that names a field of the request is not retryable."""
    error = _error(500, message, SENT)
    assert isinstance(error, ProviderRequestError)
    assert (error.status, error.retryable) == (500, False)
    assert "not retried" in str(error)


@pytest.mark.parametrize(
    ("status", "message", "fields"),
    [
        (500, "The server had an error while processing your request.", SENT),
        (503, "The model is overloaded. Please try again later.", SENT),
        (500, "the model `gpt-4o` is overloaded", SENT),
        (500, "'tools' is not supported", SENT),
        (502, "Input should be 'text' or 'json_object' at response_format.type", []),
        (529, "Overloaded", SENT),
    ],
    ids=["generic", "prose", "backquoted value", "a field not sent", "no fields", "529"],
)
def test_other_server_errors_stay_retryable(status: int, message: str, fields: list[str]) -> None:
    """Prose that happens to use a field's word, or a field the request did not send,
    leaves a 5xx retryable."""
    error = _error(status, message, fields)
    assert isinstance(error, ProviderUnavailableError)
    assert error.retryable


def test_names_field_wants_a_quoted_or_path_form_for_plain_words() -> None:
    """Plain words count only quoted or in a path; underscored and camelCase names as
    words, never inside another word."""
    assert names_field('Unknown name "responseSchema" at generation_config', ["responseSchema"])
    assert names_field("body.format: bad", ["format"])
    assert names_field("`format` is wrong", ["format"])
    assert not names_field("invalid format", ["format"])
    assert not names_field("my_response_format_x", ["response_format"])
    assert not names_field("anything", [])


# -- OpenAI Responses ---------------------------------------------------------------------


def _responses(server: WireServer) -> Any:
    return openai_generate(model="m", api="responses", base_url=server.base_url)


async def test_responses_fall_back_to_json_object_after_a_refused_text_format(
    wire_server: WireServer,
) -> None:
    """A 400 naming ``text.format`` moves the request to ``json_object`` with the schema
    in a system input item."""
    refusal = {
        "error": {
            "message": "Unsupported value: 'text.format.type' does not support 'json_schema'.",
            "type": "invalid_request_error",
            "param": "text.format.type",
            "code": "unsupported_value",
        }
    }
    wire_server.reply(
        JsonReply(status=400, body=refusal),
        JsonReply(body=responses_wire.response_body(responses_wire.message_item(CAPITAL))),
    )
    async with _responses(wire_server) as generate:
        result = await create_agent(generate=generate, output=Capital).run(QUESTION)

    assert result.output == PARIS
    refused, sent = (r.json for r in wire_server.received)
    assert refused["text"]["format"]["type"] == "json_schema"
    assert sent["text"] == {"format": {"type": "json_object"}}
    system = sent["input"][0]
    assert (system["type"], system["role"]) == ("message", "system")
    assert _schema_in(system["content"])


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
async def test_responses_tool_mode(wire_server: WireServer, stream: bool) -> None:
    """The final-answer function is forced with the Responses ``tool_choice`` shape."""
    body = responses_wire.response_body(
        responses_wire.function_call_item("call_1", "final_result", json.loads(CAPITAL))
    )
    if stream:
        wire_server.reply(SseReply(events=responses_wire.stream_events(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    async with openai_generate(
        model="m", api="responses", base_url=wire_server.base_url, stream=stream
    ) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="tool")
        result = await agent.run(QUESTION)

    assert result.output == PARIS
    sent = wire_server.last.json
    assert sent["tool_choice"] == {"type": "function", "name": "final_result"}
    assert [t["name"] for t in sent["tools"]] == ["final_result"]
    assert "text" not in sent


# -- Anthropic ------------------------------------------------------------------------------


def _anthropic(server: WireServer, **settings: Any) -> Any:
    return anthropic_generate(model="m", api_key="k", base_url=server.base_url, **settings)


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
async def test_anthropic_tool_mode(wire_server: WireServer, stream: bool) -> None:
    """``tool_choice`` names the final-answer tool; its ``tool_use`` input is the output."""
    body = anthropic_wire.message(
        [anthropic_wire.tool_use_block("toolu_1", "final_result", json.loads(CAPITAL))],
        stop_reason="tool_use",
    )
    if stream:
        wire_server.reply(SseReply(events=anthropic_wire.stream_events(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    async with _anthropic(wire_server, stream=stream) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="tool")
        result = await agent.run(QUESTION)

    assert result.output == PARIS
    sent = wire_server.last.json
    assert sent["tool_choice"] == {"type": "tool", "name": "final_result"}
    assert [t["name"] for t in sent["tools"]] == ["final_result"]
    assert "output_config" not in sent


async def test_anthropic_tool_mode_with_thinking_asks_for_the_tool_in_the_prompt(
    wire_server: WireServer,
) -> None:
    """Extended thinking forbids a forced tool: the tool is offered, and asked for in the
    system prompt, with no ``tool_choice``."""
    body = anthropic_wire.message(
        [anthropic_wire.tool_use_block("toolu_1", "final_result", json.loads(CAPITAL))]
    )
    wire_server.reply(JsonReply(body=body))
    thinking = {"type": "enabled", "budget_tokens": 1024}
    async with _anthropic(wire_server, thinking=thinking) as generate:
        agent = create_agent(generate=generate, output=Capital, output_mode="tool")
        result = await agent.run(QUESTION)

    assert result.output == PARIS
    sent = wire_server.last.json
    assert "tool_choice" not in sent
    assert "call the final_result tool" in sent["system"][-1]["text"]


async def test_anthropic_falls_back_to_the_prompt_when_output_config_is_refused(
    wire_server: WireServer,
) -> None:
    """A server that does not know ``output_config`` gets the schema in the system
    prompt at once; ``output_mode="prompted"`` sends only that."""
    refusal = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "output_config: Extra inputs are not permitted",
        },
    }
    answer = anthropic_wire.message([anthropic_wire.text_block(CAPITAL)])
    wire_server.reply(
        JsonReply(status=400, body=refusal), JsonReply(body=answer), JsonReply(body=answer)
    )
    async with _anthropic(wire_server) as generate:
        unset = await create_agent(generate=generate, output=Capital).run(QUESTION)
        prompted = create_agent(generate=generate, output=Capital, output_mode="prompted")
        assert (await prompted.run(QUESTION)).output == PARIS

    assert unset.output == PARIS
    refused, fallback, prompted_sent = (r.json for r in wire_server.received)
    assert "output_config" in refused
    for sent in (fallback, prompted_sent):
        assert "output_config" not in sent
        assert _schema_in(sent["system"][-1]["text"])


# -- Gemini -----------------------------------------------------------------------------------


async def test_gemini_tool_mode_and_prompted_mode(wire_server: WireServer) -> None:
    """Tool: ``functionCallingConfig`` ANY, limited to the final-answer function.
    Prompted: JSON mode and the schema in the system instruction, no
    ``responseSchema``."""
    wire_server.reply(
        JsonReply(
            body=gemini_wire.reply_body(
                [gemini_wire.function_call("final_result", json.loads(CAPITAL))]
            )
        ),
        JsonReply(body=gemini_wire.reply_body([{"text": CAPITAL}])),
    )
    async with gemini_generate(model="g", api_key="k", base_url=wire_server.base_url) as generate:
        tool_run = create_agent(generate=generate, output=Capital, output_mode="tool")
        assert (await tool_run.run(QUESTION)).output == PARIS
        prompted = create_agent(generate=generate, output=Capital, output_mode="prompted")
        assert (await prompted.run(QUESTION)).output == PARIS

    tool_sent, prompted_sent = (r.json for r in wire_server.received)
    assert tool_sent["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["final_result"]}
    }
    (declaration,) = tool_sent["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "final_result"
    assert "generationConfig" not in tool_sent
    assert prompted_sent["generationConfig"] == {"responseMimeType": "application/json"}
    assert _schema_in(prompted_sent["systemInstruction"]["parts"][-1]["text"])


async def test_gemini_falls_back_when_response_schema_is_refused(wire_server: WireServer) -> None:
    """A 400 naming ``responseSchema`` moves the request to JSON mode with the schema in
    the system instruction."""
    refusal = {
        "error": {
            "code": 400,
            "message": 'Invalid JSON payload received. Unknown name "responseSchema" at '
            "'generation_config': Cannot find field.",
            "status": "INVALID_ARGUMENT",
        }
    }
    wire_server.reply(
        JsonReply(status=400, body=refusal),
        JsonReply(body=gemini_wire.reply_body([{"text": CAPITAL}])),
    )
    async with gemini_generate(model="g", api_key="k", base_url=wire_server.base_url) as generate:
        result = await create_agent(generate=generate, output=Capital).run(QUESTION)

    assert result.output == PARIS
    refused, sent = (r.json for r in wire_server.received)
    assert "responseSchema" in refused["generationConfig"]
    assert sent["generationConfig"] == {"responseMimeType": "application/json"}


# -- Ollama -----------------------------------------------------------------------------------


async def test_ollama_tool_mode_and_prompted_mode(wire_server: WireServer) -> None:
    """Ollama has no ``tool_choice``: the final-answer tool is offered and asked for in
    the system prompt. Prompted: ``format: "json"`` and the schema in the prompt."""
    wire_server.reply(
        JsonReply(
            body=ollama_wire.chat(
                tool_calls=[ollama_wire.tool_call("final_result", json.loads(CAPITAL))]
            )
        ),
        JsonReply(body=ollama_wire.chat(CAPITAL)),
    )
    async with ollama_generate(model="o", base_url=wire_server.base_url) as generate:
        tool_run = create_agent(generate=generate, output=Capital, output_mode="tool")
        tool_result = await tool_run.run(QUESTION)
        prompted = create_agent(generate=generate, output=Capital, output_mode="prompted")
        assert (await prompted.run(QUESTION)).output == PARIS

    assert tool_result.output == PARIS
    assert tool_result.steps[0].tool_calls == ()
    tool_sent, prompted_sent = (r.json for r in wire_server.received)
    assert [t["function"]["name"] for t in tool_sent["tools"]] == ["final_result"]
    assert "format" not in tool_sent
    assert "call the final_result tool" in tool_sent["messages"][0]["content"]
    assert prompted_sent["format"] == "json"
    assert _schema_in(prompted_sent["messages"][0]["content"])


async def test_ollama_native_sends_the_schema_as_format(wire_server: WireServer) -> None:
    """Unset, the schema is the ``format`` (Ollama's native structured output)."""
    wire_server.reply(JsonReply(body=ollama_wire.chat(CAPITAL)))
    async with ollama_generate(model="o", base_url=wire_server.base_url) as generate:
        result = await create_agent(generate=generate, output=Capital).run(QUESTION)
    assert result.output == PARIS
    sent = wire_server.last.json
    assert sent["format"] == msgspec.json.schema(Capital)
    assert [m["role"] for m in sent["messages"]] == ["user"]


async def test_a_hand_built_request_with_an_unknown_mode_is_refused(
    wire_server: WireServer,
) -> None:
    """A request built by hand (no run checked it) with an unknown mode is refused
    before anything is sent."""
    conversation = Conversation()
    conversation.append_user_message(QUESTION)
    request = GenerateRequest(
        conversation=conversation.current,
        output_schema=msgspec.json.schema(Capital),
        output_mode="json",  # type: ignore[arg-type]
    )
    async with _openai(wire_server) as generate:
        with pytest.raises(InvalidArgument, match="'native', 'tool' or 'prompted'"):
            await generate(request)
    assert wire_server.received == []
