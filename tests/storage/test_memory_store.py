"""MemoryStore: conditional writes, atomic batches, listing and pagination."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import operative.storage
from operative._errors import InvalidArgument, OperativeError
from operative.storage import (
    ANY,
    ConditionalTextValueStore,
    ConflictError,
    Delete,
    MemoryStore,
    Put,
    Versioned,
)


def test_all_is_sorted_and_complete() -> None:
    """The public namespace lists exactly what it exports, sorted."""
    names = operative.storage.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(operative.storage, name)


def test_memory_store_satisfies_the_protocol() -> None:
    """MemoryStore is a ConditionalTextValueStore."""
    assert isinstance(MemoryStore(), ConditionalTextValueStore)


async def test_put_creates_at_version_one_and_increments() -> None:
    """Versions start at 1 and count every write."""
    store = MemoryStore()
    assert await store.get("a") is None
    assert await store.conditional_batch([Put(key="a", value="x", expected_version=None)]) == (1,)
    assert await store.get("a") == Versioned(key="a", value="x", version=1)
    assert await store.conditional_batch([Put(key="a", value="y", expected_version=1)]) == (2,)
    assert await store.conditional_batch([Put(key="a", value="z")]) == (3,)
    assert await store.get("a") == Versioned(key="a", value="z", version=3)


async def test_must_not_exist_conflicts_when_present() -> None:
    """expected_version=None fails on an existing key, naming key and versions."""
    store = MemoryStore()
    await store.conditional_batch([Put(key="a", value="x", expected_version=None)])
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="y", expected_version=None)])
    assert isinstance(info.value, OperativeError)
    assert info.value.key == "a"
    assert info.value.expected is None
    assert info.value.actual == 1
    assert "'a'" in str(info.value)
    assert "version 1" in str(info.value)


async def test_wrong_version_conflicts() -> None:
    """An int expected_version must match exactly; a missing key has no version."""
    store = MemoryStore()
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="x", expected_version=3)])
    assert info.value.actual is None
    await store.conditional_batch([Put(key="a", value="x")])
    with pytest.raises(ConflictError) as info:
        await store.conditional_batch([Put(key="a", value="x", expected_version=2)])
    assert (info.value.expected, info.value.actual) == (2, 1)


async def test_delete_conditions() -> None:
    """Deletes honour expected_version; deleting a missing key with ANY is a no-op."""
    store = MemoryStore()
    await store.conditional_batch([Put(key="a", value="x")])
    with pytest.raises(ConflictError):
        await store.conditional_batch([Delete(key="a", expected_version=2)])
    assert await store.conditional_batch([Delete(key="a", expected_version=1)]) == (None,)
    assert await store.get("a") is None
    assert await store.conditional_batch([Delete(key="a", expected_version=ANY)]) == (None,)
    assert await store.list() == []


async def test_a_conflict_writes_nothing() -> None:
    """One failing condition leaves every key of the batch untouched."""
    store = MemoryStore()
    await store.conditional_batch([Put(key="b", value="old")])
    with pytest.raises(ConflictError):
        await store.conditional_batch(
            [
                Put(key="a", value="new", expected_version=None),
                Delete(key="b", expected_version=1),
                Put(key="c", value="new", expected_version=7),
            ]
        )
    assert await store.get("a") is None
    assert await store.get("b") == Versioned(key="b", value="old", version=1)
    assert await store.get("c") is None


async def test_duplicate_keys_in_a_batch_are_rejected() -> None:
    """A batch naming one key twice is misuse."""
    store = MemoryStore()
    with pytest.raises(InvalidArgument):
        await store.conditional_batch([Put(key="a", value="1"), Put(key="a", value="2")])


async def test_get_many_returns_only_present_keys() -> None:
    """get_many maps the keys that exist."""
    store = MemoryStore()
    await store.conditional_batch([Put(key="a", value="1"), Put(key="b", value="2")])
    found = await store.get_many(["a", "zz", "b"])
    assert dict(found) == {
        "a": Versioned(key="a", value="1", version=1),
        "b": Versioned(key="b", value="2", version=1),
    }


async def test_list_prefix_and_pagination() -> None:
    """Listing is by prefix, sorted by key, paged with limit and an exclusive cursor."""
    store = MemoryStore()
    keys = ["p/3", "p/1", "q/1", "p/2", "o/9", "p/10"]
    await store.conditional_batch([Put(key=k, value=k) for k in keys])
    assert [v.key for v in await store.list("p/")] == ["p/1", "p/10", "p/2", "p/3"]
    page = await store.list("p/", limit=2)
    assert [v.key for v in page] == ["p/1", "p/10"]
    page = await store.list("p/", limit=2, after=page[-1].key)
    assert [v.key for v in page] == ["p/2", "p/3"]
    assert await store.list("p/", limit=2, after="p/3") == []
    assert [v.key for v in await store.list()] == sorted(keys)
    assert await store.list("p/", limit=0) == []
    with pytest.raises(InvalidArgument):
        await store.list(limit=-1)


async def test_every_method_checkpoints() -> None:
    """Each async method is a trio checkpoint."""
    store = MemoryStore()
    with trio.testing.assert_checkpoints():
        await store.get("a")
    with trio.testing.assert_checkpoints():
        await store.get_many(["a"])
    with trio.testing.assert_checkpoints():
        await store.list()
    with trio.testing.assert_checkpoints():
        await store.conditional_batch([])


async def test_closed_store_refuses_use() -> None:
    """After aclose (or leaving ``async with``) the store raises InvalidArgument."""
    async with MemoryStore() as store:
        await store.conditional_batch([Put(key="a", value="1")])
    with pytest.raises(InvalidArgument):
        await store.get("a")
    assert "closed" in repr(store)


async def test_concurrent_creates_have_one_winner() -> None:
    """Many tasks racing to create one key: exactly one succeeds."""
    store = MemoryStore()
    winners: list[int] = []

    async def attempt(i: int) -> None:
        try:
            await store.conditional_batch([Put(key="k", value=str(i), expected_version=None)])
        except ConflictError:
            return
        winners.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(attempt, i)
    assert len(winners) == 1
    stored = await store.get("k")
    assert stored is not None
    assert stored.value == str(winners[0])


_keys = st.text(alphabet="ab/", min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_keys, st.booleans()), max_size=30), st.integers(1, 5))
def test_pagination_visits_every_key_once(ops: list[tuple[str, bool]], page: int) -> None:
    """Paging through a listing returns every live key exactly once, in order."""

    async def main() -> None:
        store = MemoryStore()
        model: dict[str, str] = {}
        for key, is_put in ops:
            if is_put:
                await store.conditional_batch([Put(key=key, value=key)])
                model[key] = key
            else:
                await store.conditional_batch([Delete(key=key)])
                model.pop(key, None)
        for prefix in ("", "a", "b/"):
            seen: list[str] = []
            after: str | None = None
            while True:
                chunk = await store.list(prefix, limit=page, after=after)
                if not chunk:
                    break
                seen.extend(v.key for v in chunk)
                after = chunk[-1].key
            assert seen == sorted(k for k in model if k.startswith(prefix))

    trio.run(main)
