"""The conformance suite: every store (memory, SQLite, PostgreSQL) passes the same tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from functools import partial

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import operative.kvstore
from operative._core._errors import CorruptRecordError, InvalidArgument, OperativeError
from operative.kvstore import (
    ANY,
    ConditionalTextValueStore,
    ConflictError,
    Delete,
    MemoryStore,
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


async def test_store_satisfies_the_protocol(store: ConditionalTextValueStore) -> None:
    """Every store is a ConditionalTextValueStore."""
    assert isinstance(store, ConditionalTextValueStore)


async def test_put_creates_at_version_one_and_increments(
    store: ConditionalTextValueStore,
) -> None:
    """Versions start at 1 and count every write."""
    assert await store.get("a") is None
    assert await store.conditional_batch([Put(key="a", value="x", expected_version=None)]) == (1,)
    assert await store.get("a") == Versioned(key="a", value="x", version=1)
    assert await store.conditional_batch([Put(key="a", value="y", expected_version=1)]) == (2,)
    assert await store.conditional_batch([Put(key="a", value="z")]) == (3,)
    assert await store.get("a") == Versioned(key="a", value="z", version=3)


async def test_values_round_trip_any_text(store: ConditionalTextValueStore) -> None:
    """Unicode, long and empty values come back exactly as written."""
    values = {"k/é": "ünïcödé ✓ 😀", "k/long": "x" * 200_000, "k/empty": "", "k/nl": "a\nb\r\n"}
    await store.conditional_batch([Put(key=k, value=v) for k, v in values.items()])
    found = await store.get_many(list(values))
    assert {k: v.value for k, v in found.items()} == values


async def test_must_not_exist_conflicts_when_present(store: ConditionalTextValueStore) -> None:
    """expected_version=None fails on an existing key, naming key and versions."""
    await store.conditional_batch([Put(key="a", value="x", expected_version=None)])
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="y", expected_version=None)])
    assert isinstance(info.value, OperativeError)
    assert info.value.key == "a"
    assert info.value.expected is None
    assert info.value.actual == 1
    assert "'a'" in str(info.value)
    assert "version 1" in str(info.value)
    assert await store.get("a") == Versioned(key="a", value="x", version=1)


async def test_compare_and_swap(store: ConditionalTextValueStore) -> None:
    """An int expected_version must match exactly; a missing key has no version."""
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="x", expected_version=3)])
    assert info.value.actual is None
    await store.conditional_batch([Put(key="a", value="x")])
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="y", expected_version=2)])
    assert (info.value.key, info.value.expected, info.value.actual) == ("a", 2, 1)
    assert await store.conditional_batch([Put(key="a", value="y", expected_version=1)]) == (2,)
    assert await store.get("a") == Versioned(key="a", value="y", version=2)


async def test_any_writes_unconditionally(store: ConditionalTextValueStore) -> None:
    """ANY creates a missing key and overwrites whatever version is there."""
    assert await store.conditional_batch([Put(key="a", value="1", expected_version=ANY)]) == (1,)
    assert await store.conditional_batch([Put(key="a", value="2", expected_version=ANY)]) == (2,)
    assert await store.conditional_batch([Delete(key="a", expected_version=ANY)]) == (None,)
    assert await store.get("a") is None


async def test_delete_conditions(store: ConditionalTextValueStore) -> None:
    """Deletes honour expected_version; deleting a missing key with ANY is a no-op."""
    await store.conditional_batch([Put(key="a", value="x")])
    with pytest.raises(ConflictError):
        await store.conditional_batch([Delete(key="a", expected_version=2)])
    with pytest.raises(ConflictError):
        await store.conditional_batch([Delete(key="a", expected_version=None)])
    assert await store.get("a") is not None
    assert await store.conditional_batch([Delete(key="a", expected_version=1)]) == (None,)
    assert await store.get("a") is None
    assert await store.conditional_batch([Delete(key="a", expected_version=ANY)]) == (None,)
    assert await store.conditional_batch([Delete(key="a", expected_version=None)]) == (None,)
    assert await store.list() == []
    # A deleted key starts again at version 1.
    assert await store.conditional_batch([Put(key="a", value="y", expected_version=None)]) == (1,)


async def test_a_conflict_writes_nothing(store: ConditionalTextValueStore) -> None:
    """One failing condition leaves every key of the batch untouched."""
    await store.conditional_batch([Put(key="b", value="old"), Put(key="d", value="old")])
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch(
            [
                Put(key="a", value="new", expected_version=None),
                Delete(key="b", expected_version=1),
                Put(key="d", value="new", expected_version=1),
                Put(key="c", value="new", expected_version=7),
            ]
        )
    assert (info.value.key, info.value.expected, info.value.actual) == ("c", 7, None)
    assert await store.get("a") is None
    assert await store.get("b") == Versioned(key="b", value="old", version=1)
    assert await store.get("c") is None
    assert await store.get("d") == Versioned(key="d", value="old", version=1)


async def test_a_batch_applies_whole(store: ConditionalTextValueStore) -> None:
    """A batch whose conditions hold applies every operation and reports each version."""
    await store.conditional_batch([Put(key="b", value="1"), Put(key="c", value="1")])
    result = await store.conditional_batch(
        [
            Put(key="a", value="2", expected_version=None),
            Put(key="b", value="2", expected_version=1),
            Delete(key="c", expected_version=1),
        ]
    )
    assert result == (1, 2, None)
    assert [(v.key, v.value, v.version) for v in await store.list()] == [
        ("a", "2", 1),
        ("b", "2", 2),
    ]
    assert await store.conditional_batch([]) == ()


async def test_malformed_batches_are_rejected(store: ConditionalTextValueStore) -> None:
    """A batch naming one key twice, or holding something else, is misuse."""
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([Put(key="a", value="1"), Put(key="a", value="2")])
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([("a", "1")])  # type: ignore[list-item]
    assert await store.get("a") is None


async def test_get_many_returns_only_present_keys(store: ConditionalTextValueStore) -> None:
    """get_many maps the keys that exist."""
    await store.conditional_batch([Put(key="a", value="1"), Put(key="b", value="2")])
    found = await store.get_many(["a", "zz", "b"])
    assert dict(found) == {
        "a": Versioned(key="a", value="1", version=1),
        "b": Versioned(key="b", value="2", version=1),
    }
    assert dict(await store.get_many([])) == {}


async def test_get_many_with_many_keys(store: ConditionalTextValueStore) -> None:
    """get_many handles more keys than one SQL statement's parameter list."""
    keys = [f"k{i:04}" for i in range(1200)]
    await store.conditional_batch([Put(key=k, value=k) for k in keys[::2]])
    found = await store.get_many(keys)
    assert sorted(found) == keys[::2]
    assert all(found[k].value == k for k in found)


async def test_list_prefix_and_pagination(store: ConditionalTextValueStore) -> None:
    """Listing is by prefix, sorted by key, paged with limit and an exclusive cursor."""
    keys = ["p/3", "p/1", "q/1", "p/2", "o/9", "p/10", "p", "p0"]
    await store.conditional_batch([Put(key=k, value=k) for k in keys])
    assert [v.key for v in await store.list("p/")] == ["p/1", "p/10", "p/2", "p/3"]
    page = await store.list("p/", limit=2)
    assert [v.key for v in page] == ["p/1", "p/10"]
    page = await store.list("p/", limit=2, after=page[-1].key)
    assert [v.key for v in page] == ["p/2", "p/3"]
    assert await store.list("p/", limit=2, after="p/3") == []
    assert [v.key for v in await store.list()] == sorted(keys)
    assert [v.key for v in await store.list("p")] == ["p", "p/1", "p/10", "p/2", "p/3", "p0"]
    assert await store.list("p/", limit=0) == []
    assert [v.key for v in await store.list(after="p0")] == ["q/1"]
    with pytest.raises(InvalidArgument):
        await store.list(limit=-1)


async def test_list_orders_by_code_point(store: ConditionalTextValueStore) -> None:
    """Non-ASCII keys sort by code point, and a prefix ending in a high character works."""
    top = chr(0x10FFFF)
    keys = ["a", "B", "é", "é/1", "z", "Ω", "中", "😀", "a" + top, "a" + top + "x", "b"]
    await store.conditional_batch([Put(key=k, value=k) for k in keys])
    assert [v.key for v in await store.list()] == sorted(keys)
    assert [v.key for v in await store.list("a" + top)] == ["a" + top, "a" + top + "x"]
    assert [v.key for v in await store.list("é")] == ["é", "é/1"]
    assert [v.key for v in await store.list("\ud7ff")] == []


async def test_every_method_checkpoints(store: ConditionalTextValueStore) -> None:
    """Each async method is a trio checkpoint."""
    with trio.testing.assert_checkpoints():
        await store.get("a")
    with trio.testing.assert_checkpoints():
        await store.get_many(["a"])
    with trio.testing.assert_checkpoints():
        await store.list()
    with trio.testing.assert_checkpoints():
        await store.conditional_batch([])
    with trio.testing.assert_checkpoints():
        await store.conditional_batch([Put(key="a", value="1")])


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


async def test_concurrent_creates_have_one_winner(store: ConditionalTextValueStore) -> None:
    """Many tasks racing to create one key: exactly one succeeds."""
    winners: list[int] = []

    async def attempt(i: int) -> None:
        try:
            await store.conditional_batch([Put(key="k", value=str(i), expected_version=None)])
        except ConflictError:
            return
        winners.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(attempt, i)
    assert len(winners) == 1
    stored = await store.get("k")
    assert stored is not None
    assert stored.value == str(winners[0])


async def increment(store: ConditionalTextValueStore, key: str) -> int:
    """Read-modify-write one counter, retrying on conflict; the number of attempts."""
    attempts = 0
    while True:
        attempts += 1
        current = await store.get(key)
        value = 1 if current is None else int(current.value) + 1
        expected = None if current is None else current.version
        try:
            await store.conditional_batch(
                [Put(key=key, value=str(value), expected_version=expected)]
            )
        except ConflictError:
            continue
        return attempts


async def test_concurrent_writers_lose_no_update(store: ConditionalTextValueStore) -> None:
    """Many tasks doing read-modify-write with retry: the counter equals every increment."""
    tasks, each = 10, 10

    async def writer() -> None:
        for _ in range(each):
            await increment(store, "counter")

    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(writer)
    final = await store.get("counter")
    assert final is not None
    assert (final.value, final.version) == (str(tasks * each), tasks * each)


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


async def test_many_processes_lose_no_update(durable_backend: Backend) -> None:
    """Four processes doing read-modify-write with retry on one key lose no update."""
    processes, each = 4, 40
    body = f"""
        done = 0
        while done < {each}:
            current = await store.get("counter")
            value = 1 if current is None else int(current.value) + 1
            expected = None if current is None else current.version
            try:
                await store.conditional_batch(
                    [Put(key="counter", value=str(value), expected_version=expected)]
                )
            except ConflictError:
                continue
            done += 1
    """
    command = _child(durable_backend, body)
    async with durable_backend.open() as store:
        await store.get("counter")  # creates the table before the children race
        async with trio.open_nursery() as nursery:
            for _ in range(processes):
                nursery.start_soon(partial(trio.run_process, command, capture_stderr=True))
        final = await store.get("counter")
    assert final is not None
    assert (final.value, final.version) == (str(processes * each), processes * each)


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


_keys = st.text(alphabet="ab/é", min_size=1, max_size=4)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(st.tuples(_keys, st.booleans()), max_size=25), page=st.integers(1, 5))
def test_pagination_visits_every_key_once(
    backend: Backend, ops: list[tuple[str, bool]], page: int
) -> None:
    """Paging through a listing returns every live key exactly once, in order."""

    async def main() -> None:
        async with backend.open() as store:
            for stale in await store.list():  # the data outlives one example
                await store.conditional_batch([Delete(key=stale.key)])
            model: dict[str, str] = {}
            for key, is_put in ops:
                if is_put:
                    await store.conditional_batch([Put(key=key, value=key)])
                    model[key] = key
                else:
                    await store.conditional_batch([Delete(key=key)])
                    model.pop(key, None)
            for prefix in ("", "a", "b/", "é"):
                seen: list[str] = []
                after: str | None = None
                while True:
                    chunk = await store.list(prefix, limit=page, after=after)
                    if not chunk:
                        break
                    seen.extend(v.key for v in chunk)
                    after = chunk[-1].key
                assert seen == sorted(k for k in model if k.startswith(prefix))

    if backend.name == "memory":  # one shared MemoryStore; closing it would end it
        backend = Backend(name="memory", open=MemoryStore)
    trio.run(main)


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
