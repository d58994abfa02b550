"""What the thread-backed stores share: a bounded pool of connections and its closing."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import trio

from .._errors import InvalidArgument

__all__ = ["PooledStore"]


class PooledStore:
    """Base of stores whose blocking connections are used from worker threads.

    A subclass sets ``_closed``, ``_idle`` (idle connections), ``_limiter`` (one place
    per connection) and ``_max_connections``.
    """

    __slots__ = ("_closed", "_idle", "_limiter", "_max_connections")

    _closed: bool
    _idle: list[Any]
    _limiter: trio.CapacityLimiter
    _max_connections: int

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(f"this {type(self).__name__} is closed; create a new one")

    async def aclose(self) -> None:
        """Wait for calls in flight, then close every connection.

        The store cannot be used afterwards; closing twice is harmless.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True):
            tokens = [object() for _ in range(self._max_connections)]
            for token in tokens:  # every token held: nothing is in flight
                await self._limiter.acquire_on_behalf_of(token)
            idle, self._idle = self._idle, []
            try:
                await trio.to_thread.run_sync(_close_all, idle)
            finally:
                for token in tokens:
                    self._limiter.release_on_behalf_of(token)

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
        await self.aclose()


def _close_all(connections: Sequence[Any]) -> None:
    for conn in connections:
        conn.close()
