"""The run scope: the ``CancelScope`` the loop runs in, and why it was cancelled.

An abort, a deadline (the request's, the budget's duration), a crossed budget limit and
a shutdown all end the run the same way: the scope is cancelled, and whatever was in
flight is repaired by clean-up. The first reason recorded is the one the run reports.
"""

from __future__ import annotations

import trio

from ._run_state import CancelReason

__all__ = ["RunScope"]


class RunScope:
    """A run's cancel scope, its deadlines, and the first reason it was cancelled for."""

    __slots__ = ("_done", "cancel_scope", "deadlines", "reason")

    def __init__(self, done: trio.Event) -> None:
        self.cancel_scope = trio.CancelScope()
        self.reason: CancelReason | None = None
        """Why the scope was cancelled, first come (written by :meth:`cancel` only)."""
        self.deadlines: list[tuple[float, CancelReason]] = []
        self._done = done
        """Set once the run has ended (by ``RunTask``): cancelling then does nothing."""

    def cancel(self, reason: CancelReason) -> None:
        """Cancel the run scope for ``reason`` (kept only if no reason came first)."""
        if self._done.is_set():
            return
        if self.reason is None:
            self.reason = reason
        self.cancel_scope.cancel()

    def add_deadline(self, when: float, reason: CancelReason) -> None:
        """Bound the run scope by ``when`` (trio time); ``reason`` says why if it fires."""
        self.deadlines.append((when, reason))
        scope = self.cancel_scope
        scope.deadline = min(scope.deadline, when)

    def deadline_reason(self) -> CancelReason | None:
        """The reason of the deadline that fired (the earliest one), if any did."""
        if not self.deadlines:
            return None
        return min(self.deadlines, key=lambda item: item[0])[1]
