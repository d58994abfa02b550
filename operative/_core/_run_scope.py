"""The run scope: the ``CancelScope`` the loop runs in, and why it was cancelled.

An abort, a deadline (the request's, the budget's duration), a crossed budget limit and
a shutdown all end the run the same way: the scope is cancelled, and whatever was in
flight is repaired by clean-up. The first reason recorded is the one the run reports.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ._run_state import CancelReason

__all__ = ["RunDone", "RunScope"]


class RunDone:
    """Set once a run has ended, like a ``trio.Event``; the event itself is made only
    when someone waits before the end (most runs are awaited after they end, or in the
    task that runs them)."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: trio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once the run has ended (a checkpoint either way)."""
        if self._set:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()


class RunScope:
    """A run's cancel scope, its deadlines, and the first reason it was cancelled for."""

    __slots__ = ("_done", "cancel_scope", "deadlines", "reason", "watcher")

    def __init__(self, done: RunDone) -> None:
        self.cancel_scope = trio.CancelScope()
        self.reason: CancelReason | None = None
        """Why the scope was cancelled, first come (written by :meth:`cancel` only)."""
        self.deadlines: list[tuple[float, CancelReason]] | None = None
        """The deadlines added, with their reasons (made on the first one)."""
        self._done = done
        """Set once the run has ended (by ``RunTask``): cancelling then does nothing."""
        self.watcher: Callable[[float | None], None] | None = None
        """Told synchronously when the scope is cancelled (``None``) or gains a deadline
        (that deadline): a feature that shields work in the loop task (the durable
        journal's writes) bounds it from then on."""

    def cancel(self, reason: CancelReason) -> None:
        """Cancel the run scope for ``reason`` (kept only if no reason came first)."""
        if self._done.is_set():
            return
        if self.reason is None:
            self.reason = reason
        self.cancel_scope.cancel()
        if self.watcher is not None:
            self.watcher(None)

    def add_deadline(self, when: float, reason: CancelReason) -> None:
        """Bound the run scope by ``when`` (trio time); ``reason`` says why if it fires."""
        if self.deadlines is None:
            self.deadlines = []
        self.deadlines.append((when, reason))
        scope = self.cancel_scope
        scope.deadline = min(scope.deadline, when)
        if self.watcher is not None:
            self.watcher(when)

    def deadline_reason(self) -> CancelReason | None:
        """The reason of the deadline that fired (the earliest one), if any did."""
        if not self.deadlines:
            return None
        return min(self.deadlines, key=lambda item: item[0])[1]
