"""operative's own stores and engines (memory, SQLite, PostgreSQL) pass the conformance kits."""

from __future__ import annotations

import itertools
import os
import sqlite3
from collections.abc import Callable

import pytest
import trio

from operative.durable import (
    CheckpointStore,
    DurableEngine,
    PostgresCheckpointStore,
    PostgresEngine,
    SqliteCheckpointStore,
    SqliteEngine,
)
from operative.kvstore import ConditionalTextValueStore, MemoryStore, PostgresStore, SqliteStore
from operative.testing.conformance import EngineConformance, StoreConformance

_names = itertools.count()
_SET_RECORD = "UPDATE operative_journal SET record = ? WHERE run_id = ? AND seq = ?"


class TestMemoryStore(StoreConformance):
    async def make_store(self) -> ConditionalTextValueStore:
        return MemoryStore()


class TestSqliteStore(StoreConformance):
    corruptions = ("value-bytes", "value-blob", "version-text", "version-zero")

    async def make_store(self) -> ConditionalTextValueStore:
        return SqliteStore(self.tmp_path / "kv.db")

    def store_in_subprocess(self) -> str:
        path = str(self.tmp_path / "kv.db")
        return f"from operative.kvstore import SqliteStore\nstore = SqliteStore({path!r})"

    async def corrupt(self, key: str, kind: str) -> None:
        sql = {
            "value-bytes": "UPDATE operative_kv SET value = CAST(x'fffe41' AS TEXT) WHERE key = ?",
            "value-blob": "UPDATE operative_kv SET value = x'80' WHERE key = ?",
            "version-text": "UPDATE operative_kv SET version = 'abc' WHERE key = ?",
            "version-zero": "UPDATE operative_kv SET version = 0 WHERE key = ?",
        }[kind]

        def write() -> None:
            conn = sqlite3.connect(self.tmp_path / "kv.db")
            with conn:
                conn.execute(sql, (key,))
            conn.close()

        await trio.to_thread.run_sync(write)


class TestPostgresStore(StoreConformance):
    corruptions = ("value-null", "version-null", "version-zero", "version-negative")

    @pytest.fixture(autouse=True)
    def _database(self, postgres_dsn: str) -> None:
        self.dsn = postgres_dsn
        self.table = f"kit_kv_{os.getpid()}_{next(_names)}"

    async def make_store(self) -> ConditionalTextValueStore:
        return PostgresStore(self.dsn, table=self.table)

    def store_in_subprocess(self) -> str:
        return (
            "from operative.kvstore import PostgresStore\n"
            f"store = PostgresStore({self.dsn!r}, table={self.table!r})"
        )

    async def corrupt(self, key: str, kind: str) -> None:
        import psycopg

        table = f'"{self.table}"'
        statements = {
            "value-null": [
                f"ALTER TABLE {table} ALTER COLUMN value DROP NOT NULL",
                f"UPDATE {table} SET value = NULL WHERE key = %s",
            ],
            "version-null": [
                f"ALTER TABLE {table} ALTER COLUMN version DROP NOT NULL",
                f"UPDATE {table} SET version = NULL WHERE key = %s",
            ],
            "version-zero": [f"UPDATE {table} SET version = 0 WHERE key = %s"],
            "version-negative": [f"UPDATE {table} SET version = -7 WHERE key = %s"],
        }[kind]

        def write() -> None:
            with psycopg.connect(self.dsn, autocommit=True) as pg:
                for statement in statements:
                    pg.execute(statement, (key,) if "%s" in statement else ())

        await trio.to_thread.run_sync(write)


class TestSqliteEngine(EngineConformance):
    async def make_engine(
        self, clock: Callable[[], float]
    ) -> tuple[DurableEngine, CheckpointStore]:
        path = self.tmp_path / "runs.db"
        return SqliteEngine(path, clock=clock), SqliteCheckpointStore(path, clock=clock)

    async def corrupt_journal(self, run_id: str, seq: int) -> None:
        def write() -> None:
            conn = sqlite3.connect(self.tmp_path / "runs.db")
            with conn:
                conn.execute(_SET_RECORD, ("{not json", run_id, seq))
            conn.close()

        await trio.to_thread.run_sync(write)

    def engine_in_subprocess(self) -> str:
        path = str(self.tmp_path / "runs.db")
        return f"from operative.durable import SqliteEngine\nengine = SqliteEngine({path!r})"


class TestPostgresEngine(EngineConformance):
    @pytest.fixture(autouse=True)
    def _database(self, postgres_dsn: str) -> None:
        import psycopg

        schema = f"kit_durable_{os.getpid()}_{next(_names)}"
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        self.dsn = f"{postgres_dsn} options='-csearch_path={schema}'"

    async def make_engine(
        self, clock: Callable[[], float]
    ) -> tuple[DurableEngine, CheckpointStore]:
        return PostgresEngine(self.dsn, clock=clock), PostgresCheckpointStore(self.dsn, clock=clock)

    async def corrupt_journal(self, run_id: str, seq: int) -> None:
        import psycopg

        def write() -> None:
            with psycopg.connect(self.dsn, autocommit=True) as pg:
                pg.execute(_SET_RECORD.replace("?", "%s"), ('{"type": "no-such"}', run_id, seq))

        await trio.to_thread.run_sync(write)

    def engine_in_subprocess(self) -> str:
        return (
            f"from operative.durable import PostgresEngine\nengine = PostgresEngine({self.dsn!r})"
        )


@pytest.mark.realserver
class TestSqliteStoreAtLength(StoreConformance):
    """The linearizability check at 400 examples, outside the default run."""

    hypothesis_examples = 400

    async def make_store(self) -> ConditionalTextValueStore:
        return SqliteStore(self.tmp_path / "kv.db")
