"""``EngineConformance``: the checks every durable engine and checkpoint store pair must
pass (leases, fences, claims, cancellation), as a pytest test class to subclass."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest
import trio

from .._core._errors import CorruptRecordError, InvalidArgument
from ..conversation import Message
from ..durable import (
    CheckpointStore,
    DurableEngine,
    Finished,
    Generated,
    Lease,
    RunOutcome,
    Started,
)
from ..durable._errors import LeaseLostError, RunNotFoundError
from ..kvstore._protocol import ConflictError
from ._conformance_checks import expect, expect_equal

__all__ = ["EngineConformance"]

T0 = 1_000_000.0

Pair = tuple[DurableEngine, CheckpointStore]


@attrs.define
class _Clock:
    """Epoch seconds that move only when a check says so."""

    now: float = T0

    def __call__(self) -> float:
        return self.now


def _started(agent: str = "agent") -> Started:
    return Started(messages=(Message(id="m0", role="user", content="hello"),), agent_name=agent)


def _generated(step: int) -> Generated:
    return Generated(step=step, message=Message(id=f"a{step}", role="assistant", content="ok"))


def _finished(reason: str = "stop-condition") -> Finished:
    return Finished(outcome=RunOutcome(finish_reason=reason))


async def _raises(error: type[BaseException], call: Awaitable[object], what: str) -> None:
    try:
        got = await call
    except error:
        return
    raise AssertionError(f"{what}: expected {error.__name__}, got {got!r}")


_CLAIMER = """
import json, sys, trio
{opener}

async def main():
    async with engine:
        await engine.get("warm-up")
        print("ready", flush=True)
        sys.stdin.readline()
        claimed = []
        while leases := await engine.claim(worker_id=sys.argv[1], lease_seconds=3600, limit=2):
            claimed += [[lease.run_id, lease.fence] for lease in leases]
        print(json.dumps(claimed), flush=True)

trio.run(main)
"""


class EngineConformance:
    """Subclass as ``Test...`` and define :meth:`make_engine`; pytest runs every check.

    Time is the ``clock`` the kit hands the factory, so lease expiry never waits.
    ``self.tmp_path`` is the test's temporary directory.
    """

    racing_engines: ClassVar[int] = 8
    """Engine objects that claim at the same moment in the racing checks."""
    processes: ClassVar[int] = 4

    tmp_path: Path

    @pytest.fixture(autouse=True)
    def _conformance_tmp_path(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    # -- the hooks ------------------------------------------------------------------------

    async def make_engine(self, clock: Callable[[], float]) -> Pair:
        """A new engine and checkpoint store over this test's database (every call in one
        test over the same data, empty at the start of each test), reading the time
        from ``clock`` (epoch seconds). The check closes both."""
        raise InvalidArgument(
            f"{type(self).__name__} must define `async def make_engine(self, clock)` "
            "returning (engine, checkpoint_store)"
        )

    async def corrupt_journal(self, run_id: str, seq: int) -> None:
        """Damage journal entry ``seq`` of ``run_id`` behind the store's back so that it
        cannot be decoded; without it, the damaged-journal check is skipped."""
        pytest.skip("corrupt_journal() is not defined")

    def engine_in_subprocess(self) -> str | None:
        """Python statements that bind ``engine`` to an engine over this test's database
        on the real clock, run in a fresh interpreter; ``None`` skips the cross-process
        claim race."""
        return None

    # -- helpers --------------------------------------------------------------------------

    async def _with_pair(
        self, body: Callable[[DurableEngine, CheckpointStore, _Clock], Awaitable[None]]
    ) -> None:
        clock = _Clock()
        engine, store = await self.make_engine(clock)
        try:
            await body(engine, store, clock)
        finally:
            await engine.aclose()
            await store.aclose()

    async def _more_engines(self, clock: _Clock, count: int) -> list[Pair]:
        return [await self.make_engine(clock) for _ in range(count)]

    # -- start, append, read ----------------------------------------------------------------

    @pytest.mark.trio
    async def test_start_append_and_read(self) -> None:
        """start leases the run at fence 1 and journals entry 0; appends land at the
        next seq; an existing id or a taken seq is a ConflictError that writes nothing."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            expect(isinstance(engine, DurableEngine), f"{engine!r} is not a DurableEngine")
            expect(isinstance(store, CheckpointStore), f"{store!r} is not a CheckpointStore")
            lease = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=10)
            expect_equal(
                (lease.run_id, lease.worker_id, lease.fence, lease.expires_at),
                ("r1", "w1", 1, T0 + 10),
                "the lease start returns",
            )
            await _raises(
                ConflictError,
                engine.start(_started(), run_id="r1", worker_id="w2", lease_seconds=10),
                "a second start of one run id",
            )
            clock.now += 1
            expect_equal(await store.append(lease, 1, [_generated(1)]), None, "append")
            await _raises(
                ConflictError, store.append(lease, 1, [_generated(9)]), "an append at a taken seq"
            )
            await _raises(
                ConflictError,
                store.append(lease, 1, [_generated(8), _generated(9)]),
                "an append whose batch reaches a taken seq",
            )
            entries = await store.read("r1")
            expect_equal(
                [(e.seq, e.record) for e in entries],
                [(0, _started()), (1, _generated(1))],
                "the journal (nothing of a conflicting append may be written)",
            )
            expect_equal([e.seq for e in await store.read("r1", after=0)], [1], "read(after=0)")
            record = await engine.get("r1")
            expect(record is not None, "get of a started run")
            assert record is not None
            expect_equal(
                (record.status, record.lease_owner, record.fence), ("running", "w1", 1), "record"
            )

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_a_damaged_journal_entry_raises_corrupt_record_error(self) -> None:
        """Reading past a journal entry that cannot be decoded raises CorruptRecordError
        naming run and seq; the entries after it and other runs still read."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            lease = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=10)
            await store.append(lease, 1, [_generated(1), _generated(2), _generated(3)])
            other = await engine.start(_started(), run_id="r2", worker_id="w1", lease_seconds=10)
            await store.append(other, 1, [_generated(1)])
            await self.corrupt_journal("r1", 2)
            try:
                got = await store.read("r1")
            except CorruptRecordError as error:
                text = str(error)
                expect("'r1'" in text and "2" in text, f"the error names run and seq: {text}")
            else:
                raise AssertionError(f"read returned {got!r} past a damaged entry")
            expect_equal([e.seq for e in await store.read("r1", after=2)], [3], "entries after it")
            expect_equal([e.seq for e in await store.read("r2")], [0, 1], "another run")

        await self._with_pair(body)

    # -- claims and fences ------------------------------------------------------------------

    @pytest.mark.trio
    async def test_only_expired_leases_are_claimed(self) -> None:
        """claim takes running runs whose lease expired, never a live or finished one."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=10)
            done = await engine.start(_started(), run_id="r2", worker_id="w1", lease_seconds=1)
            await engine.finish(done, 1, _finished())
            expect_equal(await engine.claim(worker_id="w2", lease_seconds=5), [], "early claim")
            clock.now = T0 + 9.5
            expect_equal(await engine.claim(worker_id="w2", lease_seconds=5), [], "claim at 9.5 s")
            clock.now = T0 + 10
            claimed = await engine.claim(worker_id="w2", lease_seconds=5)
            expect_equal(
                [(c.run_id, c.worker_id, c.fence, c.expires_at) for c in claimed],
                [("r1", "w2", 2, T0 + 15)],
                "the claim once r1's lease expired",
            )

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_a_claim_fences_out_the_stale_lease(self) -> None:
        """After a claim, the previous holder's append, renew and finish raise
        LeaseLostError and its release is ignored; the new lease writes."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            old = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=5)
            await store.append(old, 1, [_generated(1)])
            clock.now += 6
            [new] = await engine.claim(worker_id="w2", lease_seconds=5)
            expect_equal(new.fence, old.fence + 1, "the new lease's fence")
            await _raises(LeaseLostError, store.append(old, 2, [_generated(2)]), "stale append")
            await _raises(LeaseLostError, engine.renew(old, lease_seconds=5), "stale renew")
            await _raises(LeaseLostError, engine.finish(old, 2, _finished()), "stale finish")
            await engine.release(old)
            record = await engine.get("r1")
            assert record is not None
            expect_equal(
                (record.lease_owner, record.fence, record.status),
                ("w2", 2, "running"),
                "the run after a stale release",
            )
            expect_equal(await engine.claim(worker_id="w3", lease_seconds=5), [], "reclaim")
            expect_equal(await store.append(new, 2, [_generated(2)]), None, "the new holder")
            expect_equal([e.seq for e in await store.read("r1")], [0, 1, 2], "journal")

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_same_worker_id_reclaims_at_once(self) -> None:
        """A new engine object under a worker id takes that id's live runs back without
        waiting out the lease, fencing the old object out; an engine object never claims
        the runs it holds itself."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            old = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=600)
            await engine.start(_started(), run_id="r2", worker_id="w2", lease_seconds=600)
            expect_equal(await engine.claim(worker_id="w1", lease_seconds=600), [], "own claim")
            [(again, again_store)] = await self._more_engines(clock, 1)
            try:
                claimed = await again.claim(worker_id="w1", lease_seconds=600)
                expect_equal(
                    [(c.run_id, c.fence) for c in claimed],
                    [("r1", 2)],
                    "a restarted w1's claim (its own run, not w2's)",
                )
                await _raises(
                    LeaseLostError, store.append(old, 1, [_generated(1)]), "the old incarnation"
                )
                expect_equal(
                    await again.claim(worker_id="w1", lease_seconds=600), [], "a second claim"
                )
            finally:
                await again.aclose()
                await again_store.aclose()

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_release_and_finish(self) -> None:
        """A released run is claimable at once; a finished run keeps its outcome, frees
        its lease and is never claimed."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            lease = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=1000)
            await engine.release(lease)
            [claimed] = await engine.claim(worker_id="w2", lease_seconds=5)
            expect_equal(claimed.fence, 2, "the fence of a released run's claim")
            record = await engine.finish(claimed, 1, _finished("error"))
            expect_equal(
                (record.status, record.outcome, record.lease_owner),
                ("error", RunOutcome(finish_reason="error"), None),
                "the finished record",
            )
            expect_equal(await engine.get("r1"), record, "get of the finished run")
            await _raises(LeaseLostError, engine.finish(claimed, 2, _finished()), "finish twice")
            clock.now += 10_000
            expect_equal(await engine.claim(worker_id="w3", lease_seconds=5), [], "claim")

        await self._with_pair(body)

    # -- finish with the journal's last records ---------------------------------------------

    @pytest.mark.trio
    async def test_finish_commits_its_journal_and_outcome_together(self) -> None:
        """finish(..., journal=[...]) journals the records at seq, seq + 1, ... and the
        finished entry after them, with the outcome. Refused (the lease was lost, a seq
        is taken), it commits neither the records nor the outcome."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            lease = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=10)
            await store.append(lease, 1, [_generated(1)])
            record = await engine.finish(
                lease, 2, _finished(), journal=[_generated(2), _generated(3)]
            )
            expect_equal(
                (record.status, record.outcome, record.lease_owner),
                ("completed", RunOutcome(finish_reason="stop-condition"), None),
                "the record a finish with journal records returns",
            )
            expect_equal(await engine.get("r1"), record, "get of that run")
            expect_equal(
                [(e.seq, e.record) for e in await store.read("r1")],
                [(0, _started())]
                + [(step, _generated(step)) for step in (1, 2, 3)]
                + [(4, _finished())],
                "the journal: the finish's records at seq 2 and 3, its finished entry at 4",
            )

            stale = await engine.start(_started(), run_id="r2", worker_id="w1", lease_seconds=5)
            clock.now += 6
            [held] = await engine.claim(worker_id="w2", lease_seconds=600)
            await _raises(
                LeaseLostError,
                engine.finish(stale, 1, _finished("error"), journal=[_generated(1)]),
                "a finish with journal records under a lost lease",
            )
            await self._check_unfinished(engine, store, "r2", [0], "after a refused finish")

            await store.append(held, 1, [_generated(1)])
            await _raises(
                ConflictError,
                engine.finish(held, 1, _finished("error"), journal=[_generated(9)]),
                "a finish whose journal records start at a taken seq",
            )
            await self._check_unfinished(engine, store, "r2", [0, 1], "after a conflicting finish")
            await engine.finish(held, 2, _finished(), journal=[_generated(2)])
            expect_equal(
                [(e.seq, e.record) for e in await store.read("r2", after=0)],
                [(1, _generated(1)), (2, _generated(2)), (3, _finished())],
                "the journal once the holder finished at the next seq",
            )

        await self._with_pair(body)

    async def _check_unfinished(
        self, engine: DurableEngine, store: CheckpointStore, run_id: str, seqs: list[int], when: str
    ) -> None:
        """Neither the records of a refused finish nor its outcome were committed."""
        expect_equal([e.seq for e in await store.read(run_id)], seqs, f"the journal {when}")
        record = await engine.get(run_id)
        assert record is not None
        expect_equal(
            (record.status, record.outcome, record.lease_owner),
            ("running", None, "w2"),
            f"the run {when}",
        )

    # -- cancel -------------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_cancel(self) -> None:
        """Cancelling a held run flags it (its holder learns at its next write); an unheld
        run ends aborted at once; a finished run is unchanged; an unknown id raises
        RunNotFoundError."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            held = await engine.start(_started(), run_id="r1", worker_id="w1", lease_seconds=10)
            record = await engine.cancel("r1", "too slow")
            expect_equal(
                (record.status, record.cancel_reason), ("running", "too slow"), "a held run"
            )
            expect_equal(await store.append(held, 1, []), "too slow", "the holder's next write")
            expect_equal(
                (await engine.renew(held, lease_seconds=10))[1], "too slow", "the holder's renew"
            )
            lease = await engine.start(_started(), run_id="r2", worker_id="w1", lease_seconds=10)
            await store.append(lease, 1, [_generated(1)])
            clock.now += 100
            record = await engine.cancel("r2", "abandoned")
            expect_equal(
                (record.status, record.outcome),
                ("aborted", RunOutcome(finish_reason="aborted", abort_reason="abandoned")),
                "an unheld run",
            )
            last = (await store.read("r2"))[-1]
            expect_equal(
                (last.seq, last.record),
                (
                    2,
                    Finished(outcome=RunOutcome(finish_reason="aborted", abort_reason="abandoned")),
                ),
                "the journal's last entry",
            )
            await _raises(LeaseLostError, store.append(lease, 3, []), "a write to it")
            expect_equal(await engine.cancel("r2", "again"), record, "cancel of a finished run")
            await _raises(RunNotFoundError, engine.cancel("nobody"), "cancel of an unknown id")

        await self._with_pair(body)

    # -- races --------------------------------------------------------------------------------

    @pytest.mark.trio
    async def test_engines_racing_for_one_run_one_wins(self) -> None:
        """Several engine objects claim one expired run at the same moment: one lease."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            await engine.start(_started(), run_id="contested", worker_id="w", lease_seconds=1)
            clock.now += 5
            pairs = await self._more_engines(clock, self.racing_engines)
            won: list[list[Lease]] = []
            try:
                for other, _ in pairs:
                    await other.get("warm-up")

                async def worker(index: int, other: DurableEngine) -> None:
                    won.append(await other.claim(worker_id=f"w{index}", lease_seconds=60))

                async with trio.open_nursery() as nursery:
                    for index, (other, _) in enumerate(pairs):
                        nursery.start_soon(worker, index, other)
            finally:
                for other, other_store in pairs:
                    await other.aclose()
                    await other_store.aclose()
            winners = [leases for leases in won if leases]
            expect_equal(len(winners), 1, "engines that claimed the run")
            record = await engine.get("contested")
            assert record is not None
            expect_equal(record.fence, 2, "the run's fence after one claim")

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_engines_claiming_many_runs_never_share_one(self) -> None:
        """Engine objects claiming two at a time until nothing is left take each run once."""

        async def body(engine: DurableEngine, store: CheckpointStore, clock: _Clock) -> None:
            runs = [f"r{index:02}" for index in range(24)]
            for run_id in runs:
                await engine.start(_started(), run_id=run_id, worker_id="w", lease_seconds=1)
            clock.now += 5
            pairs = await self._more_engines(clock, self.racing_engines)
            claimed: list[tuple[str, int]] = []
            try:

                async def worker(index: int, other: DurableEngine) -> None:
                    while leases := await other.claim(
                        worker_id=f"w{index}", lease_seconds=60, limit=2
                    ):
                        claimed.extend((lease.run_id, lease.fence) for lease in leases)

                async with trio.open_nursery() as nursery:
                    for index, (other, _) in enumerate(pairs):
                        nursery.start_soon(worker, index, other)
            finally:
                for other, other_store in pairs:
                    await other.aclose()
                    await other_store.aclose()
            expect_equal(sorted(claimed), [(r, 2) for r in runs], "(run, fence) claimed")

        await self._with_pair(body)

    @pytest.mark.trio
    async def test_processes_racing_claim_each_run_once(self) -> None:
        """OS processes claim until nothing is left: every run leased exactly once."""
        opener = self.engine_in_subprocess()
        if opener is None:
            pytest.skip("engine_in_subprocess() is not defined")
        runs = [f"run-{index:02}" for index in range(16)]
        engine, store = await self.make_engine(lambda: time.time() - 3600)
        try:
            for run_id in runs:
                await engine.start(_started(), run_id=run_id, worker_id="gone", lease_seconds=1)
        finally:
            await engine.aclose()
            await store.aclose()
        source = _CLAIMER.format(opener=textwrap.dedent(opener))
        processes = [
            await trio.lowlevel.open_process(
                [sys.executable, "-c", source, f"p{index}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for index in range(self.processes)
        ]
        outputs: list[bytes] = []
        try:
            with trio.fail_after(60):
                for process in processes:
                    assert process.stdout is not None
                    expect_equal(await _read_line(process.stdout), b"ready\n", "a child's start")
                for process in processes:
                    assert process.stdin is not None
                    await process.stdin.send_all(b"go\n")
                for process in processes:
                    assert process.stdout is not None
                    assert process.stderr is not None
                    outputs.append(await _read_line(process.stdout))
                    code = await process.wait()
                    errors = b"".join([chunk async for chunk in process.stderr])
                    expect_equal(code, 0, f"a child's exit code ({errors.decode()})")
        finally:
            for process in processes:
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        claimed = sorted(tuple(pair) for output in outputs for pair in json.loads(output))
        expect_equal(claimed, [(r, 2) for r in runs], "(run, fence) claimed across processes")


async def _read_line(stream: Any) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        if not chunk:
            break
        line += chunk
    return line
