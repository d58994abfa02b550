"""``SqliteDatabase``: a pool of stdlib ``sqlite3`` connections to one file, in WAL mode.

Connections: at most ``max_connections``, opened with ``check_same_thread=False``. The
pool's :class:`trio.CapacityLimiter` hands each connection to exactly one worker thread
at a time, and a brief write (below) uses only an idle connection, which is back in the
pool before any other task runs: no connection is ever used twice at once, and no extra
lock is needed. Every process opens its own connections; WAL and ``BEGIN IMMEDIATE``
make one file safe for many processes. A new connection checks the file (see
:mod:`._sqlite_file`), puts it in WAL mode with ``synchronous=NORMAL`` (a crash of the
machine may lose the last commits, never corrupt the file; a killed process loses
nothing it committed) and brings its schemas up to date (see :mod:`._migrate`).

Private files: a database holds transcripts, so a file this module creates is ``0600``
(owner read and write only, whatever the umask): :func:`create_private` makes it empty
before SQLite opens it, and SQLite gives the ``-wal`` and ``-shm`` files it creates the
database file's mode. An existing file keeps its mode (the user chose it); so does a
database SQLite creates where this module could not (it then reports the problem).

Busy: SQLite's own busy wait cannot be interrupted, so connections have none: a call
that finds another writer holding the lock pauses in its worker thread (1 ms, doubling
up to 100 ms; a cancel ends the pause at once) and tries again, until ``busy_timeout``
has passed (an :class:`~operative.OperativeError` saying the file stayed locked) or the
caller is cancelled.

Brief writes (``brief_writes=True``: the durable journal's). A commit of a few rows in
WAL mode does not sync the file and waits on nothing (about 40 µs here for a journal
append), while a worker thread's round trip costs about 80 µs, so ``call(work,
brief=True)`` runs ``work`` in the Trio thread on an idle connection. It cannot wait
there: with no busy wait, a file locked by another writer answers at once, and the call
goes on in a worker thread like any other. Ctrl-C cannot tear it: it runs KI-protected,
so a ``KeyboardInterrupt`` arrives after the commit, never inside it. It makes no
scheduler pass (a cancelled caller writes nothing; one that was not gets its result),
as :class:`~._database.held` makes none for a free lock. And it never checkpoints:
those connections have SQLite's automatic checkpoint off (a checkpoint copies the log
into the file and syncs both: about 10 ms for 1,000 pages here, a third of a commit's
cost when spread over the commits). Instead, every so many calls (the interval adapts so
that each checkpoint finds about 1,000 pages in the log, SQLite's own threshold) a
checkpoint falls due, and the call that falls due makes it first, in its worker thread,
while the object's other calls wait for it. It is a ``RESTART`` checkpoint, which keeps
writers out while it copies, so the next write starts the log over: a passive checkpoint
beside a steady stream of writes never finds the log fully copied, and the log then
grows without end (about 200 MB in a minute of a benchmark's writes).

Cancellation: a call in a worker thread is always waited for. A cancelled caller
interrupts the connection (``sqlite3.Connection.interrupt``), the thread rolls back
whatever it had not committed, and only then does the caller see ``trio.Cancelled``. So
when a cancelled call returns, nothing of it is still running, and its transaction was
either committed whole or not at all. A brief write is never interrupted: it checks for
a cancel before it starts, and once it has committed it returns its result.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import outcome
import trio

from .._core._errors import InvalidArgument, OperativeError
from ._database import Database, held
from ._migrate import Schema, migrate
from ._sqlite_dialect import SQLITE
from ._sqlite_file import check_database_file, raise_for_database_file

__all__ = [
    "PRIVATE_FILE",
    "SqliteDatabase",
    "check_busy_timeout",
    "check_path",
    "create_private",
    "run_in_worker_thread",
]

_T = TypeVar("_T")
_FIRST_PAUSE = 0.001  # seconds before a locked call's second try; doubles each time
_LONGEST_PAUSE = 0.1
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)
_CHECKPOINT_PAGES = 1000  # what a checkpoint should find in the log (SQLite's default)
_FIRST_CHECKPOINT = 256  # calls before the first checkpoint of a brief-writes database
_CHECKPOINT_INTERVALS = (16, 4096)  # fewest and most calls between two checkpoints
_CHECKPOINT_PATIENCE = 0.5  # seconds a checkpoint tries for the write lock and readers


def _checkpoint(conn: sqlite3.Connection, stop: threading.Event) -> int:
    """Copy the log into the file so that the next write starts the log over; return
    the pages the log held.

    A ``RESTART`` checkpoint holds the write lock while it copies and then waits for
    readers to leave the log; the database object's own calls wait for it meanwhile
    (:meth:`SqliteDatabase.call`), and another object's writes find the file locked and
    pause (see the module docstring). A passive checkpoint beside the writes is not
    enough: a log restarts only when a write finds every page in it copied, and under a
    steady stream of writes each passive checkpoint leaves the pages written while it
    ran, so the log grows without end. With no busy wait, a checkpoint that meets a
    write or a reader (another object's, another process's) copies what it can and says
    so (``busy``); it tries again after a pause (1 ms, doubling), for at most
    ``_CHECKPOINT_PATIENCE``, or until cancelled (``stop``): the next one tries again."""
    deadline = time.monotonic() + _CHECKPOINT_PATIENCE
    pause = _FIRST_PAUSE
    while True:
        busy, pages, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        if not busy or time.monotonic() >= deadline or stop.wait(pause):
            return int(pages)
        pause = min(pause * 2, _LONGEST_PAUSE)


class _Locked:
    """What a brief write returns when another writer holds the file's lock."""


_LOCKED = _Locked()


@trio.lowlevel.enable_ki_protection
def _run_here(conn: sqlite3.Connection, work: Callable[[Any], _T]) -> _T | _Locked:
    """``work(conn)`` in the Trio thread; ``_LOCKED`` (nothing written: the lock is taken
    first) when another writer holds the lock. KI-protected: a Ctrl-C waits until it is
    over, so a commit is never torn from its caller's knowledge of it."""
    try:
        return work(conn)
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY_CODES:
            return _LOCKED
        raise


PRIVATE_FILE = 0o600
"""The mode of a database file this module creates (see the module docstring)."""


def create_private(path: str) -> None:
    """Create ``path`` empty with mode ``0600`` when nothing is there; an existing file
    (or anything else at ``path``) is left exactly as it is.

    A path that cannot be created here (a missing directory, no permission) is left for
    SQLite, which names the problem in its own error when it opens the file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, PRIVATE_FILE)
    except OSError:
        return
    try:
        if hasattr(os, "fchmod"):  # a umask may take the owner's bits off: exactly 0600
            os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)


def check_path(path: object, *, owner: str, hint: str) -> str:
    """The database file as text; a memory database or URI is ``InvalidArgument``."""
    if not isinstance(path, str | os.PathLike):
        raise InvalidArgument(f"path must be a str or os.PathLike, not {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise InvalidArgument(f"path must be text, not {text!r}")
    if text in ("", ":memory:") or text.startswith("file:"):
        raise InvalidArgument(f"{owner} needs a file path, not {text!r}: {hint}")
    return text


def check_busy_timeout(busy_timeout: object) -> float:
    if (
        isinstance(busy_timeout, bool)
        or not isinstance(busy_timeout, int | float)
        or not busy_timeout >= 0
    ):
        raise InvalidArgument(f"busy_timeout must be seconds >= 0, not {busy_timeout!r}")
    return float(busy_timeout)


async def run_in_worker_thread(
    fn: Callable[[], _T], on_cancel: Callable[[], None]
) -> tuple[outcome.Outcome[_T], bool]:
    """Run ``fn`` in a worker thread and wait for it, even if the caller is cancelled.

    When the caller's scope is cancelled while ``fn`` runs, ``on_cancel()`` is called once
    in the Trio thread (it must not block: it only asks ``fn`` to stop early) and the wait
    goes on until ``fn`` returns. Returns ``fn``'s outcome and whether a cancel arrived; the
    caller cleans up and then checkpoints, which raises the pending ``Cancelled``.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    cancelled = False

    def deliver(result: outcome.Outcome[_T]) -> None:
        token.run_sync_soon(trio.lowlevel.reschedule, task, outcome.Value(result))

    def abort(_: Any) -> trio.lowlevel.Abort:
        nonlocal cancelled
        if not cancelled:
            cancelled = True
            on_cancel()
        return trio.lowlevel.Abort.FAILED

    # No thread name: trio would set it (and reset it) in the OS for every call, two
    # system calls on each commit's path; the worker keeps trio's "Trio thread N".
    trio.lowlevel.start_thread_soon(fn, deliver)
    result: outcome.Outcome[_T] = await trio.lowlevel.wait_task_rescheduled(abort)
    return result, cancelled


class SqliteDatabase(Database):
    """One SQLite file (see the module docstring).

    Args:
        path: the database file (checked with :func:`check_path`); created if missing.
        owner: the name of the class using it, for messages.
        max_connections: connections (and worker threads) per object and process.
        busy_timeout: seconds a statement waits for another writer's lock.
        schemas: brought up to date on every new connection.
        text_factory: ``bytes`` to decode text columns yourself (so a row that is not
            UTF-8 can be named), or ``str``.
        brief_writes: run ``call(..., brief=True)`` in the Trio thread when it cannot
            wait (see the module docstring).
    """

    __slots__ = (
        "_brief_writes",
        "_busy_timeout",
        "_calls",
        "_checkpoint_every",
        "_checkpointing",
        "_name",
        "_path",
        "_text_factory",
    )

    def __init__(
        self,
        path: str,
        *,
        owner: str,
        max_connections: int,
        busy_timeout: float,
        schemas: Sequence[Schema],
        text_factory: type[str] | type[bytes] = bytes,
        brief_writes: bool = False,
    ) -> None:
        super().__init__(
            dialect=SQLITE, owner=owner, max_connections=max_connections, schemas=schemas
        )
        self._path = path
        self._name: str | None = None
        self._busy_timeout = check_busy_timeout(busy_timeout)
        self._text_factory = text_factory
        self._brief_writes = brief_writes
        self._calls = 0  # calls since the last checkpoint (brief_writes only)
        self._checkpoint_every = _FIRST_CHECKPOINT
        self._checkpointing: trio.Event | None = None  # set once a checkpoint is over

    @property
    def path(self) -> str:
        """The file, as given."""
        return self._path

    @property
    def name(self) -> str:
        name = self._name
        if name is None:  # resolved once: every Durable(...) compares it
            name = self._name = os.path.realpath(self._path)
        return name

    @property
    def label(self) -> str:
        return self._path

    @property
    def where(self) -> str:
        return repr(self._path)

    def transaction(self, conn: sqlite3.Connection, work: Callable[[Any], _T]) -> _T:
        conn.execute("BEGIN IMMEDIATE")  # the file's write lock, for the whole transaction
        try:
            value = work(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return value

    def snapshot(self, conn: sqlite3.Connection, work: Callable[[Any], _T]) -> _T:
        conn.execute("BEGIN")  # one read snapshot for every statement of ``work``
        try:
            return work(conn)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _connect(self) -> sqlite3.Connection:
        create_private(self._path)  # before SQLite creates it with the umask's mode
        conn = sqlite3.connect(
            self._path,
            # No busy wait: SQLite's cannot be interrupted, and a brief write must not
            # wait at all. call() pauses and tries again (see the module docstring).
            timeout=0,
            isolation_level=None,  # autocommit; transactions issue BEGIN themselves
            check_same_thread=False,  # one user at a time: the limiter, or idle in the pool
        )
        try:
            conn.text_factory = self._text_factory
            if self._brief_writes:  # a brief write never checkpoints: call() does
                conn.execute("PRAGMA wal_autocheckpoint = 0")
            # Nothing writes to a file that is not a database, or is damaged: check first.
            check_database_file(conn, self._path)
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode not in (b"wal", "wal"):
                raise OperativeError(
                    f"SQLite could not put {self._path!r} in WAL mode (it reports {mode!r}); "
                    "use a local file system"
                )
            conn.execute("PRAGMA synchronous = NORMAL")
            migrate(conn, SQLITE, self.schemas, where=self.where, transaction=self.transaction)
        except BaseException:
            conn.close()
            raise
        return conn

    async def call(self, work: Callable[[Any], _T], *, brief: bool = False) -> _T:
        if self._brief_writes:
            while (checkpointing := self._checkpointing) is not None:
                await checkpointing.wait()  # a checkpoint of this object's is under way
            self._calls = calls = self._calls + 1
            if calls >= self._checkpoint_every:
                # This call makes the checkpoint first, in its worker thread; this
                # object's other calls wait for it (see _checkpoint).
                self._calls = 0
                checkpointing = self._checkpointing = trio.Event()
                try:
                    async with held(self._limiter):
                        self.check_open()
                        return await self._in_worker_thread(work, checkpoint=True)
                finally:
                    self._checkpointing = None
                    checkpointing.set()
            if brief and self._idle:
                await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled call writes nothing
                value = self._write_here(work)
                if value is not _LOCKED:
                    return value  # type: ignore[return-value]
        async with held(self._limiter):
            self.check_open()
            return await self._in_worker_thread(work, checkpoint=False)

    def _write_here(self, work: Callable[[Any], _T]) -> _T | _Locked:
        """``work`` on an idle connection in the Trio thread, or ``_LOCKED`` when the call
        must go to a worker thread (the file is locked, or no connection is idle).

        No limiter: the connection is idle (no worker thread holds it) and back in the
        pool before any other task runs. No scheduler pass either, as :class:`held`
        makes none for a free lock: the write is bounded, and its callers (a run's loop)
        pass through the scheduler at every step.
        """
        if self._closed or not self._idle:
            return _LOCKED  # closed: the worker-thread path says so
        conn = self._idle.pop()
        try:
            return _run_here(conn, work)
        except sqlite3.DatabaseError as exc:
            raise_for_database_file(self._path, exc)
            raise
        finally:
            self._idle.append(conn)

    async def _in_worker_thread(self, work: Callable[[Any], _T], checkpoint: bool) -> _T:
        """``work`` in a worker thread (the limiter held), after a passive checkpoint when
        ``checkpoint``; tries again while the file is locked (see the module docstring)."""
        holder: list[sqlite3.Connection | None] = [self._idle.pop() if self._idle else None]
        stop = threading.Event()  # set in the Trio thread when the caller is cancelled
        pages = [-1]  # in the log at the checkpoint

        def run() -> _T:
            deadline = time.monotonic() + self._busy_timeout
            pause = _FIRST_PAUSE
            pending = checkpoint
            while True:
                try:
                    conn = holder[0]
                    if conn is None:
                        conn = holder[0] = self._connect()
                    if pending:
                        pages[0] = _checkpoint(conn, stop)
                        pending = False
                    return work(conn)
                except sqlite3.DatabaseError as exc:
                    raise_for_database_file(self._path, exc)  # met later, in a page
                    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                    if code not in _BUSY_CODES or stop.is_set():
                        raise
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise OperativeError(
                            f"{self._path!r} stayed locked by another writer for "
                            f"{self._busy_timeout:g} s (busy_timeout); try again later"
                        ) from exc
                    if stop.wait(min(pause, left)):
                        raise  # cancelled while it paused: the caller sees Cancelled
                    pause = min(pause * 2, _LONGEST_PAUSE)

        def on_cancel() -> None:
            stop.set()
            conn = holder[0]
            if conn is not None:
                conn.interrupt()  # thread-safe; the worker rolls back and returns

        try:
            result, cancelled = await run_in_worker_thread(run, on_cancel)
        finally:
            # Also when the cancel landed before the thread started: the connection
            # goes back to the pool (rolled back, committed, or never used).
            conn = holder[0]
            if conn is not None:
                await self._give_back(conn)
        if pages[0] >= 0:
            # Aim the next checkpoint at about _CHECKPOINT_PAGES pages: at once when the
            # log was longer, by at most twice the calls when shorter (another database
            # object on the file, such as the engine's beside the store's, may have just
            # started the log over).
            fewest, most = _CHECKPOINT_INTERVALS
            every = self._checkpoint_every
            aimed = every * _CHECKPOINT_PAGES // max(pages[0], 1)
            self._checkpoint_every = max(fewest, min(most, aimed, 2 * every))
        if cancelled:
            await trio.lowlevel.checkpoint()  # raises the pending Cancelled
        return result.unwrap()
