"""``closed()`` of a recovered session turn, and of the session: the cleanup
acknowledgement waits for the terminal session commit and fails when that commit did."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from operative import CleanupError
from operative.kvstore import MemoryStore
from operative.sessions import (
    SessionHandle,
    SessionPersistenceError,
    SessionStore,
    create_session_store,
    open_session,
)
from operative.sessions._durable import RecoveredRun

from ._sessions import cut_turn
from .conftest import DurableDb
from .test_durable_runs import make_agent, until
from .test_session_recover import FailingWrites


@asynccontextmanager
async def _recovering(
    sessions: SessionStore, engine: Any, store: Any, gate: trio.Event
) -> AsyncIterator[tuple[SessionHandle, RecoveredRun]]:
    """A session whose cut turn ``recover()`` resumed; its tool parks until ``gate``."""
    executions: Counter[str] = Counter()
    async with open_session(
        "s",
        store=sessions,
        agent_name="worker",
        agent=make_agent([["idem"], []], executions, gate),
        engine=engine,
        checkpoint_store=store,
    ) as handle:
        recovered = await handle.recover()
        assert recovered is not None
        await until(lambda: executions)
        yield handle, recovered


async def test_closed_waits_for_the_recovered_turns_stored_outcome(sqlite_db: DurableDb) -> None:
    sessions = create_session_store(MemoryStore())
    gate = trio.Event()
    async with sqlite_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        run_id = await cut_turn(sessions, backend)
        async with _recovering(sessions, engine, store, gate) as (handle, recovered):
            with trio.move_on_after(0.05) as waited:
                await handle.closed()  # the run is parked: no commit yet
            assert waited.cancelled_caught
            gate.set()
            await handle.closed()
            stored = await sessions.load("s")
            assert stored is not None
            ref = stored.run(run_id)
            assert ref is not None
            assert ref.outcome is not None  # stored by the time closed() returned
            await recovered.closed()  # acknowledged again, at once


async def test_a_failed_session_commit_is_a_failed_acknowledgement(sqlite_db: DurableDb) -> None:
    kv = FailingWrites()
    sessions = create_session_store(kv)
    gate = trio.Event()
    async with sqlite_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        run_id = await cut_turn(sessions, backend)
        async with _recovering(sessions, engine, store, gate) as (handle, recovered):
            kv.failing = True
            gate.set()
            with pytest.raises(CleanupError) as closed:
                await recovered.closed()
            with pytest.raises(CleanupError):
                await handle.closed()
            with pytest.raises(SessionPersistenceError):
                await recovered.result()
            kv.failing = False
    assert closed.value.run_id == run_id
    assert isinstance(closed.value.__cause__, SessionPersistenceError)
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome is None  # open: a later recover() settles it
