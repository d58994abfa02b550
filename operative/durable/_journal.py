"""The durable journal over SQL, and what the engine shares with it: the fence check.

Written once for SQLite and PostgreSQL over a :class:`~operative._sql.Database`. Every
write that names a lease runs in one write transaction that first checks the lease's
fence (``SELECT ... WHERE run_id = ? AND fence = ? AND status = 'running'``, on
PostgreSQL ``FOR UPDATE``, which also waits for a claim of that run in flight; on SQLite
``BEGIN IMMEDIATE`` holds the whole file), so a worker whose lease was taken over cannot
commit anything: not an entry, not an outcome.

**Group commit.** A checkpoint store opened with ``async with`` runs a committer task in
a nursery of its own: appends of every run that arrive while a transaction commits wait,
and the next transaction commits all of them (as PostgreSQL's own group commit shares one
WAL flush). Fencing stays per run inside the shared transaction: on SQLite each append
gets a savepoint, its fence checked and its rows inserted, and an append whose lease was
lost or whose ``seq`` is taken is rolled back to its savepoint alone (a writer alone
needs none: its whole transaction is rolled back); on PostgreSQL one
statement checks every run's fence (``FOR UPDATE``) and inserts the rows of the runs whose
fence holds, and a batch that fails (a taken ``seq``, a deadlock) is written again one
append per statement, so each writer gets its own outcome. A batch that fails as a whole
(the database is unreachable) fails each of its writers with that error. Not opened with
``async with``, the store commits each append in a transaction of its own.

On PostgreSQL an append is one statement (fence check, lock and insert): one round trip,
its own transaction.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

import outcome
import trio

from .._core._errors import InvalidArgument, OperativeError
from .._sql import Database, SqlBacked
from ..kvstore._protocol import ConflictError
from ._errors import LeaseLostError
from ._records import JournalEntry, JournalRecord, Lease
from ._rows import (
    check_after,
    check_lease,
    check_records,
    check_run_id,
    check_seq,
    decode_entry,
    encode_record,
)
from ._schema import JOURNAL_COLUMNS

__all__ = ["SqlCheckpointStore", "SqlDurable"]

logger = logging.getLogger("operative.durable")

MAX_BATCH = 512
"""Appends one group commit takes at most (the rest wait for the next)."""

_Row = tuple[str, int, Any, str, float]
_T = TypeVar("_T")


class _Waiting:
    """The writers of one batch still waiting for it; the batch stops when none is."""

    __slots__ = ("count", "scope")

    def __init__(self, scope: trio.CancelScope, count: int) -> None:
        self.scope = scope
        self.count = count

    def leave(self) -> bool:
        """A writer stops waiting; whether it was the last (the batch is stopped)."""
        self.count -= 1
        if self.count == 0:
            self.scope.cancel()
            return True
        return False


class _Work:
    """One write waiting for (or in) a group commit."""

    __slots__ = ("done", "result", "taken", "waiting", "work")

    def __init__(self, work: Callable[[Any], Any]) -> None:
        self.work = work
        self.taken = False
        self.waiting: _Waiting | None = None
        self.done: trio.Event | None = None  # made when queued (a lone writer never waits)
        self.result: outcome.Outcome[Any] | None = None


_TEMPLATES = {
    "fence": "SELECT cancel_reason FROM operative_runs "
    "WHERE run_id = {m} AND fence = {m} AND status = 'running'{lock}",
    "lost": "SELECT fence, status FROM operative_runs WHERE run_id = {m}",
    "read": "SELECT seq, record, at FROM operative_journal WHERE run_id = {m} AND seq > {m} "
    "ORDER BY seq",
}


class SqlDurable(SqlBacked):
    """What the engine and the checkpoint store share: the database, the clock, the
    fence check and journal inserts.

    ``_token`` is this object's incarnation, written next to the lease owner by every
    lease it takes (see :meth:`~operative.durable.DurableEngine.claim`). ``_q`` holds the
    class's statements in the database's dialect.
    """

    __slots__ = ("_busy", "_clock", "_closing", "_nursery_manager", "_q", "_queue", "_token",
                 "_wake", "batches")  # fmt: skip

    _templates: ClassVar[Mapping[str, str]] = _TEMPLATES

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        if not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning epoch seconds: {clock!r}")
        self._db = db
        self._clock = clock
        self._token = os.urandom(8).hex()
        self._q = {name: db.dialect.format(text) for name, text in self._templates.items()}
        self._queue: list[Any] | None = None
        """Writes waiting for the committer; ``None`` when no committer runs."""
        self._wake = trio.Event()
        self._closing = False
        self._busy = False
        """A batch is committing (the committer's, or a lone writer's own)."""
        self._nursery_manager: Any = None
        self.batches = 0
        """Group commits made (each one transaction)."""

    @property
    def clock(self) -> Callable[[], float]:
        """Where this object's times (epoch seconds) come from."""
        return self._clock

    @property
    def database(self) -> str:
        """The database: the file (absolute), or the DSN without its password."""
        return self._db.name

    # -- group commit ------------------------------------------------------------------

    @classmethod
    def _sharing(cls, db: Database, *, clock: Callable[[], float] = time.time) -> Self:
        """An object of this class over ``db``, which another object owns (opens and
        closes): the engine and the checkpoint store of one ``SqliteDurable``."""
        self = cls.__new__(cls)
        SqlDurable.__init__(self, db, clock=clock)
        return self

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        await self._start_committing()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._stop_committing()
        finally:
            await super().__aexit__(exc_type, exc, tb)

    async def _start_committing(self) -> None:
        """Start the committer task, in a nursery of its own (entered in this task)."""
        if self._nursery_manager is not None:
            raise InvalidArgument(f"{self!r} is open already; open it once")
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._nursery_manager = manager
        self._closing = False
        self._queue = []
        nursery.start_soon(self._committer, name=f"operative group commit {self._db.label}")

    async def _stop_committing(self) -> None:
        """Let the committer write what waits and end; the database stays open."""
        manager, self._nursery_manager = self._nursery_manager, None
        if manager is not None:
            # The committer writes what waits, then ends. Cancelled, it still ends the
            # batch it writes (shielded), and fails what waits: never written.
            self._closing = True
            self._wake.set()
            await manager.__aexit__(None, None, None)  # the block's error goes on

    async def _committer(self) -> None:
        """Commit what waits, in batches, until the object closes."""
        queue = self._queue
        assert queue is not None
        try:
            while True:
                while not queue or self._busy:
                    if self._closing and not queue:
                        return
                    try:
                        await self._wake.wait()
                    except trio.Cancelled:
                        # The task that opened the object is cancelled: it ends its block,
                        # and with it this task (what waits is failed below).
                        return
                    self._wake = trio.Event()
                batch = queue[:MAX_BATCH]
                del queue[:MAX_BATCH]
                for item in batch:
                    item.taken = True
                self._busy = True
                try:
                    await self._commit_batch(batch)
                finally:
                    self._busy = False
        finally:
            self._queue = None  # writes from now on commit on their own
            for item in queue:
                item.result = outcome.Error(
                    OperativeError(
                        f"the {self._db.owner} stopped committing before this write was "
                        "made (it was closed or its task cancelled); it did not commit"
                    )
                )
                item.done.set()

    async def _commit_batch(self, batch: list[Any]) -> None:
        # Shielded from the committer's own cancellation: once taken, a batch commits or
        # fails for every writer in it, bounded by the database's own timeouts. Only
        # when every writer in it has been cancelled is it stopped (as a lone writer's
        # cancelled statement is): its transaction rolls back.
        results: list[outcome.Outcome[Any]]
        scope = trio.CancelScope()
        waiting = _Waiting(scope, len(batch))
        for item in batch:
            item.waiting = waiting
        with trio.CancelScope(shield=True):
            try:
                with scope:
                    results = await self._db.call(
                        lambda conn: self._write_batch(conn, batch), brief=True
                    )
                if scope.cancelled_caught:
                    gone = OperativeError("every writer of this batch was cancelled")
                    results = [outcome.Error(gone) for _ in batch]
            except Exception as exc:
                results = [outcome.Error(exc) for _ in batch]
            except BaseException as exc:
                # Not an answer about the write (KeyboardInterrupt...): its writers
                # cannot know whether it committed; the error goes on.
                self._deliver(batch, [outcome.Error(exc) for _ in batch])
                raise
        self.batches += 1
        self._deliver(batch, results)

    @staticmethod
    def _deliver(batch: list[Any], results: list[outcome.Outcome[Any]]) -> None:
        for item, result in zip(batch, results, strict=True):
            item.result = result
            item.done.set()

    async def _submit(self, item: Any) -> Any:
        """Queue ``item`` for the committer and return its outcome; a writer that finds
        nothing committing and nothing waiting commits alone, in its own task."""
        queue = self._queue
        assert queue is not None
        if not queue and not self._busy:
            return await self._commit_alone(item)
        item.done = trio.Event()
        queue.append(item)
        self._wake.set()
        try:
            await item.done.wait()
        except trio.Cancelled:
            if not item.taken:
                queue.remove(item)  # never written: it did not commit
            elif item.waiting is not None and item.waiting.leave():
                # The last writer waiting for its batch: the batch is stopped, and this
                # writer waits (shielded) until it has, as a lone cancelled statement's
                # caller does (bounded by the database's cancellation: see Database.call).
                with trio.CancelScope(shield=True):
                    await item.done.wait()
            # Otherwise the batch commits or not without this writer (as a cancelled
            # statement's COMMIT may have). The durable driver writes shielded and waits
            # for the outcome, so it always knows.
            raise
        return item.result.unwrap()

    async def _commit_alone(self, item: Any) -> Any:
        """Commit ``item`` as a batch of one, without the committer's task hops: what
        arrives meanwhile waits for the committer's next batch. Cancelled, the writer is
        the last of its batch, so the batch is stopped, and ``Cancelled`` comes once it
        is over (see :meth:`_submit`)."""
        item.taken = True
        self._busy = True
        try:
            (result,) = await self._db.call(
                lambda conn: self._write_batch(conn, [item]), brief=True
            )
        finally:
            self._busy = False
            self.batches += 1
            if self._queue:
                self._wake.set()  # what arrived meanwhile: the committer's next batch
        return result.unwrap()

    def _write_batch(self, conn: Any, batch: Sequence[Any]) -> list[outcome.Outcome[Any]]:
        """Commit ``batch`` (of :class:`_Work`) in one transaction, each write in a
        savepoint of its own: one that raises is rolled back alone and gets its error.
        A batch of one (a writer alone) needs no savepoint: its transaction is rolled
        back whole."""
        if len(batch) == 1:
            try:
                return [outcome.Value(self._db.transaction(conn, batch[0].work))]
            except OperativeError as exc:  # a refusal (a lost lease, a taken id)
                return [outcome.Error(exc)]

        def each(conn: Any) -> list[outcome.Outcome[Any]]:
            results: list[outcome.Outcome[Any]] = []
            for item in batch:
                conn.execute("SAVEPOINT operative_write")
                try:
                    value = item.work(conn)
                except OperativeError as exc:  # a refusal (a lost lease, a taken id)
                    conn.execute("ROLLBACK TO SAVEPOINT operative_write")
                    results.append(outcome.Error(exc))
                else:
                    results.append(outcome.Value(value))
                conn.execute("RELEASE SAVEPOINT operative_write")
            return results

        return self._db.transaction(conn, each)

    async def _write(self, work: Callable[[Any], _T]) -> _T:
        """``work(connection)`` in one write transaction: shared with other writes when a
        committer runs (``work`` raises an ``OperativeError`` to refuse: only its own
        savepoint is rolled back)."""
        if self._queue is None:
            return await self._db.write(work, brief=True)
        value: _T = await self._submit(_Work(work))
        return value

    def _lost(self, conn: Any, lease: Lease) -> LeaseLostError:
        """Why ``lease`` no longer holds its run (after a fenced statement matched no row)."""
        row = conn.execute(self._q["lost"], (lease.run_id,)).fetchone()
        if row is None:
            return LeaseLostError(
                f"durable run {lease.run_id!r} is not stored in {self._db.where} any more",
                run_id=lease.run_id,
            )
        fence, status = row
        return LeaseLostError(
            f"worker {lease.worker_id!r} lost durable run {lease.run_id!r}: "
            + (
                f"it is {status} already"
                if status != "running"
                else f"another worker claimed it (fence {fence} > {lease.fence})"
            ),
            run_id=lease.run_id,
        )

    def _check_fence(self, conn: Any, lease: Lease) -> str | None:
        """Raise unless ``lease`` still holds the running run (whose row it locks, where
        the database has row locks); returns the run's cancel reason."""
        row = conn.execute(self._q["fence"], (lease.run_id, lease.fence)).fetchone()
        if row is None:
            raise self._lost(conn, lease)
        cancel: str | None = row[0]
        return cancel

    def _insert(self, conn: Any, run_id: str, seq: int, records: Sequence[JournalRecord]) -> None:
        """Journal ``records`` at ``seq``, ``seq + 1``, ... (a taken seq: ConflictError)."""
        self._insert_rows(conn, run_id, seq, self._rows(run_id, seq, records))

    def _rows(self, run_id: str, seq: int, records: Sequence[JournalRecord]) -> list[_Row]:
        """The journal rows of ``records`` (encoded here: a record that is not JSON is
        refused before anything is written)."""
        now = self._clock()
        return [
            (run_id, seq + offset, type(record).__struct_config__.tag, encode_record(record), now)
            for offset, record in enumerate(records)
        ]

    def _insert_rows(self, conn: Any, run_id: str, seq: int, rows: Sequence[_Row]) -> None:
        try:
            self._db.dialect.insert_rows(conn, "operative_journal", JOURNAL_COLUMNS, rows)
        except self._db.dialect.unique_violation:
            raise ConflictError(f"{run_id}#{seq}", expected=None, actual=seq) from None


_PG_APPEND = (
    # One statement, so one round trip and its own transaction: lock the run rows whose
    # fence holds, insert those runs' rows, return their cancel reasons.
    "WITH wanted AS (SELECT * FROM unnest(%s::text[], %s::bigint[]) AS w(run_id, fence)), "
    "held AS (SELECT r.run_id, r.cancel_reason FROM operative_runs r JOIN wanted w "
    "ON r.run_id = w.run_id AND r.fence = w.fence WHERE r.status = 'running' "
    "ORDER BY r.run_id FOR UPDATE OF r), "
    "added AS (INSERT INTO operative_journal (run_id, seq, kind, record, at) "
    "SELECT u.run_id, u.seq, u.kind, u.record, u.at FROM unnest(%s::text[], %s::bigint[], "
    "%s::text[], %s::text[], %s::double precision[]) AS u(run_id, seq, kind, record, at) "
    "JOIN held h ON h.run_id = u.run_id) "
    "SELECT run_id, cancel_reason FROM held"
)

_PG_APPEND_ONE = (
    # One run's append, one statement: lock its row if the fence holds, insert its rows
    # (one VALUES row each), return its cancel reason. Cheaper to plan than the batch's
    # unnest join, and a statement per row count, so psycopg prepares each.
    "WITH held AS (SELECT cancel_reason FROM operative_runs "
    "WHERE run_id = %s AND fence = %s AND status = 'running' FOR UPDATE), "
    "added AS (INSERT INTO operative_journal (run_id, seq, kind, record, at) "
    "SELECT v.run_id, v.seq, v.kind, v.record, v.at FROM held, (VALUES {values}) "
    "AS v(run_id, seq, kind, record, at)) "
    "SELECT cancel_reason FROM held"
)
_PG_VALUES_ROW = "(%s::text, %s::bigint, %s::text, %s::text, %s::double precision)"


_PG_ONE_MAX_ROWS = 1000
"""Rows the one-run statement takes (5 parameters each; more go through the batch's)."""


def _pg_append_one(rows: int) -> str:
    """The statement appending ``rows`` rows of one run (``rows`` >= 1)."""
    return _PG_APPEND_ONE.format(values=", ".join([_PG_VALUES_ROW] * rows))


class _Append:
    """One append waiting for (or in) a group commit."""

    __slots__ = ("done", "lease", "result", "rows", "seq", "taken", "waiting")

    def __init__(self, lease: Lease, seq: int, rows: list[_Row]) -> None:
        self.lease = lease
        self.seq = seq
        self.rows = rows
        self.waiting: _Waiting | None = None
        self.taken = False
        """In a batch being committed: its outcome is the batch's to give."""
        self.done: trio.Event | None = None  # made when queued (a lone writer never waits)
        self.result: outcome.Outcome[str | None] | None = None


class SqlCheckpointStore(SqlDurable):
    """The journal of durable runs in one database (share it with the engine).

    Opened with ``async with``, appends of concurrent runs share transactions (group
    commit, see the module docstring).
    """

    __slots__ = ()

    def _write_batch(self, conn: Any, batch: Sequence[Any]) -> list[outcome.Outcome[Any]]:
        return self._write_appends(conn, batch)

    # -- writing -----------------------------------------------------------------------

    def _write_appends(
        self, conn: Any, batch: Sequence[_Append]
    ) -> list[outcome.Outcome[str | None]]:
        """Commit ``batch`` in one transaction, each append fenced on its own."""
        dialect = self._db.dialect
        if dialect.name == "postgres":
            try:
                return self._pg_batch(conn, batch)
            except (*dialect.unique_violation, *dialect.transient):
                # A seq taken (or the batch deadlocked): one statement per append, so
                # only that writer learns of it.
                return [
                    outcome.capture(self._pg_append, conn, item.lease, item.seq, item.rows)
                    for item in batch
                ]
        if len(batch) == 1:  # a writer alone: its transaction is rolled back whole
            (item,) = batch
            try:
                return [
                    outcome.Value(
                        self._db.transaction(
                            conn,
                            lambda conn: self._fenced_insert(conn, item.lease, item.seq, item.rows),
                        )
                    )
                ]
            except (LeaseLostError, ConflictError) as exc:
                return [outcome.Error(exc)]
        return self._db.transaction(conn, lambda conn: self._sqlite_batch(conn, batch))

    def _pg_append(self, conn: Any, lease: Lease, seq: int, rows: Sequence[_Row]) -> str | None:
        """One run's append in one statement (its own transaction); a taken ``seq`` is
        a ``ConflictError``, a lost lease a ``LeaseLostError``."""
        try:
            if 0 < len(rows) <= _PG_ONE_MAX_ROWS:
                return self._pg_append_one(conn, lease, rows)
            (result,) = self._pg_batch(conn, [_Append(lease, seq, list(rows))])
        except self._db.dialect.unique_violation:
            raise ConflictError(f"{lease.run_id}#{seq}", expected=None, actual=seq) from None
        return result.unwrap()

    def _pg_append_one(self, conn: Any, lease: Lease, rows: Sequence[_Row]) -> str | None:
        """Lock the run's row if the fence holds, insert ``rows``, return the cancel
        reason: one statement (``rows``: 1 to ``_PG_ONE_MAX_ROWS``)."""
        params: list[Any] = [lease.run_id, lease.fence]
        for row in rows:
            params.extend(row)
        held = conn.execute(_pg_append_one(len(rows)), params).fetchall()
        if not held:
            raise self._lost(conn, lease)
        cancel: str | None = held[0][0]
        return cancel

    def _pg_batch(self, conn: Any, batch: Sequence[_Append]) -> list[outcome.Outcome[str | None]]:
        if len(batch) == 1 and 0 < len(batch[0].rows) <= _PG_ONE_MAX_ROWS:
            # One run (a run writing alone, or a batch failed over to one per append).
            (item,) = batch
            try:
                return [outcome.Value(self._pg_append_one(conn, item.lease, item.rows))]
            except LeaseLostError as exc:  # a taken seq (or a deadlock) goes to the caller
                return [outcome.Error(exc)]
        rows = [row for item in batch for row in item.rows]
        columns: list[list[Any]] = (
            [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * 5
        )
        runs = [[item.lease.run_id for item in batch], [item.lease.fence for item in batch]]
        held = dict(conn.execute(_PG_APPEND, [*runs, *columns]).fetchall())
        return [
            outcome.Value(held[item.lease.run_id])
            if item.lease.run_id in held
            else outcome.Error(self._lost(conn, item.lease))
            for item in batch
        ]

    def _sqlite_batch(
        self, conn: Any, batch: Sequence[_Append]
    ) -> list[outcome.Outcome[str | None]]:
        results: list[outcome.Outcome[str | None]] = []
        for item in batch:
            conn.execute("SAVEPOINT operative_append")
            try:
                cancel = self._fenced_insert(conn, item.lease, item.seq, item.rows)
            except (LeaseLostError, ConflictError) as exc:
                conn.execute("ROLLBACK TO operative_append")
                results.append(outcome.Error(exc))
            else:
                results.append(outcome.Value(cancel))
            conn.execute("RELEASE operative_append")
        return results

    def _fenced_insert(self, conn: Any, lease: Lease, seq: int, rows: Sequence[_Row]) -> str | None:
        """Insert ``rows`` if ``lease`` still holds its run; return its cancel reason."""
        cancel = self._check_fence(conn, lease)
        self._insert_rows(conn, lease.run_id, seq, rows)
        return cancel

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        """Append ``records`` from ``seq`` on if ``lease`` still holds (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        rows = self._rows(lease.run_id, seq, check_records(records))
        if self._queue is not None:
            value: str | None = await self._submit(_Append(lease, seq, rows))
            return value
        if self._db.dialect.name == "postgres":
            return await self._db.call(lambda conn: self._pg_append(conn, lease, seq, rows))
        return await self._db.write(
            lambda conn: self._fenced_insert(conn, lease, seq, rows), brief=True
        )

    async def read(self, run_id: str, *, after: int = -1) -> list[JournalEntry]:
        """The run's entries with ``seq > after``, in order."""
        check_run_id(run_id)
        check_after(after)
        where = self._db.where
        sql = self._q["read"]

        def work(conn: Any) -> list[JournalEntry]:
            # Fetch every row before decoding: a statement left unfinished by a corrupt
            # row would pin this connection's read snapshot (stale reads, busy writes).
            rows = conn.execute(sql, (run_id, after)).fetchall()
            return [decode_entry(where, run_id, seq, record, at) for seq, record, at in rows]

        return await self._db.call(work)
