"""PostgreSQL calls are bounded: connecting, and a cancelled call, whatever the server does.

Most of these need no PostgreSQL server. A silent server is a real TCP listener on
127.0.0.1 that accepts connections and never sends a byte; a server that stops answering
mid-call is a fake connection whose statements block on a ``threading.Event``. They
measure real time (what they bound is real blocking in worker threads), and each takes
a second or two at most. The last test cancels a long ``pg_sleep`` on the throwaway
cluster of tests/conftest.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from operative import InvalidArgument
from operative._sql import (
    CONNECT_TIMEOUT,
    OutcomeUnknownError,
    PostgresDatabase,
    _postgres,
)

psycopg = pytest.importorskip("psycopg")


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never answers; closing it drops them."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.01)  # so that the thread sees close() at once
        self._closing = False
        self.port: int = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.connected = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)
            self.connected.set()

    @property
    def dsn(self) -> str:
        return (
            f"host=127.0.0.1 port={self.port} user=nobody dbname=nothing "
            "sslmode=disable gssencmode=disable"
        )

    def close(self) -> None:
        self._closing = True
        self._thread.join(5)
        self._listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


def _database(dsn: str, **options: Any) -> PostgresDatabase:
    return PostgresDatabase(dsn, owner="test", max_connections=2, schemas=(), **options)


# -- the connection's bounds ---------------------------------------------------------------


def test_connections_get_a_default_connect_timeout_and_keepalives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libpq's connect_timeout is CONNECT_TIMEOUT unless the DSN, PGCONNECT_TIMEOUT or the
    argument says otherwise; keepalives and tcp_user_timeout likewise fill only gaps."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    assert CONNECT_TIMEOUT == 10
    options = _database("host=db")._options
    assert options["connect_timeout"] == CONNECT_TIMEOUT
    assert options["keepalives_idle"] == 30
    assert options["keepalives_interval"] == 10
    assert options["keepalives_count"] == 3
    if psycopg.pq.version() >= 120000:
        assert options["tcp_user_timeout"] == 60_000

    given = _database("host=db connect_timeout=3 keepalives_idle=5 tcp_user_timeout=1")._options
    assert "connect_timeout" not in given  # the DSN's own
    assert "keepalives_idle" not in given
    assert "tcp_user_timeout" not in given
    assert given["keepalives_count"] == 3
    assert "connect_timeout" not in _database("postgresql://db/app?connect_timeout=4")._options
    assert "keepalives_idle" not in _database("host=db keepalives=0")._options

    assert (
        _database("host=db connect_timeout=3", connect_timeout=7)._options["connect_timeout"] == 7
    )  # the argument wins
    assert _database("host=db", connect_timeout=0.5)._options["connect_timeout"] == 2
    assert _database("host=db", connect_timeout=2.1)._options["connect_timeout"] == 3

    monkeypatch.setenv("PGCONNECT_TIMEOUT", "5")
    assert "connect_timeout" not in _database("host=db")._options  # libpq reads the env


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "10"])
def test_a_connect_timeout_that_bounds_nothing_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="connect_timeout"):
        _database("host=db", connect_timeout=bad)


async def test_connecting_to_a_silent_server_ends_at_the_connect_timeout(
    silent_server: SilentServer,
) -> None:
    """A server that accepts and never answers fails the call after connect_timeout (2 s,
    libpq's least), not psycopg's 130 s."""
    db = _database(silent_server.dsn, connect_timeout=2)
    began = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="timeout"):
        await db.call(lambda conn: conn.execute("SELECT 1"))
    took = time.monotonic() - began
    assert 1.5 < took < 5
    assert silent_server.connected.is_set()
    await db.aclose()


# -- cancelled while connecting ------------------------------------------------------------


async def test_a_get_cancelled_while_connecting_to_a_silent_server_returns_within_its_bound(
    silent_server: SilentServer,
) -> None:
    """``store.get()`` under ``move_on_after(1)`` against a server that never answers
    returns when the second is up (the worker is left to its connect_timeout)."""
    from operative.kvstore import PostgresStore

    store = PostgresStore(silent_server.dsn)
    began = time.monotonic()
    with trio.move_on_after(1) as scope:
        await store.get("k")
    took = time.monotonic() - began
    assert scope.cancelled_caught
    assert 0.9 < took < 2
    with trio.fail_after(1):
        await store.aclose()  # no call of it is still running


async def test_cancelling_while_the_worker_connects_returns_at_once(
    silent_server: SilentServer,
) -> None:
    """A call cancelled while its worker thread connects returns at once: nothing of it
    reached the server, so there is nothing to wait for. The left-behind worker ends
    with its connect and runs nothing."""
    db = _database(silent_server.dsn)
    ran = threading.Event()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(db.call, lambda conn: ran.set())
            await trio.to_thread.run_sync(silent_server.connected.wait, 5)
            began = time.monotonic()
            scope.cancel()
    assert time.monotonic() - began < 0.5
    assert scope.cancelled_caught
    with trio.fail_after(1):
        await db.aclose()
    silent_server.close()  # the worker's connect fails now
    # The left-behind worker is an OS thread with no handle to join: its connect fails in
    # real time, so this waits in real time (virtual time would not let it run).
    await trio.to_thread.run_sync(ran.wait, 0.2)
    assert not ran.is_set()


async def test_a_worker_that_connects_after_its_call_was_cancelled_runs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The connection a left-behind worker opens is closed by it, unused."""
    connecting = threading.Event()
    release = threading.Event()
    fake = FakeConnection()

    def connect(self: PostgresDatabase) -> FakeConnection:
        connecting.set()
        release.wait(5)
        return fake

    monkeypatch.setattr(PostgresDatabase, "_connect", connect)
    db = _database("host=db")
    ran = threading.Event()
    try:
        with trio.move_on_after(0.1) as scope:
            await db.call(lambda conn: ran.set())
        assert scope.cancelled_caught
        assert connecting.is_set()
    finally:
        release.set()
    await _closed(fake)
    assert not ran.is_set()
    assert db._idle == []  # never pooled
    await db.aclose()


# -- cancelled while the server does not answer --------------------------------------------


class FakeConnection:
    """Enough of a psycopg connection for the cancellation path. Its cancel request
    changes nothing (the server does not answer it), its socket is one end of a socket
    pair, and its ``COMMIT`` (leaving ``transaction()``) waits for ``commit``."""

    def __init__(self) -> None:
        self._socket, self._peer = socket.socketpair()
        self.pgconn = SimpleNamespace(socket=self._socket.fileno())
        self.closed = False
        self.broken = False
        self.cut = False
        self.commit = threading.Event()
        self.closing = threading.Event()

    def cancel_safe(self, *, timeout: float) -> None:
        pass

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        yield
        self.commit.wait(10)

    def close(self) -> None:
        # a shut-down socket reads EOF at once
        self._peer.setblocking(False)
        with contextlib.suppress(OSError):
            self.cut = self._peer.recv(1) == b""
        self._socket.close()
        self._peer.close()
        self.closed = True
        self.closing.set()


async def _closed(fake: FakeConnection) -> None:
    assert await trio.to_thread.run_sync(fake.closing.wait, 5)


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> float:
    """The cancellation bounds cut to 0.1 s + 0.1 s; returns their sum."""
    monkeypatch.setattr(_postgres, "_CANCEL_TIMEOUT", 0.1)
    monkeypatch.setattr(_postgres, "_CUT_OFF_TIMEOUT", 0.1)
    return 0.2


@pytest.mark.parametrize(
    ("how", "unknown"),
    [("commit", True), ("statement", True), ("transaction", False), ("read", False)],
)
async def test_a_cancelled_call_the_server_never_answers_returns_within_the_bound(
    monkeypatch: pytest.MonkeyPatch, short_bounds: float, how: str, unknown: bool
) -> None:
    """The worker is stuck for good (its statement ignores the cancel request and even
    the cut socket): the caller returns once the bound is up, and the worker closes the
    connection when it ends. Cut off during a ``COMMIT`` or a statement outside a
    transaction (each commits on its own), the call raises OutcomeUnknownError; cut off
    inside a transaction before its ``COMMIT``, or in a read-only snapshot, nothing can
    have been written and the cancellation goes on."""
    fake = FakeConnection()
    stuck = threading.Event()
    monkeypatch.setattr(PostgresDatabase, "_connect", lambda self: fake)
    db = _database("host=db")

    def statement(conn: Any) -> None:
        stuck.set()
        fake.commit.wait(10)

    def snapshot(conn: Any, work: Callable[[Any], Any]) -> Any:
        with conn.transaction():
            return work(conn)

    monkeypatch.setattr(PostgresDatabase, "snapshot", lambda self, conn, work: snapshot(conn, work))
    calls = {
        "commit": lambda: db.write(lambda conn: stuck.set()),
        "statement": lambda: db.call(statement),
        "transaction": lambda: db.write(statement),
        "read": lambda: db.read(statement),
    }
    raised: list[BaseException] = []

    async def run() -> None:
        try:
            await calls[how]()
        except OutcomeUnknownError as exc:
            raised.append(exc)

    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await trio.to_thread.run_sync(stuck.wait, 5)
                began = time.monotonic()
                scope.cancel()
        took = time.monotonic() - began
        assert short_bounds <= took < short_bounds + 0.5
        if unknown:
            assert len(raised) == 1
            assert "whether its last statement took effect is unknown" in str(raised[0])
            assert "read back what it wrote" in str(raised[0])
            assert raised[0].where == db.where  # type: ignore[attr-defined]
        else:
            assert raised == []
            assert scope.cancelled_caught
        assert not fake.closed  # still the stuck worker's
        with trio.fail_after(1):
            await db.aclose()  # the call left the pool: nothing in flight
    finally:
        fake.commit.set()
    await _closed(fake)  # closed by the worker once it ended
    assert fake.cut  # its socket had been shut down


async def test_a_query_that_stops_after_the_cut_returns_before_the_bound(
    monkeypatch: pytest.MonkeyPatch, short_bounds: float
) -> None:
    """A worker waiting on its socket returns as soon as the socket is shut down: the
    caller waits for it (its outcome is an error), and the connection is closed."""
    fake = FakeConnection()
    waiting = threading.Event()
    monkeypatch.setattr(PostgresDatabase, "_connect", lambda self: fake)
    db = _database("host=db")

    def read_socket(conn: Any) -> None:
        waiting.set()
        with socket.socket(fileno=conn.pgconn.socket) as sock:
            try:
                assert sock.recv(1) == b""  # EOF once shut down
            finally:
                sock.detach()
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    raised: list[OutcomeUnknownError] = []

    async def run() -> None:
        try:
            await db.call(read_socket)
        except OutcomeUnknownError as exc:
            raised.append(exc)

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.to_thread.run_sync(waiting.wait, 5)
            began = time.monotonic()
            scope.cancel()
    took = time.monotonic() - began
    assert 0.1 <= took < short_bounds
    assert len(raised) == 1
    assert isinstance(raised[0].__cause__, psycopg.OperationalError)
    assert fake.closed  # discarded by the call itself, before it returned
    await db.aclose()


# -- against the real server ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["call", "write"])
async def test_a_cancelled_pg_sleep_returns_within_the_bound_and_the_pool_stays_usable(
    postgres_dsn: str, how: str
) -> None:
    """A long ``pg_sleep`` cancelled by the caller stops on the server at once: the call
    returns well within the bound, the sleep is no longer running, a cancelled write
    wrote nothing, and the store goes on with a fresh connection."""
    from operative.kvstore import PostgresStore, Put, Versioned

    marker = f"bounded-{how}"
    table = f"pg_bounds_{how}"

    def wait_until_running(expected: bool) -> None:
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            f"AND query LIKE '%{marker}%' AND query NOT LIKE '%pg_stat_activity%'"
        )
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for _ in range(1000):
                row = conn.execute(sql).fetchone()
                if bool(row and row[0]) == expected:
                    return
                time.sleep(0.01)
        raise AssertionError(f"{marker!r} {'never started' if expected else 'still runs'}")

    def sleep(conn: Any) -> None:
        conn.execute(f"INSERT INTO {table} (key, value, version) VALUES ('written', 'x', 1)")
        conn.execute(f"SELECT pg_sleep(30) /* {marker} */")

    async with PostgresStore(postgres_dsn, table=table, max_connections=2) as store:
        db = store._db
        await store.get("warm")  # an idle connection: the call below runs at once
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(db.write if how == "write" else db.call, sleep)
                await trio.to_thread.run_sync(wait_until_running, True)
                began = time.monotonic()
                scope.cancel()
        took = time.monotonic() - began
        assert scope.cancelled_caught
        assert took < 1.0, took  # a round trip for the cancel request, not 30 s
        await trio.to_thread.run_sync(wait_until_running, False)
        # In a transaction the INSERT rolled back; on its own it had committed.
        written = await store.get("written")
        assert (written is None) == (how == "write")
        await store.conditional_batch([Put(key="a", value="1")])
        assert await store.get("a") == Versioned(key="a", value="1", version=1)
        assert len(db._idle) <= 2
