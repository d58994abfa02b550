"""The durable engine over SQL: run records, leases and outcomes, written once.

One class for SQLite and PostgreSQL over a :class:`~operative._sql.Database`;
``SqliteEngine`` and ``PostgresEngine`` only pick the database. What the two differ in
is the dialect's:

- **claims** read the runs nobody holds and take them in one write transaction::

      SELECT run_id, ... FROM operative_runs
      WHERE status = 'running' AND (lease_expires_at <= $now
          OR (lease_owner = $worker AND lease_token IS DISTINCT FROM $token)) ...
      ORDER BY lease_expires_at, created_at, run_id LIMIT $n
      FOR UPDATE SKIP LOCKED                              -- PostgreSQL only
      UPDATE operative_runs SET fence = fence + 1, ... WHERE run_id IN (those)

  On PostgreSQL ``FOR UPDATE SKIP LOCKED`` makes workers on any number of machines pass
  over the rows another claim is taking instead of waiting for it, and re-checks the
  expiry of a row whose claim committed meanwhile: a run is never claimed twice and
  claims never block each other. On SQLite ``BEGIN IMMEDIATE`` serialises claims across
  processes. (``lease_token`` names the engine object that took the lease: a worker
  restarted under its ``worker_id`` takes its own runs back at once; see
  :mod:`operative.durable._protocols`.)
- **fenced writes** (renew, finish, release) match the lease's fence in the statement
  that writes (``WHERE fence = ? AND status = 'running'``), and finish adds its journal
  entry in the same transaction, like journal appends (see :mod:`._journal`).

Times (``created_at``, ``lease_expires_at``, ...) are epoch seconds from the ``clock``
argument (default :func:`time.time`), not the server's ``now()``: the worker's clock
decides leases, and tests can move it. Processes sharing one database must keep their
clocks in step (NTP) to within a small part of ``lease_seconds``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import trio

from .._core._errors import InvalidArgument
from ..kvstore._protocol import ConflictError
from ._errors import RunNotFoundError
from ._journal import _TEMPLATES, SqlDurable
from ._records import Finished, JournalRecord, Lease, RunOutcome, RunRecord, RunStatus, Started
from ._rows import (
    RUN_COLUMNS,
    check_lease,
    check_lease_seconds,
    check_limit,
    check_name,
    check_records,
    check_run_id,
    check_seq,
    check_started,
    check_time,
    decode_run,
    encode_outcome,
    status_of,
    statuses,
)

__all__ = ["SqlEngine"]

_ENGINE_TEMPLATES = {
    **_TEMPLATES,
    "start": "INSERT INTO operative_runs (run_id, agent_name, session_id, status, created_at, "
    "updated_at, lease_owner, lease_expires_at, fence, lease_token) "
    "VALUES ({m}, {m}, {m}, 'running', {m}, {m}, {m}, {m}, 1, {m})",
    "claimable": "SELECT run_id, agent_name, session_id, fence FROM operative_runs "
    "WHERE status = 'running' AND (lease_expires_at <= {m} "
    "OR (lease_owner = {m} AND lease_token {distinct} {m}))",
    "claim_order": " ORDER BY lease_expires_at, created_at, run_id LIMIT {m}{skip_locked}",
    "take": "UPDATE operative_runs SET lease_owner = {m}, lease_token = {m}, "
    "lease_expires_at = {m}, fence = fence + 1, updated_at = {m} WHERE ",
    "renew": "UPDATE operative_runs SET lease_expires_at = {m} "
    "WHERE run_id = {m} AND fence = {m} AND status = 'running'",
    "cancel_reason": "SELECT cancel_reason FROM operative_runs WHERE run_id = {m}",
    "terminate": "UPDATE operative_runs SET status = {m}, outcome = {m}, lease_owner = NULL, "
    "lease_token = NULL, lease_expires_at = 0, fence = fence + 1, updated_at = {m} "
    "WHERE run_id = {m} AND fence = {m} AND status = 'running'",
    "release": "UPDATE operative_runs SET lease_owner = NULL, lease_token = NULL, "
    "lease_expires_at = 0 WHERE run_id = {m} AND fence = {m} AND status = 'running'",
    "get": f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE run_id = {{m}}",
    "get_locked": f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE run_id = {{m}}{{lock}}",
    "last_seq": "SELECT COALESCE(MAX(seq), -1) FROM operative_journal WHERE run_id = {m}",
    "cancel": "UPDATE operative_runs SET cancel_reason = {m}, updated_at = {m} WHERE run_id = {m}",
}


_PG_ROW = "(%s::text, %s::bigint, %s::text, %s::text, %s::double precision)"

_PG_START = (
    # The run record and its started entry in one statement: one round trip, its own
    # transaction (no BEGIN and COMMIT of their own).
    "WITH run AS (INSERT INTO operative_runs (run_id, agent_name, session_id, status, "
    "created_at, updated_at, lease_owner, lease_expires_at, fence, lease_token) "
    "VALUES (%s, %s, %s, 'running', %s, %s, %s, %s, 1, %s) RETURNING run_id) "
    "INSERT INTO operative_journal (run_id, seq, kind, record, at) "
    f"SELECT v.run_id, v.seq, v.kind, v.record, v.at FROM run, (VALUES {_PG_ROW}) "
    "AS v(run_id, seq, kind, record, at)"
)

_PG_FINISH = (
    # The outcome (if the fence holds) and the last entries in one statement; returns
    # the finished run record, or no row when the lease no longer holds.
    "WITH done AS (UPDATE operative_runs SET status = %s, outcome = %s, lease_owner = NULL, "
    "lease_token = NULL, lease_expires_at = 0, fence = fence + 1, updated_at = %s "
    f"WHERE run_id = %s AND fence = %s AND status = 'running' RETURNING {RUN_COLUMNS}), "
    "added AS (INSERT INTO operative_journal (run_id, seq, kind, record, at) "
    "SELECT v.run_id, v.seq, v.kind, v.record, v.at FROM done, (VALUES {values}) "
    "AS v(run_id, seq, kind, record, at)) "
    f"SELECT {RUN_COLUMNS} FROM done"
)


def _pg_finish(rows: int) -> str:
    """The statement finishing a run with ``rows`` journal rows (``rows`` >= 1)."""
    return _PG_FINISH.replace("{values}", ", ".join([_PG_ROW] * rows))


class SqlEngine(SqlDurable):
    """Durable run records and leases in one database, shared by worker processes."""

    __slots__ = ()

    _templates: ClassVar = _ENGINE_TEMPLATES

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
        unique = self._db.dialect.unique_violation

        def work(conn: Any) -> Lease:
            now = self._clock()
            values = (run_id, started.agent_name, session_id, now, now, worker_id)
            try:
                conn.execute(self._q["start"], (*values, now + seconds, self._token))
            except unique:
                raise ConflictError(run_id, expected=None, actual=1) from None
            self._insert(conn, run_id, 0, [started])
            return self._started_lease(run_id, worker_id, now + seconds, started, session_id)

        if self._queue is None and self._db.dialect.name == "postgres":
            (row,) = self._rows(run_id, 0, [started])  # encoded first: refused, nothing written

            def one_statement(conn: Any) -> Lease:
                now = self._clock()
                values = (run_id, started.agent_name, session_id, now, now, worker_id)
                try:
                    conn.execute(_PG_START, (*values, now + seconds, self._token, *row))
                except unique:
                    raise ConflictError(run_id, expected=None, actual=1) from None
                return self._started_lease(run_id, worker_id, now + seconds, started, session_id)

            return await self._db.call(one_statement)
        return await self._write(work)

    @staticmethod
    def _started_lease(
        run_id: str, worker_id: str, expires_at: float, started: Started, session_id: str | None
    ) -> Lease:
        return Lease(
            run_id=run_id,
            worker_id=worker_id,
            fence=1,
            expires_at=expires_at,
            agent_name=started.agent_name,
            session_id=session_id,
        )

    async def claim(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        limit: int = 10,
        run_ids: Sequence[str] | None = None,
        agent_names: Sequence[str] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` running runs nobody holds, the longest expired first:
        their lease expired, or ``worker_id`` holds it through another engine object (the
        worker restarted under its id). See the module docstring for concurrent claims."""
        check_name("worker_id", worker_id)
        seconds = check_lease_seconds(lease_seconds)
        check_limit(limit)
        dialect = self._db.dialect
        sql = [self._q["claimable"]]
        filters: list[Any] = [worker_id, self._token]
        for column, values in (
            ("run_id", None if run_ids is None else [check_run_id(i) for i in run_ids]),
            (
                "agent_name",
                None
                if agent_names is None
                else [check_name("an agent name", name) for name in agent_names],
            ),
        ):
            if values is None:
                continue
            if not values:
                await trio.lowlevel.checkpoint()
                return []
            clause, params = dialect.any_of(column, values)
            sql.append(f" AND {clause}")
            filters.extend(params)
        sql.append(self._q["claim_order"])
        statement = "".join(sql)

        def work(conn: Any) -> list[Lease]:
            now = self._clock()
            rows = conn.execute(statement, [now, *filters, limit]).fetchall()
            for at in range(0, len(rows), dialect.chunk):
                taken = [row[0] for row in rows[at : at + dialect.chunk]]
                clause, ids = dialect.any_of("run_id", taken)
                take = (worker_id, self._token, now + seconds, now, *ids)
                conn.execute(self._q["take"] + clause, take)
            return [
                Lease(
                    run_id=run_id,
                    worker_id=worker_id,
                    fence=fence + 1,
                    expires_at=now + seconds,
                    agent_name=agent_name,
                    session_id=session_id,
                )
                for run_id, agent_name, session_id, fence in rows
            ]

        return await self._db.write(work)

    async def renew(self, lease: Lease, *, lease_seconds: float) -> tuple[Lease, str | None]:
        """Extend ``lease`` (see the protocol)."""
        check_lease(lease)
        seconds = check_lease_seconds(lease_seconds)

        def work(conn: Any) -> tuple[Lease, str | None]:
            # The fence is checked by the update itself (one statement, its own
            # transaction); the cancel reason, which only ever gets set, is read after.
            now = self._clock()
            renew = (now + seconds, lease.run_id, lease.fence)
            if conn.execute(self._q["renew"], renew).rowcount != 1:
                raise self._lost(conn, lease)
            row = conn.execute(self._q["cancel_reason"], (lease.run_id,)).fetchone()
            cancel: str | None = None if row is None else row[0]
            renewed = Lease(
                run_id=lease.run_id,
                worker_id=lease.worker_id,
                fence=lease.fence,
                expires_at=now + seconds,
                agent_name=lease.agent_name,
                session_id=lease.session_id,
            )
            return renewed, cancel

        return await self._db.call(work, brief=True)

    async def finish(
        self,
        lease: Lease,
        seq: int,
        finished: Finished,
        *,
        journal: Sequence[JournalRecord] = (),
    ) -> RunRecord:
        """Commit the terminal outcome and the ``finished`` entry (see the protocol).

        ``journal``: records journaled first, at ``seq``, ``seq + 1``, ... in the same
        transaction (the ``finished`` entry then comes after them): a run whose last
        records wait for its end commits once.
        """
        check_lease(lease)
        check_seq(seq)
        if not isinstance(finished, Finished):
            raise InvalidArgument(f"finish takes a Finished record, not {finished!r}")
        # Encoded here: a record that is not JSON is refused before anything is written.
        rows = self._rows(lease.run_id, seq, [*check_records(journal), finished])

        def work(conn: Any) -> RunRecord:
            if not self._terminate(conn, lease.run_id, lease.fence, finished.outcome):
                raise self._lost(conn, lease)
            self._insert_rows(conn, lease.run_id, seq, rows)
            return self._get(conn, lease.run_id)  # type: ignore[return-value]

        if self._queue is None and self._db.dialect.name == "postgres":
            outcome = finished.outcome
            done = (status_of(outcome.finish_reason), encode_outcome(outcome))
            sql = _pg_finish(len(rows))
            unique = self._db.dialect.unique_violation

            def one_statement(conn: Any) -> RunRecord:
                params = [*done, self._clock(), lease.run_id, lease.fence]
                for row in rows:
                    params.extend(row)
                try:
                    found = conn.execute(sql, params).fetchone()
                except unique:
                    raise ConflictError(
                        f"{lease.run_id}#{seq}", expected=None, actual=seq
                    ) from None
                if found is None:
                    raise self._lost(conn, lease)
                return decode_run(self._db.where, found)

            return await self._db.call(one_statement)
        return await self._write(work)

    def _terminate(self, conn: Any, run_id: str, fence: int, outcome: RunOutcome) -> bool:
        """Commit ``outcome`` if ``fence`` still holds the running run; whether it did."""
        status = status_of(outcome.finish_reason)
        values = (status, encode_outcome(outcome), self._clock(), run_id, fence)
        return bool(conn.execute(self._q["terminate"], values).rowcount == 1)

    async def release(self, lease: Lease) -> None:
        """Give the run up unfinished: any worker may claim it at once."""
        check_lease(lease)

        def work(conn: Any) -> None:
            conn.execute(self._q["release"], (lease.run_id, lease.fence))

        await self._db.call(work, brief=True)  # one statement: its own transaction

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        """Ask a run to stop (see the protocol)."""
        check_run_id(run_id)
        if not check_name("reason", reason):
            raise InvalidArgument(f"reason must be a non-empty str, not {reason!r}")

        def work(conn: Any) -> RunRecord:
            record = self._get(conn, run_id, lock=True)
            if record is None:
                raise RunNotFoundError(run_id)
            if record.status != "running":
                return record
            now = self._clock()
            if record.lease_expires_at <= now:
                # Nobody holds it: finish it here, after its last journal entry.
                (last,) = conn.execute(self._q["last_seq"], (run_id,)).fetchone()
                outcome = RunOutcome(finish_reason="aborted", abort_reason=reason)
                self._insert(conn, run_id, last + 1, [Finished(outcome=outcome)])
                self._terminate(conn, run_id, record.fence, outcome)
            conn.execute(self._q["cancel"], (reason, now, run_id))
            return self._get(conn, run_id)  # type: ignore[return-value]

        return await self._db.write(work)

    def _get(self, conn: Any, run_id: str, *, lock: bool = False) -> RunRecord | None:
        row = conn.execute(self._q["get_locked" if lock else "get"], (run_id,)).fetchone()
        return None if row is None else decode_run(self._db.where, row)

    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record, or ``None``."""
        check_run_id(run_id)
        return await self._db.call(lambda conn: self._get(conn, run_id))

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
        dialect = self._db.dialect
        mark = dialect.mark
        sql = [f"SELECT {RUN_COLUMNS} FROM operative_runs WHERE 1 = 1"]
        params: list[Any] = []
        wanted = statuses(status)
        if wanted is not None:
            clause, values = dialect.any_of("status", wanted)
            sql.append(f"AND {clause}")
            params.extend(values)
        for condition, value in (
            (f"agent_name = {mark}", agent_name),
            (f"session_id = {mark}", session_id),
            (f"created_at >= {mark}", since),
            (f"created_at < {mark}", until),
        ):
            if value is not None:
                sql.append(f"AND {condition}")
                params.append(value)
        sql.append(f"ORDER BY created_at DESC, run_id LIMIT {mark}")
        params.append(limit)
        statement = " ".join(sql)
        where = self._db.where

        def work(conn: Any) -> list[RunRecord]:
            rows = conn.execute(statement, params).fetchall()  # all, before decoding
            return [decode_run(where, row) for row in rows]

        return await self._db.call(work)
