"""The durable branch of a run: what the loop writes, when, and how it resumes.

::

    open_run(..., durable=Durable(...))
    ├── loop task        begin → per step: generated, tool.started/settled, step.done → finish
    │                    (its writes made in it, shielded: see _writer)
    └── writer           makes the writes of other tasks (parallel calls), one at a time,
                         and between them renews the lease every lease_seconds / 3 while
                         the run is alive (aborting the run if the renewal returns a
                         cancellation): _writer, _lease

A write commits before the loop goes on whenever something outside the run is about to
see what it holds (a listener, a hook, a call that is not idempotent), and at each
step's end at the latest, so what a listener has seen is durable; a step's records that
nobody observes wait for its commit, and a step with no call whose end nobody observes
waits for the next one (the run's terminal commit when it was the last). How calls are
journaled, and what a call cut by a crash becomes: :mod:`._calls`.
A write names the run's lease; once another worker holds the run (the lease expired and
was claimed), the next write raises :class:`~operative.LeaseLostError` and this run
stops without writing anything more.

Leaving the run by cancellation from outside (a worker shutting down) or by Ctrl-C is
not an abort: the lease is released, nothing terminal is written, and another worker (or
``recover()``) resumes the run. ``run.abort()`` and :meth:`DurableEngine.cancel` end it
``aborted``, for good. A cancellation asked for through the engine is learned from the
lease renewal (every ``lease_seconds / 3``) or from a journal write, whichever comes
first, and aborts the run at once, in the middle of a step as ``run.abort()`` would.

Every write is atomic with respect to cancellation: it runs shielded, so an abort or a
shutdown that arrives while it commits takes effect once the process knows whether it
committed (and the journal's sequence number agrees with what is stored). Once a
cancellation has arrived the write gets at most ``lease_seconds`` more: one that takes
longer could no longer be trusted anyway (another worker may hold the run by then). One
that overruns leaves the journal's state unknown to this process, so the run writes
nothing more and its result raises :class:`~operative.CleanupError`; the stored run is
finished by whoever recovers it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._core._errors import InvalidArgument, OperativeError
from .._core._extension import (
    Answered,
    Execute,
    Extension,
    Loop,
    Recorded,
    ResumePoint,
    Step,
)
from .._core._instrument_hook import current_conversation_id
from .._core._types import FinishReason, ToolCall, ToolResult, Usage
from .._sql import held
from ..conversation import Message
from ._calls import UNKNOWN_OUTCOME, journal_calls
from ._errors import LeaseLostError
from ._lease import renew_lease
from ._records import Finished, Generated, Lease, RunOutcome, Started, StepDone
from ._records import ToolStarted as ToolStartedRecord
from ._replay import Replay, recorded_answer, replay_switches
from ._routing import Durable, default_worker_id, fingerprint
from ._writer import RunWriter

if TYPE_CHECKING:
    from .._core._control import RunControl
    from .._core._results import RunResult, StepResult

__all__ = ["UNKNOWN_OUTCOME", "DurableDriver"]

logger = logging.getLogger("operative.durable")


class DurableDriver(Extension):
    """One run's durable writes: the extension a ``durable=`` routing attaches.

    The loop calls it at each boundary (see :mod:`operative._core._extension`): its
    task (the writer, which also renews the lease) starts at ``attach``; the run record
    is written as ``wrap_run`` begins; each step (``wrap_step``) learns of a
    cancellation, takes a recorded answer, and journals its end; the answer and a
    parked call are journaled when ``recorded``, each call around its execution
    (``wrap_tool``), the outcome at ``run_ending``.
    """

    durable = True
    unfinished = (
        "its outcome was not committed: the stored run stays claimable, and recover() "
        "finishes it from its journal"
    )

    __slots__ = (
        "_abort",
        "_clock",
        "_durable",
        "_failed",
        "_in_flight",
        "_journaled",
        "_lease",
        "_lock",
        "_lost",
        "_pending",
        "_pending_journaled",
        "_replay",
        "_seq",
        "_started",
        "_writer",
        "cancel_reason",
        "commit_error",
        "handed_off",
        "worker_id",
    )

    def __init__(
        self, durable: Durable, *, replay: Replay | None = None, lease: Lease | None = None
    ) -> None:
        self._durable = durable
        self.worker_id = durable.worker_id or (lease.worker_id if lease else default_worker_id())
        self._replay = replay
        self._lease = lease
        self._seq = replay.next_seq if replay is not None else 1
        self._journaled = 0
        self._pending: list[Any] = []
        """Records written with the next commit (none a listener has seen, see _defer)."""
        self._pending_journaled: int | None = None
        """How many messages the journal holds once ``_pending`` is committed."""
        self._in_flight = 0
        """Calls of the current step executing now (a settled one waits for none of them)."""
        self._clock: Callable[[], float] = getattr(durable.checkpoint_store, "clock", time.time)
        """The store's clock: records that wait for a later commit carry their own time."""
        self._lock = trio.Lock()
        self._started = trio.Event()
        self._failed: BaseException | None = None
        self._lost: LeaseLostError | None = None
        self._writer = RunWriter(durable.lease_seconds)
        """Makes the run's writes, shielded (see :class:`RunWriter`)."""
        self._abort: Callable[[str], None] | None = None
        """The run's ``abort`` while it runs (dropped at its end: no reference cycle)."""
        self.commit_error: BaseException | None = None
        """Why the terminal commit did not happen (the run's result must not succeed)."""
        self.cancel_reason: str | None = None
        """A cancellation requested through the engine, once this run has learned of it."""
        self.handed_off = False
        """A recovered run whose last journaled step handed off to another agent."""

    @property
    def replay(self) -> Replay | None:
        return self._replay

    @property
    def lease(self) -> Lease | None:
        return self._lease

    # -- start -----------------------------------------------------------------------

    async def begin(self, run: RunControl) -> None:
        """Commit the run record (a fresh run) or take up the replayed state (a recovery)."""
        durable = self._durable
        if not any(
            type(other).wrap_run is not Extension.wrap_run
            for other in run.extensions
            if other is not self
        ):
            # Called in the loop task, under the run scope and no other scope of its own:
            # its writes are made in it (no hand-off to the writer task), the run scope
            # telling the writer of a cancellation or a deadline that comes meanwhile.
            self._writer.own(trio.lowlevel.current_task())
            run.watch_cancellation(self._writer.arrived)
        if self._replay is not None:
            # Recovered: the conversation was rebuilt from the journal before the run.
            self._journaled = len(run.conversation)
            self._restore(run, self._replay)
            self._started.set()
            self._writer.keep_lease(self._renew)
            if self._replay.partial is None:
                # Between steps: a cancellation asked for while no worker ran the run
                # stops it before another step. (A step cut short learns of it from its
                # first write, which returns the cancellation and aborts the run there.)
                await self._read_cancellation(run.run_id)
            return
        cfg = run.config
        conversation = run.conversation
        started = Started(
            messages=conversation.messages,
            conversation_metadata=dict(conversation.metadata),
            agent_name=cfg.agent_name,
            fingerprint=fingerprint(cfg),
            conversation_id=current_conversation_id(),
            trace_parent=run.query("traceparent"),
        )

        async def start() -> None:
            self._lease = await durable.engine.start(
                started,
                run_id=run.run_id,
                worker_id=self.worker_id,
                lease_seconds=durable.lease_seconds,
                session_id=durable.session_id,
            )

        try:
            await self._writer.commit(start, f"the record of run {run.run_id}")
        except BaseException as exc:
            self._failed = exc
            self._started.set()
            raise
        self._journaled = len(conversation)
        self._started.set()
        self._writer.keep_lease(self._renew)

    def _renew(self) -> Awaitable[bool]:
        """Renew the lease once (the writer calls it every ``lease_seconds / 3``)."""
        return renew_lease(self)

    async def _read_cancellation(self, run_id: str) -> None:
        try:
            record = await self._durable.engine.get(run_id)
        except Exception:
            logger.warning(
                "reading the record of durable run %s failed; a cancellation is seen at "
                "its next write",
                run_id,
                exc_info=True,
            )
            return
        if record is not None and record.cancel_reason and self.cancel_reason is None:
            self.cancel_reason = record.cancel_reason

    def _restore(self, run: RunControl, replay: Replay) -> None:
        cfg = run.config
        if replay.started.fingerprint and replay.started.fingerprint != fingerprint(cfg):
            logger.warning(
                "durable run %s: the agent %r changed since the run started (its tools, "
                "limits or settings differ); the run continues with the current definition",
                run.run_id,
                cfg.agent_name,
            )
        if replay.steps:
            # A journaled step handed off: the run goes on under the agent in charge.
            self.handed_off = replay_switches(run, replay.steps, complete=replay.partial is None)
        # A run cut between steps that had met a stop condition ends at once (unless its
        # last step handed off: the agent that handed off is not consulted).
        run.resume(
            replay.steps,
            replay.usage,
            ResumePoint(
                next_step=replay.next_step,
                check_stop=replay.partial is None and not self.handed_off,
            ),
        )

    async def wait_started(self) -> None:
        """Return once the run record is committed; raise what stopped the write."""
        await self._started.wait()
        if self._failed is not None:
            if isinstance(self._failed, trio.Cancelled):
                raise OperativeError(
                    "the durable run record was never written: the run was cancelled first"
                )
            raise self._failed

    # -- the loop's boundaries -------------------------------------------------------

    async def journal_generated(
        self,
        step: int,
        conversation: Any,
        usage: Usage,
        model: str | None,
        stop_reason: str | None = None,
        *,
        flush: bool = True,
    ) -> None:
        """Journal the step's assistant message (and any message appended before it).

        Without ``flush`` (nobody listens for the step's answer) the record waits for the
        step's next commit: a tool call's start that must be durable, or the step's end.
        """
        messages: tuple[Message, ...] = conversation.messages
        replay = self._replay
        if replay is not None and replay.partial is not None and replay.partial.step == step:
            # The recorded message, appended again by the loop: already journaled.
            self._journaled = len(messages)
            return
        before = messages[self._logical_journaled() : -1]
        record = Generated(
            step=step,
            message=messages[-1],
            usage=usage,
            model=model,
            before=before,
            stop_reason=stop_reason,
            at=None if flush else self._clock(),  # its own time only if it waits
        )
        self._defer(record, journaled=len(messages))
        if flush:
            await self._append([])

    def journaled(self, run: RunControl, execute: Execute, step: int) -> Execute:
        """Wrap a step's ``execute`` with ``tool.started`` / ``tool.settled`` records."""
        return journal_calls(self, run, execute, step)

    async def parked(self, step: int, call: ToolCall, *, parked: bool) -> None:
        """Journal that a started call waits for an approval (``parked``), or that the
        approved call is about to execute after all."""
        await self._append(
            [ToolStartedRecord(step=step, call_id=call.id, tool_name=call.name, parked=parked)]
        )

    async def step_done(
        self,
        step: int,
        results: tuple[ToolResult, ...],
        conversation: Any,
        *,
        flush: bool = True,
    ) -> None:
        """Journal the step's final results; the step is then never run again.

        Without ``flush`` (a step that made no call, whose end nobody observes) its
        records wait for the next commit: the run's terminal one when it was the last
        step. Cut before, such a step is simply run again (it had no effect).
        """
        replay = self._replay
        if replay is not None and replay.partial is not None and replay.partial.step == step:
            replay.partial = None
        self._defer(StepDone(step=step, results=results), journaled=len(conversation))
        if flush:
            await self._append([])

    def _defer(self, record: Any, *, journaled: int | None = None) -> None:
        """Hold ``record`` for the next commit.

        Only records nobody has seen yet wait: the loop commits what it holds before a
        listener is told (``step.generated``, a settled result), before a call that is
        not idempotent starts, and at the step's end (``step.done``) at the latest, so
        a step whose calls are idempotent commits once.
        """
        self._pending.append(record)
        if journaled is not None:
            self._pending_journaled = journaled

    def _logical_journaled(self) -> int:
        """How many messages the journal holds once what waits is committed."""
        pending = self._pending_journaled
        return self._journaled if pending is None else pending

    async def _append(self, records: list[Any], *, journaled: int | None = None) -> None:
        """Journal what waits (:meth:`_defer`) and ``records`` in one commit; ``journaled``
        is how many messages of the conversation the journal then holds (recorded with
        the write, as the sequence number is)."""
        lease = self._lease
        if lease is None:
            raise OperativeError("a durable run wrote before its run record existed")
        async with held(self._lock):
            if self._writer.unknown is not None:
                raise OperativeError(self._writer.unknown)
            if self._pending:
                # Taken now: a record deferred while this write commits goes with the next.
                records = [*self._pending, *records]
                self._pending = []
                if journaled is None:
                    journaled = self._pending_journaled
                self._pending_journaled = None
            if not records:
                return  # a flush with nothing waiting (another task's commit took it)
            seq = self._seq
            learned: list[str] = []

            async def append() -> None:
                try:
                    cancel = await self._durable.checkpoint_store.append(lease, seq, records)
                except LeaseLostError as exc:
                    self._lost = exc
                    raise
                self._seq = seq + len(records)  # with the write: nothing can come between
                if journaled is not None:
                    self._journaled = journaled
                if cancel:
                    learned.append(cancel)

            try:
                await self._writer.commit(append, f"journal entry {seq} of run {lease.run_id}")
            except BaseException:
                if learned:  # the run is stopping already (a shutdown stays one)
                    self._cancelled(learned[0], abort=False)
                raise
            if learned:
                # Aborted once the write is over and its caller has its outcome: a call
                # whose result was just journaled keeps it; what is still in flight is
                # cancelled at its next checkpoint, as run.abort() cancels it.
                self._cancelled(learned[0])

    def _cancelled(self, reason: str, *, abort: bool = True) -> None:
        """A cancellation asked for through the engine: abort the run now, once.

        Only the first reason learned counts, and an abort or another stop that came
        first keeps its own reason (the run scope records the first). Without ``abort``
        (or before the run's tasks started) it is applied at the next step boundary.
        """
        if self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        if abort and self._abort is not None:
            self._abort(reason)

    def _gone(self) -> str | None:
        """Why this run can write nothing more (its lease lost, a write's outcome unknown)."""
        if self._lost is not None:
            return str(self._lost)
        return self._writer.unknown

    # -- the extension's boundaries ----------------------------------------------------

    def attach(self, run: RunControl, nursery: trio.Nursery) -> None:
        self._abort = run.abort
        self._writer.start(nursery, name=f"operative durable writer {run.run_id}")

    def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
        async def begun() -> FinishReason:
            await self.begin(run)
            return await loop()

        return begun

    def wrap_step(self, run: RunControl, step: int, body: Step) -> Step:
        async def journaled_step() -> StepResult:
            if self.cancel_reason is not None:
                # Asked for through the engine and not applied yet (read when the run was
                # resumed, or learned as a shutdown began); an abort already made keeps
                # its reason (the first one stands).
                run.abort(self.cancel_reason)
            answer = recorded_answer(self._replay, step)
            if answer is not None:
                run.answer_with(answer)
            result = await body()
            await self.step_done(
                result.step,
                result.results,
                run.conversation,
                flush=bool(result.results) or _end_observed(run),
            )
            return result

        return journaled_step

    async def recorded(self, run: RunControl, fact: Recorded) -> None:
        if isinstance(fact, Answered):
            response = fact.response
            await self.journal_generated(
                fact.step,
                run.conversation,
                fact.usage,
                response.model,
                response.stop_reason,
                flush=run.wants("step.generated"),
            )
        else:
            await self.parked(fact.step, fact.call, parked=fact.parked)

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        return self.journaled(run, execute, step)

    async def run_ending(self, run: RunControl, result: RunResult, *, shutdown: bool) -> RunResult:
        result = await self.finish(run, result, shutdown=shutdown)
        if self.commit_error is not None:
            raise self.commit_error
        return result

    def is_durably_started(self) -> bool:
        """True once the run's durable record is committed."""
        return self._lease is not None

    async def wait_durably_started(self) -> None:
        """Return once the run's durable record is committed; raise what stopped it."""
        await self.wait_started()

    # -- the end ---------------------------------------------------------------------

    async def finish(self, run: RunControl, result: RunResult, *, shutdown: bool) -> RunResult:
        """Commit the outcome (or, on shutdown, release the lease); called shielded.

        A terminal commit that fails sets :attr:`commit_error` (the run then reports a
        :class:`~operative.CleanupError`); the stored run stays claimable.
        """
        self._abort = None  # the run has ended: nothing more to abort
        self._writer.own(None)
        run.watch_cancellation(None)
        # The writer ends, and the lease's renewal with it: no write is in flight (the
        # loop and its calls are over), and the last writes are made each in a task of
        # its own.
        self._writer.stop()
        if not self._started.is_set():  # the run ended before it began its record
            self._failed = result.error or OperativeError(
                f"the run ended ({result.finish_reason}) before its durable record was written"
            )
            self._started.set()
        lease = self._lease
        if lease is None or self._lost is not None or isinstance(result.error, LeaseLostError):
            return result
        engine = self._durable.engine
        if shutdown:
            if self._pending and self._writer.unknown is None:
                # What the stopped step did so far: whoever resumes the run starts there.
                try:
                    await self._append([])
                except Exception:
                    logger.warning(
                        "journaling the cut step of run %s failed; it is resumed from its "
                        "last commit",
                        lease.run_id,
                        exc_info=True,
                    )
                if self._gone() is not None:
                    return result
            try:
                await engine.release(lease)
            except Exception:
                logger.warning(
                    "releasing run %s failed; it is claimable once its lease expires",
                    lease.run_id,
                    exc_info=True,
                )
            return result
        if self._writer.unknown is not None:
            self.commit_error = OperativeError(self._writer.unknown)
            return result
        journal: list[Any] = []
        if self._pending and self._durable.finish_takes_journal:
            # Records still waiting (the last step's end, or a step cut by an abort, a
            # stop, an error) are journaled before the outcome, in its transaction.
            journal, journaled = self._pending, self._logical_journaled()
            self._pending, self._pending_journaled = [], None
        elif self._pending:
            # The same, in a commit of their own (an engine whose finish predates
            # ``journal=``).
            try:
                await self._append([])
            except Exception as exc:
                if self._gone() is not None:
                    return result
                logger.error(
                    "the journal of durable run %s was not committed before its outcome",
                    lease.run_id,
                    exc_info=True,
                )
                self.commit_error = exc
                return result
            unknown = self._gone()
            if unknown is not None:
                self.commit_error = OperativeError(unknown)
                return result
        if not journal:
            journaled = self._journaled  # read after the append above, if there was one
        error = result.error
        outcome = RunOutcome(
            finish_reason=str(result.finish_reason),
            content=result.content,
            error=None if error is None else str(error),
            error_type=None if error is None else type(error).__name__,
            abort_reason=result.abort_reason,
            usage=result.usage,
            steps=len(result.steps),
        )
        tail = run.conversation.messages[journaled:]
        try:
            async with self._lock:
                try:
                    finished = Finished(outcome=outcome, messages=tail)
                    if journal:
                        await engine.finish(lease, self._seq, finished, journal=journal)
                        self._seq += len(journal)
                    else:
                        await engine.finish(lease, self._seq, finished)
                except InvalidArgument as exc:
                    # Something the run produced cannot be journaled (JSON): end the run
                    # as an error, for good, rather than leave it to be retried forever.
                    outcome = msgspec.structs.replace(
                        outcome,
                        finish_reason="error",
                        error=str(exc),
                        error_type=type(exc).__name__,
                    )
                    await engine.finish(lease, self._seq, Finished(outcome=outcome))
                    if result.error is None:
                        result = msgspec.structs.replace(
                            result, finish_reason=FinishReason.ERROR, error=exc
                        )
                self._seq += 1
        except Exception as exc:
            logger.error(
                "the outcome of durable run %s was not committed", lease.run_id, exc_info=True
            )
            self.commit_error = exc
        return result


def _end_observed(run: RunControl) -> bool:
    """Whether anything outside the run sees a step's end before the run commits its
    outcome: a ``step.completed`` listener, an ``on_step`` or ``on_run_end`` hook, an
    extension told of the run's result (an instrumentation)."""
    hooks = run.config.hooks
    if run.wants("step.completed") or hooks.on_step or hooks.on_run_end:
        return True
    return any(
        type(other).run_ending is not Extension.run_ending
        for other in run.extensions
        if not other.durable
    )
