"""Concurrent batches over keys that do not exist yet still serialise (no write skew).

Two batches each require a key to be absent (``Delete(..., expected_version=None)``)
and create the key the other requires absent. In any serial order the second one sees
the first one's key and fails, so only one batch's keys end up stored. A store that only
locks the rows it finds locks nothing here; the test forces the interleaving that
exposes that: both batches start while another connection holds the table's write
lock, so each has read its keys before either can write.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from operative.kvstore import (
    ConditionalTextValueStore,
    ConflictError,
    Delete,
    Operation,
    Put,
    Versioned,
)

from .conftest import Backend

_WAITERS = (
    "SELECT count(*) FROM pg_locks WHERE NOT granted "
    "AND (relation = to_regclass(%s) OR locktype = 'advisory')"
)


class _Gate:
    """Another connection holding the table's write lock: PostgreSQL ``LOCK TABLE ... IN
    SHARE MODE`` (rows can still be read and locked, not written), SQLite ``BEGIN
    IMMEDIATE``."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._conn: Any = None

    def close_sync(self) -> None:
        conn: Any
        if self._backend.name == "sqlite":
            conn = sqlite3.connect(
                self._backend.location, isolation_level=None, check_same_thread=False
            )
            conn.execute("BEGIN IMMEDIATE")
        else:
            import psycopg

            conn = psycopg.connect(self._backend.location)
            conn.execute(f'LOCK TABLE "{self._backend.table}" IN SHARE MODE')
        self._conn = conn

    def _wait_sync(self, waiters: int) -> None:
        for _ in range(2000):  # up to 20 s of the server's lock queue, not a test clock
            (count,) = self._conn.execute(_WAITERS, (f'"{self._backend.table}"',)).fetchone()
            if count >= waiters:
                return
            self._conn.execute("SELECT pg_sleep(0.01)")
        raise AssertionError(f"fewer than {waiters} batches ever waited for the gate")

    def open_sync(self) -> None:
        """Release the lock (once; again is a no-op)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.rollback()
            conn.close()

    async def open(self, waiters: int) -> None:
        """Open once ``waiters`` batches wait for a lock (SQLite cannot tell which, so it
        opens once every task of the test waits on its thread)."""
        await trio.testing.wait_all_tasks_blocked()
        if self._backend.name == "postgres":
            await trio.to_thread.run_sync(self._wait_sync, waiters)
        await trio.to_thread.run_sync(self.open_sync)


async def _race(
    backend: Backend, batches: Sequence[Sequence[Operation]]
) -> tuple[list[tuple[int | None, ...] | ConflictError | None], dict[str, Versioned]]:
    """Run ``batches`` at once, each from its own store object, released together."""
    stores = [backend.open() for _ in batches]
    outcomes: list[tuple[int | None, ...] | ConflictError | None] = [None] * len(batches)
    try:
        for store in stores:
            await store.get("warm-up")  # connected, table created
        gate = _Gate(backend)
        await trio.to_thread.run_sync(gate.close_sync)

        async def run(index: int, store: ConditionalTextValueStore) -> None:
            try:
                outcomes[index] = await store.conditional_batch(batches[index])
            except ConflictError as exc:
                outcomes[index] = exc

        try:
            async with trio.open_nursery() as nursery:
                for index, store in enumerate(stores):
                    nursery.start_soon(run, index, store)
                await gate.open(waiters=len(batches))
        finally:
            with trio.CancelScope(shield=True):  # a batch or the wait failed: let go
                await trio.to_thread.run_sync(gate.open_sync)
        keys = sorted({op.key for batch in batches for op in batch})
        final = dict(await stores[0].get_many(keys))
    finally:
        for store in stores:
            await store.aclose()
    return outcomes, final


@pytest.mark.parametrize(
    ("names", "size"),
    [(("b", "é"), 1), (("é", "b"), 1), (("a", "b"), 1), (("b", "é"), 40)],
)
async def test_batches_requiring_each_others_keys_absent_serialise(
    durable_backend: Backend, names: tuple[str, str], size: int
) -> None:
    """Each batch deletes (requiring absence) the keys the other creates: one commits,
    the other reports the conflict, and only the winner's keys are stored. (40 keys a
    side: batches of 80 keys, which PostgreSQL's store locks through an array.)"""
    sides = [
        [name if size == 1 else f"{name}{index:02}" for index in range(size)] for name in names
    ]
    batches: list[list[Operation]] = [
        [Delete(key=key, expected_version=None) for key in sides[0]]
        + [Put(key=key, value="one", expected_version=None) for key in sides[1]],
        [Delete(key=key, expected_version=None) for key in sides[1]]
        + [Put(key=key, value="two", expected_version=None) for key in sides[0]],
    ]
    outcomes, final = await _race(durable_backend, batches)
    won = [
        index for index, outcome in enumerate(outcomes) if not isinstance(outcome, ConflictError)
    ]
    assert len(won) == 1, f"both batches committed, leaving {sorted(final)}"
    [winner] = won
    assert outcomes[winner] == (None,) * size + (1,) * size
    assert isinstance(outcomes[1 - winner], ConflictError)
    value = ("one", "two")[winner]
    assert final == {key: Versioned(key=key, value=value, version=1) for key in sides[1 - winner]}


async def test_unconditional_creates_of_the_same_missing_key_serialise(
    durable_backend: Backend,
) -> None:
    """Two batches that each create a missing key with no condition, and require another
    key absent: both may commit only one after the other (versions 1 then 2)."""
    batches: list[list[Operation]] = [
        [Put(key="shared", value="one"), Delete(key="x", expected_version=None)],
        [Put(key="shared", value="two"), Delete(key="x", expected_version=None)],
    ]
    outcomes, final = await _race(durable_backend, batches)
    assert outcomes in ([(1, None), (2, None)], [(2, None), (1, None)])
    winner = outcomes.index((2, None))
    put = batches[winner][0]
    assert isinstance(put, Put)
    assert final == {"shared": Versioned(key="shared", value=put.value, version=2)}
