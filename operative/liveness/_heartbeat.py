"""Heartbeats: pulses on a timer, so long host-side work keeps its liveness honest.

:func:`serve_heartbeat` is a task that pulses a :class:`~operative.liveness.LivenessTracker`
(or the tracker of an ``ActiveRun`` or a ``SessionHandle``) every ``every`` seconds on
trio's clock until it is cancelled; :class:`Heartbeat` runs one for the length of an
``async with`` block and also offers :meth:`Heartbeat.beat` for work that reports in
by itself.

The pulse kind says what the beat claims (see :mod:`operative.liveness`):
``"heartbeat"`` (the default) keeps the work *reachable* but does not reset the stall
clock, because a timer firing proves the process is alive, not that the work moves;
``"host-reachability"`` or ``"progress"`` also reset the stall clock, for a host that
knows its wait is healthy (a poll that got an answer, a queue that is draining).
"""

from __future__ import annotations

import math
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn, Self

import trio

from .._core._errors import InvalidArgument
from ._snapshots import PULSE_KINDS, PulseKind

if TYPE_CHECKING:
    from ._tracker import LivenessTracker

__all__ = ["Heartbeat", "serve_heartbeat", "tracker_of"]


def tracker_of(target: object) -> LivenessTracker:
    """The :class:`LivenessTracker` behind a tracker, an ``ActiveRun`` (or the run a
    tool reaches as ``ExecutionContext.run``) or a ``SessionHandle``."""
    from ._tracker import LivenessTracker

    if isinstance(target, LivenessTracker):
        return target
    target = getattr(target, "_control", target)  # an ActiveRun: the run behind it
    for attribute in ("liveness", "_liveness", "_tracker"):
        found = getattr(target, attribute, None)
        if isinstance(found, LivenessTracker):
            return found
    raise InvalidArgument(
        "a heartbeat pulses a LivenessTracker, an ActiveRun or a SessionHandle, "
        f"got {type(target).__name__}"
    )


def _check(every: object, kind: object) -> float:
    if (
        isinstance(every, bool)
        or not isinstance(every, int | float)
        or not math.isfinite(every)
        or every <= 0
    ):
        raise InvalidArgument(f"every= takes a positive number of seconds, got {every!r}")
    if kind not in PULSE_KINDS:
        raise InvalidArgument(f"kind= is one of {sorted(PULSE_KINDS)}, got {kind!r}")
    return float(every)


async def serve_heartbeat(
    target: object,
    every: float,
    kind: PulseKind = "heartbeat",
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Pulse ``target`` now and then every ``every`` seconds, until cancelled.

    Start it in the nursery of the wait it vouches for, and cancel that when the wait
    ends: ``nursery.start_soon(serve_heartbeat, run, 10.0)``. Beats are spaced on a
    fixed grid of trio's clock (a slow pulse does not push the next one later). Pulses
    to finished work are ignored, so it is harmless for it to outlive the work briefly.
    """
    tracker = tracker_of(target)
    interval = _check(every, kind)
    task_status.started()
    due = trio.current_time()
    while True:
        tracker.pulse(kind)
        due += interval
        await trio.sleep_until(due)


class Heartbeat:
    """``async with Heartbeat(run, every=5):`` pulses ``run`` while the block runs.

    Inside, a child task beats every ``every`` seconds; leaving the block cancels it
    (an exception in the block propagates unchanged). :meth:`beat` pulses at once, for
    a loop that can report its own progress (``kind="progress"`` there says the work
    moved). ``every=None`` starts no task: only :meth:`beat` pulses.
    """

    __slots__ = ("_scope", "_stack", "beats", "every", "kind", "tracker")

    def __init__(
        self, target: object, *, every: float | None = None, kind: PulseKind = "heartbeat"
    ) -> None:
        self.tracker = tracker_of(target)
        if kind not in PULSE_KINDS:
            raise InvalidArgument(f"kind= is one of {sorted(PULSE_KINDS)}, got {kind!r}")
        self.every = None if every is None else _check(every, kind)
        self.kind: PulseKind = kind
        self.beats = 0
        """Pulses sent through :meth:`beat`."""
        self._stack: AsyncExitStack | None = None
        self._scope: trio.CancelScope | None = None

    def __repr__(self) -> str:
        return f"<Heartbeat {self.tracker.id} every={self.every!r} kind={self.kind}>"

    def beat(self, kind: PulseKind | None = None) -> None:
        """Pulse now (sync: it never blocks); ``kind`` defaults to the heartbeat's."""
        self.tracker.pulse(self.kind if kind is None else kind)
        self.beats += 1

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise InvalidArgument("this Heartbeat is already in use; make one per block")
        async with AsyncExitStack() as stack:
            nursery = await stack.enter_async_context(trio.open_nursery())
            if self.every is not None:
                await nursery.start(serve_heartbeat, self.tracker, self.every, self.kind)
            self._scope = nursery.cancel_scope
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        stack, scope = self._stack, self._scope
        self._stack = self._scope = None
        assert stack is not None
        assert scope is not None
        scope.cancel("the heartbeat's block ended")
        return bool(await stack.__aexit__(exc_type, exc, tb))
