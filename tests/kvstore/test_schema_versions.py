"""Schema versions recorded in the database, and migrations that run once.

Every SQL-backed object (key-value store, durable engine and journal, run store) brings
its schema up to date when it opens a connection, and records the version in the
``operative_schema`` table. Databases written before versions were recorded (made here
with the very DDL operative used then) open and are brought up to date, their data
intact; a database a newer operative upgraded is refused with ``SchemaVersionError``.
Each backend: SQLite and PostgreSQL (a schema of its own per test, through the DSN's
``search_path``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from durable.conftest import DurableDb, durable_db

from operative import OperativeError
from operative._sql import (
    Database,
    Migration,
    PostgresDatabase,
    Schema,
    SqliteDatabase,
    ddl,
)
from operative.durable import Finished, RunOutcome, Started
from operative.errors import SchemaVersionError
from operative.kvstore import PostgresStore, Put, SqliteStore, Versioned
from operative.runstore import PostgresRunStore, SqliteRunStore

__all__ = ["durable_db"]

CURRENT = {"kv:operative_kv": 1, "durable": 2, "run store": 2}

# -- the DDL of operative before schema versions (verbatim) --------------------------------

_OLD_SQLITE = (
    "CREATE TABLE IF NOT EXISTS operative_kv ("
    "key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL, version INTEGER NOT NULL"
    ") WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS operative_runs (
        run_id TEXT PRIMARY KEY NOT NULL,
        agent_name TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        lease_owner TEXT,
        lease_expires_at REAL NOT NULL DEFAULT 0,
        fence INTEGER NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        outcome TEXT,
        lease_token TEXT
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS operative_runs_runnable "
    "ON operative_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_created ON operative_runs (created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_agent ON operative_runs (agent_name, created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_session ON operative_runs (session_id, created_at)",
    """CREATE TABLE IF NOT EXISTS operative_journal (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        record TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS operative_store_runs_status "
    "ON operative_runs (status, created_at, run_id)",
    "CREATE INDEX IF NOT EXISTS operative_store_tool_calls "
    "ON operative_journal (at, run_id, seq) WHERE kind = 'tool.started'",
    "CREATE INDEX IF NOT EXISTS operative_store_tool_names ON operative_journal (((CASE WHEN "
    "json_valid(record) THEN CASE WHEN json_type(record, '$.tool_name') = 'text' THEN "
    "json_extract(record, '$.tool_name') END END)), at, run_id, seq) "
    "WHERE kind = 'tool.started'",
)
_OLD_POSTGRES = (
    'CREATE TABLE IF NOT EXISTS "operative_kv" ('
    'key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL, version BIGINT NOT NULL)',
    """CREATE TABLE IF NOT EXISTS operative_runs (
        run_id TEXT COLLATE "C" PRIMARY KEY,
        agent_name TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        lease_owner TEXT,
        lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        fence BIGINT NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        outcome TEXT,
        lease_token TEXT
    )""",
    "ALTER TABLE operative_runs ADD COLUMN IF NOT EXISTS lease_token TEXT",
    "CREATE INDEX IF NOT EXISTS operative_runs_runnable "
    "ON operative_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_created ON operative_runs (created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_agent ON operative_runs (agent_name, created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_session ON operative_runs (session_id, created_at)",
    """CREATE TABLE IF NOT EXISTS operative_journal (
        run_id TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        record TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
    """CREATE OR REPLACE FUNCTION operative_store_json(raw text) RETURNS json
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
    BEGIN
        RETURN raw::json;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END
    $$""",
    "CREATE INDEX IF NOT EXISTS operative_store_runs_status "
    "ON operative_runs (status, created_at, run_id)",
    "CREATE INDEX IF NOT EXISTS operative_store_tool_calls "
    "ON operative_journal (at, run_id, seq) WHERE kind = 'tool.started'",
    "CREATE INDEX IF NOT EXISTS operative_store_tool_names ON operative_journal (((CASE WHEN "
    "json_typeof((operative_store_json(record) #> '{tool_name}')) = 'string' THEN "
    "(operative_store_json(record) #>> '{tool_name}') END)), at, run_id, seq) "
    "WHERE kind = 'tool.started'",
)
_OLD_ROWS = (
    ("INSERT INTO operative_kv VALUES ('greeting', 'hello', 3)", ()),
    (
        "INSERT INTO operative_runs (run_id, agent_name, status, created_at, updated_at, "
        "lease_expires_at, fence) VALUES ('r0', 'agent', 'running', 100.0, 100.0, 0, 1)",
        (),
    ),
    (
        "INSERT INTO operative_journal VALUES ('r0', 0, 'started', ?, 100.0)",
        ('{"type":"started","messages":[],"agent_name":"agent"}',),
    ),
)


# -- helpers ------------------------------------------------------------------------------


def _run_sql(db: DurableDb, statements: Any) -> list[Any]:
    """Run ``(sql, params)`` pairs (``?`` placeholders) behind the objects' backs; the
    last statement's rows."""
    rows: list[Any] = []
    if db.name == "sqlite":
        conn = sqlite3.connect(db.location, isolation_level=None)
        try:
            for sql, params in statements:
                rows = conn.execute(sql, params).fetchall()
        finally:
            conn.close()
        return rows
    import psycopg

    with psycopg.connect(db.location, autocommit=True) as pg:
        for sql, params in statements:
            cursor = pg.execute(sql.replace("?", "%s") if params else sql, params or None)
            rows = cursor.fetchall() if cursor.description else []
    return rows


async def run_sql(db: DurableDb, *statements: str | tuple[str, tuple[Any, ...]]) -> list[Any]:
    pairs = [(s, ()) if isinstance(s, str) else s for s in statements]
    return await trio.to_thread.run_sync(partial(_run_sql, db, pairs))


async def versions(db: DurableDb) -> dict[str, int]:
    """The recorded versions ({} when nothing is recorded, not even the table)."""
    exists = (
        "SELECT count(*) FROM sqlite_master WHERE name = 'operative_schema'"
        if db.name == "sqlite"
        else "SELECT count(*) FROM pg_tables WHERE tablename = 'operative_schema' "
        "AND schemaname = current_schema()"
    )
    if await run_sql(db, exists) == [(0,)]:
        return {}
    return dict(await run_sql(db, "SELECT name, version FROM operative_schema"))


def kv(db: DurableDb) -> Any:
    return SqliteStore(db.location) if db.name == "sqlite" else PostgresStore(db.location)


def run_store(db: DurableDb) -> Any:
    return SqliteRunStore(db.location) if db.name == "sqlite" else PostgresRunStore(db.location)


def database(db: DurableDb, *schemas: Schema, max_connections: int = 4) -> Database:
    """A bare database object over ``db`` that keeps ``schemas``."""
    if db.name == "sqlite":
        return SqliteDatabase(
            db.location,
            owner="test",
            max_connections=max_connections,
            busy_timeout=10,
            schemas=schemas,
        )
    return PostgresDatabase(
        db.location, owner="test", max_connections=max_connections, schemas=schemas
    )


def counted(name: str, *steps: str, log: list[str]) -> Schema:
    """A schema whose migration *n* logs ``name:n`` and creates table ``steps[n - 1]``."""

    def step(number: int, table: str) -> Migration:
        def apply(conn: Any, dialect: Any) -> None:
            log.append(f"{name}:{number}")
            ddl(f"CREATE TABLE {table} (x {{int}})")(conn, dialect)

        return Migration(f"table {table}", apply)

    return Schema(name=name, migrations=tuple(step(n, t) for n, t in enumerate(steps, start=1)))


async def _all_use(objects: list[Database]) -> None:
    """Every object opens all its connections at once (each runs the migration check)."""
    gate = trio.Event()

    async def use(db: Database) -> None:
        await gate.wait()
        await db.call(lambda conn: conn.execute("SELECT 1").fetchall())

    async with trio.open_nursery() as nursery:
        for db in objects:
            for _ in range(4):
                nursery.start_soon(use, db)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()


# -- fresh databases ----------------------------------------------------------------------


async def test_a_new_database_records_the_version_of_every_schema(durable_db: DurableDb) -> None:
    """The first use of each object creates its schema and records its version."""
    async with kv(durable_db) as store:
        await store.get("k")
    assert await versions(durable_db) == {"kv:operative_kv": 1}
    async with durable_db.engine() as engine:
        await engine.get("r")
    async with run_store(durable_db) as runs:
        await runs.runs()
    assert await versions(durable_db) == CURRENT


async def test_each_key_value_table_is_a_schema_of_its_own(durable_db: DurableDb) -> None:
    """A second table in the same database gets its own version record (and its table)."""
    table = PostgresStore if durable_db.name == "postgres" else SqliteStore
    async with table(durable_db.location) as one, table(durable_db.location, table="other") as two:
        await one.conditional_batch([Put(key="k", value="1")])
        await two.conditional_batch([Put(key="k", value="2")])
        assert (await one.get("k"), await two.get("k")) == (
            Versioned(key="k", value="1", version=1),
            Versioned(key="k", value="2", version=1),
        )
    assert await versions(durable_db) == {"kv:operative_kv": 1, "kv:other": 1}


# -- databases from before versions were recorded ---------------------------------------------


async def test_a_database_from_before_versions_opens_and_is_brought_up_to_date(
    durable_db: DurableDb,
) -> None:
    """A database made by the DDL of the code before schema versions, with data in it,
    opens with every object: the data reads back, and every schema is recorded current."""
    old = _OLD_SQLITE if durable_db.name == "sqlite" else _OLD_POSTGRES
    await run_sql(durable_db, *old, *_OLD_ROWS)
    assert await run_sql(durable_db, "SELECT count(*) FROM operative_kv") == [(1,)]

    async with kv(durable_db) as store:
        assert await store.get("greeting") == Versioned(key="greeting", value="hello", version=3)
        assert await store.conditional_batch([Put(key="greeting", value="hi")]) == (4,)
    async with durable_db.engine(clock=lambda: 200.0) as engine:
        [lease] = await engine.claim(worker_id="w", lease_seconds=10)
        assert (lease.run_id, lease.fence) == ("r0", 2)
        record = await engine.finish(
            lease, 1, Finished(outcome=RunOutcome(finish_reason="stop-condition"))
        )
        assert record.status == "completed"
    async with durable_db.store() as journal:
        entries = await journal.read("r0")
        assert [(entry.seq, type(entry.record)) for entry in entries] == [
            (0, Started),
            (1, Finished),
        ]
    async with run_store(durable_db) as runs:
        page = await runs.runs()
        assert [summary.run_id for summary in page.items] == ["r0"]
    assert await versions(durable_db) == CURRENT


# -- newer databases ----------------------------------------------------------------------


async def test_a_database_a_newer_operative_upgraded_is_refused(durable_db: DurableDb) -> None:
    """A recorded version above this code's: SchemaVersionError saying to upgrade, raised
    by the first call, and the database is left as it was."""
    async with durable_db.engine() as engine:
        await engine.get("r")
    await run_sql(durable_db, "UPDATE operative_schema SET version = 7 WHERE name = 'durable'")
    engine, journal, runs = durable_db.engine(), durable_db.store(), run_store(durable_db)
    for opened, first_call in (
        (engine, partial(engine.get, "r")),
        (journal, partial(journal.read, "r")),
        (runs, runs.runs),
    ):
        async with opened:
            with pytest.raises(SchemaVersionError) as info:
                await first_call()
        error = info.value
        assert isinstance(error, OperativeError)
        assert (error.found, error.supported) == (7, 2)
        assert "'durable' schema" in str(error)
        assert "version 7" in str(error)
        assert "Upgrade operative" in str(error)
    assert await versions(durable_db) == {"durable": 7}  # the run store recorded nothing


# -- migrations run once, whole ---------------------------------------------------------------


async def test_a_migration_runs_once_however_many_connections_open_together(
    durable_db: DurableDb,
) -> None:
    """Eight connections of two objects open a new database at once: each migration is
    applied exactly once, and later connections apply nothing."""
    log: list[str] = []
    schema = counted("test", "t_one", "t_two", log=log)
    first, second = database(durable_db, schema), database(durable_db, schema)
    try:
        await _all_use([first, second])
        assert sorted(log) == ["test:1", "test:2"]
        third = database(durable_db, schema)
        try:
            await third.call(lambda conn: None)
        finally:
            await third.aclose()
    finally:
        await first.aclose()
        await second.aclose()
    assert sorted(log) == ["test:1", "test:2"]
    assert (await versions(durable_db))["test"] == 2


async def test_only_the_missing_migrations_run(durable_db: DurableDb) -> None:
    """A database at version 1 of a schema gets migration 2 only."""
    log: list[str] = []
    db = database(durable_db, counted("test", "t_one", log=log))
    try:
        await db.call(lambda conn: None)
    finally:
        await db.aclose()
    assert log == ["test:1"]
    db = database(durable_db, counted("test", "t_one", "t_two", log=log))
    try:
        await db.call(lambda conn: None)
    finally:
        await db.aclose()
    assert log == ["test:1", "test:2"]
    assert (await versions(durable_db))["test"] == 2


async def test_a_failing_migration_leaves_nothing_behind(durable_db: DurableDb) -> None:
    """Migrations apply in one transaction: when one fails, the ones before it in the
    same upgrade are rolled back too and no version is recorded; a fixed program then
    applies them all."""
    log: list[str] = []

    def broken(conn: Any, dialect: Any) -> None:
        conn.execute("CREATE TABLE t_half (x INTEGER)")
        raise RuntimeError("migration 2 is broken")

    good = counted("test", "t_one", "t_two", log=log)
    bad = Schema(name="test", migrations=(good.migrations[0], Migration("broken", broken)))
    db = database(durable_db, bad)
    try:
        with pytest.raises(RuntimeError, match="broken"):
            await db.call(lambda conn: None)
    finally:
        await db.aclose()
    tables = (
        "SELECT name FROM sqlite_master WHERE name LIKE 't_%'"
        if durable_db.name == "sqlite"
        else "SELECT tablename FROM pg_tables WHERE tablename LIKE 't_%' "
        "AND schemaname = current_schema()"
    )
    assert await run_sql(durable_db, tables) == []
    assert "test" not in await versions(durable_db)
    db = database(durable_db, good)
    try:
        await db.call(lambda conn: None)
    finally:
        await db.aclose()
    assert sorted(row[0] for row in await run_sql(durable_db, tables)) == ["t_one", "t_two"]
    assert (await versions(durable_db))["test"] == 2


_OPENER = """
import sys, trio
{imports}

async def main():
    async with {engine} as engine:
        sys.stdin.readline()
        await engine.get("r")

trio.run(main)
"""


async def test_processes_opening_a_new_database_together_all_succeed(
    durable_db: DurableDb,
) -> None:
    """Four processes open a new database at the same moment: one creates the schema,
    the others find it; none fails."""
    source = textwrap.dedent(_OPENER).format(
        imports=durable_db.imports, engine=durable_db.engine_source
    )
    processes = [
        await trio.lowlevel.open_process(
            [sys.executable, "-c", source], stdin=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    try:
        with trio.fail_after(60):
            for process in processes:
                assert process.stdin is not None
                await process.stdin.send_all(b"go\n")
            for process in processes:
                assert process.stderr is not None
                errors = b"".join([chunk async for chunk in process.stderr])
                assert await process.wait() == 0, errors.decode()
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert await versions(durable_db) == {"durable": 2}


async def test_a_current_database_opens_without_the_write_lock(tmp_path: Any) -> None:
    """SQLite: once every schema is current, a new connection only reads the versions, so
    it opens while another process holds the file's write lock."""
    path = str(tmp_path / "x.db")
    async with SqliteStore(path) as store:
        await store.conditional_batch([Put(key="k", value="v")])
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with trio.fail_after(5):
            async with SqliteStore(path, busy_timeout=0) as store:
                assert await store.get("k") == Versioned(key="k", value="v", version=1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
