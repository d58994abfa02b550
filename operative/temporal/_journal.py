"""One activity attempt's view of its run: the durable engine and journal it writes to.

The durable driver (:mod:`operative.durable._driver`) writes a Temporal run exactly as
it writes a SQL one; this object turns its calls into the workflow's updates:

- the attempt's ``claim`` takes the next fence (the SQL claim's ``fence + 1``): the
  workflow refuses any write that names an older one, so an attempt that Temporal
  already retried elsewhere gets :class:`~operative.durable.LeaseLostError` on its next write;
- ``start``/``append``/``finish`` are ``append`` updates (the outcome is the journal's
  last entry); a step record names unchanged results by reference (one copy of each
  tool result in the history);
- ``renew`` is the activity's heartbeat; ``release`` does nothing (the attempt then
  fails, and Temporal dispatches the run again at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._core._errors import InvalidArgument, OperativeError
from .._core._types import ToolResult
from ..durable._records import (
    Finished,
    JournalEntry,
    JournalRecord,
    Lease,
    RunRecord,
    RunStatus,
    Started,
    StepDone,
    ToolSettled,
)
from ..durable._rows import check_records, encode_record, status_of
from ..kvstore._protocol import ConflictError
from ._history import compact_step
from ._wire import (
    MAX_PAYLOAD,
    UPDATE_APPEND,
    UPDATE_CLAIM,
    Append,
    AppendReply,
    Claim,
    ClaimReply,
    decode,
    encode,
)

if TYPE_CHECKING:
    from ._engine import TemporalEngine

__all__ = ["AttemptJournal"]


class AttemptJournal:
    """The ``DurableEngine`` and ``CheckpointStore`` of one attempt of one run."""

    def __init__(
        self,
        engine: TemporalEngine,
        *,
        run_id: str,
        agent_name: str,
        session_id: str | None,
        worker_id: str,
        heartbeat: Callable[[], None],
    ) -> None:
        self._engine = engine
        self._run_id = run_id
        self._agent_name = agent_name
        self._session_id = session_id
        self._worker_id = worker_id
        self._heartbeat = heartbeat
        self._fence = 0
        self._settled: dict[tuple[int, str], ToolResult] = {}
        self.cancel_reason: str | None = None
        self.steers = 0
        """How many steering commands the workflow holds, as its last reply said."""
        self.rollover = False
        """The workflow asked the attempt to stop between steps (continue-as-new)."""
        self.wrote = trio.Event()

    @property
    def database(self) -> str:
        return self._engine.database

    def lease(self, lease_seconds: float) -> Lease:
        return Lease(
            run_id=self._run_id,
            worker_id=self._worker_id,
            fence=self._fence,
            expires_at=time.time() + lease_seconds,
            agent_name=self._agent_name,
            session_id=self._session_id,
        )

    async def take(self, activity_id: str, attempt: int) -> ClaimReply:
        """Claim the run for this attempt (fencing out every earlier one)."""
        claim = Claim(activity_id=activity_id, attempt=attempt, worker_id=self._worker_id)
        raw = await self._engine._update(self._run_id, UPDATE_CLAIM, encode(claim))
        assert raw is not None
        reply = decode(raw, ClaimReply)
        self._fence = reply.fence
        self.cancel_reason = reply.cancel_reason
        self.steers = reply.steers
        return reply

    # -- the checkpoint store --------------------------------------------------------

    async def read(self, run_id: str, *, after: int = -1) -> list[JournalEntry]:
        state = await self._engine.history(run_id)
        for entry in state.entries:
            record = entry.record
            if isinstance(record, ToolSettled):
                self._settled[(record.step, record.result.call_id)] = record.result
        return [entry for entry in state.entries if entry.seq > after]

    async def append(self, lease: Lease, seq: int, records: Sequence[JournalRecord]) -> str | None:
        batch = check_records(records)
        payload = self._payload(lease, seq, batch)
        if len(payload) > MAX_PAYLOAD:
            kinds = ", ".join(str(type(record).__struct_config__.tag) for record in batch)
            raise InvalidArgument(
                f"journal entry {seq} of run {self._run_id!r} ({kinds}) is "
                f"{len(payload):,} bytes, over Temporal's payload limit ({MAX_PAYLOAD:,}): "
                "return smaller tool results (a reference to stored data, say), or run "
                "this agent on the SQLite or PostgreSQL engines"
            )
        return await self._send(seq, payload)

    def _payload(self, lease: Lease, seq: int, batch: Sequence[JournalRecord]) -> bytes:
        """The ``append`` update's payload for ``batch`` at ``seq`` (checked records)."""
        raws: list[msgspec.Raw] = []
        for record in batch:
            if isinstance(record, StepDone):
                settled = {
                    call_id: result
                    for (step, call_id), result in self._settled.items()
                    if step == record.step
                }
                raws.append(msgspec.Raw(compact_step(record, settled)))
                continue
            if isinstance(record, ToolSettled):
                self._settled[(record.step, record.result.call_id)] = record.result
            raws.append(msgspec.Raw(encode_record(record).encode()))
        return encode(Append(fence=lease.fence, seq=seq, records=raws))

    async def _send(self, seq: int, payload: bytes) -> str | None:
        """Send one ``append`` update; the cancellation reason it returns, if any."""
        try:
            raw = await self._engine._update(self._run_id, UPDATE_APPEND, payload)
        except ConflictError:
            raise ConflictError(f"{self._run_id}#{seq}", expected=None, actual=seq) from None
        assert raw is not None
        reply = decode(raw, AppendReply)
        if reply.rollover:
            self.rollover = True
        self.steers = max(self.steers, reply.steers)
        if reply.cancel_reason and self.cancel_reason is None:
            self.cancel_reason = reply.cancel_reason
        self.wrote.set()
        return reply.cancel_reason

    # -- the engine ------------------------------------------------------------------

    async def start(
        self,
        started: Started,
        *,
        run_id: str,
        worker_id: str,
        lease_seconds: float,
        session_id: str | None = None,
    ) -> Lease:
        if run_id != self._run_id:
            raise InvalidArgument(f"this attempt runs {self._run_id!r}, not {run_id!r}")
        lease = self.lease(lease_seconds)
        await self.append(lease, 0, [started])
        return lease

    async def renew(self, lease: Lease, *, lease_seconds: float) -> tuple[Lease, str | None]:
        self._heartbeat()
        await trio.lowlevel.checkpoint()
        return self.lease(lease_seconds), self.cancel_reason

    async def finish(
        self,
        lease: Lease,
        seq: int,
        finished: Finished,
        *,
        journal: Sequence[JournalRecord] = (),
    ) -> RunRecord:
        """The outcome as the journal's last entry, after ``journal``: one ``append``
        update, which the workflow takes whole or refuses. Only when the records and
        the outcome together exceed one update's payload limit are they sent as two
        (the records first: an attempt cut between them leaves a journal without its
        end, which the next attempt resumes)."""
        records = [*check_records(journal), finished]
        payload = self._payload(lease, seq, records)
        if len(payload) <= MAX_PAYLOAD:
            await self._send(seq, payload)
        elif journal:
            await self.append(lease, seq, records[:-1])
            await self.append(lease, seq + len(records) - 1, [finished])
        else:
            await self.append(lease, seq, records)  # refused: over the limit
        now = time.time()
        return RunRecord(
            run_id=self._run_id,
            agent_name=self._agent_name,
            status=status_of(finished.outcome.finish_reason),
            created_at=now,
            updated_at=now,
            session_id=self._session_id,
            fence=self._fence,
            cancel_reason=self.cancel_reason,
            outcome=finished.outcome,
        )

    async def release(self, lease: Lease) -> None:
        await trio.lowlevel.checkpoint()  # the attempt fails next: Temporal retries it

    async def claim(self, **_: Any) -> list[Lease]:
        raise OperativeError(
            "runs on Temporal are dispatched by Temporal: serve them with "
            "operative.temporal.serve_temporal_worker, not recover()"
        )

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        return await self._engine.cancel(run_id, reason)

    async def get(self, run_id: str) -> RunRecord | None:
        await trio.lowlevel.checkpoint()
        if run_id != self._run_id:
            return await self._engine.get(run_id)
        now = time.time()
        status: RunStatus = "running"
        return RunRecord(
            run_id=run_id,
            agent_name=self._agent_name,
            status=status,
            created_at=now,
            updated_at=now,
            session_id=self._session_id,
            lease_owner=self._worker_id,
            fence=self._fence,
            cancel_reason=self.cancel_reason,
        )

    async def list(self, **filters: Any) -> list[RunRecord]:
        return await self._engine.list(**filters)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
