"""A truncated answer is visible: the provider's stop reason reaches the step, its
events, the run's result and the durable journal, and a stop condition can act on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent, stop_when, tool
from operative.durable import Durable, SqliteDurable, replay_journal


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def _model(stop_reasons: list[str | None]) -> Any:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        reason = stop_reasons[request.step - 1]
        if reason == "tool_calls":
            call = ToolCall(id=f"c{request.step}", name="lookup", arguments={"key": "k"})
            return GenerateResponse(tool_calls=(call,), stop_reason=reason)
        return GenerateResponse(content=f"answer {request.step}", stop_reason=reason)

    return generate


async def test_the_stop_reason_reaches_steps_events_and_the_result() -> None:
    """Each step and its step.generated / step.completed events carry the provider's
    stop reason; a ``length`` answer reads as truncated."""
    agent = create_agent(generate=_model(["tool_calls", "length"]), tools=[lookup])
    events: list[Any] = []
    async with agent.open_run("go") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert [step.stop_reason for step in result.steps] == ["tool_calls", "length"]
    assert [step.truncated for step in result.steps] == [False, True]
    assert result.stop_reason == "length"
    assert result.truncated
    generated = [e.stop_reason for e in events if e.type == "step.generated"]
    completed = [e.stop_reason for e in events if e.type == "step.completed"]
    assert generated == completed == ["tool_calls", "length"]


@pytest.mark.parametrize("reason", ["length", "max_tokens", "MAX_TOKENS", "max_output_tokens"])
async def test_stop_when_truncated_ends_the_run_at_a_cut_answer(reason: str) -> None:
    """``stop_when.truncated()`` stops after the step the provider cut, whatever its
    provider calls the token limit; the model is not asked again."""
    calls: list[int] = []
    model = _model([reason, None, None])

    async def counted(request: GenerateRequest) -> GenerateResponse:
        calls.append(request.step)
        response: GenerateResponse = await model(request)
        return response

    agent = create_agent(
        generate=counted, stop_when=[stop_when.truncated(), stop_when.step_count_is(3)]
    )
    result = await agent.run("go")
    assert calls == [1]
    assert result.finish_reason == "stop-condition"
    assert result.truncated


async def test_a_complete_answer_is_not_truncated() -> None:
    """A provider that says nothing, or ``stop``, is not truncated."""
    result = await create_agent(generate=_model(["stop"])).run("go")
    assert result.stop_reason == "stop"
    assert not result.truncated
    silent = await create_agent(generate=_model([None])).run("go")
    assert silent.stop_reason is None
    assert not silent.truncated


async def test_the_stop_reason_survives_the_durable_journal(tmp_path: Path) -> None:
    """A recovered run knows why each journaled answer ended."""
    agent = create_agent(generate=_model(["tool_calls", "length"]), tools=[lookup], name="w")
    path = tmp_path / "runs.db"
    async with SqliteDurable(path) as backend:
        durable = Durable(backend, run_id="r")
        async with agent.open_run("go", durable=durable) as run:
            await run.result()
        replay = replay_journal("r", await backend.checkpoint_store.read("r"))
    assert [step.stop_reason for step in replay.steps] == ["tool_calls", "length"]
