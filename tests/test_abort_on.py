"""abort_on=: the caller's per-run abort signal (the specification's ``signal`` option)."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from operative import (
    AgentRunContext,
    Conversation,
    FinishReason,
    InvalidArgument,
    create_agent,
    open_run,
)
from operative._lazy._agent import create_lazy_agent
from operative.testing import ScriptedModel


async def slow(request: Any) -> str:
    """A model call that takes ten seconds."""
    await trio.sleep(10)
    return "late"


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("go")
    return conversation


async def test_an_event_aborts_the_run(autojump_clock: trio.testing.MockClock) -> None:
    """Setting the event ends the run as aborted, with a reason naming abort_on=."""
    stop = trio.Event()
    heard: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_set_after, stop, 3)
        async with open_run(
            generate=ScriptedModel(slow), conversation=_conversation(), abort_on=stop
        ) as run:
            run.add_listener("run.aborted", lambda event: heard.append(event.reason))
        result = await run.result()
    assert result.finish_reason is FinishReason.ABORTED
    assert result.abort_reason == "the run's abort_on= signal fired"
    assert heard == ["the run's abort_on= signal fired"]
    assert trio.current_time() == pytest.approx(3)


async def _set_after(event: trio.Event, seconds: float) -> None:
    await trio.sleep(seconds)
    event.set()


async def test_an_unset_signal_never_outlives_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run that completes leaves at once: the watcher ends with the run."""
    never = trio.Event()
    async with open_run(
        generate=ScriptedModel(slow), conversation=_conversation(), maximum_steps=1, abort_on=never
    ) as run:
        pass
    assert (await run.result()).finish_reason is FinishReason.MAXIMUM_STEPS
    assert trio.current_time() == pytest.approx(10)


async def test_an_already_set_event_aborts_before_any_step(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stop = trio.Event()
    stop.set()
    async with open_run(
        generate=ScriptedModel(slow), conversation=_conversation(), abort_on=stop
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.ABORTED
    assert result.steps == ()
    assert trio.current_time() == 0


async def test_an_async_function_and_an_awaitable(autojump_clock: trio.testing.MockClock) -> None:
    async def in_two_seconds() -> None:
        await trio.sleep(2)

    async with open_run(
        generate=ScriptedModel(slow), conversation=_conversation(), abort_on=in_two_seconds
    ) as run:
        pass
    assert (await run.result()).finish_reason is FinishReason.ABORTED
    assert trio.current_time() == pytest.approx(2)

    async def in_one_second() -> None:
        await trio.sleep(1)

    awaitable = in_one_second()  # a coroutine object: awaited once, by the run
    async with open_run(
        generate=ScriptedModel(slow), conversation=_conversation(), abort_on=awaitable
    ) as run:
        pass
    assert (await run.result()).finish_reason is FinishReason.ABORTED
    assert trio.current_time() == pytest.approx(3)


async def test_a_failing_signal_aborts_with_the_failure_as_the_reason(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def broken() -> None:
        await trio.sleep(1)
        raise ConnectionError("the control channel closed")

    async with open_run(
        generate=ScriptedModel(slow), conversation=_conversation(), abort_on=broken
    ) as run:
        pass
    result = await run.result()
    assert result.finish_reason is FinishReason.ABORTED
    assert result.abort_reason is not None
    assert "ConnectionError: the control channel closed" in result.abort_reason


async def test_agent_run_and_context_take_abort_on(autojump_clock: trio.testing.MockClock) -> None:
    """agent.run(abort_on=), agent.open_run(abort_on=) and AgentRunContext.abort_on."""
    agent = create_agent(generate=ScriptedModel(slow))
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_set_after, stop, 1)
        result = await agent.run("go", abort_on=stop)
    assert result.finish_reason is FinishReason.ABORTED

    result = await agent.run("go", context=AgentRunContext(abort_on=stop))
    assert result.finish_reason is FinishReason.ABORTED
    async with agent.open_run("go", abort_on=stop) as run:
        pass
    assert (await run.result()).finish_reason is FinishReason.ABORTED

    lazy = create_lazy_agent(lambda: agent, name="late")
    result = await lazy.run("go", context=AgentRunContext(abort_on=stop))
    assert result.finish_reason is FinishReason.ABORTED
    assert trio.current_time() == pytest.approx(1)


async def test_abort_on_is_checked_and_per_run() -> None:
    with pytest.raises(InvalidArgument, match=r"abort_on= takes a trio\.Event"):
        async with open_run(
            generate=ScriptedModel(slow), conversation=_conversation(), abort_on=True
        ):
            pass
    with pytest.raises(InvalidArgument, match="abort_on= is per run"):
        create_agent(generate=ScriptedModel(slow), abort_on=trio.Event())


async def test_a_lazy_agent_aborted_before_it_loads_never_runs_the_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The signal fires while the definition loads: the loaded agent is never run."""
    model = ScriptedModel(slow)
    agent = create_agent(generate=model)

    async def loader() -> Any:
        await trio.sleep(5)
        return agent

    lazy = create_lazy_agent(loader, name="late")
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_set_after, stop, 1)
        result = await lazy.run("go", abort_on=stop)
    assert result.finish_reason is FinishReason.ABORTED
    assert result.abort_reason == "the run's abort_on= signal fired"
    assert model.calls == 0
    assert trio.current_time() == pytest.approx(1)


async def test_a_lazy_agent_forwards_a_one_shot_awaitable_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A coroutine is awaited once, by the lazy run; the loaded run watches its event."""
    agent = create_agent(generate=ScriptedModel(slow))

    async def in_two_seconds() -> None:
        await trio.sleep(2)

    lazy = create_lazy_agent(lambda: agent, name="late")
    result = await lazy.run("go", context=AgentRunContext(abort_on=in_two_seconds()))
    assert result.finish_reason is FinishReason.ABORTED
    assert result.abort_reason == "the run's abort_on= signal fired"
    assert trio.current_time() == pytest.approx(2)
