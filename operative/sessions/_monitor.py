"""``SessionHandle.monitor``: a turn now and then every interval, watched for stalls.

::

    monitor(...)                   the caller's task: tick → run → sleep until the next
    └── stall watchdog             a task of the session nursery, only while the loop runs
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from .._core._errors import InvalidArgument
from .._core._results import RunResult
from ..liveness import StallPolicy, create_stall_watchdog
from ._duration import Duration, parse_duration

if TYPE_CHECKING:
    from ._handle import SessionHandle

__all__ = ["CancellableScope", "MonitorResult", "check_monitor", "run_monitor", "start_monitor"]


@attrs.frozen(kw_only=True)
class MonitorResult:
    """How a :meth:`SessionHandle.monitor` loop ended."""

    ticks: int
    """How many runs the monitor started."""
    result: RunResult | None
    """The last tick's result (``None`` when cancelled before the first one ended)."""
    stopped_by: Literal["until", "max-ticks", "cancelled"]


def check_monitor(
    every: Duration,
    until: Callable[[RunResult], bool] | None,
    max_ticks: int | None,
    stall_policy: StallPolicy | None,
) -> tuple[float, StallPolicy]:
    """The tick interval and the watchdog's policy; bad options raise InvalidArgument."""
    interval = parse_duration(every)
    if interval <= 0:
        raise InvalidArgument(f"every= must be a positive duration, got {every!r}")
    if stall_policy is None:
        stall_policy = StallPolicy(stall_after=2 * interval, unreachable_after=4 * interval)
    elif not isinstance(stall_policy, StallPolicy):
        raise InvalidArgument(
            f"stall_policy= takes a StallPolicy, got {type(stall_policy).__name__}"
        )
    if until is not None and not callable(until):
        raise InvalidArgument(f"until= takes a callable (result -> bool), got {until!r}")
    if max_ticks is not None and (
        isinstance(max_ticks, bool) or not isinstance(max_ticks, int) or max_ticks < 1
    ):
        raise InvalidArgument(f"max_ticks= takes an int >= 1, got {max_ticks!r}")
    return interval, stall_policy


async def run_monitor(
    handle: SessionHandle,
    interval: float,
    policy: StallPolicy,
    input: Any,
    until: Callable[[RunResult], bool] | None,
    max_ticks: int | None,
) -> MonitorResult:
    """The loop, with its stall watchdog for exactly as long as the loop runs."""
    watchdog = create_stall_watchdog(handle._tracker, policy, on_abort=handle.cancel)
    watching = trio.CancelScope()

    async def watch() -> None:
        with watching:
            await watchdog.run()

    handle._nursery.start_soon(watch, name=f"operative session monitor watchdog {handle.id}")
    try:
        return await _ticks(handle, interval, input, until, max_ticks)
    finally:
        watching.cancel()  # disposed with the loop: an unpolled session never stalls


async def start_monitor(
    handle: SessionHandle,
    interval: float,
    policy: StallPolicy,
    input: Any,
    until: Callable[[RunResult], bool] | None,
    max_ticks: int | None,
    on_done: Callable[[MonitorResult], object] | None,
) -> None:
    """``handle.start_monitor``'s task: the loop, then ``on_done(result)``."""
    outcome = await run_monitor(handle, interval, policy, input, until, max_ticks)
    if on_done is not None:
        on_done(outcome)


async def _ticks(
    handle: SessionHandle,
    interval: float,
    input: Any,
    until: Callable[[RunResult], bool] | None,
    max_ticks: int | None,
) -> MonitorResult:
    ticks = 0
    last: RunResult | None = None
    with handle._cancellable() as scope:
        while True:
            next_tick = trio.current_time() + interval
            ticks += 1
            handle._tracker.pulse("host-reachability")
            last = await handle.run(input)
            if scope.cancel_called:
                break
            if until is not None and until(last):
                return MonitorResult(ticks=ticks, result=last, stopped_by="until")
            if max_ticks is not None and ticks >= max_ticks:
                return MonitorResult(ticks=ticks, result=last, stopped_by="max-ticks")
            await trio.sleep_until(next_tick)
    return MonitorResult(ticks=ticks, result=last, stopped_by="cancelled")


class CancellableScope:
    """A cancel scope that :meth:`SessionHandle.cancel` can reach while it is entered."""

    __slots__ = ("_scope", "_scopes")

    def __init__(self, scopes: set[trio.CancelScope]) -> None:
        self._scopes = scopes
        self._scope = trio.CancelScope()

    def __enter__(self) -> trio.CancelScope:
        self._scopes.add(self._scope)
        return self._scope.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        self._scopes.discard(self._scope)
        return bool(self._scope.__exit__(*exc))
