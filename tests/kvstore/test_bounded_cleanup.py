"""Clean-up is bounded: closing a store does not wait forever for calls in flight, and a
cancelled PostgreSQL query is stopped by a request the call itself awaits.

Blocked calls are worker threads blocked on a ``threading.Event`` (released at the end
of the test) or real PostgreSQL statements (``pg_sleep``).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from operative import OperativeError
from operative._sql import CLOSE_TIMEOUT, Database
from operative.kvstore import Put, Versioned

from .conftest import Backend


def _is_closed(conn: Any) -> bool:
    if isinstance(conn, sqlite3.Connection):
        try:
            conn.execute("SELECT 1")
        except sqlite3.ProgrammingError:
            return True
        return False
    return bool(conn.closed)


async def test_aclose_gives_up_on_calls_in_flight_after_the_close_timeout(
    durable_backend: Backend, autojump_clock: trio.testing.MockClock
) -> None:
    """aclose waits CLOSE_TIMEOUT for a call that does not end, then reports it with an
    OperativeError instead of waiting forever; the late call closes its own connection."""
    store = durable_backend.open()
    db = store._db  # type: ignore[attr-defined]
    assert isinstance(db, Database)
    await store.get("warm")  # one idle connection
    token = trio.lowlevel.current_trio_token()
    entered = trio.Event()
    release = threading.Event()
    used: list[Any] = []

    def blocked(conn: Any) -> str:
        used.append(conn)
        token.run_sync_soon(entered.set)
        release.wait(10)  # real seconds: only ever reached if aclose waited for it
        return "late"

    results: list[str] = []
    try:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                results.append(await db.call(blocked))

            nursery.start_soon(call)
            await entered.wait()
            began = trio.current_time()
            with pytest.raises(OperativeError, match="still running") as info:
                await store.aclose()
            assert trio.current_time() - began == pytest.approx(CLOSE_TIMEOUT)
            assert "1 call(s)" in str(info.value)
            assert not _is_closed(used[0])  # still in use by the late call
            release.set()
    finally:
        release.set()
    assert results == ["late"]
    assert _is_closed(used[0])  # the late call closed it: the store keeps nothing open
    with pytest.raises(OperativeError, match="closed"):
        await store.get("warm")
    await store.aclose()  # closing again is harmless


async def test_leaving_the_block_with_a_call_in_flight_keeps_the_block_error(
    durable_backend: Backend, autojump_clock: trio.testing.MockClock
) -> None:
    """When the ``async with`` block raised, a close that gave up on a call in flight is
    logged, and the block's own exception is the one that propagates."""
    token = trio.lowlevel.current_trio_token()
    entered = trio.Event()
    release = threading.Event()

    def blocked(conn: Any) -> None:
        token.run_sync_soon(entered.set)
        release.wait(10)

    try:
        async with trio.open_nursery() as nursery:
            with pytest.raises(KeyError, match="the block's own"):
                async with durable_backend.open() as store:
                    nursery.start_soon(store._db.call, blocked)  # type: ignore[attr-defined]
                    await entered.wait()
                    raise KeyError("the block's own")
            release.set()
    finally:
        release.set()


# -- PostgreSQL: the cancel request is part of the call ---------------------------------------


def _wait_until_running_sync(backend: Backend, marker: str) -> None:
    import psycopg

    sql = (
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
        f"AND query LIKE '%{marker}%' AND query NOT LIKE '%pg_stat_activity%'"
    )
    with psycopg.connect(backend.location, autocommit=True) as conn:
        for _ in range(1000):
            row = conn.execute(sql).fetchone()
            if row is not None and row[0]:
                return
            conn.execute("SELECT pg_sleep(0.01)")
    raise AssertionError(f"no statement {marker!r} started")


async def _wait_until_running(backend: Backend, marker: str) -> None:
    """Until a statement holding ``marker`` runs on the server (a cancel request sent
    before the statement begins would find nothing to cancel)."""
    await trio.to_thread.run_sync(_wait_until_running_sync, backend, marker)


async def test_a_cancelled_postgres_call_awaits_its_cancel_request(
    backend_factory: Callable[[str], Backend],
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The cancel request runs in a thread the cancelled call waits for: the call does not
    return while the request is still in progress, even once its query has stopped."""
    import psycopg

    backend = backend_factory("postgres")
    token = trio.lowlevel.current_trio_token()
    requested = trio.Event()
    query_returned = trio.Event()
    gate = threading.Event()
    real_cancel_safe = psycopg.Connection.cancel_safe

    def slow_cancel_safe(self: psycopg.Connection[Any], *, timeout: float = 30.0) -> None:
        real_cancel_safe(self, timeout=timeout)  # the query stops here
        token.run_sync_soon(requested.set)
        gate.wait(10)  # the request's thread is still busy

    monkeypatch.setattr(psycopg.Connection, "cancel_safe", slow_cancel_safe)

    def sleep(conn: psycopg.Connection[Any]) -> None:
        try:
            conn.execute("SELECT pg_sleep(20) /* awaited-cancel */")
        finally:
            token.run_sync_soon(query_returned.set)

    async with backend.open() as store:
        scope = trio.CancelScope()
        done: list[str] = []
        try:
            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    with scope:
                        await store._db.call(sleep)  # type: ignore[attr-defined]
                    done.append("returned")

                nursery.start_soon(call)
                await _wait_until_running(backend, "awaited-cancel")
                scope.cancel()
                await requested.wait()
                await query_returned.wait()
                await trio.testing.wait_all_tasks_blocked()
                assert done == []  # the call waits for its cancel request to finish
                gate.set()
        finally:
            gate.set()
        assert done == ["returned"]
        assert scope.cancelled_caught
        await store.conditional_batch([Put(key="a", value="1")])
        assert await store.get("a") == Versioned(key="a", value="1", version=1)


@pytest.mark.parametrize("how", ["call", "read"])
async def test_a_cancelled_postgres_query_that_ignores_the_request_is_cut_off(
    backend_factory: Callable[[str], Backend],
    monkeypatch: pytest.MonkeyPatch,
    autojump_clock: trio.testing.MockClock,
    how: str,
) -> None:
    """When the cancel request does not stop the query (an unreachable server), the call
    shuts its connection's socket after the cancel timeout instead of waiting for the
    query to end. Its statement was cut off unanswered: a plain call (which may have
    written) raises OutcomeUnknownError, a read-only snapshot is simply cancelled."""
    import psycopg

    from operative._sql import OutcomeUnknownError, _postgres

    backend = backend_factory("postgres")
    monkeypatch.setattr(psycopg.Connection, "cancel_safe", lambda self, timeout=30.0: None)
    monkeypatch.setattr(_postgres, "_CANCEL_TIMEOUT", 0.2)

    def sleep(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_sleep(20) /* ignored-cancel */")

    async with backend.open() as store:
        db = store._db  # type: ignore[attr-defined]
        raised: list[BaseException] = []

        async def run() -> None:
            try:
                await (db.call(sleep) if how == "call" else db.read(sleep))
            except OutcomeUnknownError as exc:
                raised.append(exc)

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await _wait_until_running(backend, "ignored-cancel")
                began = time.monotonic()
                scope.cancel()
        assert time.monotonic() - began < 10  # not the 20 s of the query
        if how == "call":
            assert len(raised) == 1
            assert "read back what it wrote" in str(raised[0])
            assert isinstance(raised[0].__cause__, psycopg.OperationalError)
        else:
            assert raised == []
            assert scope.cancelled_caught
        assert await store.get("a") is None  # the store works on a fresh connection
