"""The conditional text-value store protocol and its records.

A store maps string keys to text values, each with a version that counts its writes.
Writes are conditional and batched all-or-nothing, which is what approvals, sessions
and checkpoints need to stay correct when several processes share one store.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, TypeAlias, runtime_checkable

import msgspec

from .._core._errors import OperativeError

__all__ = [
    "ANY",
    "AnyVersion",
    "ConditionalTextValueStore",
    "ConflictError",
    "Delete",
    "ExpectedVersion",
    "Operation",
    "Put",
    "Versioned",
]


class ConflictError(OperativeError):
    """A conditional store write found a different version than it expected.

    Nothing in the batch was written. Read the key again and retry with its current
    version, or give up if the other writer's value wins (e.g. an approval already used).
    """

    def __init__(self, key: str, *, expected: object, actual: int | None) -> None:
        if expected is None:
            wanted = "the key to be absent"
        elif isinstance(expected, int):
            wanted = f"version {expected}"
        else:
            wanted = str(expected)
        found = "no value" if actual is None else f"version {actual}"
        super().__init__(
            f"conflict on key {key!r}: expected {wanted}, found {found}; "
            "read the key again and retry with its current version"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class AnyVersion(enum.Enum):
    """The type of :data:`ANY`."""

    ANY = "any"


ANY = AnyVersion.ANY
"""An ``expected_version`` that accepts whatever is stored (an unconditional write)."""

ExpectedVersion: TypeAlias = int | AnyVersion | None
"""An int (the key must hold exactly this version), ``None`` (the key must not exist),
or :data:`ANY` (no condition)."""


class Versioned(msgspec.Struct, frozen=True, kw_only=True):
    """One stored value and its version (1 on creation, +1 on every write)."""

    key: str
    value: str
    version: int


class Put(msgspec.Struct, frozen=True, kw_only=True):
    """Write ``value`` under ``key`` if ``expected_version`` holds."""

    key: str
    value: str
    expected_version: ExpectedVersion = ANY


class Delete(msgspec.Struct, frozen=True, kw_only=True):
    """Remove ``key`` if ``expected_version`` holds (removing a missing key is a no-op)."""

    key: str
    expected_version: ExpectedVersion = ANY


Operation: TypeAlias = Put | Delete
"""One operation of a conditional batch."""


@runtime_checkable
class ConditionalTextValueStore(Protocol):
    """Versioned text values with all-or-nothing conditional batches.

    Implementations: :class:`operative.kvstore.MemoryStore` (one process); SQLite and
    PostgreSQL stores implement the same methods so they can be shared by processes.
    """

    async def get(self, key: str) -> Versioned | None:
        """The value stored under ``key``, or ``None``."""
        ...

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        """The values stored under ``keys``; missing keys are absent from the mapping."""
        ...

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        """Values whose key starts with ``prefix``, sorted by key.

        ``after`` is an exclusive key cursor (pass the last key of the previous page);
        ``limit`` caps the page size.
        """
        ...

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        """Apply every operation, or none of them.

        Returns each operation's new version (``None`` for a delete).

        Raises:
            ConflictError: an ``expected_version`` did not hold; nothing was written.
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources; the store cannot be used afterwards."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
