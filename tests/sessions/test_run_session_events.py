"""``session.loaded`` / ``session.saved`` reach the events of a run the session owns, as
well as the handle's listeners."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio.testing

from operative import create_agent
from operative.sessions import SessionStore, open_session
from operative.testing import ScriptedModel


class Watching:
    """An agent wrapper a host might write: it watches each run as it opens."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.name = agent.name
        self.has_output = False
        self.heard: list[Any] = []
        self.streams: list[Any] = []

    async def run(self, input: Any, *, context: Any = None) -> Any:
        raise NotImplementedError

    @asynccontextmanager
    async def open_run(self, input: Any, *, context: Any = None) -> AsyncIterator[Any]:
        async with self._agent.open_run(input, context=context) as run:
            run.add_listener("session.saved", self.heard.append)
            run.add_listener("session.loaded", self.heard.append)
            self.streams.append(aiter(run.events()))  # subscribed now, read later
            yield run


async def test_a_session_runs_events_carry_its_session_loaded_and_saved(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    agent = Watching(create_agent(generate=ScriptedModel(["Hello!"]), name="helper"))
    on_handle: list[Any] = []
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        handle.add_listener("session.saved", on_handle.append)
        result = await handle.run("Hi")
    run_id = result.run_id
    streamed = [event async for event in agent.streams[0]]
    types = [event.type for event in streamed]
    # Before the run's first event: the session it starts from and its reservation.
    assert types[:3] == ["session.loaded", "session.saved", "run.started"]
    assert all(event.run_id == run_id for event in streamed[:2])
    loaded = streamed[0]
    assert (loaded.session_id, loaded.is_new, loaded.message_count) == ("s", False, 1)
    # The listeners also hear the terminal write, stored after the run's terminal event.
    assert [(event.type, getattr(event, "outcome", None)) for event in agent.heard] == [
        ("session.loaded", None),
        ("session.saved", None),
        ("session.saved", "stop-condition"),
    ]
    # The handle's listeners hear the same writes.
    assert [(event.run_id, event.outcome) for event in on_handle] == [
        (run_id, None),
        (run_id, "stop-condition"),
    ]
