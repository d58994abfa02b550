"""The run scope: the ``CancelScope`` the loop runs in, why it was cancelled, and
whether the run has ended.

An abort, a deadline (the request's, the budget's duration), a crossed budget limit and
a shutdown all end the run the same way: the scope is cancelled, and whatever was in
flight is repaired by clean-up. The first reason recorded is the one the run reports.

A run that nothing can cancel needs no scope of its own: one run to its end in its
caller's task (``agent.run``, ``run_to_end``) with no extension, steering, watchdog,
``abort_on``, request deadline or approval handler, whose tools are never handed a
context (the only way to its handle), can end early only when its caller is cancelled,
and that cancellation reaches it as it would through a scope. Such a run is *sealed*:
it enters no ``trio.CancelScope`` (about 6 µs and 1 KiB a run, the largest fixed cost of
a one-step run), and asking a sealed run to stop is a bug that fails loudly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ._extension import NO_EXTENSIONS
from ._run_state import CancelReason
from ._tool_phase import keeps_its_calls

if TYPE_CHECKING:
    from ._extension import Extensions
    from ._options import RunConfig
    from ._results import RunResult

__all__ = ["RunScope", "nothing_cancels"]


def nothing_cancels(config: RunConfig, ext: Extensions) -> bool:
    """True when nothing but the caller can end a run of ``config`` early: no feature
    is attached (budgets, guardrails, durability, tracing and tool sources all are
    extensions), no steering, stall watchdog, ``abort_on`` or request deadline, no
    approval handler, and no tool is ever handed a context (through which a subagent
    or handoff reaches the run). What holds then for a run in its caller's task: its
    handle never leaves the kernel."""
    request = config.request_context
    return (
        ext is NO_EXTENSIONS
        and config.steering is None
        and config.stall_policy is None
        and config.abort_on is None
        and config.on_approval is None
        and (request is None or request.deadline is None)
        and keeps_its_calls(config.toolbox)
    )


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
        "sealed",
        "watcher",
    )

    def __init__(self) -> None:
        self.cancel_scope: trio.CancelScope | None = None
        """Made when the loop enters it (:meth:`enter`), or earlier by a cancel or a
        deadline that comes before the loop starts; never for a sealed run."""
        self.sealed = False
        """The run runs with no scope: nothing can cancel it but its caller."""
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
        self._made().cancel()
        if self.watcher is not None:
            self.watcher(None)

    def add_deadline(self, when: float, reason: CancelReason) -> None:
        """Bound the run scope by ``when`` (trio time); ``reason`` says why if it fires."""
        if self.deadlines is None:
            self.deadlines = []
        self.deadlines.append((when, reason))
        scope = self._made()
        scope.deadline = min(scope.deadline, when)
        if self.watcher is not None:
            self.watcher(when)

    def enter(self, sealed: bool) -> trio.CancelScope | None:
        """What the loop runs in: the run's cancel scope, or nothing (``None``) when
        ``sealed`` (:func:`nothing_cancels` holds for a run in its caller's task) and
        nobody has cancelled the run or given it a deadline before it started."""
        scope = self.cancel_scope
        if scope is None:
            if sealed:
                self.sealed = True
                return None
            scope = self.cancel_scope = trio.CancelScope()
        return scope

    def _made(self) -> trio.CancelScope:
        scope = self.cancel_scope
        if scope is None:
            if self.sealed:
                raise AssertionError(
                    "a sealed run (one nothing but its caller can cancel) was asked to "
                    "stop: nothing_cancels() let through a way to its handle"
                )
            scope = self.cancel_scope = trio.CancelScope()
        return scope

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
