"""Fixtures: one store per backend (memory, SQLite, PostgreSQL).

The PostgreSQL cluster (``postgres_dsn``) is the session fixture of ``tests/conftest.py``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import attrs
import pytest

from operative.kvstore import ConditionalTextValueStore, MemoryStore, PostgresStore, SqliteStore

BACKENDS = ["memory", "sqlite", "postgres"]
DURABLE_BACKENDS = ["sqlite", "postgres"]


@attrs.frozen(kw_only=True)
class Backend:
    """How to open (more) stores on the same data, from this process or another."""

    name: str
    open: Callable[[], ConditionalTextValueStore]
    """A new store object over the same data."""
    source: str = ""
    """Python source of an expression that opens the store in another process."""
    location: str = ""
    """The file path (SQLite) or DSN (PostgreSQL) holding the data."""
    table: str = "operative_kv"


_tables = itertools.count()


# -- the backends -------------------------------------------------------------------------


@pytest.fixture
def backend_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Backend]:
    """Make a Backend by name; each test gets empty data."""

    def make(name: str) -> Backend:
        if name == "memory":
            shared = MemoryStore()
            return Backend(name=name, open=lambda: shared)
        if name == "sqlite":
            path = str(tmp_path / "store.db")
            return Backend(
                name=name,
                open=lambda: SqliteStore(path),
                source=f"SqliteStore({path!r})",
                location=path,
            )
        if name == "postgres":
            dsn: str = request.getfixturevalue("postgres_dsn")
            table = f"kv_{os.getpid()}_{next(_tables)}"
            return Backend(
                name=name,
                open=lambda: PostgresStore(dsn, table=table),
                source=f"PostgresStore({dsn!r}, table={table!r})",
                location=dsn,
                table=table,
            )
        raise AssertionError(name)

    return make


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, backend_factory: Callable[[str], Backend]) -> Backend:
    """Each backend in turn."""
    name: str = request.param
    return backend_factory(name)


@pytest.fixture(params=DURABLE_BACKENDS)
def durable_backend(
    request: pytest.FixtureRequest, backend_factory: Callable[[str], Backend]
) -> Backend:
    """The backends shared between processes."""
    name: str = request.param
    return backend_factory(name)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[ConditionalTextValueStore]:
    """An empty store of each backend, closed after the test."""
    opened = backend.open()
    try:
        yield opened
    finally:
        await opened.aclose()
