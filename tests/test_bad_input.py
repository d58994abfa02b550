"""Bad input from a model or a tool gets a typed error, early, and never poisons storage.

A response with a field of the wrong type is refused where it is built; arguments or
tool values that JSON cannot hold, or that nest deeper than ``MAX_JSON_DEPTH``, become
``error`` results the model reads; whatever a run recorded still encodes and decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import operative
import operative.errors
from operative import (
    Conversation,
    ConversationHistory,
    GenerateRequest,
    GenerateResponse,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative._core._codec import MAX_JSON_DEPTH, json_too_deep
from operative.conversation import ConversationError, new_message_id, tool_result_message
from operative.durable import Durable, SqliteCheckpointStore, SqliteDurable, SqliteEngine
from operative.errors import InvalidResponseError
from operative.providers import Delta
from operative.providers.test import StreamChunk, StreamReplayer
from operative.testing import ScriptedModel, check_run_invariants


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def nested(depth: int) -> dict[str, Any]:
    """A mapping nested ``depth`` objects deep (built without recursion)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def nested_text(depth: int) -> str:
    return '{"x":' * (depth - 1) + "{}" + "}" * (depth - 1)


def user(text: str = "hi") -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


def round_trips(history: ConversationHistory) -> None:
    """The transcript a run left behind still loads (it is what a session stores)."""
    loaded = operative.decode(operative.encode(history), ConversationHistory)
    assert len(loaded.messages) == len(history.messages)


async def run_events(
    generate: Any, tools: list[Any], conversation: Conversation | None = None, **options: Any
) -> tuple[operative.RunResult, list[Any]]:
    events: list[Any] = []
    async with open_run(
        generate=generate,
        conversation=conversation or user(),
        tools=tools,
        stop_when=stop_when.no_tool_calls(),
        **options,
    ) as run:
        run.add_listener("*", events.append)
    return await run.result(), events


# -- responses with fields of the wrong type ----------------------------------------------

MALFORMED: dict[str, Callable[[], Any]] = {
    "call id 123": lambda: GenerateResponse(tool_calls=(ToolCall(id=123, name="add"),)),  # type: ignore[arg-type]
    "call name None": lambda: GenerateResponse(tool_calls=(ToolCall(id="c", name=None),)),  # type: ignore[arg-type]
    "call arguments list": lambda: GenerateResponse(
        tool_calls=(ToolCall(id="c", name="add", arguments=[1, 2]),)  # type: ignore[arg-type]
    ),
    "tool_calls None": lambda: GenerateResponse(tool_calls=None),  # type: ignore[arg-type]
    "tool_calls dict": lambda: GenerateResponse(tool_calls={"id": "c"}),  # type: ignore[arg-type]
    "usage dict": lambda: GenerateResponse(content="x", usage={"total": 5}),  # type: ignore[arg-type]
    "usage str": lambda: GenerateResponse(content="x", usage="lots"),  # type: ignore[arg-type]
    "usage float count": lambda: GenerateResponse(content="x", usage=Usage(prompt=1.5)),  # type: ignore[arg-type]
    "usage bool count": lambda: GenerateResponse(content="x", usage=Usage(total=True)),
    "usage estimated str": lambda: GenerateResponse(content="x", usage=Usage(estimated="yes")),  # type: ignore[arg-type]
    "content int": lambda: GenerateResponse(content=5),  # type: ignore[arg-type]
    "content of str parts": lambda: GenerateResponse(content=["a", "b"]),  # type: ignore[arg-type]
    "content part of wrong type": lambda: GenerateResponse(content=(TextPart(text=5),)),  # type: ignore[arg-type]
    "model int": lambda: GenerateResponse(content="x", model=3),  # type: ignore[arg-type]
    "stop_reason list": lambda: GenerateResponse(content="x", stop_reason=["end"]),  # type: ignore[arg-type]
    "response_id int": lambda: GenerateResponse(content="x", response_id=7),  # type: ignore[arg-type]
    "metadata list": lambda: GenerateResponse(content="x", metadata=[1]),  # type: ignore[arg-type]
    "metadata not JSON": lambda: GenerateResponse(content="x", metadata={"a": object()}),
    "metadata too deep": lambda: GenerateResponse(content="x", metadata=nested(5000)),
    "metadata int key": lambda: GenerateResponse(content="x", metadata={1: "a"}),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("build", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_malformed_response_ends_the_run_with_a_typed_error(
    build: Callable[[], Any],
) -> None:
    """A provider building a response wrongly ends the run with InvalidResponseError,
    and nothing of the response reaches the transcript."""

    async def generate(request: GenerateRequest) -> GenerateResponse:
        response: GenerateResponse = build()
        return response

    conversation = user()
    result, events = await run_events(generate, [add], conversation)
    assert result.finish_reason == "error"
    assert isinstance(result.error, InvalidResponseError), repr(result.error)
    assert [m.role for m in conversation.messages] == ["user"]
    round_trips(conversation.current)
    check_run_invariants(result, events)


@pytest.mark.parametrize("build", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_response_is_refused_where_it_is_built(build: Callable[[], Any]) -> None:
    """The error names the field, at the line that built the response."""
    with pytest.raises(InvalidResponseError, match="malformed GenerateResponse: "):
        build()


async def test_a_well_typed_response_is_kept_as_it_was_built() -> None:
    """Lists become tuples; a mapping becomes a dict; nothing else changes."""
    call = ToolCall(id="c", name="add", arguments={"a": 1, "b": 2})
    response = GenerateResponse(
        content=[TextPart(text="hi")],  # type: ignore[arg-type]
        tool_calls=[call],  # type: ignore[arg-type]
        usage=Usage.of(1, 2),
        model="m",
        metadata={"reasoning": [{"id": "r1"}]},
    )
    assert response.tool_calls == (call,)
    content: object = response.content
    assert content == (TextPart(text="hi"),)
    assert GenerateResponse(tool_calls=(ToolCall(id=None, name="add"),)).tool_calls[0].id is None  # type: ignore[arg-type]


async def test_a_generate_function_returning_a_subclass_is_checked_field_by_field() -> None:
    """A subclass that skips the checks of construction is checked where the loop gets it."""

    class Lenient(GenerateResponse, frozen=True, kw_only=True):
        def __post_init__(self) -> None:
            pass

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return Lenient(content="x", usage="lots")  # type: ignore[arg-type]

    result, _ = await run_events(generate, [add])
    assert isinstance(result.error, InvalidResponseError)
    assert "usage is 'lots'" in str(result.error)


async def test_a_validate_response_hook_returning_a_malformed_response_is_a_hook_error() -> None:
    class Lenient(GenerateResponse, frozen=True, kw_only=True):
        def __post_init__(self) -> None:
            pass

    def rewrite(response: GenerateResponse, request: GenerateRequest) -> GenerateResponse:
        return Lenient(tool_calls=(ToolCall(id=123, name="add"),))  # type: ignore[arg-type]

    result, _ = await run_events(ScriptedModel(["fine"]), [add], validate_response=rewrite)
    assert isinstance(result.error, operative.errors.HookError)
    assert "has id 123" in str(result.error)


async def test_a_bad_response_after_good_turns_leaves_the_session_loadable() -> None:
    """The earlier turns of a conversation stay loadable after a malformed one."""
    conversation = user()
    result, _ = await run_events(ScriptedModel(["first answer"]), [add], conversation)
    assert result.finish_reason == "stop-condition"
    conversation.append_user_message("again")

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(tool_calls=(ToolCall(id=123, name="add"),))  # type: ignore[arg-type]

    result, _ = await run_events(generate, [add], conversation)
    assert isinstance(result.error, InvalidResponseError)
    assert [m.role for m in conversation.messages] == ["user", "assistant", "user"]
    round_trips(conversation.current)


# -- arguments the loop refuses to store --------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(nested(5000), id="5000-deep mapping"),
        pytest.param(nested_text(5000), id="5000-deep JSON text"),
        pytest.param(nested(MAX_JSON_DEPTH + 1), id="one level too deep"),
        pytest.param("[" * 5000, id="5000 unclosed brackets"),
        pytest.param({"a": object()}, id="not JSON"),
        pytest.param({"a": 10**5000}, id="huge int"),
    ],
)
async def test_arguments_that_cannot_be_stored_get_an_error_result(arguments: Any) -> None:
    """The call does not run; the model reads why, and the transcript still loads."""
    ran: list[Any] = []

    @tool
    async def anything(x: Any = None) -> str:
        """Takes anything."""
        ran.append(x)
        return "ran"

    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="c1", name="anything", arguments=arguments),)),
            "done",
        ]
    )
    result, events = await run_events(model, [anything])
    assert result.finish_reason == "stop-condition"
    assert ran == []
    [step, _] = result.steps
    [outcome] = step.results
    assert outcome.outcome == "error"
    assert outcome.error is not None
    assert "did not run" in outcome.error
    [recorded] = step.tool_calls
    assert list(recorded.arguments) == ["operative.refused"]
    assert model.requests[1].conversation.messages[-1].outcome == "error"
    round_trips(result.conversation.current)
    check_run_invariants(result, events)


async def test_arguments_at_the_depth_limit_are_run() -> None:
    seen: list[Any] = []

    @tool
    async def anything(x: Any = None) -> str:
        """Takes anything."""
        seen.append(x)
        return "ran"

    deepest = {"x": nested(MAX_JSON_DEPTH - 1)}
    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="c1", name="anything", arguments=deepest),)),
            "done",
        ]
    )
    result, _ = await run_events(model, [anything])
    assert result.steps[0].results[0].outcome == "success"
    assert len(seen) == 1


def test_json_depth_is_judged_without_recursion() -> None:
    assert not json_too_deep("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert json_too_deep("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    assert json_too_deep(b"[" * 100_000)
    # brackets inside strings do not count, escaped quotes do not end a string
    assert not json_too_deep('["' + "[" * 500 + '"]')
    assert not json_too_deep('["\\"' + "{" * 500 + '", "\\\\"]')
    # wide is fine, however many brackets
    assert not json_too_deep("[" + "[{}]," * 10_000 + "{}]")


async def test_a_streamed_5000_deep_argument_text_is_refused_not_a_recursion_error() -> None:
    """An adapter hands the loop the raw text it cannot parse; the loop refuses it."""
    chunks = [
        StreamChunk(
            delta=Delta(
                kind="tool_arguments", text=nested_text(5000), call_id="c1", tool_name="add"
            )
        )
    ]
    replayer = StreamReplayer(chunks)
    calls = 0

    async def generate(request: GenerateRequest) -> GenerateResponse:
        nonlocal calls
        calls += 1
        return await replayer(request) if calls == 1 else GenerateResponse(content="done")

    result, _ = await run_events(generate, [add])
    assert result.finish_reason == "stop-condition"
    assert result.steps[0].results[0].outcome == "error"
    round_trips(result.conversation.current)


# -- tool values that cannot be sent ------------------------------------------------------


def self_containing() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


UNSENDABLE: dict[str, Callable[[], Any]] = {
    "10**5000": lambda: 10**5000,
    "tuple-keyed dict": lambda: {(1, 2): 3},
    "self-containing list": self_containing,
    "5000-deep dict": lambda: nested(5000),
    "one level too deep": lambda: nested(MAX_JSON_DEPTH + 1),
    "object in a list": lambda: [object()],
}


def unsendable_tool(make: Callable[[], Any]) -> Any:
    @tool
    async def bad() -> Any:
        """Returns something JSON cannot hold."""
        return make()

    return bad


@pytest.mark.parametrize("make", UNSENDABLE.values(), ids=UNSENDABLE.keys())
async def test_a_tool_value_that_cannot_be_sent_is_an_error_result(
    make: Callable[[], Any],
) -> None:
    """agent.run returns a result; the call has an ``error`` result saying why."""
    agent = create_agent(
        generate=ScriptedModel(
            [GenerateResponse(tool_calls=(ToolCall(id="c1", name="bad"),)), "ok"]
        ),
        tools=[unsendable_tool(make)],
    )
    result = await agent.run("go")
    assert result.finish_reason == "stop-condition"
    [outcome] = result.steps[0].results
    assert outcome.outcome == "error"
    assert outcome.error is not None
    assert "cannot be sent to the model" in outcome.error
    round_trips(result.conversation.current)


@pytest.mark.parametrize("make", UNSENDABLE.values(), ids=UNSENDABLE.keys())
async def test_an_unsendable_value_among_concurrent_calls_is_an_error_result(
    make: Callable[[], Any],
) -> None:
    calls = (
        ToolCall(id="c1", name="bad"),
        ToolCall(id="c2", name="add", arguments={"a": 1, "b": 2}),
    )
    model = ScriptedModel([GenerateResponse(tool_calls=calls), "ok"])
    result, events = await run_events(model, [unsendable_tool(make), add])
    assert [r.outcome for r in result.steps[0].results] == ["error", "success"]
    round_trips(result.conversation.current)
    check_run_invariants(result, events)


async def test_an_aborted_step_with_an_unsendable_value_still_ends_with_a_result(
    autojump_clock: Any,
) -> None:
    """The value is checked when the call settles, so clean-up after an abort never
    meets it (it used to raise from the run's clean-up, with no result)."""

    @tool
    async def slow() -> str:
        """Never finishes."""
        await trio.sleep_forever()

    calls = (ToolCall(id="c1", name="bad"), ToolCall(id="c2", name="slow"))
    model = ScriptedModel([GenerateResponse(tool_calls=calls), "ok"])
    async with open_run(
        generate=model, conversation=user(), tools=[unsendable_tool(lambda: 10**5000), slow]
    ) as run:
        await trio.sleep(1)
        run.abort("enough")
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert [r.outcome for r in result.steps[0].results] == ["error", "cancelled"]
    round_trips(result.conversation.current)


# -- durable runs end for good ------------------------------------------------------------


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(
            lambda: [
                GenerateResponse(
                    tool_calls=(ToolCall(id="c1", name="add", arguments=nested(5000)),)
                ),
                "done",
            ],
            id="deep arguments",
        ),
        pytest.param(
            lambda: [GenerateResponse(tool_calls=(ToolCall(id="c1", name="bad"),)), "done"],
            id="deep tool value",
        ),
    ],
)
async def test_a_durable_run_with_unstorable_data_ends_for_good(
    tmp_path: Path, script: Callable[[], list[Any]]
) -> None:
    """The run completes and its record is terminal: nothing is left for recovery."""
    backend = SqliteDurable(tmp_path / "d.db")
    engine, store = backend.engine, backend.checkpoint_store
    agent = create_agent(
        generate=ScriptedModel(script()),
        tools=[add, unsendable_tool(lambda: nested(5000))],
        name="worker",
    )
    async with backend:
        durable = Durable(backend, run_id="r1")
        async with agent.open_run("go", durable=durable) as run:
            result = await run.result()
        record = await engine.get("r1")
        entries = await store.read("r1")
    assert result.finish_reason == "stop-condition", repr(result.error)
    assert result.steps[0].results[0].outcome == "error"
    assert record is not None
    assert record.status == "completed"
    assert record.lease_owner is None
    assert entries


async def test_a_durable_run_with_a_malformed_response_ends_as_an_error_for_good(
    tmp_path: Path,
) -> None:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="x", usage="lots")  # type: ignore[arg-type]

    engine = SqliteEngine(tmp_path / "d.db")
    store = SqliteCheckpointStore(tmp_path / "d.db")
    agent = create_agent(generate=generate, name="worker")
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="r1")
        async with agent.open_run("go", durable=durable) as run:
            result = await run.result()
        record = await engine.get("r1")
    assert result.finish_reason == "error"
    assert isinstance(result.error, InvalidResponseError)
    assert record is not None
    assert record.status not in ("running", "pending")
    assert record.outcome is not None
    assert record.outcome.error_type == "InvalidResponseError"


# -- input histories that no provider accepts ---------------------------------------------


def answered(call_id: str) -> Message:
    return tool_result_message(
        ToolResult(call_id=call_id, tool_name="add", outcome="success", value=3)
    )


def asking(call_id: str) -> Message:
    call = ToolCall(id=call_id, name="add", arguments={"a": 1, "b": 2})
    return Message(id=new_message_id(), role="assistant", tool_calls=(call,))


HI = Message(id="m-hi", role="user", content="hi")

BAD_HISTORIES: dict[str, tuple[list[Message], str]] = {
    "two results for one call": (
        [HI, asking("c1"), answered("c1"), answered("c1")],
        "second result for tool call 'c1'",
    ),
    "a result for no call": ([HI, answered("c9")], "which no earlier assistant message"),
    "a result before its call": (
        [HI, answered("c1"), asking("c1")],
        "which no earlier assistant message",
    ),
    "an unknown role": (
        [Message(id="m-x", role="robot", content="hi")],  # type: ignore[arg-type]
        "unknown role 'robot'",
    ),
    "content of the wrong type": (
        [Message(id="m-x", role="user", content=5)],  # type: ignore[arg-type]
        "content of type int",
    ),
    "a call id that is not a str": (
        [HI, Message(id="m-a", role="assistant", tool_calls=(ToolCall(id=1, name="add"),))],  # type: ignore[arg-type]
        "a call id is a non-empty str",
    ),
}


@pytest.mark.parametrize(("messages", "match"), BAD_HISTORIES.values(), ids=BAD_HISTORIES.keys())
async def test_a_history_no_provider_accepts_is_refused_before_the_run(
    messages: list[Message], match: str
) -> None:
    """open_run and agent.run refuse it with a ConversationError; the model is never called."""
    model = ScriptedModel(["never"])
    history = ConversationHistory(messages=tuple(messages))
    with pytest.raises(ConversationError, match=match):
        async with open_run(generate=model, conversation=history, tools=[add]):
            pass
    agent = create_agent(generate=model, tools=[add])
    with pytest.raises(ConversationError, match=match):
        await agent.run(history)
    with pytest.raises(ConversationError, match=match):
        async with open_run(generate=model, conversation=Conversation(messages), tools=[add]):
            pass
    assert model.requests == []


async def test_a_call_id_reused_in_a_later_turn_with_its_own_result_is_accepted() -> None:
    """Servers that say "call_0" every turn: each turn's call has its own result."""
    messages = (HI, asking("call_0"), answered("call_0"), asking("call_0"), answered("call_0"))
    model = ScriptedModel(["fine"])
    async with open_run(
        generate=model,
        conversation=ConversationHistory(messages=messages),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pass
    assert (await run.result()).finish_reason == "stop-condition"
    assert len(model.requests) == 1


async def test_a_dangling_call_is_answered_not_refused() -> None:
    model = ScriptedModel(["fine"])
    async with open_run(
        generate=model,
        conversation=ConversationHistory(messages=(HI, asking("c1"))),
        tools=[add],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason == "stop-condition"
    sent = model.requests[0].conversation.messages
    assert [(m.role, m.outcome) for m in sent] == [
        ("user", None),
        ("assistant", None),
        ("tool", "cancelled"),
    ]
