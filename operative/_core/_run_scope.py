"""The run scope: the ``CancelScope`` the loop runs in, why it was cancelled, and
whether the run has ended.

An abort, a deadline (the request's, the budget's duration), a crossed budget limit and
a shutdown all end the run the same way: the scope is cancelled, and whatever was in
flight is repaired by clean-up. The first reason recorded is the one the run reports.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ._run_state import CancelReason

if TYPE_CHECKING:
    from ._results import RunResult

__all__ = ["RunScope"]


class RunScope:
    """A run's cancel scope, its deadlines, the first reason it was cancelled for, and
    the run's result, with whether it has ended (set by the loop task once the result is
    recorded, like a ``trio.Event``)."""

    __slots__ = (
        "_ended",
        "_ended_event",
        "cancel_scope",
        "deadlines",
        "reason",
        "result",
        "watcher",
    )

    def __init__(self) -> None:
        self.cancel_scope = trio.CancelScope()
        """What the loop task runs in; cancelled (or given a deadline) before the loop
        starts, it takes effect as the loop enters it."""
        self.reason: CancelReason | None = None
        """Why the scope was cancelled, first come (written by :meth:`cancel` only)."""
        self.deadlines: list[tuple[float, CancelReason]] | None = None
        """The deadlines added, with their reasons (made on the first one)."""
        self.result: RunResult | None = None
        """The run's result, once it has ended (recorded by the loop task, ``drive``)."""
        self._ended = False
        """True once the run has ended (``end``): cancelling then does nothing."""
        self._ended_event: trio.Event | None = None
        """Made only when someone waits before the end (most runs are awaited after
        they end, or in the task that runs them)."""
        self.watcher: Callable[[float | None], None] | None = None
        """Told synchronously when the scope is cancelled (``None``) or gains a deadline
        (that deadline): a feature that shields work in the loop task (the durable
        journal's writes) bounds it from then on."""

    def cancel(self, reason: CancelReason) -> None:
        """Cancel the run scope for ``reason`` (kept only if no reason came first)."""
        if self._ended:
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

    def has_ended(self) -> bool:
        return self._ended

    def end(self) -> None:
        """The run has ended and its result is recorded (the loop task only)."""
        self._ended = True
        if self._ended_event is not None:
            self._ended_event.set()

    async def wait_ended(self) -> None:
        """Return once the run has ended (a checkpoint either way)."""
        if self._ended:
            await trio.lowlevel.checkpoint()
            return
        if self._ended_event is None:
            self._ended_event = trio.Event()
        await self._ended_event.wait()

    def deadline_reason(self) -> CancelReason | None:
        """The reason of the deadline that fired (the earliest one), if any did."""
        if not self.deadlines:
            return None
        return min(self.deadlines, key=lambda item: item[0])[1]
