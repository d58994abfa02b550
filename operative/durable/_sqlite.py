"""The durable engine and checkpoint store in one SQLite file.

Two tables: ``operative_runs`` (one row per run: status, lease, fence, outcome) and
``operative_journal`` (``(run_id, seq)`` → record). Every write that names a lease runs
in one ``BEGIN IMMEDIATE`` transaction that first checks the lease's fence, so a worker
whose lease was taken over cannot commit anything. ``BEGIN IMMEDIATE`` also serialises
claims across processes: two workers never claim one run.

Connections, worker threads and cancellation are those of
:class:`~operative.storage.SqliteStore` (the shared ``SqlitePooled`` base).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import trio

from .._core._errors import ConflictError, InvalidArgument, LeaseLostError, RunNotFoundError
from ..storage._sqlite import SqlitePooled
from ._records import (
    Finished,
    JournalEntry,
    JournalRecord,
    Lease,
    RunOutcome,
    RunRecord,
    RunStatus,
    Started,
)
from ._rows import (
    RUN_COLUMNS,
    check_after,
    check_lease,
    check_lease_seconds,
    check_limit,
    check_name,
    check_records,
    check_run_id,
    check_seq,
    check_started,
    check_time,
    decode_entry,
    decode_run,
    encode_outcome,
    encode_record,
    status_of,
    statuses,
)

__all__ = ["SqliteCheckpointStore", "SqliteEngine"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS operative_runs (
        run_id TEXT PRIMARY KEY NOT NULL,
        agent_name TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        lease_owner TEXT,
        lease_expires_at REAL NOT NULL DEFAULT 0,
        fence INTEGER NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        outcome TEXT,
        lease_token TEXT
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS operative_runs_runnable "
    "ON operative_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_created ON operative_runs (created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_agent ON operative_runs (agent_name, created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_session ON operative_runs (session_id, created_at)",
    """CREATE TABLE IF NOT EXISTS operative_journal (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        record TEXT NOT NULL,
        at REAL NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
)


def add_lease_token(conn: sqlite3.Connection) -> None:
    """Add ``operative_runs.lease_token`` to a file written before it existed."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(operative_runs)")}
    if "lease_token" in columns:
        return
    try:
        conn.execute("ALTER TABLE operative_runs ADD COLUMN lease_token TEXT")
    except sqlite3.OperationalError as exc:
        if "duplicate column" not in str(exc):  # another process added it first
            raise


class _SqliteDurable(SqlitePooled):
    """What the SQLite engine and checkpoint store share: the file, its tables, the clock.

    ``_token`` is this object's incarnation, written next to the lease owner by every
    lease it takes (see :meth:`SqliteEngine.claim`).
    """

    __slots__ = ("_clock", "_token")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 4,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgument(f"path must be a str or os.PathLike, not {path!r}")
        text = os.fspath(path)
        if not isinstance(text, str) or text in ("", ":memory:") or text.startswith("file:"):
            raise InvalidArgument(
                f"{type(self).__name__} needs a file path, not {text!r}: durable runs must "
                "outlive the process"
            )
        if not isinstance(busy_timeout, int | float) or not busy_timeout >= 0:
            raise InvalidArgument(f"busy_timeout must be seconds >= 0, not {busy_timeout!r}")
        if not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning epoch seconds: {clock!r}")
        self._init_pool(max_connections)
        self._path = text
        self._busy_timeout = float(busy_timeout)
        self._clock = clock
        self._token = os.urandom(8).hex()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._path!r}{' closed' if self._closed else ''}>"

    @property
    def database(self) -> str:
        """The database file (absolute)."""
        return os.path.realpath(self._path)

    def _setup(self, conn: sqlite3.Connection) -> None:
        conn.text_factory = str
        for statement in _SCHEMA:
            conn.execute(statement)
        add_lease_token(conn)

    def _where(self) -> str:
        return repr(self._path)

    def _check_fence(self, conn: sqlite3.Connection, lease: Lease) -> str | None:
        """Raise unless ``lease`` still holds the running run; returns its cancel reason."""
        row = conn.execute(
            "SELECT fence, status, cancel_reason FROM operative_runs WHERE run_id = ?",
            (lease.run_id,),
        ).fetchone()
        if row is None:
            raise LeaseLostError(
                f"durable run {lease.run_id!r} is not stored in {self._path!r} any more",
                run_id=lease.run_id,
            )
        fence, status, cancel = row
        if fence != lease.fence or status != "running":
            raise LeaseLostError(
                f"worker {lease.worker_id!r} lost durable run {lease.run_id!r}: "
                + (
                    f"it is {status} already"
                    if status != "running"
                    else f"another worker claimed it (fence {fence} > {lease.fence})"
                ),
                run_id=lease.run_id,
            )
        return cancel  # type: ignore[no-any-return]

    def _insert(
        self, conn: sqlite3.Connection, run_id: str, seq: int, records: Sequence[JournalRecord]
    ) -> None:
        now = self._clock()
        rows = [
            (run_id, seq + offset, type(record).__struct_config__.tag, encode_record(record), now)
            for offset, record in enumerate(records)
        ]
        try:
            conn.executemany(
                "INSERT INTO operative_journal (run_id, seq, kind, record, at) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
        except sqlite3.IntegrityError:
            raise ConflictError(f"{run_id}#{seq}", expected=None, actual=seq) from None

    async def _write(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        def transaction(conn: sqlite3.Connection) -> Any:
            conn.execute("BEGIN IMMEDIATE")
            try:
                value = work(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return value

        return await self._call(transaction)


class SqliteCheckpointStore(_SqliteDurable):
    """The journal of durable runs in one SQLite file (share it with a :class:`SqliteEngine`).

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per process.
        busy_timeout: seconds a write waits for another writer's lock.
        clock: epoch seconds for the entries' timestamps.
    """

    __slots__ = ()

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        """Append ``records`` from ``seq`` on if ``lease`` still holds (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        batch = check_records(records)

        def work(conn: sqlite3.Connection) -> str | None:
            cancel = self._check_fence(conn, lease)
            self._insert(conn, lease.run_id, seq, batch)
            return cancel

        result: str | None = await self._write(work)
        return result

    async def read(self, run_id: str, *, after: int = -1) -> list[JournalEntry]:
        """The run's entries with ``seq > after``, in order."""
        check_run_id(run_id)
        check_after(after)
        where = self._where()

        def work(conn: sqlite3.Connection) -> list[JournalEntry]:
            # Fetch every row before decoding: a statement left unfinished by a corrupt
            # row would pin this connection's read snapshot (stale reads, busy writes).
            rows = conn.execute(
                "SELECT seq, record, at FROM operative_journal WHERE run_id = ? AND seq > ? "
                "ORDER BY seq",
                (run_id, after),
            ).fetchall()
            return [decode_entry(where, run_id, seq, record, at) for seq, record, at in rows]

        entries: list[JournalEntry] = await self._call(work)
        return entries


class SqliteEngine(_SqliteDurable):
    """Durable run records and leases in one SQLite file, shared by worker processes.

    Leases are wall-clock times (``clock``, default :func:`time.time`), so every process
    using the file must agree on the time; on one machine they do.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per process.
        busy_timeout: seconds a write waits for another writer's lock.
        clock: epoch seconds, for leases and timestamps.
    """

    __slots__ = ()

    async def start(
        self,
        started: Started,
        *,
        run_id: str,
        worker_id: str,
        lease_seconds: float,
        session_id: str | None = None,
    ) -> Lease:
        """Commit a new run record leased to ``worker_id`` and its ``started`` entry."""
        check_started(started)
        check_run_id(run_id)
        check_name("worker_id", worker_id)
        check_name("session_id", session_id, optional=True)
        seconds = check_lease_seconds(lease_seconds)

        def work(conn: sqlite3.Connection) -> Lease:
            now = self._clock()
            try:
                conn.execute(
                    "INSERT INTO operative_runs (run_id, agent_name, session_id, status, "
                    "created_at, updated_at, lease_owner, lease_expires_at, fence, "
                    "lease_token) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, 1, ?)",
                    (
                        run_id,
                        started.agent_name,
                        session_id,
                        now,
                        now,
                        worker_id,
                        now + seconds,
                        self._token,
                    ),
                )
            except sqlite3.IntegrityError:
                raise ConflictError(run_id, expected=None, actual=1) from None
            self._insert(conn, run_id, 0, [started])
            return Lease(
                run_id=run_id,
                worker_id=worker_id,
                fence=1,
                expires_at=now + seconds,
                agent_name=started.agent_name,
                session_id=session_id,
            )

        lease: Lease = await self._write(work)
        return lease

    async def claim(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        limit: int = 10,
        run_ids: Sequence[str] | None = None,
        agent_names: Sequence[str] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` running runs nobody holds (see the protocol): their lease
        expired, or ``worker_id`` holds it through another engine object (the worker
        restarted under its id)."""
        check_name("worker_id", worker_id)
        seconds = check_lease_seconds(lease_seconds)
        check_limit(limit)
        sql = [
            "SELECT run_id, agent_name, session_id, fence FROM operative_runs "
            "WHERE status = 'running' AND (lease_expires_at <= ? "
            "OR (lease_owner = ? AND lease_token IS NOT ?))"
        ]
        filters: list[Any] = [worker_id, self._token]
        if run_ids is not None:
            ids = [check_run_id(run_id) for run_id in run_ids]
            if not ids:
                await trio.lowlevel.checkpoint()
                return []
            sql.append(f"AND run_id IN ({','.join('?' * len(ids))})")
            filters.extend(ids)
        if agent_names is not None:
            names = [check_name("an agent name", name) for name in agent_names]
            if not names:
                await trio.lowlevel.checkpoint()
                return []
            sql.append(f"AND agent_name IN ({','.join('?' * len(names))})")
            filters.extend(names)
        sql.append("ORDER BY lease_expires_at, created_at LIMIT ?")
        statement = " ".join(sql)

        def work(conn: sqlite3.Connection) -> list[Lease]:
            now = self._clock()
            rows = conn.execute(statement, [now, *filters, limit]).fetchall()
            leases = []
            for run_id, agent_name, session_id, fence in rows:
                conn.execute(
                    "UPDATE operative_runs SET lease_owner = ?, lease_expires_at = ?, "
                    "fence = ?, updated_at = ?, lease_token = ? WHERE run_id = ?",
                    (worker_id, now + seconds, fence + 1, now, self._token, run_id),
                )
                leases.append(
                    Lease(
                        run_id=run_id,
                        worker_id=worker_id,
                        fence=fence + 1,
                        expires_at=now + seconds,
                        agent_name=agent_name,
                        session_id=session_id,
                    )
                )
            return leases

        leases: list[Lease] = await self._write(work)
        return leases

    async def renew(self, lease: Lease, *, lease_seconds: float) -> tuple[Lease, str | None]:
        """Extend ``lease`` (see the protocol)."""
        check_lease(lease)
        seconds = check_lease_seconds(lease_seconds)

        def work(conn: sqlite3.Connection) -> tuple[Lease, str | None]:
            cancel = self._check_fence(conn, lease)
            now = self._clock()
            conn.execute(
                "UPDATE operative_runs SET lease_expires_at = ? WHERE run_id = ?",
                (now + seconds, lease.run_id),
            )
            return Lease(
                run_id=lease.run_id,
                worker_id=lease.worker_id,
                fence=lease.fence,
                expires_at=now + seconds,
                agent_name=lease.agent_name,
                session_id=lease.session_id,
            ), cancel

        renewed: tuple[Lease, str | None] = await self._write(work)
        return renewed

    async def finish(self, lease: Lease, seq: int, finished: Finished) -> RunRecord:
        """Commit the terminal outcome and the ``finished`` entry (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        if not isinstance(finished, Finished):
            raise InvalidArgument(f"finish takes a Finished record, not {finished!r}")
        outcome = finished.outcome

        def work(conn: sqlite3.Connection) -> RunRecord:
            self._check_fence(conn, lease)
            self._insert(conn, lease.run_id, seq, [finished])
            self._terminate(conn, lease.run_id, outcome)
            return self._get(conn, lease.run_id)  # type: ignore[return-value]

        record: RunRecord = await self._write(work)
        return record

    def _terminate(self, conn: sqlite3.Connection, run_id: str, outcome: RunOutcome) -> None:
        conn.execute(
            "UPDATE operative_runs SET status = ?, outcome = ?, lease_owner = NULL, "
            "lease_token = NULL, lease_expires_at = 0, fence = fence + 1, updated_at = ? "
            "WHERE run_id = ?",
            (status_of(outcome.finish_reason), encode_outcome(outcome), self._clock(), run_id),
        )

    async def release(self, lease: Lease) -> None:
        """Give the run up unfinished: any worker may claim it at once."""
        check_lease(lease)

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE operative_runs SET lease_owner = NULL, lease_token = NULL, "
                "lease_expires_at = 0 WHERE run_id = ? AND fence = ? AND status = 'running'",
                (lease.run_id, lease.fence),
            )

        await self._write(work)

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        """Ask a run to stop (see the protocol)."""
        check_run_id(run_id)
        if not check_name("reason", reason):
            raise InvalidArgument(f"reason must be a non-empty str, not {reason!r}")

        def work(conn: sqlite3.Connection) -> RunRecord:
            record = self._get(conn, run_id)
            if record is None:
                raise RunNotFoundError(run_id)
            if record.status != "running":
                return record
            now = self._clock()
            if record.lease_expires_at <= now:
                # Nobody holds it: finish it here, after its last journal entry.
                (last,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), -1) FROM operative_journal WHERE run_id = ?",
                    (run_id,),
                ).fetchone()
                outcome = RunOutcome(finish_reason="aborted", abort_reason=reason)
                self._insert(conn, run_id, last + 1, [Finished(outcome=outcome)])
                self._terminate(conn, run_id, outcome)
            conn.execute(
                "UPDATE operative_runs SET cancel_reason = ?, updated_at = ? WHERE run_id = ?",
                (reason, now, run_id),
            )
            return self._get(conn, run_id)  # type: ignore[return-value]

        record: RunRecord = await self._write(work)
        return record

    def _get(self, conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
        row = conn.execute(
            f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return None if row is None else decode_run(self._where(), row)

    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record, or ``None``."""
        check_run_id(run_id)
        record: RunRecord | None = await self._call(lambda conn: self._get(conn, run_id))
        return record

    async def list(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first."""
        check_limit(limit)
        check_name("agent_name", agent_name, optional=True)
        check_name("session_id", session_id, optional=True)
        since, until = check_time("since", since), check_time("until", until)
        sql = [f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE 1 = 1"]
        params: list[Any] = []
        wanted = statuses(status)
        if wanted is not None:
            sql.append(f"AND status IN ({','.join('?' * len(wanted))})")
            params.extend(wanted)
        if agent_name is not None:
            sql.append("AND agent_name = ?")
            params.append(agent_name)
        if session_id is not None:
            sql.append("AND session_id = ?")
            params.append(session_id)
        if since is not None:
            sql.append("AND created_at >= ?")
            params.append(since)
        if until is not None:
            sql.append("AND created_at < ?")
            params.append(until)
        sql.append("ORDER BY created_at DESC, run_id LIMIT ?")
        params.append(limit)
        statement = " ".join(sql)
        where = self._where()

        def work(conn: sqlite3.Connection) -> list[RunRecord]:
            rows = conn.execute(statement, params).fetchall()  # all, before decoding
            return [decode_run(where, row) for row in rows]

        records: list[RunRecord] = await self._call(work)
        return records
