"""``PostgresDatabase``: a pool of sync psycopg 3 connections, driven from worker threads.

psycopg's async connection does not run under Trio, so the SQL-backed objects drive sync
psycopg 3 from worker threads: at most ``max_connections`` connections (autocommit),
each handed to one thread at a time by a :class:`trio.CapacityLimiter`. A new
connection brings its schemas up to date (see :mod:`._migrate`).

Cancellation: when the caller's scope is cancelled, the call itself sends
``connection.cancel_safe()`` from a worker thread that it awaits, shielded; the query
stops, its transaction rolls back, the connection is discarded, and only then does
the caller see ``trio.Cancelled``. That clean-up is bounded: if the query has not stopped
``_CANCEL_TIMEOUT`` seconds after the request (an unreachable server, a request that
arrived before the statement began), the connection's socket is shut down, which ends
the worker's wait at once. A transaction whose ``COMMIT`` was already under way may still
have committed; it is never half-applied.

psycopg is the optional extra ``postgres`` and is imported only when a database object
is created.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import trio

from .._core._errors import InvalidArgument
from ._database import Database, held
from ._migrate import Schema, migrate
from ._postgres_dialect import POSTGRES

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresDatabase"]

logger = logging.getLogger("operative.sql")

_T = TypeVar("_T")
_CANCEL_TIMEOUT = 5.0  # seconds for the cancel request to reach the server
_SECRETS = ("password", "sslpassword")


def _import_psycopg(user: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"{user} needs psycopg 3: pip install 'operative[postgres]'") from exc
    return psycopg


def _without_password(psycopg_module: Any, dsn: str) -> str:
    """The DSN in libpq's canonical ``key=value`` form, without its passwords."""
    conninfo = psycopg_module.conninfo
    try:
        params: dict[str, Any] = conninfo.conninfo_to_dict(dsn)
    except psycopg_module.ProgrammingError:
        # psycopg's message quotes the DSN, which may hold a password: say less.
        raise InvalidArgument(
            "dsn is not a libpq connection string (key=value ...) or postgresql:// URI"
        ) from None
    for key in _SECRETS:
        params.pop(key, None)
    return str(conninfo.make_conninfo("", **params))


class PostgresDatabase(Database):
    """One PostgreSQL database (see the module docstring).

    Args:
        dsn: a libpq connection string or URI; tables go in the first schema of its
            ``search_path``.
        owner: the name of the class using it, for messages (and the install hint).
        max_connections: connections (and worker threads) per object.
        schemas: brought up to date on every new connection.
    """

    __slots__ = ("_dsn", "_name", "_psycopg")

    def __init__(
        self, dsn: str, *, owner: str, max_connections: int, schemas: Sequence[Schema]
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidArgument(f"dsn must be a str, not {dsn!r}")
        super().__init__(
            dialect=POSTGRES, owner=owner, max_connections=max_connections, schemas=schemas
        )
        self._psycopg = _import_psycopg(owner)
        self._dsn = dsn
        self._name = _without_password(self._psycopg, dsn)

    @property
    def name(self) -> str:
        """The DSN without its password (libpq's canonical ``key=value`` form)."""
        return self._name

    @property
    def label(self) -> str:
        return self._name

    @property
    def where(self) -> str:
        return f"PostgreSQL database {self._name!r}"

    def transaction(self, conn: psycopg.Connection[Any], work: Callable[[Any], _T]) -> _T:
        with conn.transaction():
            return work(conn)

    def snapshot(self, conn: psycopg.Connection[Any], work: Callable[[Any], _T]) -> _T:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return work(conn)

    def _connect(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] = self._psycopg.connect(self._dsn, autocommit=True)
        try:
            migrate(conn, POSTGRES, self.schemas, where=self.where, transaction=self.transaction)
        except BaseException:
            conn.close()
            raise
        return conn

    async def call(self, work: Callable[[Any], _T], *, brief: bool = False) -> _T:
        # ``brief`` changes nothing: every statement is a round trip to the server, which
        # may wait on locks or the network, so it always runs in a worker thread.
        async with held(self._limiter):
            self.check_open()
            await trio.lowlevel.checkpoint_if_cancelled()  # no thread for a cancelled call
            holder: list[psycopg.Connection[Any] | None] = [
                self._idle.pop() if self._idle else None
            ]
            task = trio.lowlevel.current_task()
            token = trio.lowlevel.current_trio_token()
            # Held until the worker thread is done with the connection (a bare lock: an
            # Event would build a Condition on every call).
            returned = threading.Lock()
            returned.acquire()
            landed: list[outcome.Outcome[_T]] = []  # the worker's outcome, once delivered
            parked = [True]  # the task waits for the delivery, which wakes it directly
            late: list[trio.Event] = []  # what a cancelled call waits on instead

            def run() -> _T:
                try:
                    conn = holder[0]
                    if conn is None:
                        conn = holder[0] = self._connect()
                    return work(conn)
                finally:
                    returned.release()

            def deliver(result: outcome.Outcome[_T]) -> None:
                def land() -> None:
                    landed.append(result)
                    if parked[0]:
                        parked[0] = False
                        trio.lowlevel.reschedule(task)
                    elif late:
                        late[0].set()

                token.run_sync_soon(land)

            def abort(_: Any) -> trio.lowlevel.Abort:
                parked[0] = False  # cancelled: the delivery no longer wakes the task
                return trio.lowlevel.Abort.SUCCEEDED

            # Started here and always waited for below: the thread never outlives the call.
            # Unnamed: trio would set the OS thread name and reset it on every call.
            trio.lowlevel.start_thread_soon(run, deliver)
            stopped = False
            try:
                await trio.lowlevel.wait_task_rescheduled(abort)
            finally:
                conn = holder[0]
                if (
                    landed
                    and conn is not None
                    and not (conn.closed or conn.broken or self._drained)
                ):
                    # The usual end: the connection goes back to the pool (nothing to
                    # wait for, so no shielded scope).
                    self._idle.append(conn)
                else:
                    with trio.CancelScope(shield=True):
                        if not landed:
                            # Cancelled while the query runs: stop it (a worker thread
                            # this task awaits, bounded), then wait for the worker, which
                            # returns promptly once its query stopped. The cancellation
                            # then goes on.
                            stopped = True
                            finished = trio.Event()
                            late.append(finished)
                            await trio.to_thread.run_sync(_stop_query, holder, returned)
                            if not landed:
                                await finished.wait()
                        conn = holder[0]
                        if conn is not None:
                            # A connection a cancel reached is discarded, as is a broken one.
                            discard = stopped or conn.closed or conn.broken
                            await self._give_back(conn, discard=discard)
        return landed[0].unwrap()


def _stop_query(holder: list[psycopg.Connection[Any] | None], returned: threading.Lock) -> None:
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
    if returned.acquire(timeout=_CANCEL_TIMEOUT):  # released once the worker returned
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
