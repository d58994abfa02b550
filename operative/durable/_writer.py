"""One durable run's writes, each made whole: a cancellation never cuts one short.

A write from the run's loop task is made in that task, shielded: no scheduler hand-off.
Its shield is bounded as soon as a cancellation could reach the task: the deadlines in
force when it starts, and whatever the run scope says of a cancellation or a deadline
that comes meanwhile (:attr:`RunScope.watcher`), and the writer task, which sees any
cancellation from outside the run. Writes from other tasks (parallel tool calls) go to
the run's writer task, which makes them in turn (one scheduler hand-off per write), and
waits for them unshielded, so it sees every cancellation; before the writer starts, and
after the run finished, each write gets a task of its own. Either way the caller learns
whether its write committed.

The writer task also renews the run's lease (:meth:`RunWriter.keep_lease`): idle, it
waits for a write with a deadline at the next renewal. A write it is making does not
delay a renewal: a write does not extend the lease (the engines check the fence, they do
not move the expiry), so a renewal held up behind a write slower than ``2/3`` of the
lease would let the lease lapse while the process is healthy. The task that waits for
that write renews instead, when the renewal falls due (see :meth:`RunWriter._wait`).
Whoever renews first moves the next renewal on, so a due renewal is made once.
"""

from __future__ import annotations

import collections
import logging
import math
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

    __slots__ = ("_idle", "_in_flight", "_renew", "_renew_at", "_scope", "_task", "_wake",
                 "_writes", "lease_seconds", "unknown")  # fmt: skip

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        """The bound on a write once a cancellation has arrived."""
        self.unknown: str | None = None
        """Set when a write overran its bound: whether it committed is not known."""
        self._writes: collections.deque[_Write] | None = None
        """Writes waiting for the writer task; ``None`` while none runs."""
        self._wake = trio.Event()
        self._scope = trio.CancelScope()
        self._task: trio.lowlevel.Task | None = None
        """The task whose writes are made in it (the run's loop task), if any."""
        self._in_flight: trio.CancelScope | None = None
        """The shield of the write that task is making now."""
        self._renew: Callable[[], Awaitable[bool]] | None = None
        """Renews the lease once; ``None`` while nothing is to be renewed."""
        self._renew_at = math.inf
        """When the next renewal is due (trio time)."""
        self._idle: trio.CancelScope | None = None
        """The writer task's wait for work, while it waits (its deadline: the renewal)."""

    def own(self, task: trio.lowlevel.Task | None) -> None:
        """Make the writes of ``task`` in it (``None``: none).

        Only for a task that nothing can cancel without :meth:`arrived` being told: the
        run's loop task, under the run scope (whose watcher calls it), with no other
        cancel scope of its own around its writes (no other extension wraps the loop).
        """
        self._task = task

    def arrived(self, when: float | None = None) -> None:
        """A cancellation arrived (``None``), or will at ``when`` (trio time): the write
        the loop task is making gets at most ``lease_seconds`` from then on."""
        shield = self._in_flight
        if shield is not None:
            start = trio.current_time() if when is None else when
            shield.deadline = min(shield.deadline, start + self.lease_seconds)

    def start(self, nursery: trio.Nursery, *, name: str) -> None:
        """Start the writer task in ``nursery`` (the run's): writes from now on queue for it."""
        self._writes = collections.deque()
        nursery.start_soon(self._run, name=name)

    def stop(self) -> None:
        """End the writer task and the lease's renewal (no write is in flight: the run
        is over); later writes get a task each."""
        self._writes = None
        self._renew = None
        self._scope.cancel()

    def keep_lease(self, renew: Callable[[], Awaitable[bool]]) -> None:
        """Call ``renew`` every ``lease_seconds / 3`` from now until :meth:`stop`, or until
        it returns ``False`` (the lease is lost: nothing more to renew).

        ``renew`` handles its own errors; it runs in the writer task while that waits
        for work, or else in the task waiting for the write the writer is making.
        """
        self._renew = renew
        self._due(trio.current_time() + self.lease_seconds / 3)

    def _due(self, at: float) -> None:
        """Make the next renewal due at ``at``: an idle writer task wakes then."""
        self._renew_at = at
        idle = self._idle
        if idle is not None:
            idle.deadline = at

    async def _renew_if_due(self) -> None:
        """Renew the lease if a renewal is due (the next one is due an interval on)."""
        renew = self._renew
        now = trio.current_time()
        if renew is None or now < self._renew_at:
            return
        self._due(now + self.lease_seconds / 3)  # before awaiting: due once, made once
        try:
            keep = await renew()
        except BaseException:
            if self._renew is renew:
                self._due(now)  # cut short (cancelled): due again, for whoever waits next
            raise
        if not keep and self._renew is renew:
            self._renew = None
            self._due(math.inf)

    async def _wait(self, item: _Write) -> None:
        """Wait until the writer task has made ``item``, renewing the lease meanwhile
        when a renewal falls due (the writer task, busy with ``item``, cannot)."""
        while not item.done.is_set():
            if self._renew is None:
                await item.done.wait()
                return
            with trio.move_on_at(self._renew_at):
                await item.done.wait()
                return
            await self._renew_if_due()

    async def commit(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """Run one write (with its bookkeeping) so that no cancellation cuts it short.

        The write runs shielded: in the loop task itself (see :meth:`own`), or in another
        task: the run's writer task (started with the run's tasks), or else a task of its
        own. An abort, a budget or a shutdown that
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
        if self._task is not None and trio.lowlevel.current_task() is self._task:
            await self._commit_here(write, what)
            return
        item = _Write(write)
        writes.append(item)
        self._wake.set()
        cancelled: BaseException | None = None
        try:
            await self._wait(item)
        except trio.Cancelled as exc:
            cancelled = exc
            bound = item.shield.deadline = trio.current_time() + self.lease_seconds
            with trio.CancelScope(shield=True):
                with trio.move_on_at(bound):  # a renewal made here is bounded as well
                    await self._wait(item)
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

    async def _commit_here(self, write: Callable[[], Awaitable[None]], what: str) -> None:
        """:meth:`commit` in the calling task (the loop task), shielded.

        The shield is bounded by ``lease_seconds`` past the earliest deadline in force
        (past now if the task is cancelled already), and :meth:`arrived` bounds it from a
        cancellation that comes while the write is made.
        """
        deadline = trio.current_effective_deadline()
        if deadline == -math.inf:  # cancelled already: the write is made, bounded
            deadline = trio.current_time()
        # The bound given to the constructor: setting it afterwards costs a context
        # manager of trio's on every commit.
        shield = trio.CancelScope(shield=True, deadline=deadline + self.lease_seconds)
        self._in_flight = shield
        try:
            with shield:
                made: outcome.Outcome[None] = await outcome.acapture(write)
        finally:
            self._in_flight = None
        result = self._known(made, what)
        try:
            # Cancelled meanwhile: the cancellation goes on once the write is over (no
            # scheduler pass otherwise, and no walk of the cancel scopes).
            await trio.lowlevel.checkpoint_if_cancelled()
        except trio.Cancelled:
            if isinstance(result, outcome.Error):
                logger.warning("%s failed as the run was stopped", what, exc_info=result.error)
            raise
        result.unwrap()

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

    def _known(self, result: outcome.Outcome[None], what: str) -> outcome.Outcome[None]:
        """A write's outcome; one cut by its bound is unknown (and the run stops writing)."""
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            self.unknown = (
                f"writing {what} did not finish within lease_seconds="
                f"{self.lease_seconds:g}s of the run being stopped, so whether it "
                "committed is unknown; the run stops writing and recover() finishes it from "
                "its journal"
            )
            return outcome.Error(OperativeError(self.unknown))
        return result

    def _settle(
        self, result: outcome.Outcome[None], what: str, cancelled: BaseException | None
    ) -> None:
        """Report a write's outcome: a write cut by its bound is unknown, and a
        cancellation that arrived meanwhile goes on once the write is over."""
        result = self._known(result, what)
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
        if writes is None:
            # Stopped before this task first ran: the run was over without ever passing
            # through the scheduler (its commits made in its loop task, none waiting).
            await trio.lowlevel.checkpoint()
            return
        try:
            with self._scope:
                try:
                    await self._take(writes)
                except trio.Cancelled:
                    if not self._scope.cancel_called:
                        # From outside the run (its caller cancelled, a shutdown): a write
                        # the loop task is making is bounded from now on.
                        self.arrived()
                    raise
        finally:
            self._writes = None
            for item in writes:
                item.done.set()  # never taken: its caller makes it
            writes.clear()

    async def _take(self, writes: collections.deque[_Write]) -> None:
        """Make the writes in turn; between them, renew the lease when it falls due."""
        while True:
            while not writes:
                self._wake = trio.Event()
                idle = self._idle = trio.CancelScope(deadline=self._renew_at)
                try:
                    with idle:
                        await self._wake.wait()
                finally:
                    self._idle = None
                await self._renew_if_due()
            item = writes[0]
            with item.shield:
                item.result = await outcome.acapture(item.write)
            writes.popleft()
            item.done.set()
