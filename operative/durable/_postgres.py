"""The durable engine and checkpoint store in PostgreSQL, shared by workers on many machines.

The tables are those of the SQLite backend: ``operative_runs`` (one row per run: status,
lease, fence, outcome) and ``operative_journal`` (``(run_id, seq)`` → record). Run ids
use the ``"C"`` collation, so orderings are code-point order as in SQLite.

Claims are one statement::

    WITH picked AS MATERIALIZED (
        SELECT run_id FROM operative_runs
        WHERE status = 'running' AND (lease_expires_at <= $now
            OR (lease_owner = $worker AND lease_token IS DISTINCT FROM $token)) ...
        ORDER BY lease_expires_at, created_at, run_id LIMIT $n
        FOR UPDATE SKIP LOCKED)
    UPDATE operative_runs SET fence = fence + 1, ... WHERE run_id IN (SELECT run_id FROM picked)
    RETURNING ...

(``lease_token`` names the engine object that took the lease: a worker restarted under
its ``worker_id`` takes its own runs back at once; see :mod:`operative.durable._protocols`.)

``FOR UPDATE SKIP LOCKED`` makes workers on any number of machines pass over the rows
another claim is taking instead of waiting for it, and re-checks the expiry of a row whose
claim committed meanwhile: a run is never claimed twice and claims never block each other.
``MATERIALIZED`` makes PostgreSQL run the locking ``SELECT`` exactly once (an ``IN``
subquery may otherwise be re-scanned and lock more than ``$n`` rows).

Every write that names a lease checks its fence in the same transaction: appends lock the
run row (``SELECT ... FOR UPDATE``) before inserting, which also waits for a claim of that
run in flight; renew, finish and release are ``UPDATE ... WHERE fence = $fence AND status =
'running'``. A worker whose run was claimed by another can therefore commit nothing.

Journal records and outcomes are stored as ``TEXT`` holding msgspec's JSON, not ``JSONB``:
the bytes read back are the bytes written (``JSONB`` re-renders numbers, key order and
whitespace), nothing parses the JSON twice, and ``JSONB`` refuses a ``\\u0000`` escape that
message content may legitimately hold. The database never queries inside a record.

Times (``created_at``, ``lease_expires_at``, ...) are ``DOUBLE PRECISION`` epoch seconds
from the ``clock`` argument (default :func:`time.time`), not the server's ``now()``, as in
SQLite: the worker's clock decides leases, and tests can move it. Machines sharing one
database must keep their clocks in step (NTP) to within a small part of ``lease_seconds``.

Connections, worker threads and cancellation (``cancel_safe()``) are those of
:class:`~operative.storage.PostgresStore` (the shared ``PostgresPooled`` base). Table
creation is serialised between processes by the same advisory lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._core._errors import ConflictError, InvalidArgument, LeaseLostError, RunNotFoundError
from ..storage._postgres import PostgresPooled
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

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresCheckpointStore", "PostgresEngine"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS operative_runs (
        run_id TEXT COLLATE "C" PRIMARY KEY,
        agent_name TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        lease_owner TEXT,
        lease_expires_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        fence BIGINT NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        outcome TEXT,
        lease_token TEXT
    )""",
    # Tables created before the lease token existed get it here.
    "ALTER TABLE operative_runs ADD COLUMN IF NOT EXISTS lease_token TEXT",
    "CREATE INDEX IF NOT EXISTS operative_runs_runnable "
    "ON operative_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_created ON operative_runs (created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_agent ON operative_runs (agent_name, created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_session ON operative_runs (session_id, created_at)",
    """CREATE TABLE IF NOT EXISTS operative_journal (
        run_id TEXT COLLATE "C" NOT NULL,
        seq BIGINT NOT NULL,
        kind TEXT NOT NULL,
        record TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
)
# CREATE INDEX IF NOT EXISTS locks its table even when the index exists (and would wait
# for every write in flight), so a connection creates nothing once both tables exist.
_READY = (
    "SELECT to_regclass('operative_runs') IS NOT NULL "
    "AND to_regclass('operative_journal') IS NOT NULL "
    "AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('operative_runs') "
    "AND attname = 'lease_token' AND NOT attisdropped)"
)
_INSERT = (
    "INSERT INTO operative_journal (run_id, seq, kind, record, at) "
    "SELECT %s, seq, kind, record, %s "
    "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS entry (seq, kind, record)"
)
_TERMINATE = (
    "UPDATE operative_runs SET status = %s, outcome = %s, lease_owner = NULL, "
    "lease_token = NULL, lease_expires_at = 0, fence = fence + 1, updated_at = %s "
    f"WHERE run_id = %s AND fence = %s AND status = 'running' RETURNING {RUN_COLUMNS}"
)
_SECRETS = ("password", "sslpassword")


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


class _PostgresDurable(PostgresPooled):
    """What the PostgreSQL engine and checkpoint store share: the DSN, tables and clock.

    ``_token`` is this object's incarnation, written next to the lease owner by every
    lease it takes (see :meth:`PostgresEngine.claim`).
    """

    __slots__ = ("_clock", "_database", "_token")

    def __init__(
        self,
        dsn: str,
        *,
        max_connections: int = 4,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning epoch seconds: {clock!r}")
        super().__init__(dsn, max_connections=max_connections)
        self._clock = clock
        self._database = _without_password(self._psycopg, dsn)
        self._token = os.urandom(8).hex()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._database!r}{' closed' if self._closed else ''}>"

    @property
    def database(self) -> str:
        """The DSN without its password (libpq's canonical ``key=value`` form)."""
        return self._database

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        (ready,) = conn.execute(_READY).fetchone()  # type: ignore[misc]
        if not ready:
            self._create_tables(conn, _SCHEMA)

    def _where(self) -> str:
        return f"PostgreSQL database {self._database!r}"

    def _lost(self, conn: psycopg.Connection[Any], lease: Lease) -> LeaseLostError:
        """Why ``lease`` no longer holds its run (after a fenced write matched no row)."""
        row = conn.execute(
            "SELECT fence, status FROM operative_runs WHERE run_id = %s", (lease.run_id,)
        ).fetchone()
        if row is None:
            return LeaseLostError(
                f"durable run {lease.run_id!r} is not stored in {self._where()} any more",
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

    def _check_fence(self, conn: psycopg.Connection[Any], lease: Lease) -> str | None:
        """Lock the run row; raise unless ``lease`` still holds it. Returns its cancel reason."""
        row = conn.execute(
            "SELECT cancel_reason FROM operative_runs "
            "WHERE run_id = %s AND fence = %s AND status = 'running' FOR UPDATE",
            (lease.run_id, lease.fence),
        ).fetchone()
        if row is None:
            raise self._lost(conn, lease)
        cancel: str | None = row[0]
        return cancel

    def _insert(
        self, conn: psycopg.Connection[Any], run_id: str, seq: int, records: Sequence[JournalRecord]
    ) -> None:
        if not records:
            return
        kinds = [type(record).__struct_config__.tag for record in records]
        texts = [encode_record(record) for record in records]
        seqs = list(range(seq, seq + len(records)))
        try:
            conn.execute(_INSERT, (run_id, self._clock(), seqs, kinds, texts))
        except self._psycopg.errors.UniqueViolation:
            raise ConflictError(f"{run_id}#{seq}", expected=None, actual=seq) from None

    async def _write(self, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """``work(conn)`` in one transaction (rolled back if it raises)."""

        def transaction(conn: psycopg.Connection[Any]) -> Any:
            with conn.transaction():
                return work(conn)

        return await self._call(transaction)


class PostgresCheckpointStore(_PostgresDurable):
    """The journal of durable runs in PostgreSQL (share the DSN with a :class:`PostgresEngine`).

    Args:
        dsn: a libpq connection string or URI; the tables are created in the first schema
            of its ``search_path``.
        max_connections: connections (and worker threads) per object.
        clock: epoch seconds for the entries' timestamps.
    """

    __slots__ = ()

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        """Append ``records`` from ``seq`` on if ``lease`` still holds (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        batch = check_records(records)

        def work(conn: psycopg.Connection[Any]) -> str | None:
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

        def work(conn: psycopg.Connection[Any]) -> list[JournalEntry]:
            return [
                decode_entry(where, run_id, seq, record, at)
                for seq, record, at in conn.execute(
                    "SELECT seq, record, at FROM operative_journal "
                    "WHERE run_id = %s AND seq > %s ORDER BY seq",
                    (run_id, after),
                )
            ]

        return await self._call(work)


class PostgresEngine(_PostgresDurable):
    """Durable run records and leases in PostgreSQL, for workers on many machines.

    Leases are wall-clock times (``clock``, default :func:`time.time`) of the worker that
    writes them, so the machines sharing the database must agree on the time.

    Args:
        dsn: a libpq connection string or URI; the tables are created in the first schema
            of its ``search_path``.
        max_connections: connections (and worker threads) per object.
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
        unique = self._psycopg.errors.UniqueViolation

        def work(conn: psycopg.Connection[Any]) -> Lease:
            now = self._clock()
            try:
                conn.execute(
                    "INSERT INTO operative_runs (run_id, agent_name, session_id, status, "
                    "created_at, updated_at, lease_owner, lease_expires_at, fence, "
                    "lease_token) VALUES (%s, %s, %s, 'running', %s, %s, %s, %s, 1, %s)",
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
            except unique:
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
        """Lease up to ``limit`` running runs nobody holds, oldest first: their lease
        expired, or ``worker_id`` holds it through another engine object (the worker
        restarted under its id).

        Concurrent claims skip each other's rows (``FOR UPDATE SKIP LOCKED``): no run is
        claimed twice, and no claim waits for another.
        """
        check_name("worker_id", worker_id)
        seconds = check_lease_seconds(lease_seconds)
        check_limit(limit)
        sql = [
            "WITH picked AS MATERIALIZED (SELECT run_id FROM operative_runs "
            "WHERE status = 'running' AND (lease_expires_at <= %(now)s "
            "OR (lease_owner = %(worker)s AND lease_token IS DISTINCT FROM %(token)s))"
        ]
        params: dict[str, Any] = {"worker": worker_id, "limit": limit, "token": self._token}
        if run_ids is not None:
            params["ids"] = [check_run_id(run_id) for run_id in run_ids]
            if not params["ids"]:
                await trio.lowlevel.checkpoint()
                return []
            sql.append("AND run_id = ANY(%(ids)s)")
        if agent_names is not None:
            params["names"] = [check_name("an agent name", name) for name in agent_names]
            if not params["names"]:
                await trio.lowlevel.checkpoint()
                return []
            sql.append("AND agent_name = ANY(%(names)s)")
        sql.append(
            "ORDER BY lease_expires_at, created_at, run_id LIMIT %(limit)s "
            "FOR UPDATE SKIP LOCKED) "
            "UPDATE operative_runs SET lease_owner = %(worker)s, lease_token = %(token)s, "
            "lease_expires_at = %(expires)s, fence = fence + 1, updated_at = %(now)s "
            "WHERE run_id IN (SELECT run_id FROM picked) "
            "RETURNING run_id, agent_name, session_id, fence, created_at"
        )
        statement = " ".join(sql)

        def work(conn: psycopg.Connection[Any]) -> list[Lease]:
            now = self._clock()
            rows = conn.execute(
                statement, {**params, "now": now, "expires": now + seconds}
            ).fetchall()
            rows.sort(key=lambda row: (row[4], row[0]))
            return [
                Lease(
                    run_id=run_id,
                    worker_id=worker_id,
                    fence=fence,
                    expires_at=now + seconds,
                    agent_name=agent_name,
                    session_id=session_id,
                )
                for run_id, agent_name, session_id, fence, _ in rows
            ]

        leases: list[Lease] = await self._call(work)
        return leases

    async def renew(self, lease: Lease, *, lease_seconds: float) -> tuple[Lease, str | None]:
        """Extend ``lease`` (see the protocol)."""
        check_lease(lease)
        seconds = check_lease_seconds(lease_seconds)

        def work(conn: psycopg.Connection[Any]) -> tuple[Lease, str | None]:
            now = self._clock()
            row = conn.execute(
                "UPDATE operative_runs SET lease_expires_at = %s "
                "WHERE run_id = %s AND fence = %s AND status = 'running' "
                "RETURNING cancel_reason",
                (now + seconds, lease.run_id, lease.fence),
            ).fetchone()
            if row is None:
                raise self._lost(conn, lease)
            renewed = Lease(
                run_id=lease.run_id,
                worker_id=lease.worker_id,
                fence=lease.fence,
                expires_at=now + seconds,
                agent_name=lease.agent_name,
                session_id=lease.session_id,
            )
            return renewed, row[0]

        renewed: tuple[Lease, str | None] = await self._call(work)
        return renewed

    async def finish(self, lease: Lease, seq: int, finished: Finished) -> RunRecord:
        """Commit the terminal outcome and the ``finished`` entry (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        if not isinstance(finished, Finished):
            raise InvalidArgument(f"finish takes a Finished record, not {finished!r}")

        def work(conn: psycopg.Connection[Any]) -> RunRecord:
            record = self._terminate(conn, lease.run_id, lease.fence, finished.outcome)
            if record is None:
                raise self._lost(conn, lease)
            self._insert(conn, lease.run_id, seq, [finished])
            return record

        record: RunRecord = await self._write(work)
        return record

    def _terminate(
        self, conn: psycopg.Connection[Any], run_id: str, fence: int, outcome: RunOutcome
    ) -> RunRecord | None:
        """Commit ``outcome`` if ``fence`` still holds the running run (else ``None``)."""
        row = conn.execute(
            _TERMINATE,
            (
                status_of(outcome.finish_reason),
                encode_outcome(outcome),
                self._clock(),
                run_id,
                fence,
            ),
        ).fetchone()
        return None if row is None else decode_run(self._where(), row)

    async def release(self, lease: Lease) -> None:
        """Give the run up unfinished: any worker may claim it at once."""
        check_lease(lease)

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute(
                "UPDATE operative_runs SET lease_owner = NULL, lease_token = NULL, "
                "lease_expires_at = 0 WHERE run_id = %s AND fence = %s AND status = 'running'",
                (lease.run_id, lease.fence),
            )

        await self._call(work)

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        """Ask a run to stop (see the protocol)."""
        check_run_id(run_id)
        if not check_name("reason", reason):
            raise InvalidArgument(f"reason must be a non-empty str, not {reason!r}")
        where = self._where()

        def work(conn: psycopg.Connection[Any]) -> RunRecord:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE run_id = %s FOR UPDATE",
                (run_id,),
            ).fetchone()
            if row is None:
                raise RunNotFoundError(run_id)
            record = decode_run(where, row)
            if record.status != "running":
                return record
            now = self._clock()
            if record.lease_expires_at <= now:
                # Nobody holds it: finish it here, after its last journal entry.
                (last,) = conn.execute(
                    "SELECT COALESCE(MAX(seq), -1) FROM operative_journal WHERE run_id = %s",
                    (run_id,),
                ).fetchone()  # type: ignore[misc]
                outcome = RunOutcome(finish_reason="aborted", abort_reason=reason)
                self._insert(conn, run_id, last + 1, [Finished(outcome=outcome)])
                self._terminate(conn, run_id, record.fence, outcome)
            row = conn.execute(
                "UPDATE operative_runs SET cancel_reason = %s, updated_at = %s "
                f"WHERE run_id = %s RETURNING {RUN_COLUMNS}",
                (reason, now, run_id),
            ).fetchone()
            return decode_run(where, row)  # type: ignore[arg-type]

        record: RunRecord = await self._write(work)
        return record

    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record, or ``None``."""
        check_run_id(run_id)
        where = self._where()

        def work(conn: psycopg.Connection[Any]) -> RunRecord | None:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            return None if row is None else decode_run(where, row)

        return await self._call(work)

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
        sql = [f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE TRUE"]
        params: list[Any] = []
        wanted = statuses(status)
        if wanted is not None:
            sql.append("AND status = ANY(%s)")
            params.append(wanted)
        if agent_name is not None:
            sql.append("AND agent_name = %s")
            params.append(agent_name)
        if session_id is not None:
            sql.append("AND session_id = %s")
            params.append(session_id)
        if since is not None:
            sql.append("AND created_at >= %s")
            params.append(since)
        if until is not None:
            sql.append("AND created_at < %s")
            params.append(until)
        sql.append("ORDER BY created_at DESC, run_id LIMIT %s")
        params.append(limit)
        statement = " ".join(sql)
        where = self._where()

        def work(conn: psycopg.Connection[Any]) -> list[RunRecord]:
            return [decode_run(where, row) for row in conn.execute(statement, params)]

        return await self._call(work)
