"""Ctrl-C and SIGTERM as a cancellation: the command stops at its next checkpoint, never
mid-statement, and its durable runs are left for ``operative recover`` at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable

import trio

__all__ = ["STOPPING_SIGNALS", "until_interrupted"]

STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Ctrl-C, and what a process manager (systemd, ``docker stop``, Kubernetes) sends."""


async def until_interrupted(command: Callable[[], Awaitable[int]]) -> int | signal.Signals:
    """Run ``command`` and return its exit code, or the signal that cancelled it.

    Trio's own Ctrl-C handling raises ``KeyboardInterrupt`` wherever the code happens
    to be, so a statement can stop halfway: a provider SDK's request coroutine made and
    never awaited (a ``RuntimeWarning`` after the exit line), a call between two of its
    steps. SIGTERM's default ends the process on the spot, so a durable run keeps its
    lease until it expires. A cancellation lands at a checkpoint instead, and every
    durable run in flight treats it as the shutdown it is (lease released, nothing
    terminal recorded).

    The first signal restores the previous handlers, so a second one, sent while the
    clean-up runs, acts at once (``KeyboardInterrupt``; SIGTERM's default). A command
    that opens a receiver of its own (``serve``, ``mcp serve``) gets the signal instead
    while that receiver is open.
    """
    if threading.current_thread() is not threading.main_thread():
        return await command()  # signals reach the main thread only (a test's worker)
    code: int | signal.Signals | None = None
    async with trio.open_nursery() as nursery:

        async def watch(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal code
            with trio.open_signal_receiver(*STOPPING_SIGNALS) as signals:
                task_status.started()
                async for signum in signals:
                    code = signal.Signals(signum)
                    nursery.cancel_scope.cancel()
                    break

        await nursery.start(watch)
        code = await command()  # when cancelled, ``code`` is the signal (set by ``watch``)
        nursery.cancel_scope.cancel()  # the command ended: stop watching
    assert code is not None
    return code
