"""The durable journal's SQLite commits run in the Trio thread when they cannot wait.

A commit of a few rows in WAL mode waits on nothing unless another writer holds the
file's lock, so :class:`SqliteDatabase` runs ``brief`` calls on an idle connection in the
Trio thread (no worker thread's round trip), KI-protected. A locked file sends the call
to a worker thread, which waits for the lock as before; a cancelled caller writes
nothing; checkpoints never run in the Trio thread (the connections' automatic checkpoint
is off) but every so many calls in a worker thread, with the object's other calls held
back, so the log starts over and stays short.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

from operative import OperativeError
from operative._sql import SqliteDatabase
from operative.durable import Durable, SqliteCheckpointStore, SqliteEngine
from operative.durable._records import Started, StepDone

from .test_durable_runs import make_agent

MAIN = threading.get_ident()


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the functions handed to worker threads while the test runs."""
    started: list[str] = []
    real = trio.lowlevel.start_thread_soon

    def counting(fn: Any, deliver: Any, name: str | None = None) -> None:
        started.append(getattr(fn, "__qualname__", repr(fn)))
        real(fn, deliver, name=name)

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", counting)
    return started


async def _started_run(engine: SqliteEngine, run_id: str = "r1") -> Any:
    return await engine.start(
        Started(messages=(), agent_name="a"), run_id=run_id, worker_id="w", lease_seconds=60
    )


def _hold_lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


async def test_a_brief_write_commits_in_the_trio_thread_ki_protected(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    async with SqliteEngine(path) as engine:
        db = engine._db
        await _started_run(engine)  # the first call opens a connection, in a worker thread
        seen: list[tuple[int, bool]] = []

        def work(conn: Any) -> int:
            seen.append((threading.get_ident(), trio.lowlevel.currently_ki_protected()))
            return int(conn.execute("SELECT count(*) FROM operative_runs").fetchone()[0])

        assert await db.write(work, brief=True) == 1
        assert seen == [(MAIN, True)]
        assert await db.write(work) == 1  # not brief: a worker thread, as ever
        assert seen[1][0] != MAIN


async def test_durable_steps_commit_without_a_worker_thread(
    tmp_path: Path, threads: list[str]
) -> None:
    """After the first run has opened the connections, a durable run (start, a step with
    a non-idempotent call: two commits, the answer, the finish) starts no thread."""
    executions: Counter[str] = Counter()
    path = tmp_path / "d.db"
    async with SqliteEngine(path) as engine, SqliteCheckpointStore(path) as store:
        for run_id in ("warm", "measured"):
            threads.clear()
            durable = Durable(engine=engine, checkpoint_store=store, run_id=run_id)
            async with make_agent([["once"], []], executions).open_run(
                "go", durable=durable
            ) as run:
                pass
            assert (await run.result()).finish_reason == "stop-condition"
        assert threads == []
        assert executions == Counter({"once:10": 2})
        record = await engine.get("measured")
        assert record is not None
        assert record.status == "completed"
        assert len(await store.read("measured")) >= 5


async def test_a_locked_file_sends_a_brief_write_to_a_worker_thread(
    tmp_path: Path, threads: list[str]
) -> None:
    path = tmp_path / "d.db"
    async with SqliteEngine(path) as engine, SqliteCheckpointStore(path) as store:
        lease = await _started_run(engine)
        await store.append(lease, 1, [StepDone(step=1)])  # the store's connection is open
        holder = _hold_lock(path)
        done = trio.Event()

        async def append() -> None:
            await store.append(lease, 2, [StepDone(step=2)])
            done.set()

        try:
            threads.clear()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append)
                await trio.sleep(0.05)  # real time: the worker thread pauses and retries
                assert not done.is_set()
                assert len(threads) == 1  # waiting in a worker thread, not in this one
                holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert [e.seq for e in await store.read("r1")] == [0, 1, 2]


async def test_a_locked_file_still_times_out_and_cancels(tmp_path: Path) -> None:
    """The worker thread's own pauses keep busy_timeout and a prompt cancel."""
    path = tmp_path / "d.db"
    async with SqliteEngine(path) as engine, SqliteCheckpointStore(path, busy_timeout=0.2) as store:
        lease = await _started_run(engine)
        await store.append(lease, 1, [StepDone(step=1)])
        holder = _hold_lock(path)
        try:
            with pytest.raises(OperativeError, match=r"stayed locked by another writer for 0\.2 s"):
                await store.append(lease, 2, [StepDone(step=2)])
            began = trio.current_time()
            with trio.move_on_after(0.05) as scope:
                await store.append(lease, 2, [StepDone(step=2)])
            assert scope.cancelled_caught
            assert trio.current_time() - began < 0.2  # a cancel ends the pause at once
        finally:
            holder.close()
        assert [e.seq for e in await store.read("r1")] == [0, 1]


async def test_a_cancelled_brief_write_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    async with SqliteEngine(path) as engine, SqliteCheckpointStore(path) as store:
        lease = await _started_run(engine)
        await store.append(lease, 1, [StepDone(step=1)])
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.append(lease, 2, [StepDone(step=2)])
        assert scope.cancelled_caught
        assert [e.seq for e in await store.read("r1")] == [0, 1]


async def _log_pages_after(path: Path, appends: int, checkpoint_every: int) -> int:
    """Pages in the log of a new file after ``appends`` appends, checkpointed every
    ``checkpoint_every`` calls by the calls that fall due (the store is not opened with
    ``async with``: no task makes them); and that exactly those calls went to a worker
    thread."""
    async with SqliteEngine(path) as engine:
        store = SqliteCheckpointStore(path)
        lease = await _started_run(engine)
        await store.append(lease, 1, [StepDone(step=1)])
        db = store._db
        assert isinstance(db, SqliteDatabase)
        assert (await db.call(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone())) == (
            0,  # the automatic checkpoint is off: it would sync the file in the Trio thread
        )
        db._calls, db._checkpoint_every = 0, checkpoint_every
        threads: list[Any] = []
        real = trio.lowlevel.start_thread_soon

        def counting(fn: Any, deliver: Any, name: str | None = None) -> None:
            threads.append(fn)
            real(fn, deliver, name=name)

        trio.lowlevel.start_thread_soon = counting
        try:
            for seq in range(2, 2 + appends):
                await store.append(lease, seq, [StepDone(step=seq)])
        finally:
            trio.lowlevel.start_thread_soon = real
        assert len(threads) == appends // checkpoint_every
        if threads:  # the next interval aims at about 1,000 pages a checkpoint
            assert checkpoint_every < db._checkpoint_every <= 4096
        outside = sqlite3.connect(path)
        try:
            _, pages, _ = outside.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            outside.close()
        assert [e.seq for e in await store.read("r1")] == list(range(2 + appends))
        await store.aclose()
        return int(pages)


async def test_checkpoints_run_in_a_worker_thread_and_keep_the_log_short(
    tmp_path: Path,
) -> None:
    never = await _log_pages_after(tmp_path / "never.db", 60, 1_000_000)
    every_50 = await _log_pages_after(tmp_path / "every50.db", 60, 50)
    # After the checkpoint at the 50th call the log starts again: it holds the last ten.
    assert 0 < every_50 < never / 3


async def test_a_checkpoint_keeps_the_objects_other_calls_out_so_the_log_restarts(
    tmp_path: Path, threads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened with ``async with`` and written by several runs at once, the store still
    makes each checkpoint in the call that falls due, in its worker thread, while its
    other calls wait: so the log starts over after every checkpoint. (A checkpoint made
    beside a steady stream of writes never finds the log fully copied, and the log then
    grows without end.)"""
    monkeypatch.setattr("operative._sql._sqlite._CHECKPOINT_INTERVALS", (50, 50))
    path = tmp_path / "d.db"
    writers, appends = 4, 60
    async with SqliteEngine(path) as engine, SqliteCheckpointStore(path) as store:
        leases = [await _started_run(engine, f"r{k}") for k in range(writers)]
        db = store._db
        assert isinstance(db, SqliteDatabase)
        for lease in leases:
            await store.append(lease, 1, [StepDone(step=1)])
        db._calls, db._checkpoint_every = 0, 50
        threads.clear()
        overlapped: list[bool] = []

        async def write(lease: Any) -> None:
            for seq in range(2, 2 + appends):
                overlapped.append(db._checkpointing is not None)
                await store.append(lease, seq, [StepDone(step=seq)])

        async with trio.open_nursery() as nursery:
            for lease in leases:
                nursery.start_soon(write, lease)
        # Calls came while a checkpoint was under way, and waited for it.
        assert any(overlapped)
        # One worker thread per checkpoint: every 50 of the 240 calls.
        assert threads == ["SqliteDatabase._in_worker_thread.<locals>.run"] * 4
        for lease in leases:
            seqs = [e.seq for e in await store.read(lease.run_id)]
            assert seqs == list(range(2 + appends))
        outside = sqlite3.connect(path)
        try:
            _, pages, _ = outside.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            outside.close()
    never = await _log_pages_after(tmp_path / "never.db", writers * appends, 1_000_000)
    assert 0 < pages < never / 3  # the log holds the 40 appends since the last checkpoint
