"""The ``output_mode`` run option: checked when the run is configured, carried on every
request of the run (the adapters act on it; see tests/providers/test_output_modes.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import operative
from operative import Conversation, create_agent, open_run
from operative.testing import ScriptedModel


class Capital(msgspec.Struct):
    city: str


@pytest.mark.parametrize("mode", ["native", "tool", "prompted", None])
async def test_every_request_carries_the_output_mode(mode: Any) -> None:
    """An agent's ``output_mode`` reaches each step's request (``None`` when unset)."""
    model = ScriptedModel(["not yet", '{"city": "Paris"}'])
    agent = create_agent(generate=model, output=Capital, output_mode=mode, schema_retries=1)
    result = await agent.run("capital?")
    assert result.output == Capital("Paris")
    assert [request.output_mode for request in model.requests] == [mode, mode]
    assert all(request.output_schema is not None for request in model.requests)


async def test_open_run_takes_the_output_mode() -> None:
    """``open_run(output_mode=...)`` as well as agents."""
    model = ScriptedModel(['{"city": "Oslo"}'])
    conversation = Conversation()
    conversation.append_user_message("capital?")
    async with open_run(
        generate=model,
        conversation=conversation,
        output=Capital,
        output_mode="tool",
        stop_when=operative.stop_when.no_tool_calls(),
    ) as run:
        assert await run.output() == Capital("Oslo")
    assert model.requests[0].output_mode == "tool"


@pytest.mark.parametrize("mode", ["json", "Tool", 1])
def test_an_unknown_mode_is_refused(mode: Any) -> None:
    """Only the three modes (or None) are taken, when the agent is defined."""
    with pytest.raises(operative.InvalidArgument, match="'native', 'tool' or 'prompted'"):
        create_agent(generate=ScriptedModel(["x"]), output=Capital, output_mode=mode)


def test_an_output_mode_without_an_output_type_is_refused() -> None:
    """``output_mode`` says how an output is asked for: without ``output=`` it is a
    mistake, said at once."""
    with pytest.raises(operative.InvalidArgument, match="pass output="):
        create_agent(generate=ScriptedModel(["x"]), output_mode="tool")
