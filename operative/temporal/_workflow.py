"""The workflow of one run: its journal and its dispatcher, and nothing else.

No user code runs here. The workflow keeps the run's journal (each record as the worker
encoded it), starts one long-running activity that drives the real loop in a Trio
worker, and accepts the journal writes of that activity as Updates. Each write names the
attempt's *fence*, taken by the attempt's ``claim``: a validator refuses a write from an
attempt that a later one superseded (Temporal retried it after its heartbeat lapsed), so
a stale attempt is fenced out exactly like a stale lease on SQL, and its writer learns
it (a signal could not refuse).

Past ``rollover_events`` history events the next write's reply asks the attempt to stop
between steps; the workflow then continues as new, carrying the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta

import msgspec
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from ._wire import (
    ACTIVITY,
    CONFLICT,
    LEASE_LOST,
    MAX_PAYLOAD,
    NON_RETRYABLE,
    NOT_WAITING,
    SIGNAL_CANCEL,
    SIGNAL_STEER,
    UPDATE_APPEND,
    UPDATE_APPROVE,
    UPDATE_CLAIM,
    WORKFLOW,
    ActivityInput,
    ActivityReply,
    Append,
    AppendReply,
    Approve,
    Cancel,
    Carried,
    Claim,
    ClaimReply,
    Peek,
    RunInput,
    decode,
    encode,
)

__all__ = ["RunWorkflow"]

_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=[NON_RETRYABLE],
)


def _refuse(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


@workflow.defn(name=WORKFLOW)
class RunWorkflow:
    """One durable operative run (see the module docstring)."""

    @workflow.init
    def __init__(self, raw: bytes) -> None:
        self._input = decode(raw, RunInput)
        carried = self._input.carried or Carried(journal=[])
        self._journal: list[msgspec.Raw] = list(carried.journal)
        self._fence = carried.fence
        self._owner = carried.owner
        self._cancel_reason = carried.cancel_reason
        self._generation = carried.generation
        self._decisions: dict[str, msgspec.Raw] = dict(carried.decisions)
        self._steering: list[msgspec.Raw] = list(carried.steering)
        self._parked: set[str] = set()
        self._finished: msgspec.Raw | None = None
        self._attempt = 0
        self._activity_id = f"{self._input.run_id}#{self._generation}"
        self._activity: workflow.ActivityHandle[bytes] | None = None
        for raw_record in self._journal:
            self._peek(raw_record)

    # -- the run ---------------------------------------------------------------------

    @workflow.run
    async def run(self, raw: bytes) -> bytes:
        spec = self._input
        argument = ActivityInput(
            run_id=spec.run_id,
            agent_name=spec.agent_name,
            heartbeat_timeout=spec.heartbeat_timeout,
            session_id=spec.session_id,
            text=spec.text,
            messages=spec.messages,
        )
        reply = ActivityReply()
        if self._finished is None:
            self._activity = workflow.start_activity(
                ACTIVITY,
                encode(argument),
                activity_id=self._activity_id,
                result_type=bytes,
                start_to_close_timeout=timedelta(days=3650),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_timeout),
                retry_policy=_RETRY,
                cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
            handle = self._activity
            if self._cancel_reason is not None:
                handle.cancel()
            await workflow.wait_condition(lambda: self._finished is not None or handle.done())
            if not handle.done():
                # The outcome is journaled: the attempt has one heartbeat to return, then
                # the run closes without it (a worker that died just after finishing).
                with contextlib.suppress(asyncio.TimeoutError):
                    await workflow.wait_condition(
                        handle.done, timeout=timedelta(seconds=spec.heartbeat_timeout)
                    )
            try:
                reply = decode(await handle, ActivityReply) if handle.done() else reply
            except asyncio.CancelledError:
                # The activity was cancelled before it began, or the workflow itself was
                # cancelled through Temporal (its UI, its command): an abort either way.
                if self._finished is None:
                    reason = self._cancel_reason or "cancelled through Temporal"
                    self._end("aborted", abort_reason=reason)
            except ActivityError as exc:
                if self._finished is None:
                    cause = exc.cause
                    if self._cancel_reason is not None:
                        self._end("aborted", abort_reason=self._cancel_reason)
                    else:
                        message = str(cause) if cause is not None else str(exc)
                        error_type = getattr(cause, "type", None) or "ActivityError"
                        self._end("error", error=message, error_type=error_type)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if reply.rollover and self._finished is None:
            carried = Carried(
                journal=self._journal,
                fence=self._fence,
                owner=self._owner,
                cancel_reason=self._cancel_reason,
                generation=self._generation + 1,
                decisions=self._decisions,
                steering=self._steering,
            )
            successor = encode(msgspec.structs.replace(spec, carried=carried))
            if len(successor) <= MAX_PAYLOAD:
                workflow.continue_as_new(successor)
            # The journal no longer fits in one payload: it cannot be carried over, and
            # the run cannot go on in this history either. End it, saying so.
            self._end(
                "error",
                error=f"the run's journal ({len(successor):,} bytes) outgrew Temporal's "
                f"payload limit ({MAX_PAYLOAD:,} bytes), so the run cannot continue as "
                "new; runs this long (or with results this large) belong on the SQLite "
                "or PostgreSQL engines",
                error_type="JournalTooLarge",
            )
        if self._finished is None:
            # The activity returned without an outcome: only an attempt that stopped
            # for the rollover does, so this is a worker bug; say so rather than hang.
            self._end("error", error="the run's activity ended without an outcome")
        assert self._finished is not None
        return bytes(self._finished)

    def _end(self, finish_reason: str, **fields: str | None) -> None:
        """Finish the run here (nobody holds it), after its last journal entry."""
        outcome = {"finish_reason": finish_reason, **{k: v for k, v in fields.items() if v}}
        record = msgspec.Raw(encode({"type": "finished", "outcome": outcome, "messages": []}))
        self._journal.append(record)
        self._finished = msgspec.Raw(encode(outcome))

    def _peek(self, raw: msgspec.Raw) -> Peek:
        peek = decode(raw, Peek)
        if peek.type == "tool.started" and peek.call_id is not None:
            if peek.parked:
                self._parked.add(peek.call_id)
            else:
                self._parked.discard(peek.call_id)
        elif peek.type == "tool.settled" and peek.result is not None:
            self._parked.discard(peek.result.call_id)
        elif peek.type == "finished":
            self._finished = peek.outcome
        return peek

    # -- the attempt's claim and writes ----------------------------------------------

    @workflow.update(name=UPDATE_CLAIM)
    def claim(self, raw: bytes) -> bytes:
        self._check_claim(raw)  # again: nothing may have changed since, but be exact
        claim = decode(raw, Claim)
        self._attempt = claim.attempt
        self._fence += 1
        self._owner = claim.worker_id
        reply = ClaimReply(
            fence=self._fence,
            next_seq=len(self._journal),
            cancel_reason=self._cancel_reason,
            steers=len(self._steering),
        )
        return encode(reply)

    @claim.validator
    def _check_claim(self, raw: bytes) -> None:
        claim = decode(raw, Claim)
        if self._finished is not None:
            raise _refuse(LEASE_LOST, f"run {self._input.run_id!r} is finished already")
        if claim.activity_id != self._activity_id or claim.attempt <= self._attempt:
            raise _refuse(
                LEASE_LOST,
                f"attempt {claim.attempt} of {claim.activity_id!r} is not the run's current "
                f"attempt ({self._attempt} of {self._activity_id!r})",
            )

    @workflow.update(name=UPDATE_APPEND)
    def append(self, raw: bytes) -> bytes:
        self._check_append(raw)
        append = decode(raw, Append)
        for record in append.records:
            self._journal.append(record)
            self._peek(record)
        info = workflow.info()
        rollover = (
            info.get_current_history_length() >= self._input.rollover_events
            or info.is_continue_as_new_suggested()
        )
        reply = AppendReply(
            cancel_reason=self._cancel_reason, rollover=rollover, steers=len(self._steering)
        )
        return encode(reply)

    @append.validator
    def _check_append(self, raw: bytes) -> None:
        append = decode(raw, Append)
        if self._finished is not None:
            raise _refuse(LEASE_LOST, f"run {self._input.run_id!r} is finished already")
        if append.fence != self._fence:
            raise _refuse(
                LEASE_LOST,
                f"another attempt holds run {self._input.run_id!r} "
                f"(fence {self._fence} > {append.fence})",
            )
        if append.seq != len(self._journal):
            raise _refuse(
                CONFLICT,
                f"journal entry {append.seq} of the run is not the next one ({len(self._journal)})",
            )

    # -- from any process ------------------------------------------------------------

    @workflow.signal(name=SIGNAL_CANCEL)
    def cancel(self, raw: bytes) -> None:
        if self._finished is not None or self._cancel_reason is not None:
            return
        self._cancel_reason = decode(raw, Cancel).reason
        if self._activity is not None:
            self._activity.cancel()

    @workflow.signal(name=SIGNAL_STEER)
    def steer(self, raw: bytes) -> None:
        """A steering command for the run (checked by the sender; kept to carry over)."""
        if self._finished is None:
            self._steering.append(msgspec.Raw(raw))

    @workflow.update(name=UPDATE_APPROVE)
    def approve(self, raw: bytes) -> None:
        self._check_approve(raw)
        decision = decode(raw, Approve)
        self._decisions[decision.call_id] = msgspec.Raw(raw)

    @approve.validator
    def _check_approve(self, raw: bytes) -> None:
        decision = decode(raw, Approve)
        if self._finished is not None:
            raise _refuse(NOT_WAITING, f"run {self._input.run_id!r} is finished")
        if decision.call_id not in self._parked:
            raise _refuse(
                NOT_WAITING,
                f"no call {decision.call_id!r} of run {self._input.run_id!r} is waiting for "
                "an approval",
            )
        if decision.call_id in self._decisions:
            raise _refuse(NOT_WAITING, f"call {decision.call_id!r} was decided already")
