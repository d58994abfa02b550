"""Signals and cancellation: a wait either receives a signal or is cancelled, never both."""

from __future__ import annotations

import trio
import trio.testing

from operative import create_agent
from operative.sessions import SessionStore, open_session
from operative.testing import ScriptedModel


async def test_a_wait_cancelled_before_a_delivery_raises_and_receives_nothing(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A delivery that comes after the wait's cancellation (before the waiting task runs
    again) reaches nobody: signal() says so, and the wait raises Cancelled."""
    agent = create_agent(generate=ScriptedModel([]), name="helper")
    got: list[object] = []
    scope = trio.CancelScope()
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:

        async def wait() -> None:
            with scope:
                got.append(await handle.wait_for_signal("go"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert handle.snapshot().status == "waiting"
            scope.cancel()
            delivered = handle.signal("go", "approved")  # the waiter has not run since
        assert handle.snapshot().status != "waiting"
    assert delivered is False
    assert got == []
    assert scope.cancelled_caught


async def test_a_delivery_before_the_cancellation_is_received(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A wait delivered to before its scope is cancelled returns the payload; the
    cancellation then takes effect at the waiter's next checkpoint."""
    agent = create_agent(generate=ScriptedModel([]), name="helper")
    got: list[object] = []
    after: list[str] = []
    scope = trio.CancelScope()
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:

        async def wait() -> None:
            with scope:
                got.append(await handle.wait_for_signal("go"))
                after.append("returned")
                await trio.lowlevel.checkpoint()
                after.append("not reached")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            delivered = handle.signal("go", "approved")
            scope.cancel()
    assert delivered is True
    assert got == ["approved"]
    assert after == ["returned"]
    assert scope.cancelled_caught
