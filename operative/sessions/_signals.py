"""Named signals a session's waits park on: a host delivers, every parked wait receives."""

from __future__ import annotations

from typing import Any

import trio

from .._errors import InvalidArgument
from ..liveness import LivenessTracker

__all__ = ["SignalBoard"]


class _Waiter:
    __slots__ = ("event", "name", "payload")

    def __init__(self, name: str) -> None:
        self.name = name
        self.event = trio.Event()
        self.payload: Any = None


class SignalBoard:
    """The parked waits of one session, by signal name (signals are not queued)."""

    __slots__ = ("_tracker", "_waiters")

    def __init__(self, tracker: LivenessTracker) -> None:
        self._tracker = tracker
        self._waiters: dict[str, list[_Waiter]] = {}

    async def wait(self, name: str, *, prompt: str | None = None) -> Any:
        """Park until ``name`` is delivered (a declared wait on the session's liveness)."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a signal name is a non-empty str, got {name!r}")
        waiter = _Waiter(name)
        self._waiters.setdefault(name, []).append(waiter)
        declared = self._tracker.declare_wait(
            "review" if prompt else "signal", detail=prompt or name
        )
        try:
            try:
                await waiter.event.wait()
            except trio.Cancelled:
                if waiter.event.is_set():
                    # The signal was delivered as the wait was being cancelled: hand the
                    # payload over (deliver() reported it delivered); the cancellation
                    # surfaces at the caller's next checkpoint.
                    return waiter.payload
                raise
            return waiter.payload
        finally:
            waiting = self._waiters.get(name, [])
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting:
                self._waiters.pop(name, None)
            self._tracker.clear_wait(declared)

    def deliver(self, name: str, payload: Any = None) -> bool:
        """Hand ``payload`` to every wait parked on ``name``; False when none was."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a signal name is a non-empty str, got {name!r}")
        waiting = self._waiters.pop(name, [])
        for waiter in waiting:
            waiter.payload = payload
            waiter.event.set()
        return bool(waiting)
