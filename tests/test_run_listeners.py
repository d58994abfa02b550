"""once() and remove_listener() beside add_listener's remover, on ActiveRun and lazy runs."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import operative
from operative import (
    Agent,
    Conversation,
    GenerateResponse,
    RunHandle,
    ToolCall,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative._lazy._agent import create_lazy_agent
from operative.testing import ScriptedModel


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


def _model(steps: int) -> ScriptedModel:
    def respond(request: operative.GenerateRequest) -> GenerateResponse:
        if request.step < steps:
            return GenerateResponse(
                tool_calls=(ToolCall(id=f"c{request.step}", name="ping", arguments={}),)
            )
        return GenerateResponse(content="done")

    return ScriptedModel(respond)


def _run(steps: int = 3) -> Any:
    conversation = Conversation()
    conversation.append_user_message("go")
    return open_run(
        generate=_model(steps),
        conversation=conversation,
        tools=[ping],
        stop_when=stop_when.no_tool_calls(),
    )


def _agent(steps: int = 3) -> Agent:
    return create_agent(generate=_model(steps), tools=[ping], name="pinger")


async def test_once_hears_only_the_first_event_of_its_type() -> None:
    """A once listener is called for the first step.completed only; a plain one for all."""
    first: list[int] = []
    every: list[int] = []
    async with _run(steps=3) as run:
        run.once("step.completed", lambda event: first.append(event.step))
        run.add_listener("step.completed", lambda event: every.append(event.step))
    assert first == [1]
    assert every == [1, 2, 3]
    assert run.statistics()["listener_errors"] == 0


async def test_once_for_every_event_hears_run_started_only() -> None:
    heard: list[str] = []
    async with _run(steps=1) as run:
        run.once("*", lambda event: heard.append(event.type))
    assert heard == ["run.started"]


async def test_remove_listener_detaches_plain_and_once_listeners() -> None:
    """remove_listener(type, listener) removes an add_listener or a once registration."""
    plain: list[int] = []
    once: list[int] = []

    def hear_plain(event: Any) -> None:
        plain.append(event.step)
        if event.step == 2:
            run.remove_listener("step.completed", hear_plain)

    def hear_once(event: Any) -> None:
        once.append(event.step)

    async with _run(steps=3) as run:
        run.add_listener("step.completed", hear_plain)
        run.once("step.completed", hear_once)
        run.remove_listener("step.completed", hear_once)  # before it ever fired
        run.remove_listener("step.completed", print)  # never added: ignored
    assert plain == [1, 2]
    assert once == []


async def test_once_remover_and_removing_one_registration() -> None:
    """once returns a remover; a listener added twice loses one registration at a time."""
    heard: list[int] = []

    def hear(event: Any) -> None:
        heard.append(event.step)

    async with _run(steps=2) as run:
        remove = run.once("step.completed", print)
        remove()
        run.add_listener("step.completed", hear)
        run.add_listener("step.completed", hear)
        run.remove_listener("step.completed", hear)
    assert heard == [1, 2]


async def test_remove_listener_checks_its_arguments() -> None:
    async with _run(steps=1) as run:
        with pytest.raises(operative.InvalidArgument, match="unknown event type"):
            run.remove_listener("step.complete", print)
        with pytest.raises(operative.InvalidArgument, match="unknown event type"):
            run.once("step.complete", print)
        with pytest.raises(operative.InvalidArgument, match="callable"):
            run.once("step.completed", "not a function")


async def test_lazy_run_remove_listener_after_the_load(
    autojump_clock: trio.testing.MockClock,
) -> None:
    heard: list[int] = []

    def hear(event: Any) -> None:
        heard.append(event.step)
        run.remove_listener("step.completed", hear)

    async def loader() -> Agent:
        return _agent(steps=3)

    lazy = create_lazy_agent(loader, name="pinger")
    async with lazy.open_run("go") as run:
        run.add_listener("step.completed", hear)
    assert heard == [1]


async def test_lazy_run_once_hears_the_terminal_event_of_an_early_abort(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def loader() -> Agent:
        await trio.sleep(10)
        return _agent()

    lazy = create_lazy_agent(loader, name="pinger")
    heard: list[str] = []
    opening = lazy.open_run("go")
    opening.abort("the user left")
    async with opening as run:
        run.once("run.aborted", lambda event: heard.append(event.reason))
        assert isinstance(run, RunHandle)
    assert heard == ["the user left"]
