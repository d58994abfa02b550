"""Named signals a session's waits park on: a host delivers, every parked wait receives.

A wait parks its task directly (``wait_task_rescheduled``), so delivery and cancellation
cannot both claim it: a delivery reschedules the parked tasks with the payload, and a
cancelled wait leaves the board in its abort callback, before any later delivery can see
it. A cancelled wait therefore raises ``Cancelled`` and never received the signal, and
:meth:`SignalBoard.deliver` reports only the waits that did receive it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import outcome
import trio

from .._core._errors import InvalidArgument
from ..liveness import LivenessTracker

if TYPE_CHECKING:
    from ._handle import SessionHandle

__all__ = ["SignalBoard", "current_handle", "wait_for_signal"]

current_handle: ContextVar[SessionHandle | None] = ContextVar(
    "operative_session_handle", default=None
)
"""The session handle whose run the current task belongs to (set by ``handle.run``)."""


class _Waiter:
    __slots__ = ("name", "task")

    def __init__(self, name: str, task: trio.lowlevel.Task) -> None:
        self.name = name
        self.task = task


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
        waiter = _Waiter(name, trio.lowlevel.current_task())
        declared = self._tracker.declare_wait(
            "review" if prompt else "signal", detail=prompt or name
        )

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._remove(waiter)  # a later deliver() no longer sees this wait
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            self._waiters.setdefault(name, []).append(waiter)
            return await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            self._remove(waiter)
            self._tracker.clear_wait(declared)

    def _remove(self, waiter: _Waiter) -> None:
        waiting = self._waiters.get(waiter.name)
        if waiting is None:
            return
        if waiter in waiting:
            waiting.remove(waiter)
        if not waiting:
            del self._waiters[waiter.name]

    def deliver(self, name: str, payload: Any = None) -> bool:
        """Hand ``payload`` to every wait parked on ``name``; False when none was."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"a signal name is a non-empty str, got {name!r}")
        waiting = self._waiters.pop(name, [])
        for waiter in waiting:
            trio.lowlevel.reschedule(waiter.task, outcome.Value(payload))
        return bool(waiting)


async def wait_for_signal(name: str, *, prompt: str | None = None) -> Any:
    """From a tool of a session's run: park until the host signals ``name``.

    See :meth:`SessionHandle.wait_for_signal`.

    Raises:
        InvalidArgument: not awaited inside a run started by a session handle.
    """
    handle = current_handle.get()
    if handle is None:
        raise InvalidArgument(
            "wait_for_signal() is awaited from a tool of a run started by SessionHandle.run"
        )
    return await handle.wait_for_signal(name, prompt=prompt)
