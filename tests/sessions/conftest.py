"""Fixtures for the session tests: every test takes a fresh store from ``kv``.

The fixture is parametrized by backend name so another store can join the list.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import pytest
import trio
import trio.testing

from operative.kvstore import (
    ConditionalTextValueStore,
    MemoryStore,
    Operation,
    SqliteStore,
    Versioned,
)
from operative.sessions import SessionStore, create_session_store


class FakeClock:
    """A wall clock the test moves by hand."""

    __test__ = False

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class HookedStore:
    """Wraps a store; ``before_batch`` runs before every conditional batch (to meddle)."""

    __test__ = False

    def __init__(self, inner: ConditionalTextValueStore) -> None:
        self.inner = inner
        self.before_batch: Callable[[Sequence[Operation]], Awaitable[None]] | None = None

    async def get(self, key: str) -> Versioned | None:
        return await self.inner.get(key)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        return await self.inner.get_many(keys)

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        return await self.inner.list(prefix, limit=limit, after=after)

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        if self.before_batch is not None:
            await self.before_batch(operations)
        return await self.inner.conditional_batch(operations)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _memory(tmp_path: Path) -> ConditionalTextValueStore:
    return MemoryStore()


def _sqlite(tmp_path: Path) -> ConditionalTextValueStore:
    return SqliteStore(tmp_path / "sessions.db")


BACKENDS: dict[str, Callable[[Path], ConditionalTextValueStore]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}
"""Store factories (given a temporary directory); add a backend here to run every test on it."""

IN_PROCESS = frozenset({"memory"})
"""Backends that never wait on a worker thread."""


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the store backend under test."""
    name: str = request.param
    return name


@pytest.fixture
async def kv(backend: str, tmp_path: Path) -> AsyncIterator[ConditionalTextValueStore]:
    """A fresh, empty conditional text-value store."""
    async with BACKENDS[backend](tmp_path) as store:
        yield store


@pytest.fixture
def autojump_clock(backend: str) -> trio.testing.MockClock:
    """Virtual time. A store that works in a thread gets a small real-time threshold, so
    the clock does not jump (and fire timeouts) while a query is in flight."""
    return trio.testing.MockClock(autojump_threshold=0 if backend in IN_PROCESS else 0.05)


@pytest.fixture
def wall_clock() -> FakeClock:
    """The sessions' wall clock, moved by hand."""
    return FakeClock()


@pytest.fixture
def sessions(kv: ConditionalTextValueStore, wall_clock: FakeClock) -> SessionStore:
    """A session store over ``kv`` with the fake wall clock."""
    return create_session_store(kv, clock=wall_clock)
