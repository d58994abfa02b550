"""The records of the durable branch: run records, leases and the journal.

A durable run is one row in the engine (who holds it, until when, how it ended) and an
append-only journal in the checkpoint store. The journal is what recovery replays:

::

    seq 0   started        the input conversation and the options fingerprint
    seq n   generated      step k's assistant message and its usage
    seq n+1 tool.started   before call c of step k executes
    seq n+2 tool.settled   call c's result, as the tool returned it
    ...
    seq m   step.done      step k's final results (after the result hooks)
    ...
    seq z   finished       the outcome, and the messages clean-up appended

Every record is a msgspec Struct in one tagged union, so a journal decodes in one pass
and a corrupt row is a :class:`~operative.errors.CorruptRecordError` naming its run and sequence.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from .._core._types import ToolResult, Usage
from ..conversation import Message

__all__ = [
    "JOURNAL_SCHEMA_VERSION",
    "Finished",
    "Generated",
    "JournalEntry",
    "JournalRecord",
    "Lease",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
    "Started",
    "StepDone",
    "ToolSettled",
    "ToolStarted",
]

JOURNAL_SCHEMA_VERSION = 1

RunStatus: TypeAlias = Literal["running", "completed", "aborted", "error"]
"""``running`` until a worker commits a terminal outcome; then how it ended."""


class RunOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How a durable run ended, as committed by the worker that finished it."""

    finish_reason: str
    content: str = ""
    error: str | None = None
    error_type: str | None = None
    abort_reason: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    steps: int = 0


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One durable run as the engine knows it.

    Times are seconds since the epoch (wall clock: leases are shared between machines).
    """

    run_id: str
    agent_name: str
    status: RunStatus
    created_at: float
    updated_at: float
    session_id: str | None = None
    lease_owner: str | None = None
    lease_expires_at: float = 0.0
    fence: int = 0
    """Incremented by every claim: a worker holding an older fence can no longer write."""
    cancel_reason: str | None = None
    """Set by :meth:`DurableEngine.cancel`; the worker holding the run aborts it at its
    next lease renewal or journal write (within ``lease_seconds / 3``), mid-step."""
    outcome: RunOutcome | None = None


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's claim on a run: valid while ``fence`` is still the run's fence."""

    run_id: str
    worker_id: str
    fence: int
    expires_at: float
    agent_name: str = ""
    session_id: str | None = None


class Started(msgspec.Struct, frozen=True, kw_only=True, tag="started"):
    """The run's input: the conversation it starts from, and what it was asked to be."""

    messages: tuple[Message, ...]
    conversation_metadata: dict[str, object] = msgspec.field(default_factory=dict)
    agent_name: str = ""
    fingerprint: str = ""
    """A digest of the options that shape the run (tools, stop conditions, limits)."""
    conversation_id: str | None = None
    """The conversation id set around the run when it started (traces of a recovered
    run carry it); ``None`` when none was set."""
    trace_parent: str | None = None
    """The W3C ``traceparent`` of the run's span when it was traced: a recovered run's
    span links to it."""
    schema_version: int = JOURNAL_SCHEMA_VERSION


class Generated(msgspec.Struct, frozen=True, kw_only=True, tag="generated"):
    """A step's assistant message: committed before any call of the step that is not
    idempotent runs, or with the step's end when every call is idempotent."""

    step: int
    message: Message
    usage: Usage = msgspec.field(default_factory=Usage)
    model: str | None = None
    before: tuple[Message, ...] = ()
    """Messages appended since the last entry (e.g. an output-format retry prompt)."""
    stop_reason: str | None = None
    """Why the answer ended, as the provider said (``"length"``: cut at the token limit)."""
    at: float | None = None
    """When the answer arrived (epoch seconds), if it waited for a later commit: the
    entry's own ``at`` is its commit time."""


class ToolStarted(
    msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag="tool.started"
):
    """Call ``call_id`` of ``step`` is about to execute.

    With ``parked`` set, the call is waiting for a person's approval instead: it has not
    executed, so a run recovered from here asks again. A later record without ``parked``
    means the approved call is about to execute after all.
    """

    step: int
    call_id: str
    tool_name: str
    parked: bool = False
    at: float | None = None
    """When the call started (epoch seconds), if the record waited for a later commit."""


class ToolSettled(msgspec.Struct, frozen=True, kw_only=True, tag="tool.settled"):
    """Call ``call_id`` of ``step`` settled with ``result`` after ``duration`` seconds."""

    step: int
    result: ToolResult
    duration: float = 0.0
    at: float | None = None
    """When the call settled (epoch seconds), if the record waited for a later commit."""


class StepDone(msgspec.Struct, frozen=True, kw_only=True, tag="step.done"):
    """Step ``step`` is complete: its final results (those the transcript holds)."""

    step: int
    results: tuple[ToolResult, ...] = ()


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    """The run ended; ``messages`` are what clean-up appended (cancelled results)."""

    outcome: RunOutcome
    messages: tuple[Message, ...] = ()


JournalRecord: TypeAlias = Started | Generated | ToolStarted | ToolSettled | StepDone | Finished


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One journal record with its place (``seq``, from 0) and commit time."""

    run_id: str
    seq: int
    record: JournalRecord
    at: float
