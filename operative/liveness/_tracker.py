"""The liveness tracker of one run or session (see :mod:`operative.liveness`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

import trio

from .._core._errors import InvalidArgument
from .._core._types import NO_USAGE, FinishReason, Usage
from ._snapshots import (
    PULSE_KINDS,
    TERMINAL_STATUSES,
    WAIT_REASONS,
    DeclaredWait,
    LivenessSnapshot,
    LivenessStatus,
    PulseKind,
    Reachability,
    SnapshotObserver,
    SnapshotStream,
    SnapshotSubscription,
    WaitReason,
)

if TYPE_CHECKING:
    from ._watchdog import StallPolicy, StallWatchdog

__all__ = ["LivenessTracker", "create_stall_watchdog"]

logger = logging.getLogger("operative.liveness")


class LivenessTracker:
    """The liveness state of one run (or session): status, revision, pulses, waits.

    Plain and synchronous: the loop calls :meth:`start`, :meth:`pulse`,
    :meth:`declare_wait` / :meth:`clear_wait` and :meth:`finish`; every call is a few
    attribute writes plus one clock read, and observers are called only when there are
    some. Nothing here blocks or spawns a task; the stall watchdog is a separate task
    that reads this state.

    Times are read from ``clock`` (default: ``trio.current_time``), only when something
    happens, so a tracker can be built outside Trio and used inside it.
    """

    __slots__ = (
        "_changed",
        "_clock",
        "_finish_reason",
        "_heard_since",
        "_last_activity",
        "_last_heartbeat",
        "_last_progress",
        "_missed",
        "_progress_at",
        "_quick",
        "_quiet_since",
        "_reachability",
        "_revision",
        "_started",
        "_started_at",
        "_status",
        "_step",
        "_subscriptions",
        "_usage",
        "_waits",
        "durability",
        "id",
        "kind",
        "observer_errors",
    )

    def __init__(
        self,
        id: str,
        *,
        kind: Literal["run", "session"] = "run",
        durability: Literal["process-local", "durable"] = "process-local",
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(id, str) or not id:
            raise InvalidArgument(f"a liveness tracker needs a non-empty str id, got {id!r}")
        if kind not in ("run", "session"):
            raise InvalidArgument(f"kind= takes 'run' or 'session', got {kind!r}")
        if durability not in ("process-local", "durable"):
            raise InvalidArgument(
                f"durability= takes 'process-local' or 'durable', got {durability!r}"
            )
        if clock is not None and not callable(clock):
            raise InvalidArgument(f"clock= takes a callable returning seconds, got {clock!r}")
        self.id = id
        self.kind: Literal["run", "session"] = kind
        self.durability: Literal["process-local", "durable"] = durability
        self._clock: Callable[[], float] = clock if clock is not None else trio.current_time
        self._status: LivenessStatus = "starting"
        self._revision = 0
        self._started = False
        self._started_at: float | None = None
        self._step = 0
        self._usage = NO_USAGE
        self._last_activity: float | None = None
        self._last_heartbeat: float | None = None
        self._last_progress: float | None = None
        self._missed = 0
        self._reachability: Reachability = "reachable"
        # An empty tuple until the first wait (most runs declare none).
        self._waits: list[DeclaredWait] | tuple[()] = ()
        self._finish_reason: FinishReason | None = None
        # The watchdog's two clocks: silence counts from these (None: since it started).
        self._quiet_since: float | None = None
        """Last progress, or the last time a declared wait began or ended."""
        self._heard_since: float | None = None
        """Last pulse of any kind, or the last time a declared wait began or ended."""
        self._progress_at: float | None = None
        """The last quick progress pulse not yet folded into the five times above."""
        self._quick = False
        """True while a progress pulse need only record its time (see ``_progress``)."""
        # An empty tuple until the first subscriber (most runs have none).
        self._subscriptions: list[SnapshotSubscription] | tuple[()] = ()
        self._changed: trio.lowlevel.ParkingLot | None = None
        """Watchdogs park here (made by the first); woken when a wait begins or ends and
        when work finishes."""
        self.observer_errors = 0
        """Observer calls that raised (each is logged to ``operative.liveness``)."""

    def _parking_lot(self) -> trio.lowlevel.ParkingLot:
        """Where a watchdog parks until a wait begins or ends or the work finishes."""
        if self._changed is None:
            self._changed = trio.lowlevel.ParkingLot()
        return self._changed

    def __repr__(self) -> str:
        return f"<LivenessTracker {self.kind} {self.id} {self._status} r{self._revision}>"

    # -- reading ---------------------------------------------------------------------

    @property
    def status(self) -> LivenessStatus:
        return self._status

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def terminal(self) -> bool:
        """True once :meth:`finish` was called; nothing changes after that."""
        return self._status in TERMINAL_STATUSES

    @property
    def declared_waits(self) -> tuple[DeclaredWait, ...]:
        """Every wait in force, oldest first."""
        return tuple(self._waits)

    def snapshot(self) -> LivenessSnapshot:
        """The state now; never blocks, never changes anything."""
        self._fold()
        return LivenessSnapshot(
            kind=self.kind,
            id=self.id,
            status=self._status,
            revision=self._revision,
            step=self._step,
            usage=self._usage,
            started_at=self._started_at,
            observed_at=self._clock(),
            last_activity_at=self._last_activity,
            finish_reason=self._finish_reason,
            durability=self.durability,
            last_heartbeat_at=self._last_heartbeat,
            last_progress_at=self._last_progress,
            missed_pulse_count=self._missed,
            declared_wait=self._waits[0] if self._waits else None,
            reachability=self._reachability,
        )

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: revision, subscriptions, waits, observer failures."""
        return {
            "revision": self._revision,
            "subscriptions": len(self._subscriptions),
            "declared_waits": len(self._waits),
            "missed_pulses": self._missed,
            "observer_errors": self.observer_errors,
        }

    # -- observing -------------------------------------------------------------------

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then once per revision change.

        The terminal snapshot is delivered exactly once, after which the subscription
        ends by itself; subscribing to finished work delivers its terminal snapshot once.
        Observers are plain callables, called synchronously in the task that changed
        the state; one that raises is logged and counted, never allowed to break the
        work. Heartbeats that change nothing but ``last_heartbeat_at`` are not
        delivered (they do not change the revision).
        """
        checked: object = observer
        if not callable(checked):
            raise InvalidArgument(f"observer must be callable, got {observer!r}")
        subscription = SnapshotSubscription(self, observer)
        if not self.terminal:
            self._add_subscription(subscription)
        subscription._deliver(self.snapshot())
        return subscription

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots (the current one first) until the terminal one.

        ``capacity`` bounds the buffer; a consumer that falls behind misses the oldest
        snapshots, never the newest or the terminal one.
        """
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgument(f"capacity must be an int of at least 1, got {capacity!r}")
        return SnapshotStream(self, capacity)

    def _add_subscription(self, subscription: SnapshotSubscription) -> None:
        self._quick = False  # every revision change is delivered from now on
        subscriptions = self._subscriptions
        if isinstance(subscriptions, list):
            subscriptions.append(subscription)
        else:
            self._subscriptions = [subscription]

    def _drop(self, subscription: SnapshotSubscription) -> None:
        subscriptions = self._subscriptions
        if isinstance(subscriptions, list) and subscription in subscriptions:
            subscriptions.remove(subscription)

    # -- feeding ---------------------------------------------------------------------

    def start(self) -> None:
        """The work started: ``starting`` → ``running``; starts the stall clock."""
        self._start_at(self._clock())

    def _start_at(self, now: float) -> None:
        """:meth:`start` at ``now`` (the run's loop has read its clock already)."""
        if self._started or self.terminal:
            return
        self._started = True
        self._started_at = now
        self._last_activity = self._last_heartbeat = self._last_progress = now
        self._quiet_since = self._heard_since = now
        self._bump()

    def pulse(
        self,
        kind: PulseKind = "progress",
        *,
        step: int | None = None,
        usage: Usage | None = None,
    ) -> None:
        """Record a pulse (see the module docstring for the three kinds).

        ``step`` and ``usage``, when given, update the snapshot's step and usage. A
        progress pulse moves a ``stalled`` or ``unreachable`` run back to ``running``;
        a heartbeat moves an ``unreachable`` one back to ``stalled``. Does nothing once
        the work finished.
        """
        if kind not in PULSE_KINDS:
            raise InvalidArgument(f"pulse kind must be one of {sorted(PULSE_KINDS)}, got {kind!r}")
        if self._status in TERMINAL_STATUSES:
            return
        self._fold()
        now = self._clock()
        changed = False
        if step is not None and step != self._step:
            self._step = step
            changed = True
        if usage is not None and usage != self._usage:
            self._usage = usage
            changed = True
        if self._reachability == "unreachable":
            self._reachability = "reachable"
            changed = True
        self._last_heartbeat = now
        self._heard_since = now
        if kind != "heartbeat":
            if not self._started:
                self._started = True
                self._started_at = now
            self._last_activity = self._last_progress = now
            self._quiet_since = now
            self._missed = 0
            changed = True
        if changed:
            self._bump()

    def _progress(self, step: int, usage: Usage) -> None:
        """``pulse("progress", step=step, usage=usage)`` for the run's own loop.

        The loop pulses three times a step with known-good arguments, so this skips
        the checks and the comparisons and always counts as a change. While the work
        runs with nothing to change but the times (no wait, no missed pulse, reachable,
        nobody subscribed) a pulse records its time alone: the five times it sets are
        folded in from it when they are next read or written (``_fold``).
        """
        if self._quick:
            self._progress_at = self._clock()
            self._step = step
            self._usage = usage
            self._revision += 1
            return
        if self._status in TERMINAL_STATUSES:
            return
        self._fold()
        now = self._clock()
        self._step = step
        self._usage = usage
        self._last_heartbeat = self._heard_since = now
        self._last_activity = self._last_progress = self._quiet_since = now
        self._missed = 0
        self._reachability = "reachable"
        if not self._started:
            self._started = True
            self._started_at = now
        self._status = "waiting" if self._waits else "running"
        self._revision += 1
        self._quick = not self._waits and not self._subscriptions
        if self._subscriptions:
            snapshot = self.snapshot()
            for subscription in tuple(self._subscriptions):
                subscription._deliver(snapshot)

    def declare_wait(
        self,
        wait: DeclaredWait | WaitReason,
        *,
        deadline: float | None = None,
        detail: str = "",
    ) -> DeclaredWait:
        """Declare a wait (status ``waiting``; the watchdog pauses). Returns the wait.

        Pass a reason (``"approval"``, ``"elicitation"``, ``"steering"``, ``"review"``
        or ``"signal"``) with an optional absolute ``deadline`` on trio's clock, or a
        ready :class:`DeclaredWait`. Waits nest (two tools can wait for approval at
        once); end each with :meth:`clear_wait`, or use :meth:`waiting`. Beginning or
        ending a wait counts as activity: it restarts the stall clock.
        """
        if isinstance(wait, DeclaredWait):
            declared = wait
        else:
            if wait not in WAIT_REASONS:
                raise InvalidArgument(
                    f"a declared wait's reason is one of {sorted(WAIT_REASONS)}, got {wait!r}"
                )
            if deadline is not None and (
                isinstance(deadline, bool) or not isinstance(deadline, int | float)
            ):
                raise InvalidArgument(
                    f"deadline= is a time on trio's clock (a float), got {deadline!r}"
                )
            declared = DeclaredWait(
                reason=wait,
                since=self._clock(),
                deadline=None if deadline is None else float(deadline),
                detail=detail,
            )
        if self.terminal:
            return declared
        if not self._waits:
            self._waits = []
        self._waits.append(declared)
        self._restart_clocks()
        self._bump()
        if self._changed is not None:
            self._changed.unpark_all()
        return declared

    def clear_wait(self, wait: DeclaredWait | None = None) -> None:
        """End ``wait`` (the object :meth:`declare_wait` returned), or every wait.

        Ending a wait that is not in force does nothing.
        """
        if wait is None:
            if not self._waits:
                return
            self._waits = ()
        else:
            waits = self._waits
            for index, candidate in enumerate(waits):
                if candidate is wait:
                    assert isinstance(waits, list)  # it holds ``wait``
                    del waits[index]
                    break
            else:
                return
        if self.terminal:
            return
        self._restart_clocks()
        self._bump()
        if self._changed is not None:
            self._changed.unpark_all()

    @contextmanager
    def waiting(
        self, reason: WaitReason, *, deadline: float | None = None, detail: str = ""
    ) -> Iterator[DeclaredWait]:
        """``with tracker.waiting("approval"):`` declares a wait for the block."""
        declared = self.declare_wait(reason, deadline=deadline, detail=detail)
        try:
            yield declared
        finally:
            self.clear_wait(declared)

    def finish(
        self,
        status: LivenessStatus,
        finish_reason: FinishReason | None = None,
        *,
        step: int | None = None,
        usage: Usage | None = None,
    ) -> LivenessSnapshot:
        """The work is over: record the terminal status and deliver it (once).

        ``status`` is ``completed``, ``failed`` or ``aborted`` (see
        :func:`terminal_status`). Waits end, subscriptions end after the terminal
        snapshot, watchdogs return. Only the first call counts; later ones return the
        terminal snapshot unchanged.
        """
        if status not in TERMINAL_STATUSES:
            raise InvalidArgument(
                f"finish() takes a terminal status {sorted(TERMINAL_STATUSES)}, got {status!r}"
            )
        self._end(status, finish_reason, step, usage)
        return self.snapshot()

    def _end(
        self,
        status: LivenessStatus,
        finish_reason: FinishReason | None,
        step: int | None,
        usage: Usage | None,
        now: float | None = None,
    ) -> None:
        """:meth:`finish` without the checks, and no snapshot unless someone subscribed
        (``now``: the time it ended, when the caller has read the clock already)."""
        if self._status in TERMINAL_STATUSES:
            return
        self._fold()
        self._quick = False
        if now is None:
            now = self._clock()
        if step is not None:
            self._step = step
        if usage is not None:
            self._usage = usage
        self._waits = ()
        self._last_activity = now
        self._finish_reason = finish_reason
        self._status = status
        self._revision += 1
        subscriptions, self._subscriptions = self._subscriptions, ()
        if subscriptions:
            snapshot = self.snapshot()
            for subscription in subscriptions:
                subscription._deliver(snapshot)
        if self._changed is not None:
            self._changed.unpark_all()

    # -- the watchdog's side ---------------------------------------------------------

    def _excused_until(self) -> float | None:
        """Until when declared waits excuse silence: None (no wait), inf, or a deadline."""
        if not self._waits:
            return None
        latest = float("-inf")
        for wait in self._waits:
            if wait.deadline is None:
                return float("inf")
            latest = max(latest, wait.deadline)
        return latest

    def _mark_missed(self, count: int) -> None:
        if self.terminal or count == self._missed:
            return
        self._missed = count
        self._bump()

    def _mark_unreachable(self) -> None:
        if self.terminal or self._reachability == "unreachable":
            return
        self._reachability = "unreachable"
        self._bump()

    # -- internals -------------------------------------------------------------------

    def _fold(self) -> None:
        """Take the last quick progress pulse into the pulse times (before any of them
        is read, or written by anything else)."""
        at = self._progress_at
        if at is not None:
            self._progress_at = None
            self._last_heartbeat = self._heard_since = at
            self._last_activity = self._last_progress = self._quiet_since = at

    def _restart_clocks(self) -> None:
        self._fold()
        now = self._clock()
        self._last_activity = now
        self._quiet_since = self._heard_since = now
        self._missed = 0
        self._reachability = "reachable"

    def _bump(self) -> None:
        if self._reachability == "unreachable":
            status: LivenessStatus = "unreachable"
        elif self._missed:
            status = "stalled"
        elif self._waits:
            status = "waiting"
        elif self._started:
            status = "running"
        else:
            status = "starting"
        self._status = status
        self._revision += 1
        self._quick = status == "running" and not self._subscriptions
        if self._subscriptions:
            snapshot = self.snapshot()
            for subscription in tuple(self._subscriptions):
                subscription._deliver(snapshot)


def create_stall_watchdog(
    tracker: LivenessTracker,
    policy: StallPolicy,
    *,
    on_abort: Callable[[str], object] | None = None,
) -> StallWatchdog:
    """A watchdog over ``tracker`` following ``policy``; start its ``run()`` in a nursery.

    ``on_abort(reason)`` is called once, when the work first stalls, if
    ``policy.abort_when_stalled`` is set (a run passes its ``abort``). Defined here,
    with the watchdog loaded on the first call, so that a run without a stall policy
    never loads it.
    """
    from ._watchdog import StallPolicy, StallWatchdog

    if not isinstance(tracker, LivenessTracker):
        raise InvalidArgument(f"tracker= takes a LivenessTracker, got {type(tracker).__name__}")
    if not isinstance(policy, StallPolicy):
        raise InvalidArgument(f"policy= takes a StallPolicy, got {type(policy).__name__}")
    if on_abort is not None and not callable(on_abort):
        raise InvalidArgument(f"on_abort= takes a callable, got {on_abort!r}")
    if policy.abort_when_stalled and on_abort is None:
        raise InvalidArgument(
            "the policy aborts stalled work (abort_when_stalled=True) but no on_abort= "
            "callback was given to do it"
        )
    return StallWatchdog(tracker, policy, on_abort)
