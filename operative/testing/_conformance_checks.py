"""What the conformance checks share: readable expectations, and read-modify-write
counters (in this process and in child processes) for the lost-update races."""

from __future__ import annotations

from collections.abc import Sequence

from .._core._errors import OperativeError
from ..kvstore import ConditionalTextValueStore, Delete, ExpectedVersion, Put
from ..kvstore._protocol import ConflictError

__all__ = ["CHILD", "expect", "expect_conflict", "expect_equal", "increment", "increments"]


def expect(condition: bool, message: str) -> None:
    """Fail the check with ``message`` (a readable failure without pytest's rewriting)."""
    if not condition:
        raise AssertionError(message)


def expect_equal(actual: object, expected: object, what: str) -> None:
    """Fail unless ``actual == expected``, showing both."""
    if actual != expected:
        raise AssertionError(f"{what}: expected {expected!r}, got {actual!r}")


async def expect_conflict(
    store: ConditionalTextValueStore,
    ops: Sequence[Put | Delete],
    key: str,
    expected: ExpectedVersion,
    actual: int | None,
) -> None:
    """The batch raises a ConflictError naming ``key``, ``expected`` and ``actual``."""
    try:
        await store.conditional_batch(ops)
    except ConflictError as error:
        expect(isinstance(error, OperativeError), "ConflictError must be operative's own")
        expect_equal(
            (error.key, error.expected, error.actual),
            (key, expected, actual),
            f"the ConflictError of {list(ops)!r} (key, expected, actual)",
        )
        expect(repr(key) in str(error), f"the ConflictError's message names {key!r}: {error}")
        return
    raise AssertionError(f"{list(ops)!r} was written: expected a ConflictError on {key!r}")


async def increment(store: ConditionalTextValueStore, key: str) -> None:
    """Read-modify-write one counter, retrying on conflict."""
    while True:
        current = await store.get(key)
        value = 1 if current is None else int(current.value) + 1
        expected = None if current is None else current.version
        try:
            await store.conditional_batch(
                [Put(key=key, value=str(value), expected_version=expected)]
            )
        except ConflictError:
            continue
        return


CHILD = """
import sys, trio
from operative.kvstore import ConflictError, Put
{opener}

async def main():
    async with store:
        done = 0
        while done < {each}:
            current = await store.get("counter")
            value = 1 if current is None else int(current.value) + 1
            expected = None if current is None else current.version
            try:
                await store.conditional_batch(
                    [Put(key="counter", value=str(value), expected_version=expected)]
                )
            except ConflictError:
                continue
            done += 1

trio.run(main)
"""


async def increments(store: ConditionalTextValueStore, count: int) -> None:
    for _ in range(count):
        await increment(store, "counter")
