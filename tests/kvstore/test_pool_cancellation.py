"""Thread-backed stores under cancellation: no connection may escape the pool."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from operative.kvstore import SqliteStore


def _is_open(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - raises ProgrammingError once closed
    except sqlite3.ProgrammingError:
        return False
    return True


async def test_sqlite_cancel_right_after_acquiring_the_limiter_keeps_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    """A call cancelled just after it got a pool slot returns its connection; aclose closes all."""
    opened: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = real_connect(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    store = SqliteStore(tmp_path / "kv.db", max_connections=1)
    await store.get("k")  # the pool now holds one idle connection
    with trio.move_on_after(1) as scope:
        # The deadline passes now but is noticed at the next schedule point: the one
        # inside CapacityLimiter.acquire, after the slot was taken.
        mock_clock.jump(1)
        await store.get("k")
    assert scope.cancelled_caught
    await store.get("k")
    await store.aclose()
    assert [conn for conn in opened if _is_open(conn)] == []


async def test_postgres_cancel_right_after_acquiring_the_limiter_keeps_the_connection(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    """As for SQLite: a server connection never escapes the pool on cancellation."""
    import psycopg

    from operative.kvstore import PostgresStore

    opened: list[psycopg.Connection[Any]] = []
    real_connect = psycopg.connect

    def connect(*args: Any, **kwargs: Any) -> psycopg.Connection[Any]:
        conn = real_connect(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(psycopg, "connect", connect)
    store = PostgresStore(postgres_dsn, max_connections=1, table="review_leak")
    await store.get("k")
    with trio.move_on_after(1) as scope:
        mock_clock.jump(1)
        await store.get("k")
    assert scope.cancelled_caught
    await store.get("k")
    await store.aclose()
    leaked = [conn for conn in opened if not conn.closed]
    for conn in leaked:
        conn.close()
    assert leaked == []
