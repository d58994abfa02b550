"""Reading a run back from its Temporal history, with no worker running.

The journal is the workflow's input (the journal carried over a continue-as-new) and
then the arguments of its accepted ``append`` updates, in history order; the claims,
cancellation and approvals are the other accepted updates, and the outcome is the
workflow's result. So any process with a client reads a run's state, and follows it as
it grows (a long poll on the history).

A step record repeats no tool result: results a step kept as they settled travel as
references to the ``tool.settled`` records (``compact_step``) and are expanded here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from .._core._errors import CorruptRecordError, OperativeError
from .._core._results import RunResult
from .._core._types import FinishReason, ToolResult
from ..conversation import Conversation, ConversationHistory, Message
from ..conversation._message import new_message_id
from ..durable._records import (
    Finished,
    JournalEntry,
    RunOutcome,
    RunRecord,
    RunStatus,
    Started,
    StepDone,
    ToolSettled,
)
from ..durable._replay import replay_journal, transcript
from ..durable._rows import decode_entry, encode_record, status_of
from ..steering import SteeringCommand
from ._wire import (
    SIGNAL_CANCEL,
    SIGNAL_STEER,
    UPDATE_APPEND,
    UPDATE_APPROVE,
    UPDATE_CLAIM,
    Append,
    Approve,
    Cancel,
    Claim,
    RunInput,
    decode,
)

__all__ = ["RunHistory", "TemporalRunError", "compact_step", "payload_bytes"]

_E = EventType


class _StepDoneWire(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    results: list[ToolResult] = msgspec.field(default_factory=list)
    order: list[str] | None = None
    """Present in a compact record: the step's call ids; those not in ``results`` are
    the settled results, unchanged."""


def compact_step(record: StepDone, settled: dict[str, ToolResult]) -> bytes:
    """``record`` as the journal on Temporal stores it: unchanged results by reference."""
    changed = [r for r in record.results if settled.get(r.call_id) != r]
    if len(changed) == len(record.results):
        return encode_record(record).encode()
    order = [r.call_id for r in record.results]
    wire = {"type": "step.done", "step": record.step, "order": order}
    if changed:
        wire["results"] = changed
    return msgspec.json.encode(wire)


def payload_bytes(payload: Any, what: str) -> bytes:
    """The bytes an operative payload carries (``binary/plain``)."""
    encoding = payload.metadata.get("encoding", b"")
    if encoding != b"binary/plain":
        raise CorruptRecordError(
            f"{what} is not an operative payload (encoding {encoding!r}): the run was "
            "written by something else, or through a data converter that changes payloads",
            what=what,
            detail=f"encoding {encoding!r}",
        )
    data: bytes = payload.data
    return data


class TemporalRunError(OperativeError):
    """The error a run on Temporal ended with, as its outcome records it.

    ``error_type`` names the original exception's class (it lived in the worker).
    """

    def __init__(self, message: str, *, error_type: str | None) -> None:
        super().__init__(message)
        self.error_type = error_type


class RunHistory:
    """One run as its Temporal history says (``engine.history(run_id)``), fed event
    by event: its journal (``entries``), who holds it (``owner``, ``fence``), the
    cancellation and approval decisions asked for, and how it ended."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.input: RunInput | None = None
        self.entries: list[JournalEntry] = []
        self.fence = 0
        self.owner: str | None = None
        self.cancel_reason: str | None = None
        self.decisions: dict[str, Approve] = {}
        self.steering: list[SteeringCommand] = []
        """The steering commands the run was sent, in order."""
        self.outcome: RunOutcome | None = None
        self.closed: str | None = None
        """How the workflow closed, when it did (``completed``, ``failed``, ...)."""
        self.next_run: str | None = None
        """The run it continued as, when it continued as new."""
        self.updated_at = 0.0
        self._settled: dict[tuple[int, str], ToolResult] = {}
        self._accepted: dict[str, tuple[str, bytes, float]] = {}
        """Updates accepted whose completion is not read yet: ``{id: (name, arg, at)}``."""

    # -- what it says ----------------------------------------------------------------

    def record(self) -> RunRecord:
        """The run's record, as the other engines give it (``engine.get``)."""
        spec = self.input
        if spec is None:
            raise OperativeError(f"the history of run {self.run_id!r} has no start")
        outcome = self.outcome
        if outcome is not None:
            status: RunStatus = status_of(outcome.finish_reason)
        elif self.closed is None:
            status = "running"
        else:
            # Closed by Temporal itself (terminated, timed out): no outcome was written.
            closed = self.closed
            status = "aborted" if closed in ("terminated", "cancelled") else "error"
            outcome = RunOutcome(
                finish_reason=status,
                error=None if status == "aborted" else f"the workflow {closed} in Temporal",
                abort_reason=f"the workflow was {closed} in Temporal"
                if status == "aborted"
                else None,
            )
        return RunRecord(
            run_id=self.run_id,
            agent_name=spec.agent_name,
            status=status,
            created_at=spec.created_at,
            updated_at=self.updated_at,
            session_id=spec.session_id,
            lease_owner=self.owner if status == "running" else None,
            fence=self.fence,
            cancel_reason=self.cancel_reason,
            outcome=outcome,
        )

    def journal(self) -> list[JournalEntry]:
        """The journal as a durable engine keeps it: from its ``started`` entry.

        Temporal's journal begins when a worker first takes the run; for a run no worker
        has taken yet (or one cancelled before that) it begins with the input as given.
        """
        entries = self.entries
        if entries and isinstance(entries[0].record, Started):
            return list(entries)
        spec = self.input
        if spec is None:
            raise OperativeError(f"the history of run {self.run_id!r} has no start")
        if spec.text is not None:
            messages: tuple[Message, ...] = (
                Message(id=new_message_id(), role="user", content=spec.text),
            )
        else:
            messages = msgspec.json.decode(spec.messages, type=ConversationHistory).messages
        first = JournalEntry(
            run_id=self.run_id, seq=0, record=Started(messages=messages), at=spec.created_at
        )
        return [first, *(msgspec.structs.replace(e, seq=e.seq + 1) for e in entries)]

    def result(self) -> RunResult:
        """The finished run's result: the journal's transcript and steps, the outcome.

        Raises:
            OperativeError: the run has not ended.
        """
        outcome = self.record().outcome
        if outcome is None:
            raise OperativeError(f"run {self.run_id!r} has not ended")
        replay = replay_journal(self.run_id, self.journal())
        error = None
        if outcome.finish_reason == "error":
            error = TemporalRunError(
                outcome.error or "the run failed", error_type=outcome.error_type
            )
        return RunResult(
            conversation=Conversation.from_history(transcript(replay)),
            steps=tuple(replay.steps),
            content=outcome.content,
            usage=outcome.usage,
            finish_reason=FinishReason(outcome.finish_reason),
            error=error,
            run_id=self.run_id,
            abort_reason=outcome.abort_reason,
        )

    # -- feeding ---------------------------------------------------------------------

    def feed(self, events: Iterable[HistoryEvent]) -> list[JournalEntry]:
        """Take ``events`` in; returns the journal entries they added."""
        added: list[JournalEntry] = []
        for event in events:
            kind = event.event_type
            at = event.event_time.ToMicroseconds() / 1e6
            self.updated_at = max(self.updated_at, at)
            if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                attrs = event.workflow_execution_started_event_attributes
                self._started(attrs.input.payloads, at, added)
            elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
                attrs_u = event.workflow_execution_update_accepted_event_attributes
                request = attrs_u.accepted_request
                (payload,) = request.input.args.payloads
                name = request.input.name
                raw = payload_bytes(payload, f"update {name!r} of run {self.run_id!r}")
                self._accepted[request.meta.update_id] = (name, raw, at)
            elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                # An update counts once its handler succeeded (a handler that refused
                # after acceptance left the workflow's state as it was).
                attrs_d = event.workflow_execution_update_completed_event_attributes
                accepted = self._accepted.pop(attrs_d.meta.update_id, None)
                if accepted is None or attrs_d.outcome.HasField("failure"):
                    continue
                name, raw, at = accepted
                if name == UPDATE_APPEND:
                    self._append(raw, at, added)
                elif name == UPDATE_CLAIM:
                    claim = decode(raw, Claim)
                    self.fence += 1
                    self.owner = claim.worker_id
                elif name == UPDATE_APPROVE:
                    approve = decode(raw, Approve)
                    self.decisions[approve.call_id] = approve
            elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attrs_s = event.workflow_execution_signaled_event_attributes
                if attrs_s.signal_name == SIGNAL_STEER and self.outcome is None:
                    (payload,) = attrs_s.input.payloads
                    raw = payload_bytes(payload, f"a steering command of run {self.run_id!r}")
                    self.steering.append(_steering(raw, self.run_id))
                if attrs_s.signal_name == SIGNAL_CANCEL and self.outcome is None:
                    (payload,) = attrs_s.input.payloads
                    raw = payload_bytes(payload, f"a cancellation of run {self.run_id!r}")
                    if self.cancel_reason is None:
                        self.cancel_reason = decode(raw, Cancel).reason
            elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
                attrs_c = event.workflow_execution_completed_event_attributes
                (payload,) = attrs_c.result.payloads
                raw = payload_bytes(payload, f"the result of run {self.run_id!r}")
                self.outcome = decode(raw, RunOutcome)
                self.closed = "completed"
                if not self.entries or not isinstance(self.entries[-1].record, Finished):
                    # Finished by the workflow itself (cancelled while nobody ran it, or
                    # its activity failed for good): the journal's last entry.
                    record = {"type": "finished", "outcome": msgspec.Raw(raw)}
                    self._entry(msgspec.json.encode(record), at, added)
            elif kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs_n = event.workflow_execution_continued_as_new_event_attributes
                self.next_run = attrs_n.new_execution_run_id
            elif kind in _CLOSED:
                self.closed = _CLOSED[kind]
        return added

    def _started(self, payloads: Sequence[Any], at: float, added: list[JournalEntry]) -> None:
        (payload,) = payloads
        spec = decode(payload_bytes(payload, f"the input of run {self.run_id!r}"), RunInput)
        self.input = spec
        carried = spec.carried
        if carried is None or self.entries:
            return  # a continued run's carried journal is known already when following
        self.fence = carried.fence
        self.owner = carried.owner
        self.cancel_reason = carried.cancel_reason
        for call_id, raw in carried.decisions.items():
            self.decisions[call_id] = decode(raw, Approve)
        self.steering = [_steering(bytes(raw), self.run_id) for raw in carried.steering]
        for raw in carried.journal:
            self._entry(bytes(raw), at, added)

    def _append(self, raw: bytes, at: float, added: list[JournalEntry]) -> None:
        append = decode(raw, Append)
        if append.seq != len(self.entries):
            raise CorruptRecordError(
                f"the history of run {self.run_id!r} appends entry {append.seq} where "
                f"{len(self.entries)} belongs",
                what=f"run {self.run_id!r}",
                detail="journal out of order",
            )
        for record in append.records:
            self._entry(bytes(record), at, added)

    def _entry(self, raw: bytes, at: float, added: list[JournalEntry]) -> None:
        seq = len(self.entries)
        if raw.startswith(b'{"type":"step.done"') and b'"order"' in raw:
            raw = self._expand(raw, seq)
        entry = decode_entry(f"Temporal run {self.run_id!r}", self.run_id, seq, raw, at)
        record = entry.record
        if isinstance(record, ToolSettled):
            self._settled[(record.step, record.result.call_id)] = record.result
        self.entries.append(entry)
        added.append(entry)

    def _expand(self, raw: bytes, seq: int) -> bytes:
        try:
            wire = msgspec.json.decode(raw, type=_StepDoneWire)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(
                f"journal entry {seq} of Temporal run {self.run_id!r} cannot be read: {exc}",
                what=f"run {self.run_id!r} at seq {seq}",
                detail=str(exc),
            ) from None
        changed = {r.call_id: r for r in wire.results}
        results: list[ToolResult] = []
        for call_id in wire.order or ():
            result = changed.get(call_id) or self._settled.get((wire.step, call_id))
            if result is None:
                raise CorruptRecordError(
                    f"journal entry {seq} of Temporal run {self.run_id!r} refers to a "
                    f"result of call {call_id!r} that step {wire.step} never settled",
                    what=f"run {self.run_id!r} at seq {seq}",
                    detail="dangling result reference",
                )
            results.append(result)
        return encode_record(StepDone(step=wire.step, results=tuple(results))).encode()


def _steering(raw: bytes, run_id: str) -> SteeringCommand:
    try:
        return msgspec.json.decode(raw, type=SteeringCommand)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"a steering command of Temporal run {run_id!r} cannot be read: {exc}",
            what=f"run {run_id!r}",
            detail=str(exc),
        ) from None


_CLOSED = {
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: "failed",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: "timed out",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: "terminated",
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: "cancelled",
}
