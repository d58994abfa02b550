"""Fixtures: a durable database per backend (SQLite file, PostgreSQL schema), empty per test.

``durable_db`` yields a :class:`DurableDb` that opens backends (``SqliteDurable``,
``PostgresDurable``: the engine and the checkpoint store, one object), or engines and
checkpoint stores apart, on the same data, in this process or (through ``source``) in
another one. PostgreSQL tests get a
schema of their own, selected through the DSN's ``search_path``, so their tables never
meet another test's.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio.testing

from operative.durable import SqliteCheckpointStore, SqliteDurable, SqliteEngine

DURABLE_BACKENDS = ["sqlite", "postgres"]

_schemas = itertools.count()


@attrs.frozen(kw_only=True)
class DurableDb:
    """One durable database: open more engines and stores over it."""

    name: str
    location: str
    """The SQLite file, or the PostgreSQL DSN (with this test's search_path)."""
    engine_source: str
    """Python source of an expression that opens an engine in another process."""
    store_source: str
    """Python source of an expression that opens a checkpoint store in another process."""
    imports: str
    """The import line those expressions need."""
    _engine: Callable[..., Any]
    _store: Callable[..., Any]
    _backend: Callable[..., Any]

    def backend(self, **options: Any) -> Any:
        """A new backend over this database: an engine and a checkpoint store, one pool."""
        return self._backend(**options)

    def engine(self, **options: Any) -> Any:
        """A new engine over this database."""
        return self._engine(**options)

    def store(self, **options: Any) -> Any:
        """A new checkpoint store over this database."""
        return self._store(**options)


def _sqlite(tmp_path: Path) -> DurableDb:
    path = str(tmp_path / "durable.db")
    return DurableDb(
        name="sqlite",
        location=path,
        engine_source=f"SqliteEngine({path!r})",
        store_source=f"SqliteCheckpointStore({path!r})",
        imports="from operative.durable import SqliteEngine, SqliteCheckpointStore",
        engine=lambda **options: SqliteEngine(path, **options),
        store=lambda **options: SqliteCheckpointStore(path, **options),
        backend=lambda **options: SqliteDurable(path, **options),
    )


def _postgres(base_dsn: str) -> DurableDb:
    import psycopg

    from operative.durable import PostgresCheckpointStore, PostgresDurable, PostgresEngine

    schema = f"durable_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{base_dsn} options='-csearch_path={schema}'"
    return DurableDb(
        name="postgres",
        location=dsn,
        engine_source=f"PostgresEngine({dsn!r})",
        store_source=f"PostgresCheckpointStore({dsn!r})",
        imports="from operative.durable import PostgresEngine, PostgresCheckpointStore",
        engine=lambda **options: PostgresEngine(dsn, **options),
        store=lambda **options: PostgresCheckpointStore(dsn, **options),
        backend=lambda **options: PostgresDurable(dsn, **options),
    )


@pytest.fixture(params=DURABLE_BACKENDS)
def durable_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DurableDb]:
    """An empty durable database of each backend."""
    if request.param == "sqlite":
        yield _sqlite(tmp_path)
    else:
        yield _postgres(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def sqlite_db(tmp_path: Path) -> DurableDb:
    """An empty durable SQLite database (for tests about the loop, not the backend)."""
    return _sqlite(tmp_path)


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """Virtual time that jumps only once the process has been idle a moment: a database
    call runs in a worker thread, and time must not jump past a lease renewal (or a
    deadline) while it does."""
    return trio.testing.MockClock(autojump_threshold=0.25)
