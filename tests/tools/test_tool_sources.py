"""Tool sources in ``tools=``: read when each run starts, offered beside ordinary tools."""

from __future__ import annotations

from typing import Any

import pytest

from operative import (
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    Tool,
    ToolCall,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative._core._control import RunControl
from operative.extending import Extension
from operative.testing import ScriptedModel
from operative.tools import ToolDefinitionError, ToolSource


@tool
async def local(x: int) -> int:
    """A tool of the process."""
    return x + 1


class Source:
    """A tool source whose tools can change between runs."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.reads = 0

    async def list_tools(self) -> list[Tool]:
        self.reads += 1
        tools = []
        for name in self.names:

            async def remote(text: str, _name: str = name) -> str:
                return f"{_name}: {text}"

            tools.append(Tool(remote, name=name, description=f"remote {name}"))
        return tools


def test_a_source_is_a_tool_source() -> None:
    assert isinstance(Source(), ToolSource)
    assert not isinstance(local, ToolSource)


async def test_a_source_in_tools_is_read_when_the_run_starts_and_its_tools_run() -> None:
    source = Source("echo")
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="echo", arguments={"text": "hi"}),)
            ),
            "done",
        ]
    )
    async with open_run(
        generate=model,
        conversation=_history(),
        tools=[local, source],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.STOP_CONDITION
    assert [spec.name for spec in model.requests[0].tools] == ["local", "echo"]
    assert result.steps[0].results[0].value == "echo: hi"
    assert source.reads == 1


async def test_an_agent_reads_its_sources_again_for_each_run() -> None:
    source = Source("first")
    model = ScriptedModel(["one", "two"])
    agent = create_agent(generate=model, tools=[source])
    await agent.run("hello")
    source.names = ["second"]
    await agent.run("hello again")
    assert [[s.name for s in r.tools] for r in model.requests] == [["first"], ["second"]]
    assert source.reads == 2


async def test_a_source_tool_named_like_a_local_tool_ends_the_run_with_a_clear_error() -> None:
    async with open_run(
        generate=ScriptedModel(["never"]), conversation=_history(), tools=[local, Source("local")]
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.ERROR
    assert isinstance(result.error, ToolDefinitionError)
    assert "'local'" in str(result.error)


async def test_a_source_that_cannot_list_its_tools_fails_the_run_before_any_model_call() -> None:
    class Broken:
        async def list_tools(self) -> list[Tool]:
            raise ConnectionError("the server went away")

    model = ScriptedModel(["never"])
    async with open_run(generate=model, conversation=_history(), tools=[Broken()]) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.ERROR
    assert isinstance(result.error, ConnectionError)
    assert model.requests == []


async def test_reading_sources_does_not_wrap_the_generate_function_twice() -> None:
    wraps: list[str] = []

    class Wrapping(Extension):
        def wrap_generate(self, run: RunControl, generate: Any) -> Any:
            wraps.append("wrap")

            async def wrapped(request: GenerateRequest) -> GenerateResponse:
                response: GenerateResponse = await generate(request)
                return response

            return wrapped

    class Feature:
        def extension(self, config: Any) -> Extension:
            return Wrapping()

    async with open_run(
        generate=ScriptedModel(["ok"]),
        conversation=_history(),
        tools=[Source("echo")],
        extensions=[Feature()],
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pass
    assert (await run.result()).finish_reason is not FinishReason.ERROR
    assert wraps == ["wrap"]


def test_tool_sources_option_refuses_what_is_not_a_source() -> None:
    with pytest.raises(InvalidArgument, match="list_tools"):
        create_agent(generate=ScriptedModel(["x"]), tool_sources=[object()])


def _history() -> Any:
    from operative import Conversation

    conversation = Conversation()
    conversation.append_user_message("hello")
    return conversation
