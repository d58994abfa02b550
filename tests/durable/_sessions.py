"""A session turn left open by a process that shut down: what recovery and cancel meet."""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio

from operative.sessions import SessionStore, open_session

from .test_durable_runs import make_agent, until


async def cut_turn(sessions: SessionStore, backend: Any) -> str:
    """A turn of session ``s`` whose process shut down mid-call (its ``RunRef`` stays
    open, its durable run ``running`` and unleased); returns its run id."""
    executions: Counter[str] = Counter()
    with trio.CancelScope() as scope:
        async with (
            open_session(
                "s",
                store=sessions,
                agent_name="worker",
                agent=make_agent([["idem"], []], executions, trio.Event()),
                durable=backend,
            ) as handle,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(handle.run, "hello")
            await until(lambda: executions)
            scope.cancel()
    stored = await sessions.load("s")
    assert stored is not None
    return stored.runs[-1].run_id
