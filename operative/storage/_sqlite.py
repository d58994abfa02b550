"""``SqliteStore``: the conditional text-value store in one SQLite file, shared by processes.

Connections: a small pool (``max_connections``, default 4) opened with
``check_same_thread=False``. A :class:`trio.CapacityLimiter` of the same size hands each
connection to exactly one worker thread at a time, so no connection is ever used by two
threads at once and no extra lock is needed. Every process opens its own connections;
WAL and ``BEGIN IMMEDIATE`` make one file safe for many processes.

Cancellation: a call runs its statements in a worker thread that the caller always waits
for. A cancelled caller interrupts the connection (``sqlite3.Connection.interrupt``), the
thread rolls back whatever it had not committed, and only then does the caller see
``trio.Cancelled``. So when a cancelled call returns, nothing of it is still running, and
its batch was either committed whole or not at all.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import outcome
import trio

from .._core._errors import (
    ConflictError,
    CorruptRecordError,
    DatabaseFileError,
    InvalidArgument,
    OperativeError,
)
from ._pool import PooledStore
from ._protocol import ANY, AnyVersion, Delete, Operation, Put, Versioned

__all__ = ["SqlitePooled", "SqliteStore"]

_T = TypeVar("_T")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_CHUNK = 500  # keys per IN (...) statement, well under SQLite's parameter limit
_MAX_CHAR = 0x10FFFF
_SLICE = 0.1  # seconds of one uninterruptible busy wait
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary codes)
_CORRUPT = 11  # SQLITE_CORRUPT: "database disk image is malformed"
_NOTADB = 26  # SQLITE_NOTADB: "file is not a database"


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

    trio.lowlevel.start_thread_soon(fn, deliver, name="operative storage")
    result: outcome.Outcome[_T] = await trio.lowlevel.wait_task_rescheduled(abort)
    return result, cancelled


def database_file_error(path: str, detail: str, *, damaged: bool) -> DatabaseFileError:
    """The error for a file SQLite cannot use as a database; the file is left as it is."""
    if damaged:
        what = "is a damaged SQLite database"
        todo = (
            f"restore it from a backup (or try `sqlite3 {path} .recover`), or move it away "
            "to start a new database there"
        )
    else:
        what = "is not an SQLite database"
        todo = "check the path, or move the file away to start a new database there"
    return DatabaseFileError(
        f"{path!r} {what} ({detail}); it was left untouched: {todo}",
        path=path,
        detail=detail,
    )


def check_database_file(conn: sqlite3.Connection, path: str) -> None:
    """Raise :class:`DatabaseFileError` unless ``path`` (opened as ``conn``) is an SQLite
    database or empty; call it before anything may write to the file.

    It only reads, in one read transaction (the file cannot change under it): the header
    and the schema, and the page count, which SQLite reports as 0 for a short file it
    does not recognise. A database not yet in WAL mode is about to be converted, which
    writes to it, so it must first pass ``PRAGMA quick_check`` (once per file: a WAL
    database is not checked again).
    """
    try:
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            if pages == 0:
                if os.path.getsize(path) > 0:
                    raise database_file_error(path, "it is too short", damaged=False)
                return
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if mode in (b"wal", "wal"):
                return
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)").fetchall()]
            if problems not in ([b"ok"], ["ok"]):
                detail = "; ".join(
                    p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p)
                    for p in problems
                )
                raise database_file_error(path, f"quick_check: {detail}", damaged=True)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # it only read
    except sqlite3.DatabaseError as exc:
        raise_for_database_file(path, exc)
        raise


def raise_for_database_file(path: str, exc: sqlite3.DatabaseError) -> None:
    """Raise :class:`DatabaseFileError` from ``exc`` when SQLite found the file is not a
    database or is damaged; return otherwise."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (_CORRUPT, _NOTADB):
        raise database_file_error(path, f"SQLite: {exc}", damaged=code == _CORRUPT) from exc


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (code-point
    order, which is also UTF-8 byte order), or ``None`` when there is none."""
    stripped = prefix.rstrip(chr(_MAX_CHAR))
    if not stripped:
        return None
    last = ord(stripped[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # surrogates cannot be stored; skip past them
        last = 0xE000
    return stripped[:-1] + chr(last)


def check_operations(operations: Sequence[Operation], *, forbid_nul: bool = False) -> None:
    """Raise :class:`InvalidArgument` for anything a store cannot apply."""
    seen: set[str] = set()
    for op in operations:
        if not isinstance(op, Put | Delete):
            raise InvalidArgument(f"a batch holds Put and Delete operations, not {op!r}")
        check_text("key", op.key, forbid_nul=forbid_nul)
        if isinstance(op, Put):
            check_text("value", op.value, forbid_nul=forbid_nul)
        expected = op.expected_version
        if not (
            expected is None
            or isinstance(expected, AnyVersion)
            or (isinstance(expected, int) and not isinstance(expected, bool))
        ):
            raise InvalidArgument(f"expected_version must be an int, None or ANY, not {expected!r}")
        if op.key in seen:
            raise InvalidArgument(f"key {op.key!r} appears twice in one batch; merge them")
        seen.add(op.key)


def check_text(what: str, text: object, *, forbid_nul: bool = False) -> None:
    """A key or value must be a ``str`` that encodes as UTF-8."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a {what} must be a str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what} {text[:80]!r} is not valid Unicode text: {exc}") from None
    if forbid_nul and "\x00" in text:
        raise InvalidArgument(
            f"{what} {text[:80]!r} contains a NUL character, which PostgreSQL text cannot hold"
        )


def check_versions(operations: Sequence[Operation], current: Mapping[str, int]) -> None:
    """Raise :class:`ConflictError` for the first operation whose condition fails."""
    for op in operations:
        expected = op.expected_version
        if expected is ANY:
            continue
        actual = current.get(op.key)
        if expected != actual:
            raise ConflictError(op.key, expected=expected, actual=actual)


def corrupt(where: str, key: object, problem: str) -> CorruptRecordError:
    """The error for a row that cannot be read; the row itself is left untouched."""
    return CorruptRecordError(
        f"the value stored under key {key!r} in {where} cannot be read: {problem}; "
        "the row is left as it is: repair or delete it",
        what=f"stored value of key {key!r}",
        detail=problem,
    )


def decode_version(where: str, key: object, version: object) -> int:
    """A stored version is an int of at least 1."""
    if type(version) is not int or version < 1:
        raise corrupt(where, key, f"its version {version!r} is not a positive integer")
    return version


def decode_text(where: str, key: object, what: str, raw: object) -> str:
    """Stored text comes back as bytes (or str) and must be UTF-8."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise corrupt(where, key, f"its {what} is not valid UTF-8 ({exc})") from None
    raise corrupt(where, key, f"its {what} is {type(raw).__name__} {raw!r}, not text")


class SqlitePooled(PooledStore):
    """Base of SQLite-backed classes: a pool of connections to one file, in WAL mode.

    A subclass sets ``_path``, ``_busy_timeout`` and the pool fields of
    :class:`PooledStore`, and creates its tables in ``_setup``. ``_call(work)`` runs
    ``work(connection)`` in a worker thread, retrying while another writer holds the
    lock, and interrupts it when the caller is cancelled (see the module docstring).
    """

    __slots__ = ("_busy_timeout", "_path")

    _path: str
    _busy_timeout: float

    def _setup(self, conn: sqlite3.Connection) -> None:
        """Create this class's tables (called once per new connection)."""

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path,
            timeout=self._busy_timeout,
            isolation_level=None,  # autocommit; batches issue BEGIN IMMEDIATE themselves
            check_same_thread=False,  # one thread at a time, guaranteed by the limiter
        )
        try:
            conn.text_factory = bytes  # decode ourselves, so a bad row names its key
            # SQLite's own busy wait cannot be interrupted, so it waits in short slices
            # and _call retries until busy_timeout has passed or the caller is cancelled.
            conn.execute(f"PRAGMA busy_timeout = {int(min(self._busy_timeout, _SLICE) * 1000)}")
            # Nothing writes to a file that is not a database, or is damaged: check first.
            check_database_file(conn, self._path)
            (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode not in (b"wal", "wal"):
                raise OperativeError(
                    f"SQLite could not put {self._path!r} in WAL mode (it reports {mode!r}); "
                    "use a local file system"
                )
            conn.execute("PRAGMA synchronous = NORMAL")
            self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        async with self._limiter:
            self._check_open()
            holder: list[sqlite3.Connection | None] = [self._idle.pop() if self._idle else None]

            stop = threading.Event()

            def run() -> _T:
                deadline = time.monotonic() + self._busy_timeout
                while True:
                    try:
                        conn = holder[0]
                        if conn is None:
                            conn = holder[0] = self._connect()
                        return work(conn)
                    except sqlite3.DatabaseError as exc:
                        raise_for_database_file(self._path, exc)  # met later, in a page
                        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                        if code not in _BUSY_CODES or stop.is_set():
                            raise
                        if time.monotonic() >= deadline:
                            raise OperativeError(
                                f"{self._path!r} stayed locked by another writer for "
                                f"{self._busy_timeout:g} s (busy_timeout); try again later"
                            ) from exc

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
        if cancelled:
            await trio.lowlevel.checkpoint()  # raises the pending Cancelled
        return result.unwrap()


class SqliteStore(SqlitePooled):
    """A :class:`~operative.storage.ConditionalTextValueStore` in one SQLite file.

    The embedded default: no server, one file, safe for many tasks and many processes.
    The file is put in WAL mode with ``synchronous=NORMAL`` (a crash of the machine may
    lose the last commits, never corrupt the file; a killed process loses nothing it
    committed). Writers wait up to ``busy_timeout`` seconds for each other.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per store and process.
        busy_timeout: seconds a statement waits for another writer's lock.
        table: the table holding the values (created if missing).
    """

    __slots__ = ("_table",)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 4,
        busy_timeout: float = 10.0,
        table: str = "operative_kv",
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgument(f"path must be a str or os.PathLike, not {path!r}")
        text = os.fspath(path)
        if not isinstance(text, str):
            raise InvalidArgument(f"path must be text, not {text!r}")
        if text in ("", ":memory:") or text.startswith("file:"):
            raise InvalidArgument(
                f"SqliteStore needs a file path, not {text!r}; use MemoryStore for memory"
            )
        if not isinstance(busy_timeout, int | float) or not busy_timeout >= 0:
            raise InvalidArgument(f"busy_timeout must be seconds >= 0, not {busy_timeout!r}")
        if not isinstance(table, str) or not _IDENTIFIER.match(table):
            raise InvalidArgument(f"table must be a plain SQL identifier, not {table!r}")
        self._init_pool(max_connections)
        self._path = text
        self._busy_timeout = float(busy_timeout)
        self._table = table

    def __repr__(self) -> str:
        return f"<SqliteStore {self._path!r}{' closed' if self._closed else ''}>"

    @property
    def path(self) -> str:
        """The database file."""
        return self._path

    # -- plumbing -------------------------------------------------------------------

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            "key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL, version INTEGER NOT NULL"
            ") WITHOUT ROWID"
        )

    def _where(self) -> str:
        return f"table {self._table!r} of {self._path!r}"

    def _row(self, row: tuple[object, object, object]) -> Versioned:
        raw_key, raw_value, raw_version = row
        where = self._where()
        key = decode_text(where, raw_key, "key", raw_key)
        return Versioned(
            key=key,
            value=decode_text(where, key, "value", raw_value),
            version=decode_version(where, key, raw_version),
        )

    def _select_many(self, conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, Versioned]:
        found: dict[str, Versioned] = {}
        for start in range(0, len(keys), _CHUNK):
            chunk = keys[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            cursor = conn.execute(
                f"SELECT key, value, version FROM {self._table} WHERE key IN ({marks})", chunk
            )
            for row in cursor.fetchall():  # all rows first: a bad one ends no snapshot early
                item = self._row(row)
                found[item.key] = item
        return found

    # -- the protocol ---------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        """The value stored under ``key``, or ``None``.

        Raises:
            CorruptRecordError: the stored row cannot be read (names the key).
        """
        check_text("key", key)

        def work(conn: sqlite3.Connection) -> Versioned | None:
            row = conn.execute(
                f"SELECT key, value, version FROM {self._table} WHERE key = ?", (key,)
            ).fetchone()
            return None if row is None else self._row(row)

        return await self._call(work)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        """The values stored under ``keys``; missing keys are absent from the mapping.

        The values are read from one snapshot of the file.
        """
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            check_text("key", key)

        def work(conn: sqlite3.Connection) -> dict[str, Versioned]:
            if len(wanted) <= _CHUNK:
                return self._select_many(conn, wanted)
            conn.execute("BEGIN")  # one read snapshot across the chunks
            try:
                return self._select_many(conn, wanted)
            finally:
                conn.execute("COMMIT")

        return await self._call(work)

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        """Values whose key starts with ``prefix``, sorted by key, after ``after``."""
        check_text("prefix", prefix)
        if after is not None:
            check_text("after", after)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise InvalidArgument(f"limit must be None or an int, not {limit!r}")
        if limit is not None and limit < 0:
            raise InvalidArgument(f"limit must be None or >= 0, not {limit!r}")
        sql = [f"SELECT key, value, version FROM {self._table} WHERE key >= ?"]
        params: list[object] = [prefix]
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            sql.append("AND key < ?")
            params.append(upper)
        if after is not None:
            sql.append("AND key > ?")
            params.append(after)
        sql.append("ORDER BY key")
        if limit is not None:
            sql.append("LIMIT ?")
            params.append(limit)
        statement = " ".join(sql)

        def work(conn: sqlite3.Connection) -> list[Versioned]:
            rows = conn.execute(statement, params).fetchall()  # the statement ends here
            return [self._row(row) for row in rows]

        return await self._call(work)

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        """Apply every operation or none, in one ``BEGIN IMMEDIATE`` transaction.

        Raises:
            ConflictError: an ``expected_version`` did not hold; nothing was written.
            InvalidArgument: a malformed batch (a key twice, a non-text key or value).
        """
        ops = list(operations)
        check_operations(ops)
        if not ops:
            await trio.lowlevel.checkpoint()
            self._check_open()
            return ()
        table = self._table
        where = self._where()

        def work(conn: sqlite3.Connection) -> tuple[int | None, ...]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current: dict[str, int] = {}
                keys = [op.key for op in ops]
                for start in range(0, len(keys), _CHUNK):
                    chunk = keys[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    for raw_key, raw_version in conn.execute(
                        f"SELECT key, version FROM {table} WHERE key IN ({marks})", chunk
                    ):
                        key = decode_text(where, raw_key, "key", raw_key)
                        current[key] = decode_version(where, key, raw_version)
                check_versions(ops, current)
                versions: list[int | None] = []
                for op in ops:
                    old = current.get(op.key)
                    if isinstance(op, Put):
                        if old is None:
                            conn.execute(
                                f"INSERT INTO {table} (key, value, version) VALUES (?, ?, 1)",
                                (op.key, op.value),
                            )
                            versions.append(1)
                        else:
                            conn.execute(
                                f"UPDATE {table} SET value = ?, version = ? WHERE key = ?",
                                (op.value, old + 1, op.key),
                            )
                            versions.append(old + 1)
                    else:
                        if old is not None:
                            conn.execute(f"DELETE FROM {table} WHERE key = ?", (op.key,))
                        versions.append(None)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return tuple(versions)

        return await self._call(work)
