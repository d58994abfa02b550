"""create_agent: defaults, input handling, run context, validation, structured output."""

from __future__ import annotations

import inspect
from typing import Any

import attrs
import msgspec
import pytest
import trio

import operative
import operative.conversation
import operative.liveness
import operative.tools
from operative import (
    AgentRunContext,
    Conversation,
    GenerateRequest,
    GenerateResponse,
    RunnableAgent,
    TextPart,
    Toolbox,
    ToolCall,
    create_agent,
    stop_when,
    tool,
)
from operative.testing import ScriptedModel


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def echo(request: GenerateRequest) -> GenerateResponse:
    last = request.conversation.messages[-1]
    return GenerateResponse(content=f"Echo: {last.text}")


async def test_quick_start_echo() -> None:
    """The specification's quick start: one step, stop-condition, echoed content."""
    agent = create_agent(generate=echo, instructions="You are a helpful assistant.")
    result = await agent.run("Hello, agent!")
    assert result.content == "Echo: Hello, agent!"
    assert result.finish_reason == "stop-condition"
    assert [m.role for m in result.conversation.messages] == ["system", "user", "assistant"]
    assert agent.name == "(agent)"
    assert not agent.has_output
    assert isinstance(agent, RunnableAgent)


async def test_history_input_gets_no_instructions_and_is_not_mutated() -> None:
    """A ConversationHistory input is snapshotted; instructions are not re-appended."""
    seed = Conversation()
    seed.append_system_message("from the host")
    seed.append_user_message("hi")
    history = seed.current
    agent = create_agent(generate=echo, instructions="ignored for histories")
    result = await agent.run(history)
    assert [m.role for m in result.conversation.messages] == ["system", "user", "assistant"]
    assert result.conversation.messages[0].text == "from the host"
    assert len(history.messages) == 2


async def test_multimodal_input() -> None:
    """A list of content parts becomes one multi-modal user message."""
    agent = create_agent(generate=echo)
    result = await agent.run([TextPart(text="look"), TextPart(text=" here")])
    assert result.content == "Echo: look here"


async def test_default_stop_is_no_tool_calls_and_tools_run() -> None:
    """With tools and no stop_when, the agent stops on the first plain answer."""
    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="1", name="find", arguments={"key": "a"}),)),
            "A it is",
        ]
    )
    agent = create_agent(generate=model, tools={"find": lookup})
    assert [spec.name for spec in agent.toolbox.specs()] == ["find"]
    result = await agent.run("find a")
    assert result.steps[0].results[0].value == "A"
    assert result.content == "A it is"


async def test_run_context_overrides_name_and_forwards_principal() -> None:
    """AgentRunContext overrides the stamped agent name and forwards the principal."""
    seen: list[Any] = []
    agent = create_agent(
        generate=echo, name="helper", on_run_start=lambda ctx: seen.append(ctx.principal)
    )
    names: list[str] = []
    async with agent.open_run(
        "hi", context=AgentRunContext(agent_name="helper-7", principal={"user": "ann"})
    ) as run:
        run.add_listener("run.started", lambda event: names.append(event.agent_name))
    assert names == ["helper-7"]
    assert seen == [{"user": "ann"}]


async def test_runs_of_one_agent_are_independent() -> None:
    """Concurrent runs of one agent share nothing but the definition."""
    agent = create_agent(generate=echo)
    results: list[str] = []

    async def one(text: str) -> None:
        results.append((await agent.run(text)).content)

    async with trio.open_nursery() as nursery:
        for text in ("a", "b", "c"):
            nursery.start_soon(one, text)
    assert sorted(results) == ["Echo: a", "Echo: b", "Echo: c"]


def test_create_agent_validates_eagerly() -> None:
    """Conflicting or bad options fail at create_agent, with a message saying what to do."""
    toolbox = Toolbox([lookup])
    with pytest.raises(operative.InvalidArgument, match="not both"):
        create_agent(generate=echo, tools=[lookup], toolbox=toolbox)
    with pytest.raises(operative.InvalidArgument, match="permissions"):
        create_agent(generate=echo, toolbox=toolbox, permissions=operative.tools.PermissionPolicy())
    with pytest.raises(operative.InvalidArgument, match="maximum_steps"):
        create_agent(generate=echo, maximum_steps=0)
    with pytest.raises(operative.InvalidArgument, match="generate"):
        create_agent(generate="gpt")  # type: ignore[arg-type]
    with pytest.raises(operative.InvalidArgument, match=r"a model setting: pass settings="):
        create_agent(generate=echo, temperature=0.2)  # type: ignore[call-arg]
    with pytest.raises(operative.InvalidArgument, match="run_id"):
        create_agent(generate=echo, run_id="x")


async def test_bad_input_type() -> None:
    """Agent input that is neither text, parts nor a history is refused."""
    agent = create_agent(generate=echo)
    with pytest.raises(operative.InvalidArgument, match="agent input"):
        await agent.run(42)  # type: ignore[arg-type]


async def test_run_is_a_coroutine_function_that_checks_its_input() -> None:
    """``agent.run`` is an ``async def`` (for ``await`` and for ``start_soon``); bad input
    is refused when it runs, before the model is called."""
    calls: list[int] = []

    async def counting(request: GenerateRequest) -> GenerateResponse:
        calls.append(request.step)
        return GenerateResponse(content="ok")

    assert inspect.iscoroutinefunction(operative.Agent.run)
    for agent in (
        create_agent(generate=counting),
        create_agent(generate=counting, instructions="brief", tools=[lookup]),
        create_agent(
            generate=counting, stall_policy=operative.liveness.StallPolicy(stall_after=30)
        ),
    ):
        with pytest.raises(operative.InvalidArgument, match="agent input"):
            await agent.run(42)  # type: ignore[arg-type]
        assert calls == []
        result = await agent.run("hello")
        assert result.content == "ok"
        assert calls == [1]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.run, "again")
        assert calls == [1, 1]
        calls.clear()


class Weather(msgspec.Struct):
    city: str
    high_c: int


@attrs.frozen
class Verdict:
    approved: bool
    reason: str


async def test_structured_output_success() -> None:
    """A valid JSON answer becomes result.output; the schema is offered to the model."""
    model = ScriptedModel(['```json\n{"city": "Oslo", "high_c": 21}\n```'])
    agent = create_agent(generate=model, output=Weather)
    assert agent.has_output
    async with agent.open_run("weather?") as run:
        output = await run.output()
    assert output == Weather(city="Oslo", high_c=21)
    result = await run.result()
    assert result.schema_validation is not None
    assert result.schema_validation.success
    schema = model.requests[0].output_schema
    assert schema is not None
    assert "Weather" in str(schema)


async def test_structured_output_retries_with_the_error() -> None:
    """An invalid answer is sent back with the validation error, then accepted."""
    model = ScriptedModel(['{"approved": "yes"}', '{"approved": true, "reason": "fine"}'])
    agent = create_agent(generate=model, output=Verdict, schema_retries=1)
    result = await agent.run("decide")
    assert result.output == Verdict(approved=True, reason="fine")
    assert result.schema_validation is not None
    assert result.schema_validation.attempts == 2
    feedback = model.requests[1].conversation.messages[-1]
    assert feedback.role == "user"
    assert "did not match" in feedback.text


async def test_structured_output_gives_up_after_retries() -> None:
    """When retries run out the run still stops; output() raises with the reason."""
    model = ScriptedModel(["not json", "still not json"])
    agent = create_agent(generate=model, output=Weather, schema_retries=1)
    async with agent.open_run("weather?") as run:
        with pytest.raises(operative.OutputValidationError, match="not valid JSON"):
            await run.output()
    result = await run.result()
    assert result.finish_reason == "stop-condition"
    assert result.output is None
    assert result.schema_validation is not None
    assert not result.schema_validation.success
    assert model.calls == 2


async def test_output_without_output_type() -> None:
    """output() on a run without an output type says how to get one."""
    agent = create_agent(generate=echo)
    async with agent.open_run("x") as run:
        with pytest.raises(operative.InvalidArgument, match="output="):
            await run.output()


def test_unschemable_output_type_is_refused() -> None:
    """An output type msgspec cannot describe fails at create_agent."""

    class Opaque:
        pass

    with pytest.raises(operative.InvalidArgument, match="output="):
        create_agent(generate=echo, output=Opaque)


async def test_stop_when_list_on_agent() -> None:
    """Park-on-approval style stop lists are accepted by create_agent."""
    agent = create_agent(
        generate=echo, stop_when=[stop_when.pending_approval(), stop_when.no_tool_calls()]
    )
    assert len(agent.stop_when) == 2
    assert (await agent.run("x")).finish_reason == "stop-condition"


async def test_runs_of_one_agent_get_their_own_id_and_transcript() -> None:
    """An agent's runs share its validated configuration, never their state."""
    agent = create_agent(generate=echo, instructions="Be brief.", name="echoer")
    first, second = await agent.run("one"), await agent.run("two")
    assert first.run_id
    assert first.run_id != second.run_id
    assert [m.text for m in first.conversation.messages] == ["Be brief.", "one", "Echo: one"]
    assert [m.text for m in second.conversation.messages] == ["Be brief.", "two", "Echo: two"]


async def test_agent_run_refuses_a_broken_history_before_the_model_is_called() -> None:
    """A history given to ``agent.run`` is checked as ``open_run`` checks it."""
    calls: list[GenerateRequest] = []

    async def model(request: GenerateRequest) -> GenerateResponse:
        calls.append(request)
        return GenerateResponse(content="never")

    history = operative.ConversationHistory(
        messages=(
            operative.Message(id="u", role="user", content="hi"),
            operative.Message(id="t", role="tool", content="orphan", tool_call_id="nope"),
        )
    )
    agent = create_agent(generate=model)
    with pytest.raises(operative.conversation.ConversationError, match="nope"):
        await agent.run(history)
    assert calls == []
