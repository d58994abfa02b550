"""A pool of blocking connections to one database, lent to worker threads, and its closing.

:class:`Database` is what every SQL-backed object owns: a bounded pool (at most
``max_connections`` connections, each handed to one worker thread at a time by a
:class:`trio.CapacityLimiter`), the :class:`~._dialect.Dialect` its statements are
written against, and the schemas it brings up to date when it opens a connection. The
backends (:class:`~._sqlite.SqliteDatabase`, :class:`~._postgres.PostgresDatabase`)
supply the connection, the worker-thread call and its cancellation, and transactions.

Closing is bounded: :meth:`Database.aclose` waits at most ``CLOSE_TIMEOUT`` seconds
(trio's clock) for the calls other tasks still have in flight. When some are still running
then, the pool is closed all the same, each of those calls closes its own connection
when it ends, and ``aclose`` raises an :class:`~operative.OperativeError` saying so: it
never reports a clean close that did not happen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

import trio

from .._core._errors import InvalidArgument, OperativeError
from ._dialect import Dialect
from ._migrate import Schema

__all__ = ["CLOSE_TIMEOUT", "Database", "SqlBacked", "held"]

logger = logging.getLogger("operative.sql")

_T = TypeVar("_T")

CLOSE_TIMEOUT = 30.0
"""Seconds :meth:`Database.aclose` waits for calls in flight before it gives up on them."""


class held:
    """``async with held(lock):`` is ``async with lock:`` (a :class:`trio.Lock` or
    :class:`trio.CapacityLimiter`) without the scheduler round trip trio makes when the
    lock is free: a cancellation is still raised before it is taken, and a taken lock is
    waited for as usual. For locks taken once per database call, where that round trip
    is a measurable part of the call.
    """

    __slots__ = ("_lock",)

    def __init__(self, lock: trio.Lock | trio.CapacityLimiter) -> None:
        self._lock = lock

    async def __aenter__(self) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


class Database:
    """A bounded pool of connections to one database (see the module docstring).

    ``call(work)`` runs ``work(connection)`` in a worker thread; ``write(work)`` runs it
    in one write transaction and ``read(work)`` in one read snapshot. ``owner`` names the
    object using the pool, in messages.
    """

    __slots__ = (
        "_closed",
        "_drained",
        "_idle",
        "_limiter",
        "_max_connections",
        "dialect",
        "owner",
        "schemas",
    )

    dialect: Dialect
    owner: str
    schemas: tuple[Schema, ...]

    def __init__(
        self, *, dialect: Dialect, owner: str, max_connections: int, schemas: Sequence[Schema]
    ) -> None:
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise InvalidArgument(f"max_connections must be an int, not {max_connections!r}")
        if max_connections < 1:
            raise InvalidArgument(f"max_connections must be >= 1, not {max_connections!r}")
        self.dialect = dialect
        self.owner = owner
        self.schemas = tuple(schemas)
        self._max_connections = max_connections
        self._limiter = trio.CapacityLimiter(max_connections)
        self._idle: list[Any] = []
        self._closed = False
        self._drained = False  # aclose took the idle connections: late calls close their own

    # -- what a backend supplies -----------------------------------------------------

    @property
    def name(self) -> str:
        """The database, as the owner's ``database`` property reports it."""
        raise NotImplementedError

    @property
    def label(self) -> str:
        """The database as the owner's ``repr`` shows it."""
        raise NotImplementedError

    @property
    def where(self) -> str:
        """The database, as messages name it."""
        raise NotImplementedError

    async def call(self, work: Callable[[Any], _T], *, brief: bool = False) -> _T:
        """``work(connection)`` in a worker thread, which the caller always waits for.

        ``brief``: ``work`` is a small write of a few rows, which a backend may commit in
        the Trio thread when that cannot wait on anything (see
        :class:`~._sqlite.SqliteDatabase`); others ignore it.
        """
        raise NotImplementedError

    def transaction(self, conn: Any, work: Callable[[Any], _T]) -> _T:
        """``work(conn)`` in one write transaction, committed when it returns and rolled
        back when it raises (in the worker thread)."""
        raise NotImplementedError

    def snapshot(self, conn: Any, work: Callable[[Any], _T]) -> _T:
        """``work(conn)`` in one read-only snapshot of the database (in the worker thread)."""
        raise NotImplementedError

    # -- built on those ----------------------------------------------------------------

    async def write(self, work: Callable[[Any], _T], *, brief: bool = False) -> _T:
        """``work(connection)`` in one write transaction, in a worker thread (``brief``:
        see :meth:`call`)."""
        return await self.call(lambda conn: self.transaction(conn, work), brief=brief)

    async def read(self, work: Callable[[Any], _T]) -> _T:
        """``work(connection)`` in one read snapshot, in a worker thread."""
        return await self.call(lambda conn: self.snapshot(conn, work))

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"this {self.owner} is closed; create a new one")

    async def _give_back(self, conn: Any, *, discard: bool = False) -> None:
        """Return ``conn`` to the pool, or close it: when ``discard`` (it may be unusable)
        or when the pool was closed while the call that used it ran.

        Closing runs in a worker thread that is always awaited, shielded: it is bounded
        by itself (neither driver's ``close`` waits for another connection or the server).
        """
        if not (discard or self._drained):
            self._idle.append(conn)
            return
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(conn.close)
            except Exception:
                logger.warning("closing a %s connection failed", self.owner, exc_info=True)

    async def aclose(self) -> None:
        """Wait (at most ``CLOSE_TIMEOUT`` seconds) for calls in flight, then close every
        connection. Closing twice is harmless; closing is shielded from cancellation.

        Raises:
            OperativeError: calls of other tasks were still running when the time was up.
                The pool is closed anyway and those calls close their connections when
                they end; close an object only after the tasks using it are done.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        held: list[object] = []
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(CLOSE_TIMEOUT):
                    for _ in range(self._max_connections):  # every place held: none in flight
                        token = object()
                        await self._limiter.acquire_on_behalf_of(token)
                        held.append(token)
                idle, self._idle = self._idle, []
                self._drained = True
                await trio.to_thread.run_sync(_close_all, idle)
            finally:
                for token in held:
                    self._limiter.release_on_behalf_of(token)
        running = self._max_connections - len(held)
        if running:
            raise OperativeError(
                f"the {self.owner} of {self.label!r} was closed while {running} call(s) of "
                f"other tasks were still running after {CLOSE_TIMEOUT:g} s; each closes its "
                "connection when it ends. Close it only after the tasks that use it are done"
            )


def _close_all(connections: Sequence[Any]) -> None:
    for conn in connections:
        try:
            conn.close()
        except Exception:
            logger.warning("closing a connection failed", exc_info=True)


class SqlBacked:
    """Base of the objects built on one :class:`Database`: closing them closes it."""

    __slots__ = ("_db",)

    _db: Database

    def __repr__(self) -> str:
        closed = " closed" if self._db.closed else ""
        return f"<{type(self).__name__} {self._db.label!r}{closed}>"

    async def aclose(self) -> None:
        """Release the connections (see :meth:`Database.aclose`); the object cannot be
        used afterwards, and closing twice is harmless."""
        await self._db.aclose()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        self._db.check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._db.aclose()
        except OperativeError:
            if exc is None:
                raise
            # The block's own exception goes on (it may be Cancelled); the close is reported.
            logger.warning("closing %r after an error did not finish", self, exc_info=True)
