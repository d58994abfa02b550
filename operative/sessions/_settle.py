"""Settling a turn: its transcript and outcome in one conditional write of the session."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._core._results import RunResult
from .._core._types import FinishReason
from ..conversation import ConversationHistory
from ._errors import SessionPersistenceError
from ._merge import apply_run
from ._records import AgentSession, RunOutcome, outcome_of

if TYPE_CHECKING:
    from ._handle import SessionHandle

__all__ = ["settle_run", "settle_unstarted", "store_outcome"]

logger = logging.getLogger("operative.sessions")


async def settle_run(
    handle: SessionHandle,
    run_id: str,
    base: ConversationHistory,
    result: RunResult | None,
    failure: BaseException | None,
) -> BaseException | None:
    """Store the run's transcript and outcome, bounded by the handle's
    ``cleanup_timeout`` (see ``SessionHandle._settle``)."""
    if result is not None:
        outcome = outcome_of(result)
        transcript = result.conversation.current
    elif isinstance(failure, trio.Cancelled):
        outcome = RunOutcome(finish_reason=str(FinishReason.ABORTED))
        transcript = base
    else:
        name = type(failure).__name__ if failure is not None else "Error"
        outcome = RunOutcome(finish_reason=str(FinishReason.ERROR), error=f"error/{name}")
        transcript = base
    problem: BaseException | None = None
    timeout = handle._cleanup_timeout
    with trio.move_on_after(timeout) as scope:
        try:
            await store_outcome(handle, run_id, base, transcript, outcome)
        except Exception as exc:
            problem = exc
    if scope.cancelled_caught:
        problem = TimeoutError(f"storing the outcome took longer than cleanup_timeout={timeout}s")
    if problem is None:
        return None
    message = (
        f"run {run_id} of session {handle.id!r} ended ({outcome.finish_reason}) but its "
        f"transcript and outcome could not be stored: {type(problem).__name__}: {problem}. "
        "The session records the run without an outcome; retry the turn or reconcile."
    )
    if failure is not None:
        # The run's own failure (or the caller's cancellation) is what propagates.
        logger.error("%s", message)
        failure.add_note(message)
        return problem
    raise SessionPersistenceError(
        message, session_id=handle.id, run_id=run_id, result=result
    ) from problem


async def store_outcome(
    handle: SessionHandle,
    run_id: str,
    base: ConversationHistory | None,
    transcript: ConversationHistory | None,
    outcome: RunOutcome,
) -> None:
    """Write a run's transcript and outcome in one update, and announce it (see
    ``SessionHandle._store_outcome``)."""
    ended_at = handle._store.clock()

    def settle(current: AgentSession) -> AgentSession:
        history = current.conversation_history
        return apply_run(
            current,
            run_id=run_id,
            transcript=history if transcript is None else transcript,
            base=history if transcript is None or base is None else base,
            outcome=outcome,
            ended_at=ended_at,
        )

    handle._session = await handle._store.update(handle.id, settle)
    handle._announce_save(run_id, outcome.finish_reason)


async def settle_unstarted(handle: SessionHandle, run_id: str) -> None:
    """Record ``run_id`` as aborted if its reservation was stored (bounded by the
    handle's ``cleanup_timeout``; a failure is logged, the turn left open)."""

    def abort_if_reserved(current: AgentSession) -> AgentSession:
        if not any(ref.run_id == run_id and ref.outcome is None for ref in current.runs):
            return current
        history = current.conversation_history
        return apply_run(
            current,
            run_id=run_id,
            transcript=history,
            base=history,
            outcome=RunOutcome(finish_reason=str(FinishReason.ABORTED)),
            ended_at=handle._store.clock(),
        )

    with trio.move_on_after(handle._cleanup_timeout):
        try:
            handle._session = await handle._store.update(handle.id, abort_if_reserved)
        except Exception:
            logger.exception(
                "session %r: could not record turn %s as aborted after its reservation "
                "was interrupted",
                handle.id,
                run_id,
            )
