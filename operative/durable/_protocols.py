"""What a durable run needs from a database: an engine and a checkpoint store.

The **engine** keeps one record per run: its status, the lease a worker holds on it
(owner, expiry, fence) and its terminal outcome. The **checkpoint store** keeps each
run's journal. Every write a worker makes names its :class:`Lease`; the write commits
only if the lease's fence is still the run's fence, in the same transaction. So a worker
whose lease was taken over (it stalled past the expiry, another worker claimed the run)
can never write again: its next write raises :class:`~operative.durable.LeaseLostError`.

Engine and checkpoint store therefore live in one database (the fence check and the
journal append are one transaction); :class:`~operative.durable.Durable` refuses a pair
that does not.

A lease names its worker (``worker_id``) and, in the engine's row, the engine object
that took it (a random token per object: one incarnation of the worker). A claim takes
the runs whose lease expired and also, at once, those its own ``worker_id`` holds through
another engine object: a worker restarted under a stable id (the old process died holding
them) takes its runs back without waiting out their leases, as DBOS recovers the pending
work of a stable executor id. If the old incarnation is in fact still alive (two live
processes under one id), the claim's new fence stops it: its next write raises
``LeaseLostError``, so two holders of one id are safe, though they take runs from each
other. One engine object never takes the runs it holds itself, so a worker polling with
:func:`~operative.durable.serve_durable_runs` never claims the runs it is running.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ._records import Finished, JournalEntry, JournalRecord, Lease, RunRecord, RunStatus, Started

__all__ = ["CheckpointStore", "DurableEngine", "accepts_journal"]


@runtime_checkable
class CheckpointStore(Protocol):
    """The append-only journal of every durable run."""

    @property
    def database(self) -> str:
        """Where the journal lives (a file path or a DSN without its password)."""
        ...

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        """Append ``records`` at ``seq``, ``seq + 1``, ... in one transaction.

        Commits only if ``lease`` is still the run's lease and ``seq`` is the next free
        sequence number. Returns the cancellation reason an operator requested through
        :meth:`DurableEngine.cancel`, or ``None``.

        Raises:
            LeaseLostError: the lease was taken over, or the run is already finished.
            ConflictError: ``seq`` is taken (another writer appended first).
        """
        ...

    async def read(self, run_id: str, *, after: int = -1) -> list[JournalEntry]:
        """The run's journal entries with ``seq > after``, in order.

        Raises:
            CorruptRecordError: an entry cannot be decoded (names run and sequence).
        """
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class DurableEngine(Protocol):
    """Run records, leases and outcomes."""

    @property
    def database(self) -> str:
        """Where the run records live (a file path or a DSN without its password)."""
        ...

    async def start(
        self,
        started: Started,
        *,
        run_id: str,
        worker_id: str,
        lease_seconds: float,
        session_id: str | None = None,
    ) -> Lease:
        """Commit a new run record, leased to ``worker_id``, with its journal's first entry.

        Raises:
            ConflictError: a run with this id exists already.
        """
        ...

    async def claim(
        self,
        *,
        worker_id: str,
        lease_seconds: float,
        limit: int = 10,
        run_ids: Sequence[str] | None = None,
        agent_names: Sequence[str] | None = None,
    ) -> list[Lease]:
        """Lease up to ``limit`` running runs nobody holds: their lease expired, or
        ``worker_id`` holds it through another engine object (the worker restarted under
        its id; see the module docstring).

        Each claim increments the run's fence, so the previous holder can write nothing
        more. Two claims never take the same run.
        """
        ...

    async def renew(self, lease: Lease, *, lease_seconds: float) -> tuple[Lease, str | None]:
        """Extend ``lease``; returns the new lease and any requested cancellation reason.

        Raises:
            LeaseLostError: the lease was taken over or the run is finished.
        """
        ...

    async def finish(
        self,
        lease: Lease,
        seq: int,
        finished: Finished,
        *,
        journal: Sequence[JournalRecord] = (),
    ) -> RunRecord:
        """Commit the terminal outcome and the journal's last entries, all or nothing.

        ``journal`` (default: none) are records the run had not journaled yet (its last
        step's end, say): they go at ``seq``, ``seq + 1``, ... and ``finished`` right
        after them, at ``seq + len(journal)``, in the transaction that commits the
        outcome, so a run whose last records wait for its end commits once. Like an
        append, it commits only if ``lease`` is still the run's lease: a refused finish
        writes neither the records nor the outcome.

        (A ``finish`` without the ``journal`` keyword still works: the run then appends
        those records in a commit of their own first.)

        Raises:
            LeaseLostError: the lease was taken over or the run is already finished.
            ConflictError: ``seq`` (or a later one the records need) is taken.
        """
        ...

    async def release(self, lease: Lease) -> None:
        """Give the run up without finishing it: any worker may claim it right away.

        A lease already lost is ignored.
        """
        ...

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        """Ask a running run to stop; it ends ``aborted`` with ``reason``.

        The worker holding the run learns of it at its next lease renewal (every
        ``lease_seconds / 3``) or journal write, whichever comes first, and aborts the
        run there, in the middle of a step as ``run.abort(reason)`` would: a tool call
        or model call in flight is cancelled. A run no worker holds (its lease expired
        or was released) is finished ``aborted`` right away; the worker that resumes
        one cancelled meanwhile stops it before another step. A finished run is
        returned unchanged.

        Raises:
            RunNotFoundError: no run has this id.
        """
        ...

    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record, or ``None``."""
        ...

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
        """Runs matching every filter given, newest first (by creation time)."""
        ...

    async def aclose(self) -> None: ...


def accepts_journal(engine: DurableEngine) -> bool:
    """Whether ``engine.finish`` takes the ``journal`` keyword (every engine of this
    package does; an engine written before the keyword existed may not)."""
    try:
        parameters = inspect.signature(engine.finish).parameters.values()
    except (TypeError, ValueError):  # no signature to read: assume the protocol's
        return True
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == "journal" and p.kind is not p.POSITIONAL_ONLY)
        for p in parameters
    )
