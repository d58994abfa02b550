"""What leaves an ``open_session`` block: the block's own exception, as itself."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from operative import create_agent
from operative.sessions import MonitorResult, SessionStore, open_session
from operative.testing import ScriptedModel


async def test_an_error_raised_in_the_block_propagates_unwrapped(sessions: SessionStore) -> None:
    """A ValueError raised in the block comes out as that ValueError, not in a group."""
    raised = ValueError("the caller's own error")
    with pytest.raises(ValueError, match="the caller's own error") as caught:
        async with open_session("s", store=sessions, agent_name="a"):
            raise raised
    assert caught.value is raised


async def test_keyboard_interrupt_in_the_block_propagates_as_itself(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Ctrl-C in the block is a KeyboardInterrupt outside it, after the session's tasks end."""
    agent = create_agent(generate=ScriptedModel(lambda request: "fine"), name="w")
    done: list[MonitorResult] = []
    with pytest.raises(KeyboardInterrupt):
        async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
            handle.start_monitor(every="PT1M", input="ok?", on_done=done.append)
            await trio.sleep(90)
            raise KeyboardInterrupt
    assert done == []  # the monitor was cancelled (and waited for) before it propagated
    stored = await sessions.load("s")
    assert stored is not None
    assert len(stored.runs) == 2
    assert all(ref.outcome is not None for ref in stored.runs)


async def test_a_failing_session_task_and_a_failing_block_are_both_raised(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Only when a task of the session failed too does the block's error come in a group."""
    agent = create_agent(generate=ScriptedModel(lambda request: "fine"), name="w")

    def until(result: object) -> bool:
        raise LookupError("the monitor's until= broke")

    with pytest.RaisesGroup(LookupError, ValueError):
        async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
            handle.start_monitor(every="PT1M", input="ok?", until=until)
            try:
                await trio.sleep_forever()
            finally:
                # Cancelled by the failing monitor; the block fails on its way out.
                raise ValueError("the block's cleanup failed")


async def test_a_failing_session_task_alone_is_raised_as_before(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A task of the session that fails cancels the block and is raised in the group."""
    agent = create_agent(generate=ScriptedModel(lambda request: "fine"), name="w")

    def until(result: object) -> bool:
        raise LookupError("the monitor's until= broke")

    with pytest.RaisesGroup(LookupError):
        async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
            handle.start_monitor(every="PT1M", input="ok?", until=until)
            await trio.sleep_forever()
