"""``MemoryStore``: the conditional text-value store kept in one process's memory."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Self

import trio

from .._core._errors import InvalidArgument
from ._protocol import ANY, ConflictError, Delete, Operation, Put, Versioned

__all__ = ["MemoryStore"]


class MemoryStore:
    """A :class:`~operative.kvstore.ConditionalTextValueStore` held in a dict.

    Each method checkpoints, and a batch is checked and applied without yielding in
    between, so concurrent tasks see every batch as atomic. Values live as long as the
    object: share one instance to share state between toolboxes in one process; use a
    SQLite or PostgreSQL store to share it between processes.
    """

    __slots__ = ("_closed", "_data", "_keys")

    def __init__(self) -> None:
        self._data: dict[str, Versioned] = {}
        self._keys: list[str] = []  # sorted, for prefix listing
        self._closed = False

    def __repr__(self) -> str:
        return f"<MemoryStore {len(self._data)} keys{' closed' if self._closed else ''}>"

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this MemoryStore is closed; create a new one")

    async def get(self, key: str) -> Versioned | None:
        """The value stored under ``key``, or ``None``."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        return self._data.get(key)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        """The values stored under ``keys``; missing keys are absent from the mapping."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        data = self._data
        return {key: data[key] for key in keys if key in data}

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        """Values whose key starts with ``prefix``, sorted by key, after ``after``."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        if limit is not None and limit < 0:
            raise InvalidArgument(f"limit must be None or >= 0, not {limit!r}")
        keys = self._keys
        start = bisect.bisect_left(keys, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(keys, after))
        out: list[Versioned] = []
        for index in range(start, len(keys)):
            if limit is not None and len(out) >= limit:
                break
            key = keys[index]
            if not key.startswith(prefix):
                break
            out.append(self._data[key])
        return out

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        """Apply every operation or none; see the protocol for the conditions."""
        await trio.lowlevel.checkpoint()
        self._check_open()
        seen: set[str] = set()
        data = self._data
        for op in operations:
            if not isinstance(op, Put | Delete):
                raise InvalidArgument(f"a batch holds Put and Delete operations, not {op!r}")
            if op.key in seen:
                raise InvalidArgument(f"key {op.key!r} appears twice in one batch; merge them")
            seen.add(op.key)
            current = data.get(op.key)
            actual = None if current is None else current.version
            expected = op.expected_version
            if expected is not ANY and expected != actual:
                raise ConflictError(op.key, expected=expected, actual=actual)
        # Every condition holds: apply without yielding.
        versions: list[int | None] = []
        for op in operations:
            current = data.get(op.key)
            if isinstance(op, Put):
                version = 1 if current is None else current.version + 1
                data[op.key] = Versioned(key=op.key, value=op.value, version=version)
                if current is None:
                    bisect.insort(self._keys, op.key)
                versions.append(version)
            else:
                if current is not None:
                    del data[op.key]
                    del self._keys[bisect.bisect_left(self._keys, op.key)]
                versions.append(None)
        return tuple(versions)

    async def aclose(self) -> None:
        """Drop every value; the store cannot be used afterwards."""
        await trio.lowlevel.checkpoint()
        self._closed = True
        self._data.clear()
        self._keys.clear()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
