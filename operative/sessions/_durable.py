"""Durable session runs: turns routed through a durable engine, and ``recover()``.

With ``open_session(..., durable=SqliteDurable(path))`` (or ``engine=`` with
``checkpoint_store=``, for an engine of one's own) every turn is a durable run whose
id is the turn's ``RunRef``. A turn whose process stopped (or whose caller was cancelled:
a shutdown, which leaves the run to another worker) keeps its ``RunRef`` open; a later
``handle.recover()`` finds it and either resumes it (the engine says it is still
running and nobody holds it) or, when another worker already finished it, stores the
outcome and transcript the journal holds.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._agent import AgentRunContext, RunnableAgent
from .._core._errors import CleanupError, InvalidArgument
from .._core._open_run import open_run
from .._core._results import RunResult
from .._core._run_state import is_shutdown
from .._lazy._agent import resolve_agent
from ..conversation import Conversation, ConversationHistory
from ..durable import CheckpointStore, Durable, DurableEngine, replay_journal, transcript
from ..durable._backend import durable_parts
from ..durable._errors import RunNotFoundError
from ..durable._records import Lease, RunRecord
from ..durable._routing import Resumed, default_worker_id
from ._errors import LeaseHeldError, MissingRunOptionsError
from ._events import RecoverStage, SessionRecoverFailed
from ._records import RunOutcome

if TYPE_CHECKING:
    from ._handle import SessionHandle

__all__ = ["RecoveredRun", "SessionDurability"]

logger = logging.getLogger("operative.sessions")


@attrs.frozen(kw_only=True)
class SessionDurability:
    """The durable engine a session's turns run through."""

    engine: DurableEngine
    checkpoint_store: CheckpointStore
    lease_seconds: float = 30.0
    worker_id: str = attrs.Factory(default_worker_id)

    @classmethod
    def of(
        cls,
        backend: Any,
        engine: Any,
        checkpoint_store: Any,
        lease_seconds: float,
        worker_id: str | None,
    ) -> SessionDurability | None:
        if backend is None and engine is None and checkpoint_store is None:
            return None
        if isinstance(backend, Durable):
            raise InvalidArgument(
                "open_session(durable=...) takes the database (SqliteDurable(path), "
                "PostgresDurable(dsn)), not a Durable: the session makes each turn's own"
            )
        engine, checkpoint_store = durable_parts(
            backend, engine, checkpoint_store, call="open_session()", keyword="durable="
        )
        # Durable() checks both, and that they share one database.
        Durable(engine=engine, checkpoint_store=checkpoint_store, lease_seconds=lease_seconds)
        return cls(
            engine=engine,
            checkpoint_store=checkpoint_store,
            lease_seconds=lease_seconds,
            worker_id=worker_id or default_worker_id(),
        )

    def routing(self, run_id: str, session_id: str) -> Durable:
        return Durable(
            engine=self.engine,
            checkpoint_store=self.checkpoint_store,
            run_id=run_id,
            worker_id=self.worker_id,
            lease_seconds=self.lease_seconds,
            session_id=session_id,
        )


class RecoveredRun:
    """A session turn resumed by :meth:`SessionHandle.recover`, running in the session.

    ``result()`` returns once the run ended *and* its outcome is stored on the session.
    """

    __slots__ = ("_cleanup", "_done", "_error", "_handle", "_result", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._handle: Any = None
        self._done = trio.Event()
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._cleanup: CleanupError | None = None

    def __repr__(self) -> str:
        return f"<RecoveredRun {self.run_id}{' done' if self._done.is_set() else ''}>"

    def abort(self, reason: str = "aborted") -> None:
        """Abort the resumed run (it ends ``aborted``, stored as such)."""
        if self._handle is not None:
            self._handle.abort(reason)

    async def result(self) -> RunResult:
        """The run's result, once its outcome is stored on the session.

        Raises:
            SessionPersistenceError: the outcome could not be stored.
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def closed(self) -> None:
        """Wait for the run's terminal session commit: its outcome and transcript stored.

        The cleanup acknowledgement, apart from :meth:`result`: it succeeds once the
        session holds the outcome, whatever the run ended with. Bound the wait with
        ``trio.fail_after`` if need be.

        Raises:
            CleanupError: the outcome was not stored (the write failed or took longer
                than ``cleanup_timeout``, or the run was left to another worker by a
                shutdown); the turn stays open, and ``recover()`` settles it later. The
                cause, when there is one, is ``__cause__``.
        """
        await self._done.wait()
        if self._cleanup is not None:
            raise self._cleanup


def _open_resumed(handle: SessionHandle, agent: RunnableAgent | None, routing: Resumed) -> Any:
    history = routing.replay.history
    if agent is not None:
        run_id = routing.lease.run_id
        return agent.open_run(  # type: ignore[call-arg]
            history, context=AgentRunContext(run_id=run_id), durable=routing
        )
    assert handle._run_options is not None
    return open_run(
        conversation=Conversation.from_history(history), durable=routing, **handle._run_options
    )


async def recover(handle: SessionHandle) -> RecoveredRun | None:
    """See :meth:`SessionHandle.recover`."""
    durability = handle._durability
    if durability is None:
        raise InvalidArgument(
            "recover() needs a durable session: open_session(..., durable=SqliteDurable(path)) "
            "(or PostgresDurable(dsn))"
        )
    open_ids = [
        ref.run_id
        for ref in reversed(handle.session.runs)
        if ref.outcome is None and ref.run_id not in handle._turns
    ]
    engine = durability.engine
    running: list[str] = []
    held: RunRecord | None = None
    for run_id in open_ids:  # newest first
        try:
            record = await engine.get(run_id)
        except Exception as exc:
            _failed(handle, run_id, "lookup", exc)
            continue
        try:
            if record is None:
                # Its run record was never committed: nothing can resume it.
                await handle._store_outcome(run_id, None, None, RunOutcome(finish_reason="aborted"))
            elif record.status != "running":
                await _reconcile(handle, durability, record)
            else:
                running.append(run_id)
        except Exception as exc:
            _failed(handle, run_id, "reconcile", exc)
    if not running:
        return None
    if handle._agent is None and handle._run_options is None:
        raise MissingRunOptionsError(
            f"session {handle.id!r} has a durable run {running[0]} to resume but nothing to "
            "run it with: pass agent= or run_options= to open_session()"
        )
    # A lazy agent loads before the run is claimed: a load that fails leaves the turns
    # as they are, never claimed by a worker that cannot run them.
    try:
        agent = await resolve_agent(handle._agent) if handle._agent is not None else None
    except Exception as exc:
        _failed(handle, running[0], "load", exc)
        return None
    for run_id in running:
        try:
            leases = await engine.claim(
                worker_id=durability.worker_id,
                lease_seconds=durability.lease_seconds,
                limit=1,
                run_ids=[run_id],
            )
            if not leases:
                # Another worker's lease has not expired: it is running the turn, or it
                # stopped and its lease runs out later.
                if held is None:
                    held = await engine.get(run_id)
                continue
            lease = leases[0]
            replay = replay_journal(run_id, await durability.checkpoint_store.read(run_id))
        except Exception as exc:
            _failed(handle, run_id, "claim", exc)
            continue
        if replay.finished is not None:  # pragma: no cover - finish commits status and entry
            continue
        try:
            return await _start(handle, durability, agent, lease, replay)
        except Exception as exc:
            _failed(handle, run_id, "resume", exc)
            return None
    if held is not None and held.status == "running" and held.lease_owner is not None:
        raise _lease_held(handle, held)
    return None


def _lease_held(handle: SessionHandle, record: RunRecord) -> LeaseHeldError:
    """The error saying that ``record``'s run is another worker's until its lease expires."""
    holder = record.lease_owner or ""
    expires_at = record.lease_expires_at
    until = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at))
    left = expires_at - time.time()
    return LeaseHeldError(
        f"session {handle.id!r}: turn {record.run_id} was not recovered: worker {holder!r} "
        f"holds its lease until {until}"
        + (f" (in {left:.0f} s)" if left > 0 else "")
        + ". If that worker is still running the turn, leave it be; if it stopped, call "
        "recover() again once the lease has expired",
        run_id=record.run_id,
        holder=holder,
        expires_at=expires_at,
    )


def _failed(handle: SessionHandle, run_id: str, stage: RecoverStage, error: Exception) -> None:
    logger.warning(
        "session %r: recovering run %s failed (%s)", handle.id, run_id, stage, exc_info=error
    )
    handle._emit_recover(
        SessionRecoverFailed(
            run_id=run_id,
            time=trio.current_time(),
            session_id=handle.id,
            stage=stage,
            error_type=type(error).__name__,
            message=str(error),
        )
    )


async def _start(
    handle: SessionHandle,
    durability: SessionDurability,
    agent: RunnableAgent | None,
    lease: Lease,
    replay: Any,
) -> RecoveredRun:
    recovered = RecoveredRun(lease.run_id)
    handle._recovered.append(recovered)
    routing = Resumed(
        durable=durability.routing(lease.run_id, handle.id), lease=lease, replay=replay
    )
    base = ConversationHistory(
        messages=replay.started.messages, metadata=dict(replay.started.conversation_metadata)
    )

    async def resume(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        handle._turns.add(lease.run_id)
        try:
            await _resume(task_status)
        finally:
            handle._turns.discard(lease.run_id)

    async def _resume(task_status: trio.TaskStatus[None]) -> None:
        result: RunResult | None = None
        failure: BaseException | None = None
        try:
            async with _open_resumed(handle, agent, routing) as run:
                recovered._handle = run
                handle._runs.add(run)
                handle._attach_run(lease.run_id, run)
                task_status.started()
                try:
                    result = await run.result()
                finally:
                    handle._runs.discard(run)
        except BaseException as exc:
            failure = exc
        problem: BaseException | None = None
        try:
            with trio.CancelScope(shield=True):
                if result is not None or not (
                    is_shutdown(failure) or isinstance(failure, CleanupError)
                ):
                    try:
                        problem = await handle._settle(lease.run_id, base, result, failure)
                    finally:
                        handle._run_hubs.pop(lease.run_id, None)
                else:
                    handle._run_hubs.pop(lease.run_id, None)
                    problem = failure  # left to another worker: nothing was stored
        except BaseException as exc:
            recovered._error = problem = exc
        else:
            recovered._result = result
            if result is None:
                recovered._error = failure
        finally:
            if problem is not None:
                recovered._cleanup = CleanupError(
                    f"run {lease.run_id} of session {handle.id!r} ended but its outcome "
                    f"was not stored on the session ({type(problem).__name__}: {problem}); "
                    "the turn stays open: call recover() again to settle it",
                    run_id=lease.run_id,
                    result=result,
                )
                recovered._cleanup.__cause__ = problem
            recovered._done.set()
        if failure is not None:
            raise failure

    await handle._nursery.start(resume, name=f"operative recovered session run {lease.run_id}")
    return recovered


async def _reconcile(
    handle: SessionHandle, durability: SessionDurability, record: RunRecord
) -> None:
    """Store the outcome and transcript of a run another worker finished."""
    replay = replay_journal(record.run_id, await durability.checkpoint_store.read(record.run_id))
    outcome = record.outcome
    finish = outcome.finish_reason if outcome is not None else "error"
    error = None
    if finish == "error":
        error = f"error/{outcome.error_type if outcome and outcome.error_type else 'Error'}"
    base = ConversationHistory(
        messages=replay.started.messages, metadata=dict(replay.started.conversation_metadata)
    )
    await handle._store_outcome(
        record.run_id,
        base,
        transcript(replay),
        RunOutcome(finish_reason=finish, error=error),
    )


async def cancel_detached(handle: SessionHandle, run_ids: tuple[str, ...], reason: str) -> None:
    """Settle turns the session records as open that no run of ``handle`` holds.

    A task of the session's nursery, started by :meth:`SessionHandle.cancel`: shielded
    and bounded by ``cleanup_timeout``, so leaving the ``open_session`` block right
    after ``cancel()`` still settles the turns. A failure to reach the engine or the
    store is logged and leaves the turn open (``recover()`` or another ``cancel()``
    settles it later); it never ends the ``open_session`` block.
    """
    with trio.CancelScope(shield=True), trio.move_on_after(handle._cleanup_timeout) as scope:
        await _cancel_detached(handle, run_ids, reason)
    if scope.cancelled_caught:
        logger.warning(
            "session %r: cancelling turns %s took longer than cleanup_timeout=%ss; what "
            "was not settled stays open",
            handle.id,
            ", ".join(run_ids),
            handle._cleanup_timeout,
        )


async def _cancel_detached(handle: SessionHandle, run_ids: tuple[str, ...], reason: str) -> None:
    aborted = RunOutcome(finish_reason="aborted")
    durability = handle._durability
    for run_id in run_ids:
        if run_id in handle._turns:  # resumed meanwhile: that run owns its outcome
            continue
        try:
            if durability is None:
                # No journal to read: the session's history stays as it is.
                await handle._store_outcome(run_id, None, None, aborted)
                continue
            try:
                record = await durability.engine.cancel(run_id, reason)
            except RunNotFoundError:
                # Its run record was never committed: nothing ran, nothing can resume it.
                await handle._store_outcome(run_id, None, None, aborted)
                continue
            if record.status == "running":
                continue  # a live worker holds it: it stops at its next step, and stores
            await _reconcile(handle, durability, record)
        except Exception:
            logger.warning(
                "session %r: cancelling turn %s failed; it stays open (recover() or "
                "cancel() settles it later)",
                handle.id,
                run_id,
                exc_info=True,
            )
