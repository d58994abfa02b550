"""``open_diagnostic_run``: a run handle's liveness for work that is not an agent run.

The specification's ``DiagnosticAgentRun`` is a third ``LivenessObservable`` beside a run
and a session: something a host can watch as it watches a run (``snapshot()``,
``subscribe_snapshot()``, ``snapshots()``, a stall watchdog) although no model loop
runs, e.g. a tool-only job or a diagnostic probe. In Trio the work lives in a nursery
the caller sees::

    open_diagnostic_run(...)      the abort scope (``diagnostic.abort()``)
    └── job nursery               the block's body, and ``diagnostic.start_soon`` tasks

Leaving the block normally ends it ``completed``; ``abort()`` (or a stall watchdog that
aborts) ends it ``aborted``; an exception ends it ``failed`` and propagates.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import trio

from .._core._errors import InvalidArgument
from .._core._types import FinishReason, Usage
from ._snapshots import (
    DeclaredWait,
    LivenessSnapshot,
    PulseKind,
    SnapshotObserver,
    SnapshotStream,
    SnapshotSubscription,
    WaitReason,
)
from ._tracker import LivenessTracker
from ._watchdog import StallPolicy, create_stall_watchdog

__all__ = ["DiagnosticRun", "open_diagnostic_run"]


class DiagnosticRun:
    """The handle :func:`open_diagnostic_run` yields: liveness, pulses and abort.

    It reports as a run (``snapshot().kind == "run"``) whose status follows the pulses
    the job gives; it has no events and no ``RunResult``.
    """

    __slots__ = ("_abort_reason", "_nursery", "_scope", "_tracker")

    def __init__(self, tracker: LivenessTracker) -> None:
        self._tracker = tracker
        self._scope = trio.CancelScope()
        self._abort_reason: str | None = None
        self._nursery: trio.Nursery | None = None

    def __repr__(self) -> str:
        return f"<DiagnosticRun {self.run_id} {self._tracker.status}>"

    @property
    def run_id(self) -> str:
        """The id every snapshot carries."""
        return self._tracker.id

    @property
    def abort_reason(self) -> str | None:
        """Why :meth:`abort` ended the job (None while it was not aborted)."""
        return self._abort_reason

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Cancel the job (the block's body and its tasks); it ends ``aborted``.

        Synchronous, like ``ActiveRun.abort``; calling it again, or after the job ended,
        does nothing.
        """
        if self._abort_reason is None and not self._tracker.terminal:
            self._abort_reason = reason or "aborted"
            self._scope.cancel()

    def start_soon(
        self, fn: Callable[..., Awaitable[object]], *args: Any, name: object = None
    ) -> None:
        """Run ``fn(*args)`` as a task of the job: the block waits for it, ``abort()``
        cancels it, and an exception it raises fails the job."""
        if self._nursery is None:
            raise InvalidArgument(
                "this diagnostic run has ended: start tasks inside its async with block"
            )
        self._nursery.start_soon(fn, *args, name=name)

    # -- feeding ---------------------------------------------------------------------

    def pulse(
        self, kind: PulseKind = "progress", *, step: int | None = None, usage: Usage | None = None
    ) -> None:
        """Record a pulse: ``"progress"`` (the job moved forward), ``"heartbeat"`` (it is
        alive) or ``"host-reachability"``. See :meth:`LivenessTracker.pulse`."""
        self._tracker.pulse(kind, step=step, usage=usage)

    def declare_wait(
        self, wait: DeclaredWait | WaitReason, *, deadline: float | None = None, detail: str = ""
    ) -> DeclaredWait:
        """Declare a wait (status ``waiting``; a watchdog pauses). Returns the wait."""
        return self._tracker.declare_wait(wait, deadline=deadline, detail=detail)

    def clear_wait(self, wait: DeclaredWait | None = None) -> None:
        """End ``wait``, or every wait."""
        self._tracker.clear_wait(wait)

    @contextmanager
    def waiting(
        self, reason: WaitReason, *, deadline: float | None = None, detail: str = ""
    ) -> Iterator[DeclaredWait]:
        """``with diagnostic.waiting("signal"):`` declares a wait for the block."""
        with self._tracker.waiting(reason, deadline=deadline, detail=detail) as declared:
            yield declared

    # -- observing -------------------------------------------------------------------

    def snapshot(self) -> LivenessSnapshot:
        """How the job is doing now; never blocks, never changes anything."""
        return self._tracker.snapshot()

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change; the terminal
        snapshot exactly once. Returns a handle with ``unsubscribe()``."""
        return self._tracker.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one."""
        return self._tracker.snapshots(capacity=capacity)


@asynccontextmanager
async def open_diagnostic_run(
    run_id: str | None = None,
    *,
    stall_policy: StallPolicy | None = None,
    clock: Callable[[], float] | None = None,
) -> AsyncIterator[DiagnosticRun]:
    """Watch work that is not an agent run as a run: ``async with open_diagnostic_run()
    as diagnostic:``; the block (and tasks started with ``diagnostic.start_soon``) is the
    job, and ``diagnostic.pulse()`` reports its progress.

    ``stall_policy=`` starts a stall watchdog in the handle's nursery (an aborting
    policy calls ``abort``); it ends with the job. ``clock`` is the snapshots' clock
    (default: trio's). The job ends ``completed`` when the block is left normally,
    ``aborted`` after ``abort()`` or when the caller is cancelled (the cancellation
    goes on), and ``failed`` when it raises (the exception goes on).
    """
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise InvalidArgument(f"run_id= takes a non-empty str, got {run_id!r}")
    if stall_policy is not None and not isinstance(stall_policy, StallPolicy):
        raise InvalidArgument(
            f"stall_policy= takes a StallPolicy, got {type(stall_policy).__name__}"
        )
    tracker = LivenessTracker(run_id or os.urandom(12).hex(), clock=clock)
    diagnostic = DiagnosticRun(tracker)
    body_error: BaseException | None = None
    async with trio.open_nursery() as watch:
        if stall_policy is not None:
            watchdog = create_stall_watchdog(tracker, stall_policy, on_abort=diagnostic.abort)
            # It returns by itself once the job's liveness is terminal.
            watch.start_soon(watchdog.run, name=f"operative stall watchdog {tracker.id}")
        tracker.start()
        try:
            with diagnostic._scope:
                async with trio.open_nursery() as job:
                    diagnostic._nursery = job
                    try:
                        yield diagnostic
                    except Exception as exc:
                        body_error = exc
                        job.cancel_scope.cancel()
        except BaseException as exc:
            diagnostic._nursery = None
            if _only_cancelled(exc):
                tracker.finish("aborted", FinishReason.ABORTED)
                raise
            tracker.finish("failed", FinishReason.ERROR)
            body_error = exc  # raised once the watchdog ended, not wrapped in its group
        diagnostic._nursery = None
        if body_error is not None:
            tracker.finish("failed", FinishReason.ERROR)  # once: a second call is ignored
        elif diagnostic._abort_reason is not None:
            tracker.finish("aborted", FinishReason.ABORTED)
        else:
            tracker.finish("completed")
    if body_error is not None:
        raise body_error


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)
