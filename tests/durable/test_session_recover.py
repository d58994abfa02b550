"""``SessionHandle.recover()`` looks at every open turn, returns ``None`` when nothing can
be resumed, raises ``LeaseHeldError`` when another worker holds the turn, and reports
each failure as a ``session.recover`` event."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from operative.kvstore import MemoryStore, Operation
from operative.sessions import (
    LeaseHeldError,
    RunOutcome,
    SessionRecoverFailed,
    create_session_store,
    open_session,
)

from ._sessions import cut_turn
from .conftest import DurableDb
from .test_durable_runs import make_agent


class FailingWrites(MemoryStore):
    """A memory store whose writes fail once ``failing`` is set."""

    failing = False

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        if self.failing:
            raise OSError("the session store is down")
        return await super().conditional_batch(operations)


class Unopenable:
    """An agent whose runs fail to open (the resumed run never starts)."""

    name = "worker"
    has_output = False

    async def run(self, input: Any, *, context: Any = None) -> Any:
        raise NotImplementedError

    @asynccontextmanager
    async def open_run(
        self, input: Any, *, context: Any = None, durable: Any = None
    ) -> AsyncIterator[Any]:
        if context is not None or durable is not None:
            raise RuntimeError("the model provider is unreachable")
        yield None


async def test_recover_settles_every_open_turn_not_only_the_last(sqlite_db: DurableDb) -> None:
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        older = await cut_turn(sessions, backend)
        newer = await cut_turn(sessions, backend)
        await engine.cancel(older, "given up")  # nobody holds it: aborted at once
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=make_agent([["idem"], []], Counter()),
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            assert recovered.run_id == newer
            await recovered.result()
        stored = await sessions.load("s")
    assert stored is not None
    assert stored.run(older) is not None
    assert stored.runs[0].outcome == RunOutcome(finish_reason="aborted")
    assert stored.runs[1].outcome is not None
    assert stored.runs[1].outcome.finish_reason == "stop-condition"


async def test_a_reconciliation_persistence_failure_is_a_session_recover_event(
    sqlite_db: DurableDb,
) -> None:
    kv = FailingWrites()
    sessions = create_session_store(kv)
    events: list[Any] = []
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        run_id = await cut_turn(sessions, backend)
        await engine.cancel(run_id)
        async with open_session(
            "s", store=sessions, agent_name="worker", durable=backend
        ) as handle:
            handle.add_listener("session.recover", events.append)
            kv.failing = True
            assert await handle.recover() is None
            kv.failing = False
        stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome is None  # left open for a later recover()
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, SessionRecoverFailed)
    assert (event.type, event.run_id, event.session_id, event.stage) == (
        "session.recover",
        run_id,
        "s",
        "reconcile",
    )
    assert event.error_type == "OSError"


async def test_recover_returns_none_and_reports_a_resume_that_fails(sqlite_db: DurableDb) -> None:
    sessions = create_session_store(MemoryStore())
    events: list[Any] = []
    async with sqlite_db.backend() as backend:
        run_id = await cut_turn(sessions, backend)
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=Unopenable(),
            durable=backend,
        ) as handle:
            handle.add_listener("*", events.append)
            assert await handle.recover() is None
    failures = [event for event in events if event.type == "session.recover"]
    assert [(event.run_id, event.stage, event.error_type) for event in failures] == [
        (run_id, "resume", "RuntimeError")
    ]


async def test_recover_says_who_holds_a_turn_and_until_when(sqlite_db: DurableDb) -> None:
    """A turn whose lease another worker still holds is not recovered, and recover()
    says so: a LeaseHeldError naming the turn, the holder and when its lease expires.
    Once the lease has expired, recover() resumes the turn."""
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        run_id = await cut_turn(sessions, backend)
        (lease,) = await engine.claim(worker_id="worker-b", lease_seconds=60, run_ids=[run_id])
        async with open_session(
            "s",
            store=sessions,
            agent=make_agent([["idem"], []], Counter()),
            durable=backend,
        ) as handle:
            with pytest.raises(LeaseHeldError) as raised:
                await handle.recover()
        held = raised.value
        assert (held.run_id, held.holder, held.expires_at) == (run_id, "worker-b", lease.expires_at)
        assert "worker 'worker-b' holds its lease until" in str(held)
        assert "call recover() again once the lease has expired" in str(held)
        stored = await sessions.load("s")
        assert stored is not None
        assert stored.runs[-1].outcome is None  # still open
        later = time.time() + 120  # the holder stopped: its lease has run out
        async with (
            sqlite_db.engine(clock=lambda: later) as engine_later,
            open_session(
                "s",
                store=sessions,
                agent=make_agent([["idem"], []], Counter()),
                engine=engine_later,
                checkpoint_store=store,
            ) as handle,
        ):
            recovered = await handle.recover()
            assert recovered is not None
            assert recovered.run_id == run_id
            await recovered.result()
