"""Row encoding shared by the SQL backends: journal records, outcomes, run records."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from .._core._errors import CorruptRecordError, InvalidArgument
from ._records import (
    Finished,
    Generated,
    JournalEntry,
    JournalRecord,
    Lease,
    RunOutcome,
    RunRecord,
    RunStatus,
    Started,
    StepDone,
    ToolSettled,
    ToolStarted,
)

__all__ = [
    "RUN_COLUMNS",
    "STATUSES",
    "check_after",
    "check_lease",
    "check_lease_seconds",
    "check_limit",
    "check_name",
    "check_records",
    "check_run_id",
    "check_seq",
    "check_started",
    "check_time",
    "decode_entry",
    "decode_run",
    "encode_outcome",
    "encode_record",
    "status_of",
    "statuses",
]

RUN_COLUMNS = (
    "run_id, agent_name, session_id, status, created_at, updated_at, lease_owner, "
    "lease_expires_at, fence, cancel_reason, outcome"
)
STATUSES: frozenset[str] = frozenset({"running", "completed", "aborted", "error"})
_RECORD_TYPES = (Started, Generated, ToolStarted, ToolSettled, StepDone, Finished)

_encoder = msgspec.json.Encoder()
_record_decoder: msgspec.json.Decoder[JournalRecord] = msgspec.json.Decoder(JournalRecord)
_outcome_decoder = msgspec.json.Decoder(RunOutcome)


def encode_record(record: JournalRecord) -> str:
    try:
        return _encoder.encode(record).decode()
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(
            f"a {type(record).__name__} journal record cannot be encoded as JSON: {exc}; "
            "durable runs need JSON-encodable tool results and message metadata"
        ) from exc


def encode_outcome(outcome: RunOutcome) -> str:
    return _encoder.encode(outcome).decode()


def _text(raw: object) -> str | bytes:
    if isinstance(raw, memoryview):
        return bytes(raw)
    if isinstance(raw, str | bytes):
        return raw
    raise TypeError(f"{type(raw).__name__} is not text")


def decode_entry(where: str, run_id: str, seq: object, raw: object, at: object) -> JournalEntry:
    """A journal row; a corrupt one is a ``CorruptRecordError`` naming run and sequence."""
    what = f"journal entry {seq!r} of run {run_id!r} in {where}"
    try:
        if type(seq) is not int or seq < 0:
            raise ValueError(f"its sequence number {seq!r} is not an int >= 0")
        record: JournalRecord = _record_decoder.decode(_text(raw))
        return JournalEntry(run_id=run_id, seq=seq, record=record, at=float(at))  # type: ignore[arg-type]
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"{what} cannot be read: {exc}. The row is left as it is; recovery of this "
            "run stops here until it is repaired or the run is cancelled",
            what=what,
            detail=str(exc),
        ) from None


def decode_run(where: str, row: Sequence[Any]) -> RunRecord:
    """A run row in ``RUN_COLUMNS`` order."""
    (run_id, agent_name, session_id, status, created, updated, owner, expires, fence, cancel,
     outcome) = row  # fmt: skip
    if isinstance(run_id, bytes):
        run_id = run_id.decode("utf-8", "replace")
    what = f"run record {run_id!r} in {where}"
    try:
        decoded = None if outcome is None else _outcome_decoder.decode(_text(outcome))
        return RunRecord(
            run_id=str(run_id),
            agent_name=_str(agent_name),
            session_id=None if session_id is None else _str(session_id),
            status=_status(status),
            created_at=float(created),
            updated_at=float(updated),
            lease_owner=None if owner is None else _str(owner),
            lease_expires_at=float(expires),
            fence=int(fence),
            cancel_reason=None if cancel is None else _str(cancel),
            outcome=decoded,
        )
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        raise CorruptRecordError(
            f"{what} cannot be read: {exc}; the row is left as it is", what=what, detail=str(exc)
        ) from None


def _str(raw: object) -> str:
    text = _text(raw)
    return text.decode("utf-8") if isinstance(text, bytes) else text


def _status(raw: object) -> RunStatus:
    status = _str(raw)
    if status not in STATUSES:
        raise ValueError(f"its status {status!r} is not one of {sorted(STATUSES)}")
    return status  # type: ignore[return-value]


def status_of(finish_reason: str) -> RunStatus:
    """The terminal status a finish reason is recorded under."""
    if finish_reason == "aborted":
        return "aborted"
    if finish_reason == "error":
        return "error"
    return "completed"


def statuses(status: RunStatus | Sequence[RunStatus] | None) -> list[str] | None:
    if status is None:
        return None
    wanted: list[str] = [status] if isinstance(status, str) else list(status)
    for item in wanted:
        if item not in STATUSES:
            raise InvalidArgument(f"status must be one of {sorted(STATUSES)}, not {item!r}")
    return wanted


def check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str) or not run_id or "\x00" in run_id:
        raise InvalidArgument(f"a run id is a non-empty str without NUL, not {run_id!r}")
    return run_id


def check_lease_seconds(lease_seconds: object) -> float:
    if (
        isinstance(lease_seconds, bool)
        or not isinstance(lease_seconds, int | float)
        or not 0 < lease_seconds < math.inf
    ):
        raise InvalidArgument(f"lease_seconds must be seconds > 0, not {lease_seconds!r}")
    return float(lease_seconds)


def check_seq(seq: object) -> int:
    """A sequence number a worker writes at: 0 is the ``started`` entry, written by start."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise InvalidArgument(f"seq must be an int >= 1 (0 is the start), not {seq!r}")
    return seq


def check_name(what: str, value: object, *, optional: bool = False) -> str | None:
    """A worker id, agent name, session id or reason: a str without NUL (PostgreSQL text
    cannot hold one), or ``None`` where ``optional``."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or "\x00" in value:
        raise InvalidArgument(f"{what} must be a str without NUL, not {value!r}")
    return value


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be an int >= 1, not {limit!r}")
    return limit


def check_time(what: str, value: object) -> float | None:
    """An optional bound in epoch seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise InvalidArgument(f"{what} must be epoch seconds or None, not {value!r}")
    return float(value)


def check_started(started: object) -> Started:
    if not isinstance(started, Started):
        raise InvalidArgument(f"a run starts from a Started record, not {started!r}")
    check_name("the agent name", started.agent_name)
    return started


def check_after(after: object) -> int:
    if isinstance(after, bool) or not isinstance(after, int):
        raise InvalidArgument(f"after must be an int (a sequence number), not {after!r}")
    return after


def check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise InvalidArgument(f"expected the Lease start or claim returned, not {lease!r}")
    return lease


def check_records(records: object) -> list[JournalRecord]:
    """The records of one append: a sequence of journal records (possibly empty)."""
    if isinstance(records, str | bytes) or not isinstance(records, Sequence):
        raise InvalidArgument(f"records must be a sequence of journal records, not {records!r}")
    for record in records:
        if not isinstance(record, _RECORD_TYPES):
            raise InvalidArgument(f"{record!r} is not a journal record")
    return list(records)
