"""The durable journal over SQL, and what the engine shares with it: the fence check.

Written once for SQLite and PostgreSQL over a :class:`~operative._sql.Database`. Every
write that names a lease runs in one write transaction that first checks the lease's
fence (``SELECT ... WHERE run_id = ? AND fence = ? AND status = 'running'``, on
PostgreSQL ``FOR UPDATE``, which also waits for a claim of that run in flight; on SQLite
``BEGIN IMMEDIATE`` holds the whole file), so a worker whose lease was taken over cannot
commit anything: not an entry, not an outcome.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from .._core._errors import ConflictError, InvalidArgument, LeaseLostError
from .._sql import Database, SqlBacked
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

    __slots__ = ("_clock", "_q", "_token")

    _templates: ClassVar[Mapping[str, str]] = _TEMPLATES

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        if not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning epoch seconds: {clock!r}")
        self._db = db
        self._clock = clock
        self._token = os.urandom(8).hex()
        self._q = {name: db.dialect.format(text) for name, text in self._templates.items()}

    @property
    def database(self) -> str:
        """The database: the file (absolute), or the DSN without its password."""
        return self._db.name

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
        now = self._clock()
        rows = [
            (run_id, seq + offset, type(record).__struct_config__.tag, encode_record(record), now)
            for offset, record in enumerate(records)
        ]
        try:
            self._db.dialect.insert_rows(conn, "operative_journal", JOURNAL_COLUMNS, rows)
        except self._db.dialect.unique_violation:
            raise ConflictError(f"{run_id}#{seq}", expected=None, actual=seq) from None


class SqlCheckpointStore(SqlDurable):
    """The journal of durable runs in one database (share it with the engine)."""

    __slots__ = ()

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        """Append ``records`` from ``seq`` on if ``lease`` still holds (see the protocol)."""
        check_lease(lease)
        check_seq(seq)
        batch = check_records(records)

        def work(conn: Any) -> str | None:
            cancel = self._check_fence(conn, lease)
            self._insert(conn, lease.run_id, seq, batch)
            return cancel

        return await self._db.write(work)

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
