"""Liveness records and subscriptions: what a snapshot says and how observers get it.

:class:`LivenessSnapshot` is the record; :class:`SnapshotSubscription` (a callback)
and :class:`SnapshotStream` (an async iterator) deliver a tracker's snapshots. The
tracker itself is :class:`operative.liveness.LivenessTracker`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

import msgspec
import trio

from .._core._types import FinishReason, Usage

if TYPE_CHECKING:
    from ._tracker import LivenessTracker

__all__ = [
    "PULSE_KINDS",
    "TERMINAL_STATUSES",
    "WAIT_REASONS",
    "DeclaredWait",
    "LivenessSnapshot",
    "LivenessStatus",
    "PulseKind",
    "Reachability",
    "SnapshotObserver",
    "SnapshotStream",
    "SnapshotSubscription",
    "WaitReason",
    "terminal_status",
]

logger = logging.getLogger("operative.liveness")

LivenessStatus: TypeAlias = Literal[
    "starting",
    "running",
    "waiting",
    "stalled",
    "unreachable",
    "completed",
    "failed",
    "aborted",
]

TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "aborted"})

PulseKind: TypeAlias = Literal["progress", "heartbeat", "host-reachability"]
PULSE_KINDS: frozenset[str] = frozenset({"progress", "heartbeat", "host-reachability"})

WaitReason: TypeAlias = Literal["approval", "elicitation", "steering", "review", "signal"]
WAIT_REASONS: frozenset[str] = frozenset(
    {"approval", "elicitation", "steering", "review", "signal"}
)

Reachability: TypeAlias = Literal["reachable", "unreachable"]


class DeclaredWait(msgspec.Struct, frozen=True, kw_only=True):
    """A wait the work announced: silence until it ends is expected, not a stall."""

    reason: WaitReason
    """What the work waits for: ``approval``, ``elicitation``, ``steering`` (a pause),
    ``review`` or ``signal``."""
    since: float
    """When the wait began (trio's clock)."""
    deadline: float | None = None
    """When the wait stops excusing silence (trio's clock); ``None``: an unbounded wait."""
    detail: str = ""
    """What exactly is awaited (a tool call id, an approval id, a prompt)."""


class LivenessSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """How a run is doing, as of ``observed_at`` (trio's clock)."""

    kind: Literal["run", "session"] = "run"
    id: str
    status: LivenessStatus
    revision: int
    step: int = 0
    """The step in progress, or the last one once the run is over."""
    usage: Usage = Usage()
    started_at: float | None = None
    observed_at: float = 0.0
    last_activity_at: float | None = None
    """When the run last made progress (a step began, a model answered, tools settled)."""
    finish_reason: FinishReason | None = None
    durability: Literal["process-local", "durable"] = "process-local"
    last_heartbeat_at: float | None = None
    """When the work last proved it is alive (any pulse)."""
    last_progress_at: float | None = None
    """When the work last moved forward (a progress or host-reachability pulse)."""
    missed_pulse_count: int = 0
    """How many whole ``stall_after`` intervals passed without progress (0 when fine)."""
    declared_wait: DeclaredWait | None = None
    """The oldest wait in force, when the work declared one."""
    reachability: Reachability = "reachable"
    """``unreachable`` once no pulse of any kind arrived within ``unreachable_after``."""

    @property
    def terminal(self) -> bool:
        """True once the run is over; a terminal snapshot never changes again."""
        return self.status in TERMINAL_STATUSES


SnapshotObserver: TypeAlias = Callable[[LivenessSnapshot], object]


def terminal_status(finish_reason: FinishReason | str) -> LivenessStatus:
    """The terminal liveness status a run ending with ``finish_reason`` reports."""
    return _TERMINAL.get(finish_reason, "completed")


_TERMINAL: dict[str, LivenessStatus] = {
    FinishReason.ERROR: "failed",
    FinishReason.ABORTED: "aborted",
}
"""The finish reasons that do not complete the work (a ``str`` finds its member)."""


class SnapshotSubscription:
    """A live subscription made by :meth:`LivenessTracker.subscribe_snapshot`.

    ``unsubscribe()`` (or leaving a ``with`` block) stops delivery; it is also over once
    the terminal snapshot was delivered.
    """

    __slots__ = ("_active", "_last_revision", "_observer", "_tracker", "delivered")

    def __init__(self, tracker: LivenessTracker, observer: SnapshotObserver) -> None:
        self._tracker = tracker
        self._observer = observer
        self._active = True
        self._last_revision = -1
        self.delivered = 0
        """How many snapshots the observer received."""

    @property
    def active(self) -> bool:
        """False once unsubscribed or after the terminal snapshot."""
        return self._active

    def unsubscribe(self) -> None:
        """Stop delivery now. Calling it again does nothing."""
        if self._active:
            self._active = False
            self._tracker._drop(self)

    def __enter__(self) -> SnapshotSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unsubscribe()

    def _deliver(self, snapshot: LivenessSnapshot) -> None:
        # Revisions only move forward for one observer, even when an observer's own
        # callback changes the tracker (a nested delivery comes first, the stale outer
        # one is skipped); the terminal snapshot is delivered exactly once.
        if not self._active or snapshot.revision <= self._last_revision:
            return
        self._last_revision = snapshot.revision
        if snapshot.terminal:
            self._active = False
        self.delivered += 1
        try:
            self._observer(snapshot)
        except Exception:
            self._tracker.observer_errors += 1
            logger.exception("liveness observer %r raised", self._observer)


class SnapshotStream:
    """Async iteration over snapshots through a bounded buffer; ends after the terminal.

    Snapshots are state, not history: when the consumer falls ``capacity`` behind, the
    oldest buffered snapshot is dropped (``dropped`` counts them) and the tracker never
    waits. The terminal snapshot is never dropped. It subscribes when iteration starts;
    leave early with ``aclose()`` or ``async with``.
    """

    __slots__ = ("_buffer", "_capacity", "_closed", "_lot", "_subscription", "_tracker", "dropped")

    def __init__(self, tracker: LivenessTracker, capacity: int) -> None:
        self._tracker = tracker
        self._capacity = capacity
        self._buffer: deque[LivenessSnapshot] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self._subscription: SnapshotSubscription | None = None
        self.dropped = 0
        """How many snapshots the consumer missed because it fell behind."""

    def __aiter__(self) -> SnapshotStream:
        self._subscribe()
        return self

    async def __aenter__(self) -> SnapshotStream:
        self._subscribe()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _subscribe(self) -> None:
        if self._subscription is None and not self._closed:
            self._subscription = self._tracker.subscribe_snapshot(self._push)

    def _push(self, snapshot: LivenessSnapshot) -> None:
        if self._closed:
            return
        if len(self._buffer) >= self._capacity:
            self._buffer.popleft()
            self.dropped += 1
        self._buffer.append(snapshot)
        self._lot.unpark_all()

    async def __anext__(self) -> LivenessSnapshot:
        self._subscribe()
        parked = False
        while not self._buffer:
            subscription = self._subscription
            if self._closed or subscription is None or not subscription.active:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            parked = True
            await self._lot.park()
        if not parked:
            await trio.lowlevel.checkpoint()
        return self._buffer.popleft()

    async def aclose(self) -> None:
        """Stop receiving snapshots."""
        self._closed = True
        self._buffer.clear()
        if self._subscription is not None:
            self._subscription.unsubscribe()
        self._lot.unpark_all()
        await trio.lowlevel.checkpoint()
