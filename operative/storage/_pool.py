"""What the thread-backed stores share: a bounded pool of connections and its closing.

Closing is bounded: :meth:`PooledStore.aclose` waits at most ``CLOSE_TIMEOUT`` seconds
(trio's clock) for the calls other tasks still have in flight. When some are still running
then, the store is closed all the same, each of those calls closes its own connection
when it ends, and ``aclose`` raises an :class:`~operative.OperativeError` saying so: it
never reports a clean close that did not happen.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import trio

from .._core._errors import InvalidArgument, OperativeError

__all__ = ["CLOSE_TIMEOUT", "PooledStore"]

logger = logging.getLogger("operative.storage")

CLOSE_TIMEOUT = 30.0
"""Seconds :meth:`PooledStore.aclose` waits for calls in flight before it gives up on them."""


class PooledStore:
    """Base of stores whose blocking connections are used from worker threads.

    A subclass calls :meth:`_init_pool` from its ``__init__``. Its ``_call`` takes one
    place of ``_limiter``, an idle connection (or opens one), and hands the connection
    back with :meth:`_give_back`.
    """

    __slots__ = ("_closed", "_drained", "_idle", "_limiter", "_max_connections")

    _closed: bool
    _drained: bool
    _idle: list[Any]
    _limiter: trio.CapacityLimiter
    _max_connections: int

    def _init_pool(self, max_connections: int) -> None:
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise InvalidArgument(f"max_connections must be an int, not {max_connections!r}")
        if max_connections < 1:
            raise InvalidArgument(f"max_connections must be >= 1, not {max_connections!r}")
        self._max_connections = max_connections
        self._limiter = trio.CapacityLimiter(max_connections)
        self._idle = []
        self._closed = False
        self._drained = False  # aclose took the idle connections: late calls close their own

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"this {type(self).__name__} is closed; create a new one")

    async def _give_back(self, conn: Any, *, discard: bool = False) -> None:
        """Return ``conn`` to the pool, or close it: when ``discard`` (it may be unusable)
        or when the store was closed while the call that used it ran.

        Closing runs in a worker thread that is always awaited, shielded: it is bounded
        by itself (neither backend's ``close`` waits for another connection or the server).
        """
        if not (discard or self._drained):
            self._idle.append(conn)
            return
        with trio.CancelScope(shield=True):
            try:
                await trio.to_thread.run_sync(conn.close)
            except Exception:
                logger.warning("closing a %s connection failed", type(self).__name__, exc_info=True)

    async def aclose(self) -> None:
        """Wait (at most ``CLOSE_TIMEOUT`` seconds) for calls in flight, then close every
        connection.

        The store cannot be used afterwards; closing twice is harmless. Closing is
        shielded from cancellation.

        Raises:
            OperativeError: calls of other tasks were still running when the time was up.
                The store is closed anyway and those calls close their connections when
                they end; close a store only after the tasks using it are done.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        held: list[object] = []
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(CLOSE_TIMEOUT):
                    for _ in range(self._max_connections):  # every place held: none in flight
                        token = object()
                        await self._limiter.acquire_on_behalf_of(token)
                        held.append(token)
                idle, self._idle = self._idle, []
                self._drained = True
                await trio.to_thread.run_sync(_close_all, idle)
            finally:
                for token in held:
                    self._limiter.release_on_behalf_of(token)
        running = self._max_connections - len(held)
        if running:
            raise OperativeError(
                f"{self!r} was closed while {running} call(s) of other tasks were still "
                f"running after {CLOSE_TIMEOUT:g} s; each closes its connection when it "
                "ends. Close a store only after the tasks that use it are done"
            )

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        except OperativeError:
            if exc is None:
                raise
            # The block's own exception goes on (it may be Cancelled); the close is reported.
            logger.warning("closing %r after an error did not finish", self, exc_info=True)


def _close_all(connections: Sequence[Any]) -> None:
    for conn in connections:
        try:
            conn.close()
        except Exception:
            logger.warning("closing a connection failed", exc_info=True)
