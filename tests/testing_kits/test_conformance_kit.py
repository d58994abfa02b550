"""The conformance kits fail stores and engines that break their contract, and say how.

Each toy here has one deliberate bug; the kit's checks are called directly (as pytest
would) and must raise an AssertionError naming what went wrong. A correct toy passes.
"""

from __future__ import annotations

import bisect
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import attrs
import msgspec
import pytest
import trio

from operative import InvalidArgument
from operative.durable import Lease, SqliteCheckpointStore, SqliteEngine
from operative.errors import CorruptRecordError
from operative.kvstore import ANY, ConflictError, Delete, Operation, Versioned
from operative.testing.conformance import EngineConformance, StoreConformance

pytest_plugins = ["pytester"]


class ToyStore:
    """A dict of ``"version:value"`` strings, with switches that break it."""

    def __init__(
        self,
        *,
        compare: bool = True,
        atomic: bool = True,
        yield_before_write: bool = False,
        strict_decode: bool = True,
    ) -> None:
        self.raw: dict[str, str] = {}
        self.compare = compare
        self.atomic = atomic
        self.yield_before_write = yield_before_write
        self.strict_decode = strict_decode

    def _decode(self, key: str) -> Versioned | None:
        raw = self.raw.get(key)
        if raw is None:
            return None
        version, _, value = raw.partition(":")
        if not version.isdigit() or int(version) < 1:
            if self.strict_decode:
                raise CorruptRecordError(f"the record under {key!r} is damaged: {raw!r}")
            return Versioned(key=key, value=value, version=0)
        return Versioned(key=key, value=value, version=int(version))

    async def get(self, key: str) -> Versioned | None:
        await trio.lowlevel.checkpoint()
        return self._decode(key)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        await trio.lowlevel.checkpoint()
        found = {key: self._decode(key) for key in keys}
        return {key: value for key, value in found.items() if value is not None}

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        await trio.lowlevel.checkpoint()
        keys = sorted(k for k in self.raw if k.startswith(prefix))
        if after is not None:
            keys = keys[bisect.bisect_right(keys, after) :]
        found = [self._decode(key) for key in keys[:limit]]
        return [value for value in found if value is not None]

    def _check(self, op: Operation) -> None:
        current = self._decode(op.key)
        actual = None if current is None else current.version
        if self.compare and op.expected_version is not ANY and op.expected_version != actual:
            raise ConflictError(op.key, expected=op.expected_version, actual=actual)

    def _apply(self, op: Operation) -> int | None:
        current = self._decode(op.key)
        if isinstance(op, Delete):
            self.raw.pop(op.key, None)
            return None
        version = 1 if current is None else current.version + 1
        self.raw[op.key] = f"{version}:{op.value}"
        return version

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        await trio.lowlevel.checkpoint()
        if not self.atomic:  # check and write one operation at a time
            results = []
            for op in operations:
                self._check(op)
                results.append(self._apply(op))
            return tuple(results)
        for op in operations:
            self._check(op)
        if self.yield_before_write:
            await trio.lowlevel.checkpoint()
        return tuple(self._apply(op) for op in operations)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def kit_for(**switches: bool) -> StoreConformance:
    """The store kit pointed at a ToyStore with ``switches``, shared within the test."""
    store = ToyStore(**switches)

    class Kit(StoreConformance):
        corruptions = ("garbage",)
        hypothesis_examples = 60
        hypothesis_shrink = False

        async def make_store(self) -> ToyStore:
            return store

        async def corrupt(self, key: str, kind: str) -> None:
            store.raw[key] = "garbage"

    return Kit()


class TestToyStore(StoreConformance):
    """The control: the toy without a bug passes every check."""

    corruptions = ("garbage",)

    async def make_store(self) -> ToyStore:
        self.toy = getattr(self, "toy", None) or ToyStore()
        return self.toy

    async def corrupt(self, key: str, kind: str) -> None:
        self.toy.raw[key] = "garbage"


async def fails(check: Any, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        await check()


async def test_a_store_that_does_not_compare_fails() -> None:
    """Ignoring expected_version fails compare-and-set, creates and lost updates."""
    await fails(kit_for(compare=False).test_compare_and_set, "expected a ConflictError on 'a'")
    await fails(
        kit_for(compare=False).test_concurrent_creates_have_one_winner, "tasks whose create"
    )
    await fails(kit_for(compare=False).test_concurrent_writers_lose_no_update, "counter")
    await fails(kit_for(compare=False).test_a_conflict_writes_nothing, "expected a ConflictError")


async def test_a_batch_that_is_not_all_or_nothing_fails() -> None:
    """Writing a batch's operations until one conflicts leaves half a batch: caught."""
    await fails(kit_for(atomic=False).test_a_conflict_writes_nothing, "nothing may change")
    await kit_for(atomic=False).test_a_batch_applies_whole()  # the happy path still passes


async def test_a_store_that_yields_between_check_and_write_fails() -> None:
    """A check-then-write with a checkpoint between loses updates to racing tasks."""
    await fails(kit_for(yield_before_write=True).test_concurrent_writers_lose_no_update, "counter")
    await fails(
        kit_for(yield_before_write=True).test_concurrent_creates_have_one_winner, "tasks whose"
    )
    await fails(kit_for(yield_before_write=True).test_racing_batches_are_atomic, "x, y")
    await kit_for(yield_before_write=True).test_compare_and_set()  # sequentially it is right


async def test_a_store_that_reads_damaged_records_silently_fails() -> None:
    """Returning a damaged record instead of raising CorruptRecordError is caught."""
    await fails(
        kit_for(strict_decode=False).test_corrupt_records_raise_corrupt_record_error,
        "returned .* from a damaged record",
    )


@pytest.mark.parametrize(
    "switches",
    [{"compare": False}, {"atomic": False}, {"yield_before_write": True}],
    ids=["no-compare", "non-atomic-batch", "yield-before-write"],
)
def test_the_model_check_finds_each_bug(switches: dict[str, bool]) -> None:
    """The hypothesis linearizability check alone finds every store bug above."""
    with pytest.raises(AssertionError, match="no serial order explains this round"):
        kit_for(**switches).test_compare_and_set_is_linearizable()


def test_a_kit_without_a_factory_says_what_to_define() -> None:
    """A subclass that forgot make_store is told to define it."""

    class Forgot(StoreConformance):
        pass

    with pytest.raises(InvalidArgument, match="async def make_store"):
        trio.run(Forgot().test_compare_and_set)


# -- engines ------------------------------------------------------------------------------


@attrs.define
class ReadThenClaimEngine:
    """A SQLite engine whose claim reads the expired runs and leases them without a
    conditional write: two claimers both win, and the fence never moves."""

    inner: SqliteEngine
    clock: Callable[[], float]

    async def claim(
        self, *, worker_id: str, lease_seconds: float, limit: int = 10, **_: Any
    ) -> list[Lease]:
        now = self.clock()
        records = await self.inner.list(status="running")
        await trio.lowlevel.checkpoint()
        return [
            Lease(
                run_id=r.run_id,
                worker_id=worker_id,
                fence=r.fence + 1,
                expires_at=now + lease_seconds,
                agent_name=r.agent_name,
            )
            for r in records
            if r.lease_expires_at <= now
        ][:limit]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class DeafCancelEngine:
    """A SQLite engine whose cancel does nothing but return the record."""

    inner: SqliteEngine

    async def cancel(self, run_id: str, reason: str = "cancelled") -> Any:
        return await self.inner.get(run_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class SkippingJournal:
    """A SQLite checkpoint store whose read hides a damaged journal behind an empty one."""

    inner: SqliteCheckpointStore

    async def read(self, run_id: str, *, after: int = -1) -> list[Any]:
        try:
            return await self.inner.read(run_id, after=after)
        except CorruptRecordError:
            return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class JournalDroppingEngine:
    """A SQLite engine whose finish takes ``journal=`` and leaves the records out (the
    finished entry still goes after where they belonged)."""

    inner: SqliteEngine

    async def finish(
        self, lease: Lease, seq: int, finished: Any, *, journal: Sequence[Any] = ()
    ) -> Any:
        return await self.inner.finish(lease, seq + len(journal), finished)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class UnfencedJournalEngine:
    """A SQLite engine whose finish journals its records under the run's current fence,
    whoever holds the run, then commits the outcome under the lease it was given: a
    stale holder's refused finish leaves its records behind."""

    inner: SqliteEngine
    store: SqliteCheckpointStore

    async def finish(
        self, lease: Lease, seq: int, finished: Any, *, journal: Sequence[Any] = ()
    ) -> Any:
        record = await self.inner.get(lease.run_id)
        if journal and record is not None:
            current = msgspec.structs.replace(lease, fence=record.fence)
            await self.store.append(current, seq, journal)
        return await self.inner.finish(lease, seq + len(journal), finished)

    async def aclose(self) -> None:
        await self.store.aclose()
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def engine_kit(
    wrap: Callable[[SqliteEngine, Callable[[], float]], Any],
    tmp_path: Any,
    journal: Callable[[SqliteCheckpointStore], Any] = lambda store: store,
) -> Any:
    class Kit(EngineConformance):
        async def make_engine(self, clock: Callable[[], float]) -> Any:
            path = tmp_path / "runs.db"
            store = journal(SqliteCheckpointStore(path, clock=clock))
            return wrap(SqliteEngine(path, clock=clock), clock), store

        async def corrupt_journal(self, run_id: str, seq: int) -> None:
            with sqlite3.connect(tmp_path / "runs.db") as conn:
                conn.execute(
                    "UPDATE operative_journal SET record = '{' WHERE run_id = ? AND seq = ?",
                    (run_id, seq),
                )
            conn.close()

    return Kit()


async def test_a_journal_that_hides_a_damaged_entry_fails(tmp_path: Any) -> None:
    """Reading around a damaged entry instead of raising CorruptRecordError is caught;
    the same wiring without the wrapper passes."""
    kit = engine_kit(lambda engine, clock: engine, tmp_path / "a", SkippingJournal)
    (tmp_path / "a").mkdir()
    await fails(kit.test_a_damaged_journal_entry_raises_corrupt_record_error, "past a damaged")
    (tmp_path / "b").mkdir()
    await engine_kit(
        lambda engine, clock: engine, tmp_path / "b"
    ).test_a_damaged_journal_entry_raises_corrupt_record_error()


async def test_an_engine_whose_claim_is_not_exclusive_fails(tmp_path: Any) -> None:
    """Claims that do not fence: racers all win, and the stale holder keeps writing."""
    kit = engine_kit(ReadThenClaimEngine, tmp_path / "a")
    (tmp_path / "a").mkdir()
    await fails(kit.test_engines_racing_for_one_run_one_wins, "engines that claimed the run")
    (tmp_path / "b").mkdir()
    kit = engine_kit(ReadThenClaimEngine, tmp_path / "b")
    await fails(kit.test_a_claim_fences_out_the_stale_lease, "stale append")


async def test_an_engine_that_ignores_cancel_fails(tmp_path: Any) -> None:
    """A cancel that neither flags nor finishes the run is caught."""
    kit = engine_kit(lambda engine, clock: DeafCancelEngine(engine), tmp_path)
    await fails(kit.test_cancel, "a held run")


async def test_an_engine_whose_finish_drops_its_journal_fails(tmp_path: Any) -> None:
    """A finish that commits the outcome without the records it was given is caught."""
    kit = engine_kit(lambda engine, clock: JournalDroppingEngine(engine), tmp_path)
    await fails(kit.test_finish_commits_its_journal_and_outcome_together, "the finish's records")


async def test_an_engine_whose_refused_finish_leaves_records_fails(tmp_path: Any) -> None:
    """A finish refused for a lost lease that commits its records all the same is caught."""
    path = tmp_path / "runs.db"

    def wrap(engine: SqliteEngine, clock: Callable[[], float]) -> Any:
        return UnfencedJournalEngine(engine, SqliteCheckpointStore(path, clock=clock))

    kit = engine_kit(wrap, tmp_path)
    await fails(
        kit.test_finish_commits_its_journal_and_outcome_together,
        "the journal after a refused finish",
    )


class TestSqliteEngineUnwrapped(EngineConformance):
    """The control for the engine toys: the same wiring without a bug passes."""

    async def make_engine(self, clock: Callable[[], float]) -> Any:
        path = self.tmp_path / "runs.db"
        return SqliteEngine(path, clock=clock), SqliteCheckpointStore(path, clock=clock)


# -- the user's view ----------------------------------------------------------------------


def test_a_users_test_file_reports_pass_and_fail(pytester: pytest.Pytester) -> None:
    """A few-line test file, run by pytest without operative's configuration: the correct
    store passes every check, the broken one fails the ones its bug breaks."""
    pytester.makepyfile(
        test_my_store="""
        from operative.kvstore import MemoryStore
        from operative.testing.conformance import StoreConformance

        class TestMyStore(StoreConformance):
            async def make_store(self):
                return MemoryStore()

        class BrokenStore(MemoryStore):
            async def conditional_batch(self, operations):
                for op in operations:  # writes each operation on its own
                    await super().conditional_batch([op])
                return ()

        class TestBrokenStore(StoreConformance):
            hypothesis_examples = 60
            hypothesis_shrink = False

            async def make_store(self):
                return BrokenStore()
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    failed = {
        line.split("::")[-1].split(" ")[0]
        for line in result.outlines
        if line.startswith("FAILED") and "TestBrokenStore" in line
    }
    assert not any("TestMyStore" in line for line in result.outlines if "FAILED" in line)
    assert {
        "test_a_conflict_writes_nothing",
        "test_compare_and_set_is_linearizable",
        "test_versions_start_at_one_and_count_writes",
    } <= failed, result.stdout.str()
    assert outcomes["passed"] >= 13, outcomes
