"""Recurring runs on trio's clock: ``serve_schedule`` and its :class:`Schedule`.

A schedule ticks on a fixed grid (``first_after`` from the start, then every ``every``
seconds), so slow ticks never make the schedule drift. Each tick may be delayed by a
random ``jitter`` in ``[0, jitter)`` drawn from a seeded generator (the same seed gives
the same delays, so tests are exact). A tick calls ``fn(*args)`` in a child task of
``serve_schedule``'s own nursery; :func:`current_tick` tells it which tick it is.

Two policies decide what happens when reality does not fit the grid:

``overlap`` — a tick comes while earlier runs are still going:
    ``"skip"`` drops the new tick; ``"queue"`` runs it when the previous run ends (at
    most ``max_queued`` wait; more are dropped); ``"cancel_previous"`` cancels the
    running ones and starts once they have ended; ``"allow"`` runs them side by side.
``missed`` — the schedule wakes up after more than one grid point passed (the process
    was suspended, or the event loop was blocked):
    ``"run_once"`` runs one tick for all of them; ``"run_all"`` hands every missed
    tick to the overlap policy at once; ``"skip"`` runs none and waits for the next
    grid point.

This is process-local, like ``SessionHandle.monitor``: a process that exits loses its
schedules. Durable work should be ticks that start durable runs.
"""

from __future__ import annotations

import logging
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Literal, TypeAlias

import attrs
import trio

from ._core._errors import InvalidArgument

__all__ = [
    "MissedPolicy",
    "OverlapPolicy",
    "Schedule",
    "ScheduleHandle",
    "Tick",
    "current_tick",
    "serve_schedule",
]

logger = logging.getLogger("operative.schedule")

OverlapPolicy: TypeAlias = Literal["skip", "queue", "cancel_previous", "allow"]
MissedPolicy: TypeAlias = Literal["run_once", "run_all", "skip"]

_OVERLAP = ("skip", "queue", "cancel_previous", "allow")
_MISSED = ("run_once", "run_all", "skip")


def _seconds(name: str, value: object, *, zero: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        kind = "a non-negative" if zero else "a positive"
        raise InvalidArgument(f"{name}= takes {kind} number of seconds, got {value!r}")


def _count(name: str, value: object, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgument(f"{name}= takes an int of at least {least}, got {value!r}")


@attrs.frozen(kw_only=True)
class Schedule:
    """When to tick and what to do when ticks collide; see the module docstring.

    ``every``, ``jitter`` and ``first_after`` are seconds on trio's clock (``jitter``
    below ``every``; ``first_after`` defaults to ``every``, 0 ticks at once).
    ``max_ticks`` stops the schedule after that many ticks were handed to the overlap
    policy (run or dropped). ``errors="raise"`` lets an exception from a tick end the
    schedule (out of ``serve_schedule``, in an ``ExceptionGroup`` as nurseries do);
    ``"log"`` logs it to ``operative.schedule`` and keeps going. ``liveness`` (a
    tracker, run or session handle) gets a ``host-reachability`` pulse per tick.
    """

    every: float
    jitter: float = 0.0
    overlap: OverlapPolicy = "skip"
    missed: MissedPolicy = "run_once"
    first_after: float | None = None
    max_ticks: int | None = None
    max_queued: int = 1
    seed: int | None = None
    errors: Literal["raise", "log"] = "raise"
    liveness: object = None

    def __attrs_post_init__(self) -> None:
        _seconds("every", self.every)
        _seconds("jitter", self.jitter, zero=True)
        if self.jitter >= self.every:
            raise InvalidArgument(
                f"jitter={self.jitter!r} must be shorter than every={self.every!r}, or "
                "ticks could swap places"
            )
        if self.overlap not in _OVERLAP:
            raise InvalidArgument(f"overlap= is one of {list(_OVERLAP)}, got {self.overlap!r}")
        if self.missed not in _MISSED:
            raise InvalidArgument(f"missed= is one of {list(_MISSED)}, got {self.missed!r}")
        if self.first_after is not None:
            _seconds("first_after", self.first_after, zero=True)
        if self.max_ticks is not None:
            _count("max_ticks", self.max_ticks, least=1)
        _count("max_queued", self.max_queued, least=0)
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise InvalidArgument(f"seed= takes an int or None, got {self.seed!r}")
        if self.errors not in ("raise", "log"):
            raise InvalidArgument(f"errors= takes 'raise' or 'log', got {self.errors!r}")
        if self.liveness is not None:
            from .liveness._heartbeat import tracker_of

            tracker_of(self.liveness)


@attrs.frozen(kw_only=True)
class Tick:
    """One tick, as :func:`current_tick` reports it inside the tick's task."""

    number: int
    """The grid point's number (1-based; missed points count too)."""
    scheduled_at: float
    """The grid point, on trio's clock (before jitter)."""
    started_at: float
    """When the schedule fired it (after jitter; later if it waited in a queue)."""
    missed: int = 0
    """Grid points before this one that were missed and folded into it."""


_current: ContextVar[Tick | None] = ContextVar("operative_schedule_tick", default=None)


def current_tick() -> Tick | None:
    """The tick the calling task runs for, or ``None`` outside a scheduled tick."""
    return _current.get()


@attrs.define(eq=False)
class _Active:
    tick: Tick
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)


class ScheduleHandle:
    """What ``await nursery.start(serve_schedule, ...)`` returns: watch or stop it."""

    __slots__ = ("_active", "_queue", "_scope", "_stats", "next_tick_at", "schedule")

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule
        self.next_tick_at: float | None = None
        """When the next tick is due (trio's clock, jitter included)."""
        self._scope = trio.CancelScope()
        self._active: list[_Active] = []
        self._queue: deque[Tick] = deque()
        self._stats = dict.fromkeys(
            (
                "fired",
                "started",
                "finished",
                "skipped_overlap",
                "missed",
                "cancelled_previous",
                "errors",
            ),
            0,
        )

    def __repr__(self) -> str:
        return f"<ScheduleHandle every={self.schedule.every:g}s running={len(self._active)}>"

    @property
    def running(self) -> int:
        """Ticks whose ``fn`` is running now."""
        return len(self._active)

    def statistics(self) -> dict[str, int]:
        """Counters: ticks fired, started, finished, skipped by the overlap policy,
        missed grid points, runs cancelled by ``cancel_previous``, errors logged, and
        the running and queued ticks now."""
        return {**self._stats, "running": len(self._active), "queued": len(self._queue)}

    def cancel(self, reason: str = "schedule cancelled") -> None:
        """Stop the schedule: running ticks are cancelled and ``serve_schedule`` returns."""
        self._scope.cancel(reason)


async def serve_schedule(
    schedule: Schedule,
    fn: Callable[..., Awaitable[object]],
    *args: Any,
    task_status: trio.TaskStatus[ScheduleHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``fn(*args)`` on ``schedule``'s ticks until cancelled (or ``max_ticks``).

    Start it with ``handle = await nursery.start(serve_schedule, schedule, fn)``: it
    reports a :class:`ScheduleHandle` once the schedule's clock has started. Every tick
    runs in a task of this function's own nursery, so when it returns (``max_ticks``
    reached and those runs ended, or :meth:`ScheduleHandle.cancel`) or is cancelled,
    no tick is left running.
    """
    if not isinstance(schedule, Schedule):
        raise InvalidArgument(f"serve_schedule() takes a Schedule first, got {schedule!r}")
    if not callable(fn):
        raise InvalidArgument(f"serve_schedule() takes an async callable, got {fn!r}")
    handle = ScheduleHandle(schedule)
    rng = random.Random(schedule.seed)
    tracker = None
    if schedule.liveness is not None:
        from .liveness._heartbeat import tracker_of

        tracker = tracker_of(schedule.liveness)
    every = schedule.every
    origin = trio.current_time()
    first = origin + (every if schedule.first_after is None else schedule.first_after)
    stats = handle._stats

    def point(n: int) -> float:
        return first + (n - 1) * every

    async def run(active: _Active, previous: tuple[_Active, ...]) -> None:
        try:
            with active.scope:
                for earlier in previous:
                    await earlier.done.wait()
                tick = active.tick
                if previous or tick.started_at < trio.current_time():
                    tick = attrs.evolve(tick, started_at=trio.current_time())
                stats["started"] += 1
                token = _current.set(tick)
                try:
                    await fn(*args)
                except Exception:
                    if schedule.errors == "raise":
                        raise
                    stats["errors"] += 1
                    logger.exception("scheduled tick %d of %r failed", tick.number, fn)
                finally:
                    _current.reset(token)
        finally:
            stats["finished"] += 1
            handle._active.remove(active)
            active.done.set()

    async def drain(active: _Active) -> None:
        while True:
            await run(active, ())
            if not handle._queue:
                return
            queued = handle._queue.popleft()
            active = _Active(tick=queued)
            handle._active.append(active)

    def fire(nursery: trio.Nursery, tick: Tick) -> None:
        stats["fired"] += 1
        if tracker is not None:
            tracker.pulse("host-reachability")
        busy = bool(handle._active)
        policy = schedule.overlap
        if busy and policy == "skip":
            stats["skipped_overlap"] += 1
            return
        if busy and policy == "queue":
            if len(handle._queue) < schedule.max_queued:
                handle._queue.append(tick)
            else:
                stats["skipped_overlap"] += 1
            return
        previous: tuple[_Active, ...] = ()
        if busy and policy == "cancel_previous":
            previous = tuple(handle._active)
            for earlier in previous:
                if not earlier.scope.cancel_called:
                    stats["cancelled_previous"] += 1
                earlier.scope.cancel(f"tick {tick.number} replaced it (cancel_previous)")
        active = _Active(tick=tick)
        handle._active.append(active)
        if policy == "queue":
            nursery.start_soon(drain, active)
        else:
            nursery.start_soon(run, active, previous)

    with handle._scope:
        async with trio.open_nursery() as nursery:
            n = 1
            handle.next_tick_at = point(1) + rng.uniform(0, schedule.jitter)
            task_status.started(handle)
            while schedule.max_ticks is None or stats["fired"] < schedule.max_ticks:
                await trio.sleep_until(handle.next_tick_at)
                now = trio.current_time()
                last = n + max(0, math.floor((now - point(n)) / every))
                count = last - n + 1
                if count == 1:
                    fire(nursery, Tick(number=n, scheduled_at=point(n), started_at=now))
                elif schedule.missed == "run_once":
                    stats["missed"] += count - 1
                    fire(
                        nursery,
                        Tick(
                            number=last, scheduled_at=point(last), started_at=now, missed=count - 1
                        ),
                    )
                elif schedule.missed == "run_all":
                    for k in range(n, last + 1):
                        if schedule.max_ticks is not None and stats["fired"] >= schedule.max_ticks:
                            break
                        fire(nursery, Tick(number=k, scheduled_at=point(k), started_at=now))
                else:
                    stats["missed"] += count
                n = last + 1
                handle.next_tick_at = point(n) + rng.uniform(0, schedule.jitter)
            handle.next_tick_at = None
