"""``PostgresStore``: the conditional text-value store in a PostgreSQL table.

psycopg's async connection does not run under Trio, so this store drives sync psycopg 3
from worker threads: a pool of at most ``max_connections`` connections (autocommit), each
handed to one thread at a time by a :class:`trio.CapacityLimiter`. That plumbing is the
``PostgresPooled`` base, shared with the PostgreSQL durable engine and checkpoint store.

Batches run in one transaction: ``SELECT ... FOR UPDATE`` locks the rows that exist,
their versions are compared, then rows are updated, deleted, or inserted with
``ON CONFLICT DO NOTHING`` (a key created by a concurrent writer in between makes the
batch start over, and the next attempt reports the conflict). Keys use the ``"C"``
collation so that listing order is code-point order, as in every other store.

Cancellation: when the caller's scope is cancelled, the call itself sends
``connection.cancel_safe()`` from a worker thread that it awaits, shielded; the query
stops, its transaction rolls back, the connection is discarded, and only then does
the caller see ``trio.Cancelled``. That clean-up is bounded: if the query has not stopped
``_CANCEL_TIMEOUT`` seconds after the request (an unreachable server, a request that
arrived before the statement began), the connection's socket is shut down, which ends
the worker's wait at once. A batch whose ``COMMIT`` was already under way may still have
committed (read the keys to find out); it is never half-applied.

psycopg is the optional extra ``postgres`` and is imported only when a store is created.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import trio

from .._core._errors import InvalidArgument
from ._pool import PooledStore
from ._protocol import Delete, Operation, Versioned
from ._sqlite import (
    check_operations,
    check_text,
    check_versions,
    decode_text,
    decode_version,
    prefix_upper_bound,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresPooled", "PostgresStore"]

logger = logging.getLogger("operative.storage")

_T = TypeVar("_T")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_ATTEMPTS = 20  # batch restarts after a deadlock or a concurrent insert
_CANCEL_TIMEOUT = 5.0  # seconds for the cancel request to reach the server
_SCHEMA_LOCK = 7279751083373420113  # advisory lock serialising operative's CREATE TABLEs


def _import_psycopg(user: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"{user} needs psycopg 3: pip install 'operative[postgres]'") from exc
    return psycopg


class _Restart(Exception):
    """A concurrent writer created a key this batch meant to create: start over."""


class PostgresPooled(PooledStore):
    """Base of PostgreSQL-backed classes: a pool of sync psycopg connections (autocommit).

    A subclass calls ``__init__`` with the DSN and pool size and creates its tables in
    ``_setup`` (with :meth:`_create_tables`). ``_call(work)`` runs ``work(connection)`` in
    a worker thread and, when the caller is cancelled, stops the query with
    ``cancel_safe()`` (see the module docstring).
    """

    __slots__ = ("_dsn", "_psycopg")

    def __init__(self, dsn: str, *, max_connections: int) -> None:
        if not isinstance(dsn, str):
            raise InvalidArgument(f"dsn must be a str, not {dsn!r}")
        self._init_pool(max_connections)
        self._psycopg = _import_psycopg(type(self).__name__)
        self._dsn = dsn

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        """Create this class's tables (called once per new connection)."""

    @staticmethod
    def _create_tables(conn: psycopg.Connection[Any], statements: Sequence[str]) -> None:
        """Run ``statements`` in one transaction, one connection of any process at a time
        (concurrent ``CREATE TABLE IF NOT EXISTS`` can collide)."""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in statements:
                conn.execute(statement)

    def _connect(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] = self._psycopg.connect(self._dsn, autocommit=True)
        try:
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, work: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        async with self._limiter:
            self._check_open()
            await trio.lowlevel.checkpoint_if_cancelled()  # no thread for a cancelled call
            holder: list[psycopg.Connection[Any] | None] = [
                self._idle.pop() if self._idle else None
            ]
            token = trio.lowlevel.current_trio_token()
            returned = threading.Event()  # the worker thread is done with the connection
            finished = trio.Event()  # ... and its outcome is in ``landed``
            landed: list[outcome.Outcome[_T]] = []

            def run() -> _T:
                try:
                    conn = holder[0]
                    if conn is None:
                        conn = holder[0] = self._connect()
                    return work(conn)
                finally:
                    returned.set()

            def deliver(result: outcome.Outcome[_T]) -> None:
                def land() -> None:
                    landed.append(result)
                    finished.set()

                token.run_sync_soon(land)

            # Started here and always waited for below: the thread never outlives the call.
            trio.lowlevel.start_thread_soon(run, deliver, name="operative postgres")
            stopped = False
            try:
                await finished.wait()
            finally:
                with trio.CancelScope(shield=True):
                    if not finished.is_set():
                        # Cancelled while the query runs: stop it (a worker thread this
                        # task awaits, bounded), then wait for the worker, which returns
                        # promptly once its query stopped. The cancellation then goes on.
                        stopped = True
                        await trio.to_thread.run_sync(_stop_query, holder, returned)
                        await finished.wait()
                    conn = holder[0]
                    if conn is not None:
                        # A connection a cancel reached is discarded, as is a broken one.
                        discard = stopped or conn.closed or conn.broken
                        await self._give_back(conn, discard=discard)
        return landed[0].unwrap()


def _stop_query(holder: list[psycopg.Connection[Any] | None], returned: threading.Event) -> None:
    """Stop the query running on ``holder[0]``; in a worker thread, bounded.

    First politely: ``cancel_safe()`` asks the server to cancel the statement (the
    transaction rolls back). If the worker thread has still not returned
    ``_CANCEL_TIMEOUT`` seconds later (the server is unreachable, or the request came
    before the statement started), the connection's socket is shut down: the worker's
    next read fails at once and it returns. These waits are real time, like the blocking
    they bound.
    """
    conn = holder[0]
    if conn is not None:
        try:
            conn.cancel_safe(timeout=_CANCEL_TIMEOUT)
        except Exception:
            logger.debug("the cancel request for a PostgreSQL query failed", exc_info=True)
    if returned.wait(_CANCEL_TIMEOUT):
        return
    conn = holder[0]  # it may have connected meanwhile
    if conn is None:
        return  # still connecting: libpq's connect_timeout bounds it
    logger.warning(
        "a cancelled PostgreSQL query did not stop within %g s; closing its socket",
        _CANCEL_TIMEOUT,
    )
    try:
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:
        logger.warning("shutting down a PostgreSQL connection's socket failed", exc_info=True)


class PostgresStore(PostgresPooled):
    """A :class:`~operative.storage.ConditionalTextValueStore` in a PostgreSQL table.

    For many processes on many machines sharing one database. Connections open lazily.

    Args:
        dsn: a libpq connection string or URI.
        max_connections: connections (and worker threads) per store.
        table: the table holding the values (created if missing).
    """

    __slots__ = ("_table",)

    def __init__(self, dsn: str, *, max_connections: int = 4, table: str = "operative_kv") -> None:
        if not isinstance(table, str) or not _IDENTIFIER.match(table):
            raise InvalidArgument(f"table must be a plain SQL identifier, not {table!r}")
        super().__init__(dsn, max_connections=max_connections)
        self._table = table

    def __repr__(self) -> str:
        return f"<PostgresStore table {self._table!r}{' closed' if self._closed else ''}>"

    # -- plumbing -------------------------------------------------------------------

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        self._create_tables(
            conn,
            [
                f'CREATE TABLE IF NOT EXISTS "{self._table}" ('
                'key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL, '
                "version BIGINT NOT NULL)"
            ],
        )

    def _row(self, row: Sequence[object]) -> Versioned:
        raw_key, raw_value, raw_version = row
        where = f"PostgreSQL table {self._table!r}"
        key = decode_text(where, raw_key, "key", raw_key)
        return Versioned(
            key=key,
            value=decode_text(where, key, "value", raw_value),
            version=decode_version(where, key, raw_version),
        )

    # -- the protocol ---------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        """The value stored under ``key``, or ``None``.

        Raises:
            CorruptRecordError: the stored row cannot be read (names the key).
        """
        check_text("key", key, forbid_nul=True)
        sql = f'SELECT key, value, version FROM "{self._table}" WHERE key = %s'

        def work(conn: psycopg.Connection[Any]) -> Versioned | None:
            row = conn.execute(sql, (key,)).fetchone()
            return None if row is None else self._row(row)

        return await self._call(work)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        """The values stored under ``keys``; missing keys are absent from the mapping."""
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            check_text("key", key, forbid_nul=True)
        sql = f'SELECT key, value, version FROM "{self._table}" WHERE key = ANY(%s)'

        def work(conn: psycopg.Connection[Any]) -> dict[str, Versioned]:
            if not wanted:
                return {}
            found: dict[str, Versioned] = {}
            for row in conn.execute(sql, (wanted,)):
                item = self._row(row)
                found[item.key] = item
            return found

        return await self._call(work)

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        """Values whose key starts with ``prefix``, sorted by key, after ``after``."""
        check_text("prefix", prefix, forbid_nul=True)
        if after is not None:
            check_text("after", after, forbid_nul=True)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgument(f"limit must be None or an int, not {limit!r}")
        if limit is not None and limit < 0:
            raise InvalidArgument(f"limit must be None or >= 0, not {limit!r}")
        sql = [f'SELECT key, value, version FROM "{self._table}" WHERE key >= %s']
        params: list[object] = [prefix]
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            sql.append("AND key < %s")
            params.append(upper)
        if after is not None:
            sql.append("AND key > %s")
            params.append(after)
        sql.append("ORDER BY key")
        if limit is not None:
            sql.append("LIMIT %s")
            params.append(limit)
        statement = " ".join(sql)

        def work(conn: psycopg.Connection[Any]) -> list[Versioned]:
            return [self._row(row) for row in conn.execute(statement, params)]

        return await self._call(work)

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        """Apply every operation or none, in one transaction.

        Raises:
            ConflictError: an ``expected_version`` did not hold; nothing was written.
            InvalidArgument: a malformed batch (a key twice, a non-text key or value, a NUL
                character, which PostgreSQL text cannot hold).
        """
        ops = list(operations)
        check_operations(ops, forbid_nul=True)
        if not ops:
            await trio.lowlevel.checkpoint()
            self._check_open()
            return ()
        errors = self._psycopg.errors
        retryable = (_Restart, errors.DeadlockDetected, errors.SerializationFailure)

        def work(conn: psycopg.Connection[Any]) -> tuple[int | None, ...]:
            for attempt in range(_ATTEMPTS):
                try:
                    with conn.transaction():
                        return self._apply(conn, ops)
                except retryable:
                    if attempt == _ATTEMPTS - 1:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

        return await self._call(work)

    def _apply(
        self, conn: psycopg.Connection[Any], ops: Sequence[Operation]
    ) -> tuple[int | None, ...]:
        table = f'"{self._table}"'
        where = f"PostgreSQL table {self._table!r}"
        current: dict[str, int] = {}
        rows = conn.execute(
            f"SELECT key, version FROM {table} WHERE key = ANY(%s) ORDER BY key FOR UPDATE",
            ([op.key for op in ops],),
        )
        for raw_key, raw_version in rows:
            key = decode_text(where, raw_key, "key", raw_key)
            current[key] = decode_version(where, key, raw_version)
        check_versions(ops, current)
        versions: list[int | None] = []
        for op in ops:
            old = current.get(op.key)
            if isinstance(op, Delete):
                if old is not None:
                    conn.execute(f"DELETE FROM {table} WHERE key = %s", (op.key,))
                versions.append(None)
            elif old is not None:
                conn.execute(
                    f"UPDATE {table} SET value = %s, version = %s WHERE key = %s",
                    (op.value, old + 1, op.key),
                )
                versions.append(old + 1)
            else:
                inserted = conn.execute(
                    f"INSERT INTO {table} (key, value, version) VALUES (%s, %s, 1) "
                    "ON CONFLICT (key) DO NOTHING RETURNING version",
                    (op.key, op.value),
                ).fetchone()
                if inserted is None:  # created since our SELECT: look again
                    raise _Restart(op.key)
                versions.append(1)
        return tuple(versions)
