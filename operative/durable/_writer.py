"""One durable run's writes, each made whole: a cancellation never cuts one short.

The run's writer task makes them in turn (one scheduler hand-off per write); before it
starts, and after the run finished, each write gets a task of its own. Either way the
caller learns whether its write committed.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable

import outcome
import trio

from .._core._errors import OperativeError

__all__ = ["RunWriter"]

logger = logging.getLogger("operative.durable")


class _Write:
    """One write handed to the run's writer task."""

    __slots__ = ("done", "result", "shield", "write")

    def __init__(self, write: Callable[[], Awaitable[None]]) -> None:
        self.write = write
        self.shield = trio.CancelScope(shield=True)
        self.done = trio.Event()
        self.result: outcome.Outcome[None] | None = None
        """Set once the writer has made the write; ``None`` when it never took it."""


class RunWriter:
    """Makes one run's writes, shielded; see :meth:`commit`."""

    __slots__ = ("_scope", "_wake", "_writes", "lease_seconds", "unknown")

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        """The bound on a write once a cancellation has arrived."""
        self.unknown: str | None = None
        """Set when a write overran its bound: whether it committed is not known."""
        self._writes: collections.deque[_Write] | None = None
        """Writes waiting for the writer task; ``None`` while none runs."""
        self._wake = trio.Event()
        self._scope = trio.CancelScope()

    def start(self, nursery: trio.Nursery, *, name: str) -> None:
        """Start the writer task in ``nursery`` (the run's): writes from now on queue for it."""
        self._writes = collections.deque()
        nursery.start_soon(self._run, name=name)

    def stop(self) -> None:
        """End the writer task (no write is in flight: the run is over); later writes
        get a task each."""
        self._writes = None
        self._scope.cancel()

    async def commit(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """Run one write (with its bookkeeping) so that no cancellation cuts it short.

        The write runs shielded, in another task: the run's writer task (started with the
        run's tasks), or else a task of its own. An abort, a budget or a shutdown that
        arrives meanwhile waits for it, then goes on (``Cancelled`` is raised here once the
        write is over), so the process always knows whether it committed. Only once a
        cancellation has arrived is the write bounded, by ``lease_seconds``: a write still
        unfinished then has an unknown outcome, and this run writes nothing more
        (``OperativeError``; the record is left for recovery). Until then it is bounded by
        the store's own timeouts, like any query, and by no deadline that a mock clock
        could reach while a worker thread does the work.
        """
        writes = self._writes
        if writes is None:
            await self.commit_in_task(write, what)
            return
        item = _Write(write)
        writes.append(item)
        self._wake.set()
        cancelled: BaseException | None = None
        try:
            await item.done.wait()
        except trio.Cancelled as exc:
            cancelled = exc
            item.shield.deadline = trio.current_time() + self.lease_seconds
            with trio.CancelScope(shield=True):
                await item.done.wait()  # bounded by the write's own deadline
        result = item.result
        if result is None:
            # The writer stopped (the run's nursery was cancelled) before it took this
            # write: it is made here, as if no writer had run.
            await self.commit_in_task(write, what)
            if cancelled is not None:
                raise cancelled
            return
        self._settle(result, what, cancelled)

    async def commit_in_task(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """:meth:`commit` in a task of its own (no writer task runs)."""
        shield = trio.CancelScope(shield=True)
        done = trio.Event()
        box: list[outcome.Outcome[None]] = []

        async def commit() -> None:
            with shield:
                box.append(await outcome.acapture(write))
            done.set()

        cancelled: BaseException | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit, name=f"operative durable write: {what}")
            try:
                await done.wait()
            except trio.Cancelled as exc:
                cancelled = exc
                shield.deadline = trio.current_time() + self.lease_seconds
                with trio.CancelScope(shield=True):
                    await done.wait()  # bounded by the write's own deadline
        (result,) = box
        self._settle(result, what, cancelled)

    def _settle(
        self, result: outcome.Outcome[None], what: str, cancelled: BaseException | None
    ) -> None:
        """Report a write's outcome: a write cut by its bound is unknown, and a
        cancellation that arrived meanwhile goes on once the write is over."""
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            self.unknown = (
                f"writing {what} did not finish within lease_seconds="
                f"{self.lease_seconds:g}s of the run being stopped, so whether it "
                "committed is unknown; the run stops writing and recover() finishes it from "
                "its journal"
            )
            result = outcome.Error(OperativeError(self.unknown))
        if cancelled is not None:
            if isinstance(result, outcome.Error):
                logger.warning("%s failed as the run was stopped", what, exc_info=result.error)
            raise cancelled
        result.unwrap()

    async def _run(self) -> None:
        """Make the run's writes in turn, each shielded (see :meth:`commit`), until the
        run finishes or its nursery is cancelled; a write it did not take is left to its
        caller."""
        writes = self._writes
        assert writes is not None
        try:
            with self._scope:
                while True:
                    while not writes:
                        self._wake = trio.Event()
                        await self._wake.wait()
                    item = writes[0]
                    with item.shield:
                        item.result = await outcome.acapture(item.write)
                    writes.popleft()
                    item.done.set()
        finally:
            self._writes = None
            for item in writes:
                item.done.set()  # never taken: its caller makes it
            writes.clear()
