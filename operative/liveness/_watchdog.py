"""The stall watchdog: a task that turns missing pulses into ``stalled`` / ``unreachable``.

It never polls. It computes the next moment something could be due (the next missed
pulse, the unreachable threshold, the end of a declared wait's excuse) and sleeps until
then on trio's clock, parked on the tracker so that a wait beginning or ending, or the
work finishing, wakes it early. A pulse only ever moves deadlines later, so pulses do
not wake it: at the old deadline it re-reads the tracker and sleeps again (at most one
spurious wake per ``stall_after``; none per pulse). Under
``trio.testing.MockClock(autojump_threshold=0)`` an hour of silence takes milliseconds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from .._core._errors import InvalidArgument
from ._tracker import create_stall_watchdog as create_stall_watchdog

if TYPE_CHECKING:
    from ._tracker import LivenessTracker

__all__ = ["StallPolicy", "StallWatchdog", "create_stall_watchdog"]

logger = logging.getLogger("operative.liveness")


def _check_duration(name: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidArgument(f"{name}= takes a positive number of seconds, got {value!r}")


@attrs.frozen(kw_only=True)
class StallPolicy:
    """When silence becomes a stall, and what to do about it.

    ``stall_after`` seconds without a progress pulse make the work ``stalled`` (and
    every further ``stall_after`` counts one more missed pulse); ``unreachable_after``
    seconds without any pulse at all make it ``unreachable`` (``None``: never). With
    ``abort_when_stalled`` the watchdog asks for an abort once, when the work first
    stalls. Durations are seconds on trio's clock.
    """

    stall_after: float
    unreachable_after: float | None = None
    abort_when_stalled: bool = False

    def __attrs_post_init__(self) -> None:
        _check_duration("stall_after", self.stall_after)
        _check_duration("unreachable_after", self.unreachable_after, optional=True)
        if self.unreachable_after is not None and self.unreachable_after < self.stall_after:
            raise InvalidArgument(
                f"unreachable_after={self.unreachable_after!r} is shorter than "
                f"stall_after={self.stall_after!r}: work is stalled before it is "
                "unreachable, so unreachable_after must be at least stall_after"
            )
        if not isinstance(self.abort_when_stalled, bool):
            raise InvalidArgument(
                f"abort_when_stalled= takes a bool, got {self.abort_when_stalled!r}"
            )


class StallWatchdog:
    """Reads a tracker's pulses and moves it to ``stalled`` and ``unreachable``.

    Start :meth:`run` in the nursery of the work it watches
    (``nursery.start_soon(watchdog.run)``). It returns by itself once the tracker is
    terminal, and promptly when cancelled. While a declared wait is in force it is
    paused: no time accrues toward a stall until the wait ends (or its deadline passes).
    """

    __slots__ = ("_aborted", "_on_abort", "_policy", "_running", "_tracker", "wakeups")

    def __init__(
        self,
        tracker: LivenessTracker,
        policy: StallPolicy,
        on_abort: Callable[[str], object] | None,
    ) -> None:
        self._tracker = tracker
        self._policy = policy
        self._on_abort = on_abort
        self._aborted = False
        self._running = False
        self.wakeups = 0
        """How many times the watchdog woke up (for tests and debugging)."""

    @property
    def policy(self) -> StallPolicy:
        return self._policy

    @property
    def aborted(self) -> bool:
        """True once ``on_abort`` was called."""
        return self._aborted

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: wake-ups, and whether it asked for an abort."""
        return {"wakeups": self.wakeups, "aborted": int(self._aborted)}

    async def run(self) -> None:
        """Watch until the tracker is terminal (or this task is cancelled)."""
        if self._running:
            raise InvalidArgument("this watchdog is already running; start run() once")
        self._running = True
        try:
            await trio.lowlevel.checkpoint()
            tracker = self._tracker
            origin = trio.current_time()
            while True:
                # None once terminal (an observer or on_abort may finish the work).
                deadline = self._check(trio.current_time(), origin)
                if deadline is None:
                    break
                with trio.move_on_at(deadline):
                    await tracker._parking_lot().park()
                self.wakeups += 1
        finally:
            self._running = False

    def _check(self, now: float, origin: float) -> float | None:
        """Bring the tracker up to date at ``now``; return when to look again."""
        tracker = self._tracker
        if tracker.terminal:
            return None
        policy = self._policy
        stall = policy.stall_after
        excused = tracker._excused_until()
        if excused is not None and now < excused:
            return excused  # paused: a wait ending or the work finishing wakes us early
        tracker._fold()
        quiet = tracker._quiet_since if tracker._quiet_since is not None else origin
        heard = tracker._heard_since if tracker._heard_since is not None else origin
        if excused is not None:  # a wait overran its deadline: silence counts from it
            quiet = max(quiet, excused)
            heard = max(heard, excused)
        missed = int((now - quiet) // stall) if now > quiet else 0
        # The same expression decides the deadline below and the count here, so a wake
        # exactly at a deadline always counts that pulse as missed (no float drift).
        while quiet + (missed + 1) * stall <= now:
            missed += 1
        while missed > 0 and quiet + missed * stall > now:
            missed -= 1
        if missed > tracker._missed:
            tracker._mark_missed(missed)
            if policy.abort_when_stalled and not self._aborted:
                self._aborted = True
                self._abort(stall)
        due = quiet + (missed + 1) * stall
        unreachable_after = policy.unreachable_after
        if unreachable_after is not None and tracker._reachability != "unreachable":
            if now >= heard + unreachable_after:
                tracker._mark_unreachable()
            else:
                due = min(due, heard + unreachable_after)
        return None if tracker.terminal else due

    def _abort(self, stall: float) -> None:
        callback = self._on_abort
        if callback is None:
            return
        reason = f"no progress for {stall:g}s: the stall policy aborts stalled work"
        try:
            callback(reason)
        except Exception:
            logger.exception("on_abort callback %r raised", callback)
