"""``PostgresDatabase``: a pool of sync psycopg 3 connections, driven from worker threads.

psycopg's async connection does not run under Trio, so the SQL-backed objects drive sync
psycopg 3 from worker threads: at most ``max_connections`` connections (autocommit),
each handed to one thread at a time by a :class:`trio.CapacityLimiter`. A new
connection brings its schemas up to date (see :mod:`._migrate`).

Every wait is bounded:

- **Connecting.** libpq's ``connect_timeout`` is :data:`CONNECT_TIMEOUT` (10 s) unless
  the DSN, ``PGCONNECT_TIMEOUT`` or the ``connect_timeout`` argument sets another. TCP
  keepalives (after 30 s idle, every 10 s, 3 probes) and a 60 s ``tcp_user_timeout``
  end a connection whose server or network went away, when the DSN sets none of its own.
- **A cancelled call.** When the caller's scope is cancelled, the call stops its work
  and returns at most ``_CANCEL_TIMEOUT + _CUT_OFF_TIMEOUT`` (5) seconds later,
  whatever the server does:

  - *not yet started* (still connecting, or not yet scheduled): it returns at once.
    The worker thread is left to finish its connect (bounded by ``connect_timeout``),
    then closes that connection and runs nothing.
  - *running*: a thread sends ``connection.cancel_safe()``; the server stops the query,
    its transaction rolls back, the worker thread returns, the connection is discarded,
    and only then does the caller see ``trio.Cancelled`` (a round trip to a healthy
    server). If the query has not stopped ``_CANCEL_TIMEOUT`` (4) seconds after the
    cancellation (an unreachable or silent server, a request that arrived before the
    statement began), the connection's socket is shut down, which ends the worker's
    wait at once; a worker that still has not returned ``_CUT_OFF_TIMEOUT`` (1) second
    later is abandoned, and closes its connection itself when it ends.

  A connection a cancel reached is never reused. When the socket had to be cut (or the
  worker abandoned) the server's answer to the statement in flight was never read:
  unless that statement was known to change nothing (the call was a :meth:`read`, or it
  was inside a :meth:`transaction` before its
  ``COMMIT``), the call raises :class:`OutcomeUnknownError` instead of
  ``trio.Cancelled``: whatever it wrote may or may not have committed.

A call that is not cancelled waits for the server as long as it takes: bound it with a
cancel scope (or a server-side ``statement_timeout`` through the DSN's ``options``).

psycopg is the optional extra ``postgres`` and is imported only when a database object
is created.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import trio

from .._core._errors import InvalidArgument, OperativeError
from ._database import Database, held
from ._migrate import Schema, migrate
from ._postgres_dialect import POSTGRES

if TYPE_CHECKING:
    import psycopg

__all__ = ["CONNECT_TIMEOUT", "OutcomeUnknownError", "PostgresDatabase"]

logger = logging.getLogger("operative.sql")

_T = TypeVar("_T")

CONNECT_TIMEOUT = 10
"""libpq's ``connect_timeout`` (whole seconds, at least 2) when nothing else sets one."""

_CANCEL_TIMEOUT = 4.0  # seconds a cancelled query gets to stop before its socket is cut
_CUT_OFF_TIMEOUT = 1.0  # seconds a worker gets to return once its socket is cut
_SOCKET_DEFAULTS: Mapping[str, int] = {
    # A server or network that went away is noticed while a call waits for an answer.
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
_TCP_USER_TIMEOUT = 60_000  # milliseconds; libpq 12 or newer
_SECRETS = ("password", "sslpassword")

# Where a call is, as the threads stopping it see it.
_STARTING = 0  # its worker has not begun its work (it may be connecting): nothing sent
_RUNNING = 1  # its work runs outside a transaction: each statement commits on its own
_TRANSACTION = 2  # inside transaction(), before its COMMIT: a cut rolls it back
_COMMITTING = 3  # transaction()'s COMMIT is under way
_DONE = 4  # the worker thread returned

_STATE = threading.Lock()  # guards the hand-overs between a call's threads
_local = threading.local()  # .call: the _Call whose work this thread runs


class OutcomeUnknownError(OperativeError):
    """A cancelled PostgreSQL call was cut off before the server answered its statement
    in flight, so whether that statement took effect is unknown.

    Raised instead of ``trio.Cancelled`` when the server did not stop the query within
    the cancellation bound, so its socket was cut: a write may or may not have
    committed. Read back what it wrote before retrying it. ``where`` names the
    database; ``__cause__`` is the driver's error, if the call ended with one.
    """

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message)
        self.where = where


def _import_psycopg(user: str) -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"{user} needs psycopg 3: pip install 'operative[postgres]'") from exc
    return psycopg


def _parse(psycopg_module: Any, dsn: str) -> dict[str, Any]:
    try:
        params: dict[str, Any] = psycopg_module.conninfo.conninfo_to_dict(dsn)
    except psycopg_module.ProgrammingError:
        # psycopg's message quotes the DSN, which may hold a password: say less.
        raise InvalidArgument(
            "dsn is not a libpq connection string (key=value ...) or postgresql:// URI"
        ) from None
    return params


def _without_password(psycopg_module: Any, dsn: str) -> str:
    """The DSN in libpq's canonical ``key=value`` form, without its passwords."""
    params = _parse(psycopg_module, dsn)
    for key in _SECRETS:
        params.pop(key, None)
    return str(psycopg_module.conninfo.make_conninfo("", **params))


def _check_connect_timeout(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"connect_timeout must be a number of seconds, not {value!r}")
    if not value > 0 or math.isinf(value):
        raise InvalidArgument(
            f"connect_timeout must be a finite number of seconds > 0, not {value!r}"
        )
    return max(2, math.ceil(value))  # libpq counts whole seconds, at least 2


def _connect_options(psycopg_module: Any, dsn: str, connect_timeout: int | None) -> dict[str, int]:
    """What :meth:`PostgresDatabase._connect` adds to the DSN: the bounds it does not set
    (in the DSN itself or in libpq's environment variables)."""
    params = _parse(psycopg_module, dsn)
    envvars = {
        info.keyword.decode(): info.envvar.decode()
        for info in psycopg_module.pq.Conninfo.get_defaults()
        if info.envvar
    }

    def given(key: str) -> bool:
        return key in params or bool(os.environ.get(envvars.get(key, ""), ""))

    options: dict[str, int] = {}
    if connect_timeout is not None:
        options["connect_timeout"] = connect_timeout
    elif not given("connect_timeout"):
        options["connect_timeout"] = CONNECT_TIMEOUT
    if params.get("keepalives", "1") != "0":
        options.update((key, value) for key, value in _SOCKET_DEFAULTS.items() if not given(key))
    if psycopg_module.pq.version() >= 120000 and not given("tcp_user_timeout"):
        options["tcp_user_timeout"] = _TCP_USER_TIMEOUT
    return options


class _Call:
    """One call, as its Trio task, its worker thread and the threads stopping it share it.

    ``users`` counts the threads that may still touch the connection (the worker, and on
    cancellation the stopper and the cancel request's thread). Once ``orphaned``, the
    Trio side has let go of the connection and the last of them to leave closes it.
    """

    __slots__ = ("conn", "depth", "lost", "orphaned", "phase", "returned", "users")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.phase = _STARTING
        self.depth = 0  # transaction() blocks entered
        self.lost = -1  # the phase its socket was cut (or its worker abandoned) in
        self.orphaned = False
        self.users = 1  # the worker thread
        self.returned = threading.Lock()  # released once the worker thread returned
        self.returned.acquire()

    def leave(self, *, worker: bool = False) -> None:
        """A thread is done with the connection; the last one closes an orphaned one."""
        with _STATE:
            if worker:
                self.phase = _DONE
            self.users -= 1
            close = self.orphaned and self.users == 0 and self.conn is not None
        if worker:
            self.returned.release()
        if close:
            _close_quietly(self.conn)

    def let_go(self) -> bool:
        """The Trio side drops the connection: True when no thread uses it (the caller
        closes it); otherwise the last thread to leave will."""
        with _STATE:
            if self.users == 0:
                return True
            self.orphaned = True
            return False


class _Abandoned(Exception):
    """The call was cancelled before its worker began its work: nobody waits for it."""


class PostgresDatabase(Database):
    """One PostgreSQL database (see the module docstring).

    Args:
        dsn: a libpq connection string or URI; tables go in the first schema of its
            ``search_path``. Its ``connect_timeout``, keepalive and ``tcp_user_timeout``
            settings replace the defaults.
        owner: the name of the class using it, for messages (and the install hint).
        max_connections: connections (and worker threads) per object.
        schemas: brought up to date on every new connection.
        connect_timeout: seconds to open a connection (rounded up to whole seconds, at
            least 2); ``None``: the DSN's, else ``PGCONNECT_TIMEOUT``, else
            :data:`CONNECT_TIMEOUT`.
    """

    __slots__ = ("_dsn", "_name", "_options", "_psycopg")

    def __init__(
        self,
        dsn: str,
        *,
        owner: str,
        max_connections: int,
        schemas: Sequence[Schema],
        connect_timeout: float | None = None,
    ) -> None:
        if not isinstance(dsn, str):
            raise InvalidArgument(f"dsn must be a str, not {dsn!r}")
        timeout = _check_connect_timeout(connect_timeout)
        super().__init__(
            dialect=POSTGRES, owner=owner, max_connections=max_connections, schemas=schemas
        )
        self._psycopg = _import_psycopg(owner)
        self._dsn = dsn
        self._name = _without_password(self._psycopg, dsn)
        self._options = _connect_options(self._psycopg, dsn, timeout)

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
        call: _Call | None = getattr(_local, "call", None)
        if call is None:  # a migration, while the connection opens
            with conn.transaction():
                return work(conn)
        call.depth += 1
        outer = call.depth == 1
        if outer:
            call.phase = _TRANSACTION
        try:
            with conn.transaction():
                result = work(conn)
                if outer:
                    call.phase = _COMMITTING  # leaving the block sends the COMMIT
            return result
        finally:
            call.depth -= 1
            if outer:
                call.phase = _RUNNING

    def snapshot(self, conn: psycopg.Connection[Any], work: Callable[[Any], _T]) -> _T:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return work(conn)

    def _connect(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] = self._psycopg.connect(
            self._dsn, autocommit=True, **self._options
        )
        try:
            migrate(conn, POSTGRES, self.schemas, where=self.where, transaction=self.transaction)
        except BaseException:
            conn.close()
            raise
        return conn

    async def call(self, work: Callable[[Any], _T], *, brief: bool = False) -> _T:
        # ``brief`` changes nothing: every statement is a round trip to the server, which
        # may wait on locks or the network, so it always runs in a worker thread.
        return await self._call(work, read_only=False)

    async def read(self, work: Callable[[Any], _T]) -> _T:
        # A read-only snapshot: cut off, it has changed nothing (no OutcomeUnknownError).
        return await self._call(lambda conn: self.snapshot(conn, work), read_only=True)

    async def _call(self, work: Callable[[Any], _T], *, read_only: bool) -> _T:
        async with held(self._limiter):
            self.check_open()
            await trio.lowlevel.checkpoint_if_cancelled()  # no thread for a cancelled call
            call = _Call(self._idle.pop() if self._idle else None)
            task = trio.lowlevel.current_task()
            token = trio.lowlevel.current_trio_token()
            landed: list[outcome.Outcome[_T]] = []  # the worker's outcome, once delivered
            parked = [True]  # the task waits for the delivery, which wakes it directly
            late: list[trio.Event] = []  # what a cancelled call waits on instead

            def run() -> _T:
                try:
                    conn = call.conn
                    if conn is None:
                        conn = self._connect()
                    with _STATE:
                        call.conn = conn
                        if call.orphaned:
                            raise _Abandoned  # leave() closes the connection
                        call.phase = _RUNNING
                    _local.call = call
                    try:
                        return work(conn)
                    finally:
                        _local.call = None
                finally:
                    call.leave(worker=True)

            def deliver(result: outcome.Outcome[_T]) -> None:
                def land() -> None:
                    landed.append(result)
                    if parked[0]:
                        parked[0] = False
                        trio.lowlevel.reschedule(task)
                    elif late:
                        late[0].set()

                try:  # noqa: SIM105 - no context manager on every call
                    token.run_sync_soon(land)
                except trio.RunFinishedError:
                    pass  # an abandoned call outlived the run: nobody waits for it

            def abort(_: Any) -> trio.lowlevel.Abort:
                parked[0] = False  # cancelled: the delivery no longer wakes the task
                return trio.lowlevel.Abort.SUCCEEDED

            # Started here and waited for below, within the cancellation bound.
            # Unnamed: trio would set the OS thread name and reset it on every call.
            trio.lowlevel.start_thread_soon(run, deliver)
            try:
                await trio.lowlevel.wait_task_rescheduled(abort)
            except BaseException as exc:  # cancelled (or KeyboardInterrupt)
                if landed:  # the worker had already returned
                    await self._hand_back(call.conn)
                    raise
                with trio.CancelScope(shield=True):
                    unknown = await self._stop(call, landed, late, read_only=read_only)
                if unknown is not None and isinstance(exc, trio.Cancelled):
                    raise unknown from unknown.__cause__
                raise
            await self._hand_back(call.conn)
        return landed[0].unwrap()

    async def _hand_back(self, conn: Any) -> None:
        """After the worker returned: ``conn`` goes back to the pool, or is closed when it
        is broken or the pool was closed meanwhile."""
        if conn is None:
            return
        if conn.closed or conn.broken or self._drained:
            await self._give_back(conn, discard=conn.closed or conn.broken)
        else:
            # The usual end: nothing to wait for, so no checkpoint and no shielded scope.
            self._idle.append(conn)

    async def _stop(
        self,
        call: _Call,
        landed: list[outcome.Outcome[_T]],
        late: list[trio.Event],
        *,
        read_only: bool,
    ) -> OutcomeUnknownError | None:
        """The clean-up of a call cancelled while its worker runs (shielded; bounded by
        ``_CANCEL_TIMEOUT + _CUT_OFF_TIMEOUT`` seconds of real time, like the blocking it
        bounds). Returns the :class:`OutcomeUnknownError` to raise when a statement that
        may have written was cut off unanswered; ``None``: the cancellation goes on."""
        finished = trio.Event()
        late.append(finished)
        came_back = await _in_thread(_stop_query, call)
        if came_back and not landed:
            await finished.wait()  # the worker returned: its delivery is on its way
        conn = call.conn
        if came_back and conn is not None and call.let_go():
            # A connection a cancel reached is discarded, never reused.
            await self._give_back(conn, discard=True)
        if read_only or call.lost not in (_RUNNING, _COMMITTING):
            return None  # stopped by the server, or nothing it could have written
        if landed and isinstance(landed[0], outcome.Value):
            return None  # the answer came in before the cut: it is known
        bound = _CANCEL_TIMEOUT + _CUT_OFF_TIMEOUT
        error = OutcomeUnknownError(
            f"a cancelled call of the {self.owner} to {self.where} got no answer from "
            f"the server within {bound:g} s, so its connection was cut off and whether "
            "its last statement took effect is unknown. A read can simply be retried; "
            "for a write, read back what it wrote before retrying it (or make it "
            "idempotent), and check the server and the network",
            where=self.where,
        )
        if landed and isinstance(landed[0], outcome.Error):
            error.__cause__ = landed[0].error
        return error


async def _in_thread(fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` in a thread of trio's cache, waited for without a capacity limiter
    (the caller is shielded and ``fn`` is bounded: no limiter's queue may delay it)."""
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result: outcome.Outcome[_T]) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(lambda: fn(*args), deliver)
    result: _T = await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
    return result


def _stop_query(call: _Call) -> bool:
    """Stop the work of a cancelled ``call``, in a worker thread; True when its worker
    thread returned, False when it was abandoned (see the module docstring).

    A worker that has not begun its work (still connecting) is abandoned at once.
    Otherwise a thread of its own sends ``cancel_safe()`` (the server cancels the
    statement, the transaction rolls back), and this waits for that request and then for
    the worker, until ``_CANCEL_TIMEOUT`` seconds have passed; then it shuts the
    connection's socket down (the worker's next read fails at once) and gives the worker
    ``_CUT_OFF_TIMEOUT`` seconds more. These waits are real time, like the blocking they
    bound.
    """
    deadline = time.monotonic() + _CANCEL_TIMEOUT
    with _STATE:
        if call.phase == _STARTING:
            # The worker closes its connection and runs nothing.
            call.orphaned = True
            call.lost = _STARTING
            return False
        if call.phase == _DONE:
            return True
        conn = call.conn
        call.users += 2  # this thread and the cancel request's
    try:
        requested = threading.Event()

        def request() -> None:
            try:
                conn.cancel_safe(timeout=_CANCEL_TIMEOUT)
            except Exception:
                logger.debug("the cancel request for a PostgreSQL query failed", exc_info=True)
            finally:
                requested.set()
                call.leave()

        # A thread of its own: the request may take longer than it was asked to (libpq
        # before 17 has no timeout for it), and this thread must keep to the bound.
        threading.Thread(target=request, name="operative-postgres-cancel", daemon=True).start()
        requested.wait(_CANCEL_TIMEOUT)
        if call.returned.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return True
        with _STATE:
            if call.phase == _DONE:
                return True
            call.lost = call.phase
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
        if call.returned.acquire(timeout=_CUT_OFF_TIMEOUT):
            return True
        with _STATE:
            if call.phase == _DONE:
                return True
            call.orphaned = True  # the last thread to leave closes the connection
        logger.warning(
            "a cancelled PostgreSQL call did not return %g s after its socket was shut "
            "down; it is left to end on its own and close its connection",
            _CUT_OFF_TIMEOUT,
        )
        return False
    finally:
        call.leave()


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception:
        logger.warning("closing a PostgreSQL connection failed", exc_info=True)
