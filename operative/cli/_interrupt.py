"""Ctrl-C as a cancellation: the command stops at its next checkpoint, never mid-statement."""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable

import trio

__all__ = ["until_interrupted"]


async def until_interrupted(command: Callable[[], Awaitable[int]]) -> int | None:
    """Run ``command`` and return its exit code; the first SIGINT cancels it (``None``).

    Trio's own Ctrl-C handling raises ``KeyboardInterrupt`` wherever the code happens
    to be, so a statement can stop halfway: a provider SDK's request coroutine made and
    never awaited (a ``RuntimeWarning`` after the exit line), a call between two of its
    steps. A cancellation lands at a checkpoint instead, and every durable run in flight
    treats it as the shutdown it is (lease released, nothing terminal recorded).

    The first signal restores Trio's handler, so a second Ctrl-C, pressed while the
    clean-up runs, interrupts at once. A command that opens a receiver of its own
    (``serve``, ``mcp serve``) gets the signal instead while that receiver is open.
    """
    if threading.current_thread() is not threading.main_thread():
        return await command()  # signals reach the main thread only (a test's worker)
    code: int | None = None
    async with trio.open_nursery() as nursery:

        async def watch(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with trio.open_signal_receiver(signal.SIGINT) as signals:
                task_status.started()
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break

        await nursery.start(watch)
        code = await command()
        nursery.cancel_scope.cancel()  # the command ended: stop watching
    return code
