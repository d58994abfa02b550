"""``StoreConformance``: the checks every :class:`~operative.kvstore.ConditionalTextValueStore`
must pass, as a pytest test class a user subclasses with a factory."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trio
import trio.testing

from .._core._errors import CorruptRecordError, InvalidArgument
from ..kvstore import ANY, ConditionalTextValueStore, Delete, Put, Versioned
from ..kvstore._protocol import ConflictError
from ._conformance_checks import CHILD, expect, expect_conflict, expect_equal, increments
from ._conformance_model import Outcome, State, draw_step, linearize, perform

__all__ = ["StoreConformance"]


class StoreConformance:
    """Subclass as ``Test...`` and define :meth:`make_store`; pytest runs every check.

    Each check is a ``test_*`` method; a failure is an ``AssertionError`` saying what the
    store did wrong. Checks that need something only the store's author can provide
    (another process, corrupting a record) are skipped unless the matching hook is
    overridden. ``self.tmp_path`` is the test's temporary directory.
    """

    processes: ClassVar[int] = 4
    """How many OS processes race in :meth:`test_processes_lose_no_update`."""
    increments_per_process: ClassVar[int] = 40
    hypothesis_examples: ClassVar[int] = 25
    """Examples of the linearizability property per run."""
    hypothesis_shrink: ClassVar[bool] = True
    """Shrink a failing example to a minimal one (slower to fail, clearer to read)."""
    corruptions: ClassVar[Sequence[str]] = ()
    """The kinds of damage :meth:`corrupt` knows how to do (one check per kind)."""

    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _conformance_tmp_path(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    # -- the hooks ------------------------------------------------------------------------

    async def make_store(self) -> ConditionalTextValueStore:
        """A store for one check (every call in one test over the same data, which
        starts empty in each test). The check closes it."""
        raise InvalidArgument(
            f"{type(self).__name__} must define `async def make_store(self)` returning "
            "the store to check"
        )

    def store_in_subprocess(self) -> str | None:
        """Python statements that bind ``store`` to a store over this test's data, run
        in a fresh interpreter (imports included); ``None`` skips the cross-process
        check (a store held in one process's memory)."""
        return None

    async def corrupt(self, key: str, kind: str) -> None:
        """Damage the record under ``key`` behind the store's back (one of
        :attr:`corruptions`), so that reading it cannot decode."""
        raise InvalidArgument(f"{type(self).__name__} lists corruptions but defines no corrupt()")

    # -- helpers --------------------------------------------------------------------------

    async def _with_store(
        self, body: Callable[[ConditionalTextValueStore], Awaitable[None]]
    ) -> None:
        store = await self.make_store()
        try:
            await body(store)
        finally:
            await store.aclose()

    # -- versioned reads and conditional writes -------------------------------------------

    @pytest.mark.trio
    async def test_satisfies_the_protocol(self) -> None:
        """The store is a ConditionalTextValueStore, and each method checkpoints."""

        async def body(store: ConditionalTextValueStore) -> None:
            expect(
                isinstance(store, ConditionalTextValueStore),
                f"{store!r} lacks a method of ConditionalTextValueStore",
            )
            calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                ("get", lambda: store.get("a")),
                ("get_many", lambda: store.get_many(["a"])),
                ("list", lambda: store.list()),
                ("conditional_batch", lambda: store.conditional_batch([Put(key="a", value="1")])),
            ]
            for name, call in calls:
                try:
                    with trio.testing.assert_checkpoints():
                        await call()
                except AssertionError:
                    raise AssertionError(f"{name} must be a trio checkpoint") from None

        await self._with_store(body)

    @pytest.mark.trio
    async def test_versions_start_at_one_and_count_writes(self) -> None:
        """A created key has version 1; every write adds one; reads return the version."""

        async def body(store: ConditionalTextValueStore) -> None:
            expect_equal(await store.get("a"), None, "get of a missing key")
            done = await store.conditional_batch([Put(key="a", value="x", expected_version=None)])
            expect_equal(done, (1,), "the versions a creating batch returns")
            expect_equal(await store.get("a"), Versioned(key="a", value="x", version=1), "get")
            expect_equal(
                await store.conditional_batch([Put(key="a", value="y", expected_version=1)]),
                (2,),
                "the version after a second write",
            )
            expect_equal(
                await store.conditional_batch([Put(key="a", value="z")]),
                (3,),
                "the version after an unconditional write",
            )
            expect_equal(await store.get("a"), Versioned(key="a", value="z", version=3), "get")
            await store.conditional_batch([Delete(key="a")])
            expect_equal(await store.get("a"), None, "get of a deleted key")
            expect_equal(
                await store.conditional_batch([Put(key="a", value="w", expected_version=None)]),
                (1,),
                "a deleted key starts again at version",
            )

        await self._with_store(body)

    @pytest.mark.trio
    async def test_values_round_trip(self) -> None:
        """Unicode, long, empty and multi-line values come back exactly as written."""

        async def body(store: ConditionalTextValueStore) -> None:
            values = {
                "k/é": "ünïcödé ✓ 😀",
                "k/long": "x" * 200_000,
                "k/empty": "",
                "k/nl": "a\nb\r\n",
            }
            await store.conditional_batch([Put(key=k, value=v) for k, v in values.items()])
            found = await store.get_many(list(values))
            expect_equal({k: v.value for k, v in found.items()}, values, "values read back")

        await self._with_store(body)

    @pytest.mark.trio
    async def test_compare_and_set(self) -> None:
        """An int expected version must match exactly, None needs the key absent, ANY
        writes whatever is there; a failed condition raises ConflictError naming key,
        expected and actual versions, and writes nothing."""

        async def body(store: ConditionalTextValueStore) -> None:
            await expect_conflict(
                store, [Put(key="a", value="x", expected_version=3)], "a", 3, None
            )
            await store.conditional_batch([Put(key="a", value="x", expected_version=None)])
            await expect_conflict(
                store, [Put(key="a", value="y", expected_version=None)], "a", None, 1
            )
            await expect_conflict(store, [Put(key="a", value="y", expected_version=2)], "a", 2, 1)
            await expect_conflict(store, [Delete(key="a", expected_version=7)], "a", 7, 1)
            await expect_conflict(store, [Delete(key="a", expected_version=None)], "a", None, 1)
            expect_equal(await store.get("a"), Versioned(key="a", value="x", version=1), "get")
            expect_equal(
                await store.conditional_batch([Put(key="a", value="y", expected_version=1)]),
                (2,),
                "a write at the current version",
            )
            expect_equal(
                await store.conditional_batch([Put(key="a", value="z", expected_version=ANY)]),
                (3,),
                "an ANY write",
            )
            expect_equal(
                await store.conditional_batch([Delete(key="a", expected_version=3)]),
                (None,),
                "a delete at the current version",
            )
            expect_equal(await store.get("a"), None, "get after delete")
            expect_equal(
                await store.conditional_batch(
                    [Delete(key="a", expected_version=ANY), Delete(key="b", expected_version=None)]
                ),
                (None, None),
                "deleting missing keys",
            )

        await self._with_store(body)

    # -- batches ----------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_a_conflict_writes_nothing(self) -> None:
        """One failing condition leaves every key of the batch as it was."""

        async def body(store: ConditionalTextValueStore) -> None:
            await store.conditional_batch([Put(key="b", value="old"), Put(key="d", value="old")])
            await expect_conflict(
                store,
                [
                    Put(key="a", value="new", expected_version=None),
                    Delete(key="b", expected_version=1),
                    Put(key="d", value="new", expected_version=1),
                    Put(key="c", value="new", expected_version=7),
                ],
                "c",
                7,
                None,
            )
            found = await store.get_many(["a", "b", "c", "d"])
            expect_equal(
                dict(found),
                {
                    "b": Versioned(key="b", value="old", version=1),
                    "d": Versioned(key="d", value="old", version=1),
                },
                "the keys after a batch that conflicted (nothing may change)",
            )

        await self._with_store(body)

    @pytest.mark.trio
    async def test_a_batch_applies_whole(self) -> None:
        """A batch whose conditions hold applies every operation and reports each version."""

        async def body(store: ConditionalTextValueStore) -> None:
            await store.conditional_batch([Put(key="b", value="1"), Put(key="c", value="1")])
            done = await store.conditional_batch(
                [
                    Put(key="a", value="2", expected_version=None),
                    Put(key="b", value="2", expected_version=1),
                    Delete(key="c", expected_version=1),
                ]
            )
            expect_equal(done, (1, 2, None), "the versions of the batch")
            expect_equal(
                [(v.key, v.value, v.version) for v in await store.list()],
                [("a", "2", 1), ("b", "2", 2)],
                "the listing after the batch",
            )
            expect_equal(await store.conditional_batch([]), (), "an empty batch")

        await self._with_store(body)

    @pytest.mark.trio
    async def test_racing_batches_are_atomic(self) -> None:
        """Tasks moving units between two keys in conditional batches, while others read
        both keys at once: every read sees the total unchanged."""

        async def body(store: ConditionalTextValueStore) -> None:
            await store.conditional_batch([Put(key="x", value="50"), Put(key="y", value="50")])
            torn: list[tuple[str, str]] = []

            async def move(amount: int) -> None:
                for _ in range(10):
                    while True:
                        found = await store.get_many(["x", "y"])
                        x, y = found["x"], found["y"]
                        ops = [
                            Put(
                                key="x",
                                value=str(int(x.value) - amount),
                                expected_version=x.version,
                            ),
                            Put(
                                key="y",
                                value=str(int(y.value) + amount),
                                expected_version=y.version,
                            ),
                        ]
                        try:
                            await store.conditional_batch(ops)
                        except ConflictError:
                            continue
                        break

            async def read() -> None:
                for _ in range(30):
                    found = await store.get_many(["x", "y"])
                    if int(found["x"].value) + int(found["y"].value) != 100:
                        torn.append((found["x"].value, found["y"].value))

            async with trio.open_nursery() as nursery:
                for amount in (1, -2, 3, 5):
                    nursery.start_soon(move, amount)
                nursery.start_soon(read)
            found = await store.get_many(["x", "y"])
            expect_equal(
                (found["x"].value, found["y"].value, found["x"].version),
                ("-20", "120", 41),
                "x, y and x's version after 40 moves of 7 units net from x to y",
            )
            expect(not torn, f"reads saw half-applied batches (x, y): {torn[:5]}")

        await self._with_store(body)

    # -- reads ------------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_get_many_returns_only_present_keys(self) -> None:
        """get_many maps the keys that exist, also for more keys than one query holds."""

        async def body(store: ConditionalTextValueStore) -> None:
            await store.conditional_batch([Put(key="a", value="1"), Put(key="b", value="2")])
            expect_equal(
                dict(await store.get_many(["a", "zz", "b"])),
                {
                    "a": Versioned(key="a", value="1", version=1),
                    "b": Versioned(key="b", value="2", version=1),
                },
                "get_many",
            )
            expect_equal(dict(await store.get_many([])), {}, "get_many of no keys")
            keys = [f"k{i:04}" for i in range(1200)]
            await store.conditional_batch([Put(key=k, value=k) for k in keys[::2]])
            found = await store.get_many(keys)
            expect_equal(sorted(found), keys[::2], "get_many of 1200 keys, half present")
            expect(all(found[k].value == k for k in found), "get_many returned wrong values")

        await self._with_store(body)

    @pytest.mark.trio
    async def test_list_prefix_and_pagination(self) -> None:
        """Listing is by prefix, sorted by code point, paged by limit and an exclusive
        ``after`` cursor."""

        async def body(store: ConditionalTextValueStore) -> None:
            top = chr(0x10FFFF)
            keys = ["p/3", "p/1", "q/1", "p/2", "o/9", "p/10", "p", "p0", "é", "é/1", "中", "😀"]
            keys += ["a" + top, "a" + top + "x", "B"]
            await store.conditional_batch([Put(key=k, value=k) for k in keys])

            async def listed(prefix: str = "", **options: Any) -> list[str]:
                return [v.key for v in await store.list(prefix, **options)]

            expect_equal(await listed(), sorted(keys), "list() (sorted by code point)")
            expect_equal(await listed("p/"), ["p/1", "p/10", "p/2", "p/3"], "list('p/')")
            expect_equal(await listed("p/", limit=2), ["p/1", "p/10"], "list('p/', limit=2)")
            expect_equal(
                await listed("p/", limit=2, after="p/10"),
                ["p/2", "p/3"],
                "list('p/', limit=2, after='p/10')",
            )
            expect_equal(await listed("p/", after="p/3"), [], "list after the last key")
            expect_equal(await listed("p"), ["p", "p/1", "p/10", "p/2", "p/3", "p0"], "list('p')")
            expect_equal(await listed("p/", limit=0), [], "list(limit=0)")
            expect_equal(await listed("q", after="p0"), ["q/1"], "list('q', after='p0')")
            expect_equal(await listed("é"), ["é", "é/1"], "list('é')")
            expect_equal(
                await listed("a" + top), ["a" + top, "a" + top + "x"], "a prefix ending in U+10FFFF"
            )
            expect_equal(await listed("\ud7ff"), [], "a prefix nothing starts with")

        await self._with_store(body)

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_concurrent_creates_have_one_winner(self) -> None:
        """Twenty tasks racing to create one key: exactly one succeeds."""

        async def body(store: ConditionalTextValueStore) -> None:
            winners: list[int] = []

            async def attempt(i: int) -> None:
                try:
                    await store.conditional_batch(
                        [Put(key="k", value=str(i), expected_version=None)]
                    )
                except ConflictError:
                    return
                winners.append(i)

            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(attempt, i)
            expect_equal(len(winners), 1, "tasks whose create succeeded")
            stored = await store.get("k")
            expect(stored is not None and stored.value == str(winners[0]), f"stored {stored!r}")

        await self._with_store(body)

    @pytest.mark.trio
    async def test_concurrent_writers_lose_no_update(self) -> None:
        """Ten tasks doing read-modify-write with retry: the counter counts every one."""

        async def body(store: ConditionalTextValueStore) -> None:
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(increments, store, 10)
            final = await store.get("counter")
            expect(final is not None, "the counter is missing")
            assert final is not None
            expect_equal((final.value, final.version), ("100", 100), "counter (value, version)")

        await self._with_store(body)

    @pytest.mark.trio
    async def test_processes_lose_no_update(self) -> None:
        """Several OS processes doing read-modify-write with retry lose no update."""
        opener = self.store_in_subprocess()
        if opener is None:
            pytest.skip("store_in_subprocess() is not defined: the store lives in one process")
        command = [
            sys.executable,
            "-c",
            CHILD.format(opener=textwrap.dedent(opener), each=self.increments_per_process),
        ]

        async def body(store: ConditionalTextValueStore) -> None:
            await store.get("counter")  # the store's tables exist before the children race
            async with trio.open_nursery() as nursery:
                for _ in range(self.processes):
                    nursery.start_soon(partial(trio.run_process, command, capture_stderr=True))
            final = await store.get("counter")
            total = self.processes * self.increments_per_process
            expect(final is not None, "the counter is missing")
            assert final is not None
            expect_equal((final.value, final.version), (str(total), total), "counter")

        await self._with_store(body)

    # -- corruption ---------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_corrupt_records_raise_corrupt_record_error(self) -> None:
        """A record that cannot be decoded raises CorruptRecordError naming its key from
        every read that meets it; the other keys still read."""
        if not self.corruptions:
            pytest.skip("no corruptions listed: define `corruptions` and `corrupt()`")

        async def body(store: ConditionalTextValueStore) -> None:
            for kind in self.corruptions:
                bad = f"bad-{kind}/key"
                await store.conditional_batch(
                    [Put(key="good", value="fine"), Put(key=bad, value="x")]
                )
                await self.corrupt(bad, kind)
                reads: list[tuple[str, Callable[[], Awaitable[object]]]] = [
                    ("get", partial(store.get, bad)),
                    ("get_many", partial(store.get_many, ["good", bad])),
                    ("list", partial(store.list, f"bad-{kind}/")),
                ]
                for name, call in reads:
                    try:
                        got = await call()
                    except CorruptRecordError as error:
                        expect(
                            repr(bad) in str(error),
                            f"{kind}: {name}'s error names {bad!r}: {error}",
                        )
                        continue
                    except Exception as error:
                        raise AssertionError(
                            f"{kind}: {name} raised {error!r}, not a CorruptRecordError"
                        ) from error
                    raise AssertionError(f"{kind}: {name} returned {got!r} from a damaged record")
                good = await store.get("good")
                expect_equal(good and good.value, "fine", f"{kind}: an undamaged key")
                await store.conditional_batch([Delete(key="good")])

        await self._with_store(body)

    # -- the model --------------------------------------------------------------------------

    def test_compare_and_set_is_linearizable(self) -> None:
        """Hypothesis draws rounds of reads and conditional batches over three keys; each
        round runs concurrently, and its results and the state after it must match some
        serial order of its steps on a model store. A paged listing after each round
        must list the model's keys."""
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import strategies as st

        examples = iter(range(1_000_000))
        phases = [Phase.explicit, Phase.reuse, Phase.generate]
        if self.hypothesis_shrink:
            phases.append(Phase.shrink)

        @settings(
            max_examples=self.hypothesis_examples,
            deadline=None,
            phases=phases,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(data=st.data())
        def run(data: st.DataObject) -> None:
            prefix = f"lin{next(examples)}/"
            trio.run(self._linearizability_example, data, prefix)

        run()

    async def _linearizability_example(self, data: Any, prefix: str) -> None:
        from hypothesis import strategies as st

        keys = [prefix + name for name in ("a", "b", "é")]
        store = await self.make_store()
        try:
            model: State = {}
            for round_number in range(data.draw(st.integers(1, 6), label="rounds")):
                count = data.draw(st.integers(1, 3), label="steps")
                steps = [
                    draw_step(data, st, model, keys, f"v{round_number}.{index}")
                    for index in range(count)
                ]
                outcomes: list[Outcome] = [()] * len(steps)
                async with trio.open_nursery() as nursery:
                    for index, step in enumerate(steps):
                        nursery.start_soon(perform, store, step, outcomes, index)
                final: State = {
                    k: (v.value, v.version) for k, v in (await store.get_many(keys)).items()
                }
                after = linearize(model, steps, outcomes, final)
                if after is None:
                    raise AssertionError(
                        "no serial order explains this round:\n"
                        f"  state before: {model}\n"
                        + "".join(
                            f"  {s!r} -> {o!r}\n" for s, o in zip(steps, outcomes, strict=True)
                        )
                        + f"  state after: {final}"
                    )
                model = after
                page = data.draw(st.integers(1, 3), label="page")
                listed: list[str] = []
                cursor: str | None = None
                while chunk := await store.list(prefix, limit=page, after=cursor):
                    expect(len(chunk) <= page, f"list(limit={page}) returned {len(chunk)}")
                    listed.extend(v.key for v in chunk)
                    cursor = chunk[-1].key
                expect_equal(listed, sorted(model), f"paging {prefix!r} {page} at a time")
        finally:
            await store.aclose()
