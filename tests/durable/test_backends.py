"""The backend conformance suite: every durable engine and checkpoint store (SQLite,
PostgreSQL) keeps the contract of ``operative.durable._protocols`` the same way.

Time is an injected clock, so lease expiry never waits; only the tests that race real
threads or processes against each other, or wait on a lock held by another connection,
touch the wall clock.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from msgspec.structs import replace

from operative import InvalidArgument
from operative.conversation import Message
from operative.durable import (
    CheckpointStore,
    Durable,
    DurableEngine,
    Finished,
    Generated,
    JournalRecord,
    Lease,
    LeaseLostError,
    PostgresCheckpointStore,
    PostgresEngine,
    RunNotFoundError,
    RunOutcome,
    SqliteCheckpointStore,
    SqliteEngine,
    Started,
    StepDone,
    ToolStarted,
)
from operative.errors import CorruptRecordError
from operative.kvstore import ConflictError

from .conftest import DurableDb

T0 = 1_000_000.0


@attrs.define
class Clock:
    """Epoch seconds that move only when a test says so."""

    now: float = T0

    def __call__(self) -> float:
        return self.now


@attrs.define
class Db:
    """An engine and a checkpoint store over one database, on one test clock."""

    db: DurableDb
    clock: Clock
    engine: DurableEngine
    store: CheckpointStore

    def more_engines(self, count: int) -> list[DurableEngine]:
        return [self.db.engine(clock=self.clock) for _ in range(count)]


@pytest.fixture
async def db(durable_db: DurableDb) -> AsyncIterator[Db]:
    clock = Clock()
    engine: DurableEngine = durable_db.engine(clock=clock)
    store: CheckpointStore = durable_db.store(clock=clock)
    try:
        yield Db(durable_db, clock, engine, store)
    finally:
        await engine.aclose()
        await store.aclose()


def started(agent: str = "agent", text: str = "hello") -> Started:
    return Started(messages=(Message(id="m0", role="user", content=text),), agent_name=agent)


def generated(step: int) -> Generated:
    return Generated(step=step, message=Message(id=f"a{step}", role="assistant", content="ok"))


def outcome(reason: str = "stop-condition", **fields: Any) -> RunOutcome:
    return RunOutcome(finish_reason=reason, **fields)


async def start(
    db: Db, run_id: str = "r1", *, lease_seconds: float = 10.0, **options: Any
) -> Lease:
    lease: Lease = await db.engine.start(
        options.pop("started", started(options.pop("agent", "agent"))),
        run_id=run_id,
        worker_id=options.pop("worker_id", "w1"),
        lease_seconds=lease_seconds,
        **options,
    )
    return lease


def _execute(durable_db: DurableDb, sql: str, params: tuple[Any, ...]) -> None:
    """Write to the database behind the backend's back (``?`` placeholders)."""
    if durable_db.name == "sqlite":
        conn = sqlite3.connect(durable_db.location)
        with conn:
            conn.execute(sql, params)
        conn.close()
        return
    import psycopg

    with psycopg.connect(durable_db.location, autocommit=True) as pg:
        pg.execute(sql.replace("?", "%s"), params)


async def execute(durable_db: DurableDb, sql: str, *params: Any) -> None:
    await trio.to_thread.run_sync(partial(_execute, durable_db, sql, params))


# -- the objects ---------------------------------------------------------------------------


async def test_engine_and_store_satisfy_the_protocols_and_share_one_database(db: Db) -> None:
    """Both are their protocol's instances; over the same data they name one database."""
    assert isinstance(db.engine, DurableEngine)
    assert isinstance(db.store, CheckpointStore)
    assert db.engine.database == db.store.database
    Durable(engine=db.engine, checkpoint_store=db.store)  # accepted
    other = db.db.engine()
    try:
        assert other.database == db.engine.database
    finally:
        await other.aclose()


def test_engine_and_store_in_different_files_are_refused(tmp_path: Path) -> None:
    """A journal in one file and run records in another cannot fence: InvalidArgument.
    One file named two ways is one database."""
    engine = SqliteEngine(tmp_path / "a.db")
    with pytest.raises(InvalidArgument, match="share one database"):
        Durable(engine=engine, checkpoint_store=SqliteCheckpointStore(tmp_path / "b.db"))
    same = SqliteCheckpointStore(f"{tmp_path}/x/../a.db")
    assert Durable(engine=engine, checkpoint_store=same).checkpoint_store is same


@pytest.mark.parametrize("durable_db", ["postgres"], indirect=True)
def test_engine_and_store_in_different_postgres_databases_are_refused(
    durable_db: DurableDb, tmp_path: Path
) -> None:
    """Another schema (search_path), or SQLite on one side, is another database."""
    elsewhere = durable_db.location.replace("search_path=", "search_path=elsewhere_")
    engine = durable_db.engine()
    with pytest.raises(InvalidArgument, match="share one database"):
        Durable(engine=engine, checkpoint_store=PostgresCheckpointStore(elsewhere))
    with pytest.raises(InvalidArgument, match="share one database"):
        Durable(engine=engine, checkpoint_store=SqliteCheckpointStore(tmp_path / "a.db"))
    with pytest.raises(InvalidArgument, match="share one database"):
        Durable(engine=SqliteEngine(tmp_path / "a.db"), checkpoint_store=durable_db.store())


def test_postgres_database_names_the_dsn_without_its_password() -> None:
    """``database`` drops the password (and writes the DSN one canonical way), so an
    engine and a store given the same server compare equal, whichever form names it."""
    engine = PostgresEngine("host=db.example port=5432 user=op password=s3cret dbname=runs")
    store = PostgresCheckpointStore("postgresql://op:s3cret@db.example:5432/runs")
    assert engine.database == store.database
    assert "s3cret" not in engine.database
    assert "s3cret" not in repr(engine)
    assert "dbname=runs" in engine.database
    assert PostgresEngine("host=a dbname=x").database != PostgresEngine("host=b dbname=x").database
    with pytest.raises(InvalidArgument) as info:
        PostgresEngine("host=a password=s3cret garbage")
    assert "s3cret" not in str(info.value)


def test_postgres_classes_without_psycopg_say_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without psycopg, creating a PostgreSQL class names the extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"PostgresEngine needs .*operative\[postgres\]"):
        PostgresEngine("host=a")
    with pytest.raises(ImportError, match=r"operative\[postgres\]"):
        PostgresCheckpointStore("host=a")


def test_importing_operative_durable_does_not_import_psycopg() -> None:
    """psycopg is imported only when a PostgreSQL engine or store is created."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, operative.durable; assert 'psycopg' not in sys.modules",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "make",
    [
        lambda: PostgresEngine(5),  # type: ignore[arg-type]
        lambda: PostgresEngine("host=a", max_connections=0),
        lambda: PostgresCheckpointStore("host=a", max_connections=True),
        lambda: PostgresEngine("host=a", clock="now"),  # type: ignore[arg-type]
        lambda: SqliteEngine(""),
        lambda: SqliteEngine(":memory:"),
        lambda: SqliteCheckpointStore("x.db", max_connections=0),
        lambda: SqliteEngine("x.db", clock=1.0),  # type: ignore[arg-type]
    ],
)
def test_bad_constructor_arguments_are_invalid(make: Callable[[], object]) -> None:
    """Constructors check their arguments before touching any database."""
    with pytest.raises(InvalidArgument):
        make()


async def test_closed_objects_refuse_calls(durable_db: DurableDb) -> None:
    """After ``aclose`` (or leaving ``async with``) a call raises InvalidArgument."""
    async with durable_db.engine() as engine, durable_db.store() as store:
        assert await engine.get("r") is None
    with pytest.raises(InvalidArgument, match="closed"):
        await engine.get("r")
    with pytest.raises(InvalidArgument, match="closed"):
        await store.read("r")
    await engine.aclose()  # twice is harmless


async def test_objects_created_together_create_the_tables_once(durable_db: DurableDb) -> None:
    """Many engines and stores whose first calls race on an empty database all work."""
    objects = [durable_db.engine() for _ in range(4)] + [durable_db.store() for _ in range(4)]
    try:
        async with trio.open_nursery() as nursery:
            for item in objects:
                if isinstance(item, DurableEngine):
                    nursery.start_soon(item.get, "r")
                else:
                    nursery.start_soon(item.read, "r")
    finally:
        for item in objects:
            await item.aclose()


# -- start, append, read ----------------------------------------------------------------


async def test_start_commits_the_run_and_its_started_entry(db: Db) -> None:
    """start returns a fence-1 lease and commits the record and journal entry 0."""
    first = started("writer", "hi \x00 there ✓")  # NUL and non-ASCII survive the round trip
    lease = await start(db, "run/1", started=first, worker_id="w1", session_id="s1")
    assert lease == Lease(
        run_id="run/1",
        worker_id="w1",
        fence=1,
        expires_at=T0 + 10,
        agent_name="writer",
        session_id="s1",
    )
    record = await db.engine.get("run/1")
    assert record is not None
    assert (record.run_id, record.agent_name, record.session_id, record.status) == (
        "run/1",
        "writer",
        "s1",
        "running",
    )
    assert (record.created_at, record.updated_at) == (T0, T0)
    assert (record.lease_owner, record.lease_expires_at, record.fence) == ("w1", T0 + 10, 1)
    assert (record.cancel_reason, record.outcome) == (None, None)
    [entry] = await db.store.read("run/1")
    assert (entry.run_id, entry.seq, entry.record, entry.at) == ("run/1", 0, first, T0)
    assert await db.engine.get("other") is None


async def test_start_of_an_existing_run_id_is_a_conflict(db: Db) -> None:
    """A second start under one id raises ConflictError and changes nothing."""
    await start(db, "r1", worker_id="w1")
    db.clock.now += 5
    with pytest.raises(ConflictError):
        await start(db, "r1", worker_id="w2", started=started("intruder"))
    record = await db.engine.get("r1")
    assert record is not None
    assert (record.agent_name, record.lease_owner, record.created_at) == ("agent", "w1", T0)
    assert len(await db.store.read("r1")) == 1


async def test_append_at_the_next_seq_and_read_after(db: Db) -> None:
    """Appends land at seq, seq+1, ...; read returns entries after ``after``, in order."""
    lease = await start(db)
    db.clock.now += 1
    assert await db.store.append(lease, 1, [generated(1)]) is None
    db.clock.now += 1
    records: list[JournalRecord] = [
        ToolStarted(step=1, call_id="c1", tool_name="t"),
        StepDone(step=1),
    ]
    assert await db.store.append(lease, 2, records) is None
    assert await db.store.append(lease, 4, []) is None  # an empty append only checks the lease
    entries = await db.store.read("r1")
    assert [(e.seq, e.at) for e in entries] == [(0, T0), (1, T0 + 1), (2, T0 + 2), (3, T0 + 2)]
    assert [e.record for e in entries[1:]] == [generated(1), *records]
    assert [e.seq for e in await db.store.read("r1", after=1)] == [2, 3]
    assert await db.store.read("r1", after=3) == []
    assert await db.store.read("nobody") == []


async def test_append_at_a_taken_seq_is_a_conflict_and_writes_nothing(db: Db) -> None:
    """A batch that reaches a taken seq raises ConflictError; none of it is written."""
    lease = await start(db)
    await db.store.append(lease, 1, [generated(1), generated(2)])
    with pytest.raises(ConflictError):
        await db.store.append(lease, 1, [generated(9)])
    with pytest.raises(ConflictError):
        await db.store.append(lease, 2, [generated(9)])
    with pytest.raises(ConflictError):  # seq 3 is free, seq 2 of the batch is not
        await db.store.append(lease, 1, [generated(8), generated(9), generated(10)])
    entries = await db.store.read("r1")
    assert [e.record for e in entries[1:]] == [generated(1), generated(2)]
    assert await db.store.append(lease, 3, [generated(3)]) is None


async def test_append_with_a_stale_fence_or_to_a_finished_run_loses_the_lease(db: Db) -> None:
    """A lease taken over, or a finished run, can no longer be written to."""
    lease = await start(db, lease_seconds=5)
    db.clock.now += 5
    [taken] = await db.engine.claim(worker_id="w2", lease_seconds=5)
    with pytest.raises(LeaseLostError, match="another worker") as info:
        await db.store.append(lease, 1, [generated(1)])
    assert info.value.run_id == "r1"
    with pytest.raises(LeaseLostError):
        await db.store.append(lease, 1, [])
    await db.engine.finish(taken, 1, Finished(outcome=outcome()))
    with pytest.raises(LeaseLostError, match="completed already"):
        await db.store.append(taken, 2, [generated(2)])
    missing = Lease(run_id="gone", worker_id="w", fence=1, expires_at=0)
    with pytest.raises(LeaseLostError, match="not stored"):
        await db.store.append(missing, 1, [generated(1)])
    assert [e.seq for e in await db.store.read("r1")] == [0, 1]


async def test_finish_journals_the_records_that_wait_before_the_outcome(db: Db) -> None:
    """``finish(..., journal=records)`` writes them at ``seq``... and the finished entry
    after them, in one transaction; with a stale fence, none of it."""
    lease = await start(db, lease_seconds=5)
    record = await db.engine.finish(
        lease, 1, Finished(outcome=outcome()), journal=[generated(1), StepDone(step=1)]
    )
    assert record.status == "completed"
    kinds = [type(e.record).__name__ for e in await db.store.read("r1")]
    assert kinds == ["Started", "Generated", "StepDone", "Finished"]
    old = await start(db, "r2", lease_seconds=5)
    db.clock.now += 5
    await db.engine.claim(worker_id="w2", lease_seconds=5)
    with pytest.raises(LeaseLostError):
        await db.engine.finish(old, 1, Finished(outcome=outcome()), journal=[generated(1)])
    assert [e.seq for e in await db.store.read("r2")] == [0]
    third = await start(db, "r3", lease_seconds=60)
    await db.store.append(third, 1, [generated(1)])
    with pytest.raises(ConflictError):  # a taken seq: nothing of it is written
        await db.engine.finish(third, 1, Finished(outcome=outcome()), journal=[generated(1)])
    stored = await db.engine.get("r3")
    assert stored is not None
    assert stored.status == "running"


_SET_RECORD = "UPDATE operative_journal SET record = ? WHERE run_id = ? AND seq = ?"


async def test_corrupt_journal_row_names_run_and_seq_and_loses_nothing_else(db: Db) -> None:
    """A row that does not decode is a CorruptRecordError naming run and seq; every other
    entry and run still reads."""
    lease = await start(db, "r1")
    await db.store.append(lease, 1, [generated(1), generated(2), generated(3)])
    other = await start(db, "r2")
    await db.store.append(other, 1, [generated(1)])
    await execute(db.db, _SET_RECORD, "{not json", "r1", 2)
    with pytest.raises(CorruptRecordError) as info:
        await db.store.read("r1")
    assert "entry 2 of run 'r1'" in str(info.value)
    assert info.value.what.startswith("journal entry 2 of run 'r1'")
    assert [e.seq for e in await db.store.read("r1", after=2)] == [3]
    assert [e.seq for e in await db.store.read("r2")] == [0, 1]
    # A second corruption is seen at once (a failed read must not leave its connection
    # on an old snapshot).
    await execute(db.db, _SET_RECORD, '{"type": "no-such-record"}', "r2", 1)
    with pytest.raises(CorruptRecordError, match="entry 1 of run 'r2'"):
        await db.store.read("r2")
    # The rows stay as they are: seq 2 is still taken, later writes and the runs are fine.
    with pytest.raises(ConflictError):
        await db.store.append(lease, 2, [generated(2)])
    assert await db.store.append(lease, 4, [generated(4)]) is None
    record = await db.engine.get("r1")
    assert record is not None
    assert record.status == "running"


async def test_corrupt_run_row_names_the_run(db: Db) -> None:
    """A run row whose outcome or status does not decode is a CorruptRecordError naming it;
    other runs still read."""
    lease = await start(db, "r1")
    await db.engine.finish(lease, 1, Finished(outcome=outcome()))
    await start(db, "r2")
    await execute(db.db, "UPDATE operative_runs SET outcome = ? WHERE run_id = ?", "[1, 2", "r1")
    with pytest.raises(CorruptRecordError, match="run record 'r1'"):
        await db.engine.get("r1")
    with pytest.raises(CorruptRecordError, match="run record 'r1'"):
        await db.engine.list()
    await execute(db.db, "UPDATE operative_runs SET status = ? WHERE run_id = ?", "paused", "r2")
    with pytest.raises(CorruptRecordError, match="run record 'r2'"):
        await db.engine.get("r2")
    with pytest.raises(CorruptRecordError, match="run record 'r2'"):
        await db.engine.cancel("r2")
    assert await db.engine.get("r3") is None


# -- claims -------------------------------------------------------------------------------


async def test_only_runs_whose_lease_expired_are_claimed(db: Db) -> None:
    """claim takes running runs with ``lease_expires_at <= now``, up to limit."""
    await start(db, "r1", lease_seconds=10)
    db.clock.now += 1
    await start(db, "r2", lease_seconds=10)
    done = await start(db, "r3", lease_seconds=1)
    await db.engine.finish(done, 1, Finished(outcome=outcome()))
    assert await db.engine.claim(worker_id="w2", lease_seconds=5) == []
    db.clock.now = T0 + 9.5
    assert await db.engine.claim(worker_id="w2", lease_seconds=5) == []
    db.clock.now = T0 + 10  # r1 expires exactly now
    [first] = await db.engine.claim(worker_id="w2", lease_seconds=5)
    assert first == Lease(
        run_id="r1", worker_id="w2", fence=2, expires_at=T0 + 15, agent_name="agent"
    )
    db.clock.now = T0 + 30  # r1 (claimed until T0 + 15) and r2 have expired, r3 is finished
    leases = await db.engine.claim(worker_id="w3", lease_seconds=5)
    assert sorted((lease.run_id, lease.fence) for lease in leases) == [("r1", 3), ("r2", 2)]
    record = await db.engine.get("r2")
    assert record is not None
    assert (record.lease_owner, record.lease_expires_at, record.fence, record.updated_at) == (
        "w3",
        T0 + 35,
        2,
        T0 + 30,
    )


async def test_claim_filters_by_run_id_and_agent_and_limit(db: Db) -> None:
    """run_ids and agent_names narrow a claim; empty filters claim nothing."""
    for index, agent in enumerate(["a", "b", "a", "c"]):
        db.clock.now = T0 + index
        await start(db, f"r{index}", agent=agent, lease_seconds=1, session_id=f"s{index}")
    db.clock.now = T0 + 100
    claim = partial(db.engine.claim, worker_id="w", lease_seconds=1000)
    assert await claim(run_ids=[]) == []
    assert await claim(agent_names=[]) == []
    [lease] = await claim(run_ids=["r3", "nope"])
    assert (lease.run_id, lease.agent_name, lease.session_id) == ("r3", "c", "s3")
    assert [lease.run_id for lease in await claim(agent_names=["a"], limit=1)] == ["r0"]
    assert [lease.run_id for lease in await claim(agent_names=["a", "b"], run_ids=["r1"])] == ["r1"]
    assert [lease.run_id for lease in await claim()] == ["r2"]
    assert await claim() == []


async def test_a_claim_fences_out_the_previous_lease(db: Db) -> None:
    """Claiming increments the fence: the old lease's append, renew and finish fail, its
    release is ignored, and the new lease works."""
    old = await start(db, lease_seconds=5)
    await db.store.append(old, 1, [generated(1)])
    db.clock.now += 6
    [new] = await db.engine.claim(worker_id="w2", lease_seconds=5)
    assert new.fence == old.fence + 1
    with pytest.raises(LeaseLostError):
        await db.store.append(old, 2, [generated(2)])
    with pytest.raises(LeaseLostError):
        await db.engine.renew(old, lease_seconds=5)
    with pytest.raises(LeaseLostError):
        await db.engine.finish(old, 2, Finished(outcome=outcome()))
    await db.engine.release(old)  # ignored: the run stays with w2
    record = await db.engine.get("r1")
    assert record is not None
    assert (record.lease_owner, record.fence, record.status) == ("w2", 2, "running")
    assert await db.engine.claim(worker_id="w3", lease_seconds=5) == []
    assert await db.store.append(new, 2, [generated(2)]) is None
    assert [e.seq for e in await db.store.read("r1")] == [0, 1, 2]


async def test_a_worker_restarted_under_its_id_takes_its_own_runs_back_at_once(db: Db) -> None:
    """A claim takes at once the live runs its own worker id holds through another engine
    object (the worker restarted: no waiting out the lease); the new fence shuts out the
    old incarnation, whose writes are refused from then on."""
    old = await start(db, "r1", lease_seconds=600)  # w1 dies holding it
    await db.store.append(old, 1, [generated(1)])
    other = await start(db, "r2", lease_seconds=600, worker_id="w2")
    done = await start(db, "r3", lease_seconds=600)
    await db.engine.finish(done, 1, Finished(outcome=outcome()))
    # The engine that holds them never takes its own runs back (a polling worker would
    # otherwise take the runs it is running).
    assert await db.engine.claim(worker_id="w1", lease_seconds=600) == []
    [restarted] = db.more_engines(1)
    try:
        assert await restarted.claim(worker_id="w3", lease_seconds=600) == []
        [lease] = await restarted.claim(worker_id="w1", lease_seconds=600)
        assert (lease.run_id, lease.worker_id, lease.fence) == ("r1", "w1", old.fence + 1)
        assert lease.expires_at == T0 + 600  # the clock never moved
        assert await restarted.claim(worker_id="w1", lease_seconds=600) == []  # it holds r1
        # The old incarnation, should it still be alive, can write nothing more.
        with pytest.raises(LeaseLostError, match="another worker"):
            await db.store.append(old, 2, [generated(2)])
        with pytest.raises(LeaseLostError):
            await db.engine.renew(old, lease_seconds=600)
        with pytest.raises(LeaseLostError):
            await db.engine.finish(old, 2, Finished(outcome=outcome("error")))
        await db.engine.release(old)  # ignored: the lease is the new incarnation's
        record = await db.engine.get("r1")
        assert record is not None
        assert (record.status, record.lease_owner, record.fence) == ("running", "w1", 2)
        assert await db.store.append(lease, 2, [generated(2)]) is None
        finished = await restarted.finish(lease, 3, Finished(outcome=outcome()))
        assert finished.status == "completed"
        assert [e.seq for e in await db.store.read("r1")] == [0, 1, 2, 3]
        still = await db.engine.get("r2")  # another worker's live run stays where it is
        assert still is not None
        assert (still.lease_owner, still.fence) == ("w2", other.fence)
    finally:
        await restarted.aclose()


async def test_two_live_engines_under_one_worker_id_stay_fenced(db: Db) -> None:
    """Two live holders of one worker id take the run from each other, and only the
    latest claim can write: every write of the other is refused."""
    first = await start(db, "r1", lease_seconds=600)
    [second_engine] = db.more_engines(1)
    try:
        [second] = await second_engine.claim(worker_id="w1", lease_seconds=600)
        [third] = await db.engine.claim(worker_id="w1", lease_seconds=600)  # takes it back
        assert (first.fence, second.fence, third.fence) == (1, 2, 3)
        for stale in (first, second):
            with pytest.raises(LeaseLostError):
                await db.store.append(stale, 1, [generated(1)])
        assert await db.store.append(third, 1, [generated(1)]) is None
        assert [e.seq for e in await db.store.read("r1")] == [0, 1]
    finally:
        await second_engine.aclose()


async def test_a_released_or_expired_own_run_is_claimable_by_the_same_engine(db: Db) -> None:
    """The restart rule adds to the expiry rule: a run released, or whose lease expired,
    is claimable by any engine, the one that held it included."""
    released = await start(db, "r1", lease_seconds=600)
    await db.engine.release(released)
    await start(db, "r2", lease_seconds=5)
    db.clock.now += 5
    leases = await db.engine.claim(worker_id="w1", lease_seconds=600)
    assert sorted((lease.run_id, lease.fence) for lease in leases) == [("r1", 2), ("r2", 2)]


_OLD_SQLITE_RUNS = """CREATE TABLE operative_runs (
    run_id TEXT PRIMARY KEY NOT NULL, agent_name TEXT NOT NULL, session_id TEXT,
    status TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    lease_owner TEXT, lease_expires_at REAL NOT NULL DEFAULT 0,
    fence INTEGER NOT NULL DEFAULT 0, cancel_reason TEXT, outcome TEXT) WITHOUT ROWID"""
_OLD_POSTGRES_RUNS = """CREATE TABLE operative_runs (
    run_id TEXT COLLATE "C" PRIMARY KEY, agent_name TEXT NOT NULL, session_id TEXT,
    status TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL, lease_owner TEXT,
    lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0,
    cancel_reason TEXT, outcome TEXT)"""


async def test_a_database_from_before_the_lease_token_is_upgraded(durable_db: DurableDb) -> None:
    """Run records written before engines recorded their lease token get the column; a
    live lease of such a record counts as another incarnation's."""
    old = _OLD_SQLITE_RUNS if durable_db.name == "sqlite" else _OLD_POSTGRES_RUNS
    await execute(durable_db, old)
    await execute(
        durable_db,
        "INSERT INTO operative_runs (run_id, agent_name, status, created_at, updated_at, "
        "lease_owner, lease_expires_at, fence) VALUES (?, ?, 'running', ?, ?, ?, ?, ?)",
        "r0",
        "agent",
        T0,
        T0,
        "w1",
        T0 + 600,
        4,
    )
    clock = Clock()
    engine = durable_db.engine(clock=clock)
    try:
        [lease] = await engine.claim(worker_id="w1", lease_seconds=60)
        assert (lease.run_id, lease.fence) == ("r0", 5)
        assert await engine.claim(worker_id="w1", lease_seconds=60) == []
    finally:
        await engine.aclose()


# -- renew, finish, release, cancel ------------------------------------------------------


async def test_renew_extends_the_lease_and_returns_the_cancel_reason(db: Db) -> None:
    """renew moves the expiry to now + lease_seconds (keeping the run from claims) and
    reports a cancellation an operator asked for."""
    lease = await start(db, lease_seconds=10)
    db.clock.now += 8
    renewed, reason = await db.engine.renew(lease, lease_seconds=10)
    assert reason is None
    assert renewed == replace(lease, expires_at=T0 + 18)
    db.clock.now += 8  # past the first expiry, not the renewed one
    assert await db.engine.claim(worker_id="w2", lease_seconds=5) == []
    record = await db.engine.cancel("r1", "operator said stop")
    assert (record.status, record.cancel_reason) == ("running", "operator said stop")
    assert await db.engine.renew(renewed, lease_seconds=10) == (
        replace(lease, expires_at=T0 + 26),
        "operator said stop",
    )
    assert await db.store.append(renewed, 1, [generated(1)]) == "operator said stop"


@pytest.mark.parametrize(
    ("finish_reason", "status"),
    [
        ("stop-condition", "completed"),
        ("maximum-steps", "completed"),
        ("budget-exceeded", "completed"),
        ("aborted", "aborted"),
        ("error", "error"),
    ],
)
async def test_finish_commits_the_outcome_under_its_terminal_status(
    db: Db, finish_reason: str, status: str
) -> None:
    """finish records the outcome, frees the lease, bumps the fence and journals it last."""
    lease = await start(db)
    await db.store.append(lease, 1, [generated(1)])
    db.clock.now += 3
    result = outcome(finish_reason, content="done", error="boom", steps=1)
    finished = Finished(outcome=result, messages=(Message(id="t", role="user", content="x"),))
    record = await db.engine.finish(lease, 2, finished)
    assert record == await db.engine.get("r1")
    assert (record.status, record.outcome, record.updated_at) == (status, result, T0 + 3)
    assert (record.lease_owner, record.lease_expires_at, record.fence) == (None, 0.0, 2)
    entries = await db.store.read("r1")
    assert (entries[-1].seq, entries[-1].record) == (2, finished)
    with pytest.raises(LeaseLostError, match=f"{status} already"):
        await db.engine.finish(lease, 3, finished)
    with pytest.raises(LeaseLostError):
        await db.engine.renew(lease, lease_seconds=1)
    db.clock.now += 1000
    assert await db.engine.claim(worker_id="w2", lease_seconds=1) == []


async def test_finish_at_a_taken_seq_is_a_conflict_and_the_run_stays_running(db: Db) -> None:
    """The outcome and the last entry commit together or not at all."""
    lease = await start(db)
    await db.store.append(lease, 1, [generated(1)])
    with pytest.raises(ConflictError):
        await db.engine.finish(lease, 1, Finished(outcome=outcome()))
    record = await db.engine.get("r1")
    assert record is not None
    assert (record.status, record.fence, record.outcome) == ("running", 1, None)
    assert (await db.engine.finish(lease, 2, Finished(outcome=outcome()))).status == "completed"


async def test_release_makes_the_run_claimable_at_once(db: Db) -> None:
    """A released run is claimable without waiting for its lease; a lost lease's release
    is ignored."""
    lease = await start(db, lease_seconds=1000)
    await db.engine.release(lease)
    record = await db.engine.get("r1")
    assert record is not None
    assert (record.status, record.lease_owner, record.lease_expires_at) == ("running", None, 0)
    [claimed] = await db.engine.claim(worker_id="w2", lease_seconds=5)
    assert claimed.fence == 2
    await db.engine.release(lease)  # stale: nothing happens
    assert await db.engine.claim(worker_id="w3", lease_seconds=5) == []
    await db.engine.finish(claimed, 1, Finished(outcome=outcome()))
    await db.engine.release(claimed)  # finished: nothing happens
    record = await db.engine.get("r1")
    assert record is not None
    assert record.status == "completed"


async def test_cancel_of_a_held_run_only_flags_it(db: Db) -> None:
    """A run some worker holds keeps running with ``cancel_reason`` set; its worker sees
    the reason on its next write and ends it."""
    lease = await start(db, lease_seconds=10)
    db.clock.now += 2
    record = await db.engine.cancel("r1", "too slow")
    assert (record.status, record.cancel_reason, record.outcome) == ("running", "too slow", None)
    assert (record.lease_owner, record.fence, record.updated_at) == ("w1", 1, T0 + 2)
    assert await db.store.append(lease, 1, []) == "too slow"
    assert [e.seq for e in await db.store.read("r1")] == [0]


async def test_cancel_of_an_unheld_run_finishes_it_aborted(db: Db) -> None:
    """A run nobody holds ends aborted at once, with a ``finished`` entry after its last."""
    lease = await start(db, lease_seconds=10)
    await db.store.append(lease, 1, [generated(1), generated(2)])
    db.clock.now += 10
    record = await db.engine.cancel("r1", "abandoned")
    expected = RunOutcome(finish_reason="aborted", abort_reason="abandoned")
    assert (record.status, record.outcome, record.cancel_reason) == (
        "aborted",
        expected,
        "abandoned",
    )
    assert (record.lease_owner, record.fence) == (None, 2)
    last = (await db.store.read("r1"))[-1]
    assert (last.seq, last.record, last.at) == (3, Finished(outcome=expected), T0 + 10)
    with pytest.raises(LeaseLostError):
        await db.store.append(lease, 4, [generated(3)])
    db.clock.now += 5
    assert await db.engine.cancel("r1", "again") == record  # finished: unchanged
    assert await db.engine.claim(worker_id="w2", lease_seconds=5) == []
    released = await start(db, "r2", lease_seconds=1000)
    await db.engine.release(released)
    assert (await db.engine.cancel("r2")).status == "aborted"  # released: unheld
    with pytest.raises(RunNotFoundError):
        await db.engine.cancel("nobody")


# -- list ---------------------------------------------------------------------------------


async def test_list_filters_and_orders_newest_first(db: Db) -> None:
    """list applies every filter given (since inclusive, until exclusive), newest first
    (ties by run id), and stops at limit."""
    plan = [
        ("r1", "a", "s1", T0 + 100, "stop-condition"),
        ("r2", "b", "s1", T0 + 200, None),
        ("r4", "a", "s2", T0 + 300, "error"),
        ("r3", "a", None, T0 + 300, "aborted"),
        ("r5", "b", None, T0 + 400, None),
    ]
    for run_id, agent, session, at, reason in plan:
        db.clock.now = at
        lease = await start(db, run_id, agent=agent, session_id=session)
        if reason is not None:
            await db.engine.finish(lease, 1, Finished(outcome=outcome(reason)))

    async def ids(**filters: Any) -> list[str]:
        return [record.run_id for record in await db.engine.list(**filters)]

    assert await ids() == ["r5", "r3", "r4", "r2", "r1"]
    assert await ids(limit=2) == ["r5", "r3"]
    assert await ids(status="running") == ["r5", "r2"]
    assert await ids(status=["aborted", "error"]) == ["r3", "r4"]
    assert await ids(status="completed") == ["r1"]
    assert await ids(status=[]) == []
    assert await ids(agent_name="a") == ["r3", "r4", "r1"]
    assert await ids(session_id="s1") == ["r2", "r1"]
    assert await ids(since=T0 + 200) == ["r5", "r3", "r4", "r2"]
    assert await ids(until=T0 + 300) == ["r2", "r1"]
    assert await ids(since=T0 + 200, until=T0 + 300) == ["r2"]
    assert await ids(agent_name="a", status="running") == []
    assert await ids(agent_name="b", session_id="s1", status="running", since=T0) == ["r2"]
    assert await ids(agent_name="nobody") == []
    [record] = await db.engine.list(session_id="s2")
    assert record == await db.engine.get("r4")


# -- bad arguments ------------------------------------------------------------------------

_LEASE = Lease(run_id="r1", worker_id="w1", fence=1, expires_at=0.0)
_Call = Callable[[DurableEngine, CheckpointStore], Awaitable[object]]


def _start(**changes: Any) -> _Call:
    arguments: dict[str, Any] = {"run_id": "r9", "worker_id": "w", "lease_seconds": 1.0}
    arguments.update(changes)
    first = arguments.pop("started", started())
    return lambda engine, store: engine.start(first, **arguments)


_BAD_CALLS: dict[str, _Call] = {
    "start: empty run id": _start(run_id=""),
    "start: run id not a str": _start(run_id=5),
    "start: NUL in run id": _start(run_id="r\x00"),
    "start: lease_seconds 0": _start(lease_seconds=0),
    "start: lease_seconds negative": _start(lease_seconds=-1),
    "start: lease_seconds infinite": _start(lease_seconds=math.inf),
    "start: lease_seconds NaN": _start(lease_seconds=math.nan),
    "start: lease_seconds bool": _start(lease_seconds=True),
    "start: lease_seconds str": _start(lease_seconds="1"),
    "start: worker id None": _start(worker_id=None),
    "start: NUL in worker id": _start(worker_id="w\x00"),
    "start: session id not a str": _start(session_id=3),
    "start: not a Started": _start(started=generated(1)),
    "start: NUL in agent name": _start(started=started("a\x00b")),
    "append: seq 0": lambda engine, store: store.append(_LEASE, 0, []),
    "append: seq bool": lambda engine, store: store.append(_LEASE, True, []),
    "append: seq str": lambda engine, store: store.append(_LEASE, "1", []),  # type: ignore[arg-type]
    "append: not a record": lambda engine, store: store.append(_LEASE, 1, [object()]),  # type: ignore[list-item]
    "append: records a str": lambda engine, store: store.append(_LEASE, 1, "ab"),  # type: ignore[arg-type]
    "append: not a lease": lambda engine, store: store.append("r1", 1, []),  # type: ignore[arg-type]
    "read: empty run id": lambda engine, store: store.read(""),
    "read: after not an int": lambda engine, store: store.read("r1", after="0"),  # type: ignore[arg-type]
    "claim: limit 0": lambda engine, store: engine.claim(worker_id="w", lease_seconds=1, limit=0),
    "claim: limit bool": lambda engine, store: engine.claim(
        worker_id="w", lease_seconds=1, limit=True
    ),
    "claim: lease_seconds 0": lambda engine, store: engine.claim(worker_id="w", lease_seconds=0),
    "claim: worker id not a str": lambda engine, store: engine.claim(
        worker_id=3,  # type: ignore[arg-type]
        lease_seconds=1,
    ),
    "claim: empty run id": lambda engine, store: engine.claim(
        worker_id="w", lease_seconds=1, run_ids=[""]
    ),
    "claim: agent name None": lambda engine, store: engine.claim(
        worker_id="w",
        lease_seconds=1,
        agent_names=[None],  # type: ignore[list-item]
    ),
    "renew: lease_seconds 0": lambda engine, store: engine.renew(_LEASE, lease_seconds=0),
    "renew: not a lease": lambda engine, store: engine.renew(None, lease_seconds=1),  # type: ignore[arg-type]
    "finish: seq 0": lambda engine, store: engine.finish(_LEASE, 0, Finished(outcome=outcome())),
    "finish: seq negative": lambda engine, store: engine.finish(
        _LEASE, -1, Finished(outcome=outcome())
    ),
    "finish: not a Finished": lambda engine, store: engine.finish(_LEASE, 1, generated(1)),  # type: ignore[arg-type]
    "release: not a lease": lambda engine, store: engine.release("r1"),  # type: ignore[arg-type]
    "cancel: empty reason": lambda engine, store: engine.cancel("r1", ""),
    "cancel: reason not a str": lambda engine, store: engine.cancel("r1", 3),  # type: ignore[arg-type]
    "cancel: NUL in reason": lambda engine, store: engine.cancel("r1", "a\x00"),
    "cancel: empty run id": lambda engine, store: engine.cancel(""),
    "get: run id not a str": lambda engine, store: engine.get(None),  # type: ignore[arg-type]
    "list: limit 0": lambda engine, store: engine.list(limit=0),
    "list: unknown status": lambda engine, store: engine.list(status="paused"),  # type: ignore[arg-type]
    "list: unknown status in a list": lambda engine, store: engine.list(
        status=["running", "paused"]  # type: ignore[list-item]
    ),
    "list: since not a number": lambda engine, store: engine.list(since="yesterday"),  # type: ignore[arg-type]
    "list: until NaN": lambda engine, store: engine.list(until=math.nan),
    "list: agent name not a str": lambda engine, store: engine.list(agent_name=3),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", _BAD_CALLS.values(), ids=_BAD_CALLS.keys())
async def test_bad_arguments_are_invalid_and_change_nothing(db: Db, call: _Call) -> None:
    """Each bad argument raises InvalidArgument before anything is written."""
    lease = await start(db, "r1")
    with pytest.raises(InvalidArgument):
        await call(db.engine, db.store)
    assert [record.run_id for record in await db.engine.list()] == ["r1"]
    assert await db.engine.renew(lease, lease_seconds=10) == (lease, None)
    assert [e.seq for e in await db.store.read("r1")] == [0]


def _unlock(conn: Any) -> None:
    """Roll back and close: the server has released the locks when this returns (a bare
    close lets the server notice the disconnection a moment later)."""
    conn.rollback() if not isinstance(conn, sqlite3.Connection) else conn.execute("ROLLBACK")
    conn.close()


# -- races -------------------------------------------------------------------------------


@attrs.define
class Gate:
    """Another connection holding the runs table (PostgreSQL: ``LOCK TABLE ... EXCLUSIVE``;
    SQLite: ``BEGIN IMMEDIATE``), so the claims that queue behind it all start at once
    when it is opened."""

    durable_db: DurableDb
    conn: Any

    @classmethod
    async def close(cls, durable_db: DurableDb) -> Gate:
        def lock() -> Any:
            if durable_db.name == "sqlite":
                conn = sqlite3.connect(
                    durable_db.location, isolation_level=None, check_same_thread=False
                )
                conn.execute("BEGIN IMMEDIATE")
                return conn
            import psycopg

            pg = psycopg.connect(durable_db.location)
            pg.execute("LOCK TABLE operative_runs IN EXCLUSIVE MODE")
            return pg

        return cls(durable_db, await trio.to_thread.run_sync(lock))

    async def open(self, waiters: int) -> None:
        """Open once ``waiters`` claims wait (PostgreSQL; SQLite cannot tell, so it opens
        when every task of this test waits on its thread)."""
        await trio.testing.wait_all_tasks_blocked()
        if self.durable_db.name == "postgres":
            count = (
                "SELECT count(*) FROM pg_locks "
                "WHERE relation = 'operative_runs'::regclass AND NOT granted"
            )
            with trio.fail_after(20):
                while True:
                    row = await trio.to_thread.run_sync(lambda: self.conn.execute(count).fetchone())
                    if row[0] >= waiters:
                        break
                    await trio.sleep(0.005)  # the server's lock queue, not a test clock
        await trio.to_thread.run_sync(_unlock, self.conn)


async def test_workers_racing_for_one_expired_run_exactly_one_wins(db: Db) -> None:
    """Eight engine objects (own connections, own threads) claim one expired run at the
    same moment: one lease, fence 2."""
    engines = db.more_engines(8)
    won: list[tuple[int, list[Lease]]] = []
    try:
        for engine in engines:
            await engine.get("warm-up")  # connected, tables found
        await start(db, "contested", lease_seconds=1)
        db.clock.now += 5
        gate = await Gate.close(db.db)

        async def worker(index: int, engine: DurableEngine) -> None:
            won.append((index, await engine.claim(worker_id=f"w{index}", lease_seconds=60)))

        async with trio.open_nursery() as nursery:
            for index, engine in enumerate(engines):
                nursery.start_soon(worker, index, engine)
            await gate.open(waiters=len(engines))
    finally:
        for engine in engines:
            await engine.aclose()
    winners = [(index, leases) for index, leases in won if leases]
    assert len(won) == 8
    assert len(winners) == 1
    index, [lease] = winners[0]
    assert (lease.run_id, lease.fence, lease.worker_id) == ("contested", 2, f"w{index}")
    record = await db.engine.get("contested")
    assert record is not None
    assert (record.fence, record.lease_owner) == (2, f"w{index}")


async def test_workers_claiming_many_runs_at_once_never_share_one(db: Db) -> None:
    """Eight workers claim two at a time until nothing is left: every run exactly once."""
    runs = [f"r{index:02}" for index in range(24)]
    for run_id in runs:
        await start(db, run_id, lease_seconds=1)
    db.clock.now += 5
    engines = db.more_engines(8)
    claimed: list[str] = []
    try:
        for engine in engines:
            await engine.get("warm-up")
        gate = await Gate.close(db.db)

        async def worker(index: int, engine: DurableEngine) -> None:
            while leases := await engine.claim(worker_id=f"w{index}", lease_seconds=60, limit=2):
                assert all(lease.fence == 2 for lease in leases)
                claimed.extend(lease.run_id for lease in leases)

        async with trio.open_nursery() as nursery:
            for index, engine in enumerate(engines):
                nursery.start_soon(worker, index, engine)
            await gate.open(waiters=len(engines))
    finally:
        for engine in engines:
            await engine.aclose()
    assert sorted(claimed) == runs
    assert {record.fence for record in await db.engine.list()} == {2}


_CLAIMER = """
import json, sys, trio
{imports}

async def main():
    engine = {engine}
    async with engine:
        await engine.get("warm-up")  # connected: the claims start together
        print("ready", flush=True)
        sys.stdin.readline()
        claimed = []
        while leases := await engine.claim(worker_id=sys.argv[1], lease_seconds=3600, limit=2):
            claimed += [[lease.run_id, lease.fence] for lease in leases]
        print(json.dumps(claimed), flush=True)

trio.run(main)
"""


async def _read_line(stream: trio.abc.ReceiveStream) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        line += chunk
    return line


async def test_processes_racing_for_expired_runs_claim_each_exactly_once(
    durable_db: DurableDb,
) -> None:
    """Four OS processes claim until nothing is left, released together (on PostgreSQL
    from behind one table lock): every run is leased exactly once overall."""
    runs = [f"run-{index:02}" for index in range(16)]
    # Leases that ended long ago on the real clock the child processes use.
    engine = durable_db.engine(clock=lambda: time.time() - 3600)
    try:
        for run_id in runs:
            await engine.start(started(), run_id=run_id, worker_id="gone", lease_seconds=1)
    finally:
        await engine.aclose()
    source = textwrap.dedent(_CLAIMER).format(
        imports=durable_db.imports, engine=durable_db.engine_source
    )
    processes = [
        await trio.lowlevel.open_process(
            [sys.executable, "-c", source, f"p{index}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(4)
    ]
    outputs: list[bytes] = []
    try:
        with trio.fail_after(60):
            for process in processes:
                assert process.stdout is not None
                assert await _read_line(process.stdout) == b"ready\n"
            gate = await Gate.close(durable_db) if durable_db.name == "postgres" else None
            for process in processes:
                assert process.stdin is not None
                await process.stdin.send_all(b"go\n")
            if gate is not None:
                await gate.open(waiters=len(processes))
            for process in processes:
                assert process.stdout is not None
                assert process.stderr is not None
                outputs.append(await _read_line(process.stdout))
                code = await process.wait()
                errors = b"".join([chunk async for chunk in process.stderr])
                assert code == 0, errors.decode()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    claimed = [tuple(pair) for output in outputs for pair in json.loads(output)]
    assert sorted(claimed) == [(run_id, 2) for run_id in runs]
    async with durable_db.engine() as check:
        records = await check.list()
    assert sorted((r.run_id, r.fence) for r in records) == [(run_id, 2) for run_id in runs]


@pytest.mark.parametrize("durable_db", ["postgres"], indirect=True)
async def test_postgres_claims_skip_locked_runs_instead_of_waiting(db: Db) -> None:
    """A run whose row another transaction holds is passed over at once (SKIP LOCKED);
    the other expired runs are claimed. (SQLite serialises claims with BEGIN IMMEDIATE.)"""
    import psycopg

    for run_id in ("a", "b"):
        await start(db, run_id, lease_seconds=1)
    db.clock.now += 5
    holder: psycopg.Connection[Any] = await trio.to_thread.run_sync(
        partial(psycopg.connect, db.db.location)
    )
    try:
        await trio.to_thread.run_sync(
            holder.execute, "SELECT 1 FROM operative_runs WHERE run_id = 'a' FOR UPDATE"
        )
        with trio.fail_after(5):
            leases = await db.engine.claim(worker_id="w2", lease_seconds=5)
        assert [lease.run_id for lease in leases] == ["b"]
    finally:
        await trio.to_thread.run_sync(_unlock, holder)
    [lease] = await db.engine.claim(worker_id="w3", lease_seconds=5)
    assert (lease.run_id, lease.fence) == ("a", 2)


def _lock(durable_db: DurableDb) -> Callable[[], None]:
    """Hold the run row (PostgreSQL) or the whole file (SQLite) from another connection."""
    if durable_db.name == "sqlite":
        conn = sqlite3.connect(durable_db.location, isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
        return partial(_unlock, conn)
    import psycopg

    pg = psycopg.connect(durable_db.location)
    pg.execute("SELECT 1 FROM operative_runs WHERE run_id = 'r1' FOR UPDATE")
    return partial(_unlock, pg)


async def test_a_cancelled_write_stops_writes_nothing_and_the_object_stays_usable(
    db: Db,
) -> None:
    """An append waiting on another connection's lock stops promptly when its caller is
    cancelled (cancel_safe on PostgreSQL, interrupt on SQLite) and commits nothing."""
    lease = await start(db)
    release = await trio.to_thread.run_sync(_lock, db.db)
    try:
        started_at = time.monotonic()
        with trio.move_on_after(0.2) as scope:
            await db.store.append(lease, 1, [generated(1)])
        assert scope.cancelled_caught
        assert time.monotonic() - started_at < 3
    finally:
        await trio.to_thread.run_sync(release)
    assert [e.seq for e in await db.store.read("r1")] == [0]
    assert await db.store.append(lease, 1, [generated(1)]) is None
