"""A file that is not an SQLite database, or is a damaged one, is refused with a
``DatabaseFileError`` naming it, by every SQLite-backed store, engine and run store (and
the sessions over them), and the file is left exactly as it was.

The kinds of bad file: text, random bytes, a file too short to be a database (SQLite
would take it for an empty database and write a new one over it), a database cut in
half, a database whose pages after the first are garbage (found by the first query), and
the same in rollback-journal mode (found before the WAL conversion that would write to
it).
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from operative import OperativeError, create_agent
from operative.durable import SqliteCheckpointStore, SqliteEngine
from operative.errors import DatabaseFileError
from operative.kvstore import Put, SqliteStore
from operative.runstore import SqliteRunStore
from operative.sessions import create_session_store, open_session
from operative.testing import ScriptedModel

PAGE = 4096


async def _use_store(path: str) -> None:
    async with SqliteStore(path) as store:
        await store.get("k")
        await store.list()
        await store.conditional_batch([Put(key="k", value="v")])


async def _use_engine(path: str) -> None:
    async with SqliteEngine(path) as engine:
        await engine.get("r1")
        await engine.list()
        await engine.claim(worker_id="w", lease_seconds=10)


async def _use_journal(path: str) -> None:
    async with SqliteCheckpointStore(path) as journal:
        await journal.read("r1")


async def _use_run_store(path: str) -> None:
    async with SqliteRunStore(path) as runs:
        await runs.runs()
        await runs.usage()


async def _use_session_store(path: str) -> None:
    async with SqliteStore(path) as kv:
        sessions = create_session_store(kv)
        await sessions.load("s")
        await sessions.list()


async def _use_open_session(path: str) -> None:
    async with SqliteStore(path) as kv:
        agent = create_agent(generate=ScriptedModel(["hi"]), name="a")
        sessions = create_session_store(kv)
        async with open_session("s", store=sessions, agent_name="a", agent=agent) as handle:
            await handle.run("hello")


USERS: dict[str, Callable[[str], Awaitable[None]]] = {
    "SqliteStore": _use_store,
    "SqliteEngine": _use_engine,
    "SqliteCheckpointStore": _use_journal,
    "SqliteRunStore": _use_run_store,
    "session store": _use_session_store,
    "open_session": _use_open_session,
}


async def _real_database(path: Path, user: str, *, wal: bool = True) -> bytes:
    """A database with the tables of ``user`` and some pages of data, closed."""
    if user == "SqliteRunStore":
        async with SqliteEngine(str(path)) as engine:
            await engine.get("r1")
        async with SqliteRunStore(str(path)) as runs:
            await runs.runs()
    elif user in ("session store", "open_session"):
        async with SqliteStore(str(path)) as kv:
            await kv.get("k")
    else:
        await USERS[user](str(path))
    return await trio.to_thread.run_sync(_fill, path, wal)


def _fill(path: Path, wal: bool) -> bytes:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE filler (x TEXT)")
    conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 300,) for _ in range(200)])
    if not wal:
        conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    return path.read_bytes()


def _garbage_after_the_first_page(data: bytes) -> bytes:
    noise = random.Random(7).randbytes(len(data) - PAGE)
    return data[:PAGE] + noise


async def _bad_file(kind: str, path: Path, user: str) -> bytes:
    if kind == "text":
        return b"these are my notes, not a database\n" * 40
    if kind == "random bytes":
        return random.Random(3).randbytes(3 * PAGE)
    if kind == "too short":
        return b"x"
    if kind == "truncated":
        data = await _real_database(path, user)
        return data[: len(data) // 2 + 123]
    if kind == "damaged pages":
        return _garbage_after_the_first_page(await _real_database(path, user))
    if kind == "damaged, rollback mode":
        return _garbage_after_the_first_page(await _real_database(path, user, wal=False))
    raise AssertionError(kind)


KINDS = [
    "text",
    "random bytes",
    "too short",
    "truncated",
    "damaged pages",
    "damaged, rollback mode",
]


def _listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("user", list(USERS))
async def test_a_bad_database_file_is_refused_and_left_untouched(
    tmp_path: Path, user: str, kind: str
) -> None:
    """The first use raises DatabaseFileError naming the file and what to do; the file's
    bytes are unchanged, and no file is left beside it."""
    source = tmp_path / "source"
    await trio.Path(source).mkdir()
    content = await _bad_file(kind, source / "source.db", user)
    path = tmp_path / "data.db"
    await trio.Path(path).write_bytes(content)
    before = _listing(tmp_path)
    with pytest.raises(DatabaseFileError) as info:
        await USERS[user](str(path))
    error = info.value
    assert isinstance(error, OperativeError)
    assert error.path == str(path)
    assert repr(str(path)) in str(error)
    assert "left untouched" in str(error)
    assert "move" in str(error)
    assert "backup" in str(error) or "check the path" in str(error)
    assert await trio.Path(path).read_bytes() == content
    assert _listing(tmp_path) == before  # no journal, WAL or shared-memory file left


async def test_an_empty_file_is_a_new_database(tmp_path: Path) -> None:
    """An empty file is where SQLite starts a new database: it is used, not refused."""
    path = trio.Path(tmp_path / "empty.db")
    await path.write_bytes(b"")
    async with SqliteStore(path) as store:
        assert await store.conditional_batch([Put(key="k", value="v")]) == (1,)
    assert (await path.read_bytes())[:16] == b"SQLite format 3\x00"


async def test_a_healthy_rollback_mode_database_is_checked_then_used(tmp_path: Path) -> None:
    """A sound database in rollback-journal mode passes the check and is put in WAL mode."""
    path = tmp_path / "old.db"
    await trio.to_thread.run_sync(_other_app_database, path)
    async with SqliteStore(path) as store:
        assert await store.conditional_batch([Put(key="k", value="v")]) == (1,)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert conn.execute("SELECT x FROM other_app").fetchall() == [("kept",)]
    conn.close()


def _other_app_database(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE other_app (x TEXT)")
    conn.execute("INSERT INTO other_app VALUES ('kept')")
    conn.close()
