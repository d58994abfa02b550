"""What each store (memory, SQLite, PostgreSQL) does beyond the shared contract: misuse,
closing, crashes, damaged rows, locks, constructor arguments.

The contract itself (versions, conditional batches, listing, races, linearizability) is
``operative.testing.conformance``, run on every backend by tests/testing_kits.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest
import trio
import trio.testing

import operative.kvstore
from operative._core._errors import CorruptRecordError, InvalidArgument, OperativeError
from operative.kvstore import (
    ConditionalTextValueStore,
    ConflictError,
    Put,
    SqliteStore,
    Versioned,
)

from .conftest import Backend


def test_all_is_sorted_and_complete() -> None:
    """The public namespace lists exactly what it exports, sorted."""
    names = operative.kvstore.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(operative.kvstore, name)


async def test_malformed_batches_are_rejected(store: ConditionalTextValueStore) -> None:
    """A batch naming one key twice, or holding something else, is misuse."""
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([Put(key="a", value="1"), Put(key="a", value="2")])
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([("a", "1")])  # type: ignore[list-item]
    assert await store.get("a") is None


async def test_a_negative_limit_is_rejected(store: ConditionalTextValueStore) -> None:
    """list(limit=-1) is misuse, not an empty page."""
    with pytest.raises(InvalidArgument):
        await store.list(limit=-1)


async def test_closed_store_refuses_use(backend: Backend) -> None:
    """After aclose (or leaving ``async with``) the store raises InvalidArgument."""
    async with backend.open() as store:
        await store.conditional_batch([Put(key="a", value="1")])
    with pytest.raises(InvalidArgument):
        await store.get("a")
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([Put(key="a", value="2")])
    assert "closed" in repr(store)
    await store.aclose()  # closing twice is harmless


def _child(backend: Backend, body: str) -> list[str]:
    """A ``python -c`` command running ``body`` (an async main's body) on the store."""
    source = textwrap.dedent(
        """
        import sys, trio
        from operative.kvstore import (
            ConflictError, Delete, PostgresStore, Put, SqliteStore,
        )

        async def main():
            async with {open} as store:
        {body}

        trio.run(main)
        """
    ).format(open=backend.source, body=textwrap.indent(textwrap.dedent(body), " " * 8))
    return [sys.executable, "-c", source]


async def test_killed_writer_leaves_the_previous_version(durable_backend: Backend) -> None:
    """A process killed with SIGKILL mid-write leaves a consistent, readable store."""
    body = """
        i = 0
        while True:
            i += 1
            value = f"{i}:" + "x" * 20000
            await store.conditional_batch([Put(key="a", value=value), Put(key="b", value=value)])
            if i == 3:
                print("ready", flush=True)
    """
    process = await trio.lowlevel.open_process(
        _child(durable_backend, body), stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        output = b""
        while b"ready\n" not in output:
            chunk = await process.stdout.receive_some()
            assert chunk, "the writer exited early"
            output += chunk
        await trio.sleep(0.3)  # let it write on
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
        if process.stdout is not None:
            await process.stdout.aclose()
    assert process.returncode == -signal.SIGKILL
    async with durable_backend.open() as store:
        found = await store.get_many(["a", "b"])
        a, b = found["a"], found["b"]
        assert a.value == b.value
        assert a.version == b.version >= 3
        number, _, padding = a.value.partition(":")
        assert int(number) == a.version
        assert padding == "x" * 20000
        next_write = Put(key="a", value="next", expected_version=a.version)
        assert await store.conditional_batch([next_write]) == (a.version + 1,)
    if durable_backend.name == "sqlite":
        with sqlite3.connect(durable_backend.location) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()


def _corrupt(backend: Backend, key: str, kind: str) -> None:
    """Write garbage under ``key`` behind the store's back."""
    if backend.name == "sqlite":
        sql = {
            "value-bytes": "UPDATE {t} SET value = CAST(x'fffe41' AS TEXT) WHERE key = ?",
            "value-blob": "UPDATE {t} SET value = x'80' WHERE key = ?",
            "version-text": "UPDATE {t} SET version = 'abc' WHERE key = ?",
            "version-zero": "UPDATE {t} SET version = 0 WHERE key = ?",
        }[kind].format(t=backend.table)
        conn = sqlite3.connect(backend.location)
        with conn:
            conn.execute(sql, (key,))
        conn.close()
        return
    import psycopg

    table = f'"{backend.table}"'
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
    with psycopg.connect(backend.location, autocommit=True) as pg:
        for statement in statements:
            pg.execute(statement, (key,) if "%s" in statement else ())


_CORRUPTIONS = {
    "sqlite": ["value-bytes", "value-blob", "version-text", "version-zero"],
    "postgres": ["value-null", "version-null", "version-zero", "version-negative"],
}


@pytest.mark.parametrize("index", range(4))
async def test_corrupt_value_is_a_clear_error(durable_backend: Backend, index: int) -> None:
    """A stored row that cannot be read raises CorruptRecordError naming its key."""
    kind = _CORRUPTIONS[durable_backend.name][index]
    async with durable_backend.open() as store:
        await store.conditional_batch(
            [Put(key="good", value="fine"), Put(key="bad/key", value="soon garbage")]
        )
        _corrupt(durable_backend, "bad/key", kind)
        calls: list[Callable[[], object]] = [
            lambda: store.get("bad/key"),
            lambda: store.get_many(["good", "bad/key"]),
            lambda: store.list(),
            lambda: store.list("bad/"),
        ]
        if kind.startswith("version"):
            calls.append(lambda: store.conditional_batch([Put(key="bad/key", value="v")]))
        for call in calls:
            with pytest.raises(CorruptRecordError) as info:
                await call()  # type: ignore[misc]
            assert "'bad/key'" in str(info.value), kind
            assert isinstance(info.value, OperativeError)
        assert await store.get("good") == Versioned(key="good", value="fine", version=1)
        assert [v.key for v in await store.list("go")] == ["good"]


async def _hold_write_lock(backend: Backend, key: str) -> Callable[[], None]:
    """Lock ``key`` (PostgreSQL) or the whole file (SQLite) from another connection."""
    if backend.name == "sqlite":
        conn = sqlite3.connect(backend.location, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")

        def release() -> None:
            conn.execute("ROLLBACK")
            conn.close()

        return release
    import psycopg

    pg = psycopg.connect(backend.location)
    pg.execute(f'SELECT version FROM "{backend.table}" WHERE key = %s FOR UPDATE', (key,))

    def release_pg() -> None:
        pg.rollback()
        pg.close()

    return release_pg


async def test_cancelled_write_leaves_the_store_consistent(durable_backend: Backend) -> None:
    """A write blocked on another writer's lock stops promptly when cancelled, writes
    nothing, and the store stays usable."""
    async with durable_backend.open() as store:
        await store.conditional_batch([Put(key="a", value="old")])
        release = await _hold_write_lock(durable_backend, "a")
        try:
            started = time.monotonic()
            with trio.move_on_after(0.3) as scope:
                await store.conditional_batch([Put(key="a", value="new", expected_version=1)])
            assert scope.cancelled_caught
            assert time.monotonic() - started < 3
        finally:
            release()
        assert await store.get("a") == Versioned(key="a", value="old", version=1)
        assert await store.conditional_batch([Put(key="a", value="new", expected_version=1)]) == (
            2,
        )


async def test_store_objects_share_one_database(durable_backend: Backend) -> None:
    """Two store objects over the same data see each other's writes and conflicts."""
    async with durable_backend.open() as one, durable_backend.open() as two:
        await one.conditional_batch([Put(key="a", value="1", expected_version=None)])
        assert await two.get("a") == Versioned(key="a", value="1", version=1)
        with pytest.raises(ConflictError):
            await two.conditional_batch([Put(key="a", value="2", expected_version=None)])


# -- backend-specific behaviour -----------------------------------------------------------


def test_sqlite_store_validates_its_arguments(tmp_path: os.PathLike[str]) -> None:
    """Bad constructor arguments raise InvalidArgument eagerly."""
    for bad in (":memory:", "", "file:x?mode=memory"):
        with pytest.raises(InvalidArgument):
            SqliteStore(bad)
    with pytest.raises(InvalidArgument):
        SqliteStore(os.path.join(tmp_path, "x.db"), max_connections=0)
    with pytest.raises(InvalidArgument):
        SqliteStore(os.path.join(tmp_path, "x.db"), table="x; DROP TABLE y")
    with pytest.raises(InvalidArgument):
        SqliteStore(os.path.join(tmp_path, "x.db"), busy_timeout=-1)


async def test_sqlite_file_is_in_wal_mode(tmp_path: os.PathLike[str]) -> None:
    """The file is switched to WAL and holds one table of key, value, version."""
    path = os.path.join(tmp_path, "x.db")
    async with SqliteStore(path) as store:
        await store.conditional_batch([Put(key="a", value="1")])
        assert store.path == path
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("SELECT key, value, version FROM operative_kv").fetchall() == [
        ("a", "1", 1)
    ]
    conn.close()


async def test_text_that_cannot_be_stored_is_rejected(backend: Backend) -> None:
    """Keys and values must be str holding valid Unicode (PostgreSQL: no NUL either)."""
    async with backend.open() as store:
        if backend.name != "memory":
            with pytest.raises(InvalidArgument):
                await store.conditional_batch([Put(key="a", value="\ud800")])
            with pytest.raises(InvalidArgument):
                await store.get(b"a")  # type: ignore[arg-type]
        if backend.name == "postgres":
            with pytest.raises(InvalidArgument, match="NUL"):
                await store.conditional_batch([Put(key="a", value="x\x00y")])
        assert await store.get("a") is None


def test_postgres_store_without_psycopg_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Creating a PostgresStore without psycopg names the extra to install."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"operative\[postgres\]"):
        operative.kvstore.PostgresStore("host=127.0.0.1")


def test_importing_operative_does_not_import_psycopg() -> None:
    """psycopg is imported only when a PostgresStore is created."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, operative, operative.kvstore; assert 'psycopg' not in sys.modules",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
