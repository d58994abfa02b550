"""Group commit and the commits a step makes.

A checkpoint store opened with ``async with`` commits the appends of concurrent runs in
one transaction; each append is still fenced on its own (a lost lease or a taken seq
fails only that writer), a failed batch fails each of its writers with the real error,
and a writer cancelled while its batch is in flight is told so while the batch commits
without it. A durable run commits a step once when its calls are idempotent (or it has
none), twice when a call is not idempotent (its start must be durable before it runs);
what the journal holds after a crash between those commits recovers as documented.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio

from operative import OperativeError, create_agent, tool
from operative.durable import (
    Durable,
    Generated,
    LeaseLostError,
    StepDone,
    ToolSettled,
    ToolStarted,
    replay_journal,
    transcript,
)
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.durable._records import Started
from operative.kvstore import ConflictError

from .conftest import DurableDb
from .test_durable_runs import make_agent, scripted, shape


class _Gate:
    """Holds the worker thread of chosen batches until released (a batch in flight)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self.hold = True
        self.fail: Exception | None = None

    def wait_here(self) -> None:
        """In the worker thread: say the batch is in flight, wait for the release."""
        self._token.run_sync_soon(self.entered.set)
        self.release.wait(30)


def _gated_store(db: DurableDb, gate: _Gate) -> Any:
    """A checkpoint store of ``db``'s class whose batches wait at ``gate``."""
    base = type(db.store())

    class Gated(base):  # type: ignore[misc, valid-type]
        def _write_batch(self, conn: Any, batch: Sequence[Any]) -> Any:
            if gate.hold:
                gate.hold = False  # only the first batch waits
                gate.wait_here()
            if gate.fail is not None:
                raise gate.fail
            return super()._write_batch(conn, batch)

    return _in_threads(db, Gated(db.location))


def _in_threads(db: DurableDb, store: Any) -> Any:
    """``store``, committing in worker threads only. A batch in flight is one in a worker
    thread: on SQLite a brief write commits in the Trio thread (and a gate there would
    hold the whole loop), so these stores send every write to a thread."""
    if db.name == "sqlite":
        store._db._brief_writes = False
    return store


async def _in_flight(gate: _Gate) -> None:
    await gate.entered.wait()


def _started(name: str) -> Started:
    return Started(messages=(), agent_name=name)


async def _start(engine: Any, run_ids: Sequence[str], **options: Any) -> dict[str, Any]:
    return {
        run_id: await engine.start(
            _started("a"), run_id=run_id, worker_id="w", lease_seconds=60, **options
        )
        for run_id in run_ids
    }


def _done(step: int) -> list[Any]:
    return [StepDone(step=step)]


async def test_concurrent_appends_commit_in_one_transaction(durable_db: DurableDb) -> None:
    """Appends that arrive while a batch commits are committed together, next."""
    gate = _Gate()
    engine, store = durable_db.engine(), _gated_store(durable_db, gate)
    async with engine, store:
        leases = await _start(engine, [f"r{i}" for i in range(20)])
        cancels: dict[str, str | None] = {}

        async def append(run_id: str) -> None:
            cancels[run_id] = await store.append(leases[run_id], 1, _done(1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, "r0")
            await _in_flight(gate)  # r0's batch is committing
            for i in range(1, 20):
                nursery.start_soon(append, f"r{i}")
            await trio.sleep(0.05)
            gate.release.set()
        assert store.batches == 2
        assert cancels == dict.fromkeys(leases)
        for run_id in leases:
            assert [e.seq for e in await store.read(run_id)] == [0, 1]


async def test_a_lost_lease_or_a_taken_seq_fails_only_its_own_append(
    durable_db: DurableDb,
) -> None:
    """In one batch: r1's lease was taken over, r2's seq is taken; r0 and r3 commit."""
    now = [1_800_000_000.0]
    gate = _Gate()
    engine = durable_db.engine(clock=lambda: now[0])
    other = durable_db.engine(clock=lambda: now[0])
    store = _gated_store(durable_db, gate)
    async with engine, other, store:
        leases = await _start(engine, ["blocker", "r0", "r1", "r2", "r3"])
        gate.hold = False
        await store.append(leases["r2"], 1, _done(1))
        gate.hold = True
        now[0] += 120  # every lease expired; another worker claims r1
        (claimed,) = await other.claim(worker_id="b", lease_seconds=60, run_ids=["r1"])
        assert claimed.fence == leases["r1"].fence + 1
        outcomes: dict[str, Any] = {}

        async def append(run_id: str, seq: int) -> None:
            try:
                outcomes[run_id] = await store.append(leases[run_id], seq, _done(seq))
            except (LeaseLostError, ConflictError) as exc:
                outcomes[run_id] = exc

        before = store.batches
        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, "blocker", 1)
            await _in_flight(gate)
            for run_id in ("r0", "r1", "r2", "r3"):
                nursery.start_soon(append, run_id, 1)
            await trio.sleep(0.05)
            gate.release.set()
        assert store.batches == before + 2  # the blocker's batch, then the four together
        assert outcomes["r0"] is None
        assert outcomes["r3"] is None
        assert isinstance(outcomes["r1"], LeaseLostError)
        assert isinstance(outcomes["r2"], ConflictError)
        assert [e.seq for e in await store.read("r0")] == [0, 1]
        assert [e.seq for e in await store.read("r1")] == [0]  # nothing of the stale writer
        assert [e.seq for e in await store.read("r3")] == [0, 1]
        # The new holder writes on.
        assert await store.append(claimed, 1, _done(1)) is None


async def test_a_failed_batch_fails_each_writer_with_its_error(durable_db: DurableDb) -> None:
    gate = _Gate()
    engine, store = durable_db.engine(), _gated_store(durable_db, gate)
    async with engine, store:
        leases = await _start(engine, ["r0", "r1", "r2"])
        gate.fail = OperativeError("the disk is full")
        errors: dict[str, BaseException] = {}

        async def append(run_id: str) -> None:
            try:
                await store.append(leases[run_id], 1, _done(1))
            except OperativeError as exc:
                errors[run_id] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, "r0")
            await _in_flight(gate)
            nursery.start_soon(append, "r1")
            nursery.start_soon(append, "r2")
            await trio.sleep(0.05)
            gate.release.set()
        assert {run_id: str(exc) for run_id, exc in errors.items()} == dict.fromkeys(
            ["r0", "r1", "r2"], "the disk is full"
        )
        gate.fail = None
        for run_id in leases:  # nothing was written: each writes again
            assert [e.seq for e in await store.read(run_id)] == [0]
            await store.append(leases[run_id], 1, _done(1))


async def test_a_writer_cancelled_during_a_group_commit(durable_db: DurableDb) -> None:
    """Cancelled in flight while another writer still waits for the batch, a writer is
    told at once and the batch commits without it; one not yet taken is taken out and
    never written."""
    blocker, gate = _Gate(), _Gate()
    base = type(durable_db.store())

    class Gated(base):  # type: ignore[misc, valid-type]
        def _write_batch(self, conn: Any, batch: Sequence[Any]) -> Any:
            runs = {item.lease.run_id for item in batch}
            if "blocker" in runs:
                blocker.wait_here()
            if "flying" in runs:
                gate.wait_here()
            return super()._write_batch(conn, batch)

    engine, store = durable_db.engine(), _in_threads(durable_db, Gated(durable_db.location))
    async with engine, store:
        leases = await _start(engine, ["blocker", "flying", "other", "waiting"])
        raised: list[str] = []

        async def append(run_id: str, scope: trio.CancelScope) -> None:
            with scope:
                await store.append(leases[run_id], 1, _done(1))
                return
            raised.append(run_id)

        scopes = {run_id: trio.CancelScope() for run_id in leases}
        async with trio.open_nursery() as nursery:
            # Alone, the blocker commits in its own task; the next two wait for it and
            # then share the committer's batch.
            nursery.start_soon(append, "blocker", scopes["blocker"])
            await _in_flight(blocker)
            nursery.start_soon(append, "flying", scopes["flying"])
            nursery.start_soon(append, "other", scopes["other"])
            await trio.sleep(0.05)
            blocker.release.set()
            await _in_flight(gate)  # both in the batch being committed
            nursery.start_soon(append, "waiting", scopes["waiting"])
            await trio.sleep(0.05)
            scopes["flying"].cancel()
            scopes["waiting"].cancel()
            await trio.sleep(0.05)
            assert sorted(raised) == ["flying", "waiting"]  # before the batch ended
            gate.release.set()
        assert sorted(raised) == ["flying", "waiting"]
        assert store.batches == 2
        # In flight when cancelled: committed all the same. Waiting: never written.
        assert [e.seq for e in await store.read("flying")] == [0, 1]
        assert [e.seq for e in await store.read("other")] == [0, 1]
        assert [e.seq for e in await store.read("waiting")] == [0]


async def test_the_last_writer_of_a_batch_cancelled_waits_for_it_to_stop(
    durable_db: DurableDb,
) -> None:
    """As a lone cancelled statement's caller does: the batch is stopped, and the
    writer's Cancelled comes once the batch is over (the store never writes for a
    writer that has gone away)."""
    gate = _Gate()
    engine, store = durable_db.engine(), _gated_store(durable_db, gate)
    async with engine, store:
        leases = await _start(engine, ["alone"])
        raised: list[float] = []
        scope = trio.CancelScope()

        async def append() -> None:
            with scope:
                await store.append(leases["alone"], 1, _done(1))
            raised.append(trio.current_time())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append)
            await _in_flight(gate)
            scope.cancel()
            await trio.sleep(0.05)
            assert raised == []  # still waiting for its batch to end
            gate.release.set()
        assert scope.cancelled_caught
        assert len(raised) == 1
        assert store.batches == 1
        # Stopped before its statements ran, or committed by then: either way the
        # journal is whole, and the store writes on.
        seqs = [e.seq for e in await store.read("alone")]
        assert seqs in ([0], [0, 1])
        await store.append(leases["alone"], len(seqs), _done(len(seqs)))


async def test_a_run_aborted_during_its_group_commit_knows_it_committed(
    durable_db: DurableDb,
) -> None:
    """The durable driver waits (shielded) for the batch: the step it was committing is
    completed in the result as in the journal, and nothing is left to recover."""
    gate = _Gate()
    gate.hold = False
    executions: Counter[str] = Counter()
    agent = make_agent([["once"], ["once"], []], executions)
    engine, base = durable_db.engine(), _gated_store(durable_db, gate)

    class HoldStepOne(type(base)):  # type: ignore[misc]
        def _write_batch(self, conn: Any, batch: Sequence[Any]) -> Any:
            if any(row[2] == "step.done" for item in batch for row in item.rows):
                gate.wait_here()
            return super()._write_batch(conn, batch)

    store = _in_threads(durable_db, HoldStepOne(durable_db.location))
    await base.aclose()
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="held")
        async with agent.open_run("go", durable=durable) as run:
            await _in_flight(gate)
            run.abort("stop now")
            await trio.sleep(0.05)
            gate.release.set()
            result = await run.result()
        assert result.finish_reason == "aborted"
        entries = await store.read("held")
        replay = replay_journal("held", entries)
        assert replay.finished is not None
        # The step's end committed (the abort waited for it) and the run stopped there.
        assert [s.step for s in replay.steps] == [s.step for s in result.steps] == [1]
        assert shape(transcript(replay)) == shape(result.conversation.current)
        record = await engine.get("held")
        assert record is not None
        assert record.status == "aborted"
    assert executions == Counter({"once:10": 1})


# -- the commits of a step -----------------------------------------------------------------


class _Counting:
    """A checkpoint store that counts its appends (each one commit)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.appends: list[list[str]] = []

    @property
    def database(self) -> str:
        return str(self._inner.database)

    async def append(self, lease: Any, seq: int, records: Any) -> str | None:
        self.appends.append([type(r).__name__ for r in records])
        cancel: str | None = await self._inner.append(lease, seq, records)
        return cancel

    async def read(self, run_id: str, *, after: int = -1) -> Any:
        return await self._inner.read(run_id, after=after)

    async def aclose(self) -> None:
        await self._inner.aclose()


@pytest.mark.parametrize(
    ("script", "commits"),
    [
        # every call idempotent: one commit per step
        (
            [["idem"], ["idem", "idem"], []],
            [["Generated", "ToolStarted", "ToolSettled", "StepDone"]],
        ),
        # a call that is not idempotent: its start (with the answer), then the rest
        (
            [["once"], []],
            [["Generated", "ToolStarted"], ["ToolSettled", "StepDone"]],
        ),
    ],
)
async def test_the_commits_of_a_step(
    sqlite_db: DurableDb, script: list[list[str]], commits: list[list[str]]
) -> None:
    engine, inner = sqlite_db.engine(), sqlite_db.store()
    store = _Counting(inner)
    async with engine, inner:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="c")
        async with make_agent(script, Counter()).open_run("go", durable=durable) as run:
            result = await run.result()
        kinds = [type(entry.record).__name__ for entry in await inner.read("c")]
    assert result.error is None
    assert store.appends[: len(commits)] == commits
    # The answer (a step with no call, whose end nobody observes) is journaled with the
    # outcome, in the terminal commit: no append of its own.
    assert store.appends[-1][-1] == "StepDone"
    assert kinds[-3:] == ["Generated", "StepDone", "Finished"]
    assert sum(map(len, store.appends)) == len(kinds) - 4  # Started; answer; Finished
    if all(name == "idem" for names in script for name in names):
        assert len(store.appends) == len(script) - 1  # one commit per step (the last: 0)


async def test_a_listener_of_the_answer_gets_it_committed_first(sqlite_db: DurableDb) -> None:
    """With a ``step.generated`` listener the answer commits before it is told."""
    engine, inner = sqlite_db.engine(), sqlite_db.store()
    store = _Counting(inner)
    seen: list[int] = []
    async with engine, inner:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="l")

        def heard(event: Any) -> None:
            with closing(sqlite3.connect(sqlite_db.location)) as conn:
                (count,) = conn.execute(
                    "SELECT count(*) FROM operative_journal WHERE run_id = 'l' "
                    "AND kind = 'generated'"
                ).fetchone()
            seen.append(count)

        agent = make_agent([["idem"], []], Counter())
        async with agent.open_run("go", durable=durable) as run:
            run.add_listener("step.generated", heard)
            await run.result()
    assert seen == [1, 2]
    assert store.appends[0] == ["Generated"]


@pytest.mark.parametrize("observer", ["step.completed", "on_step", "on_run_end"])
async def test_an_observed_end_of_the_answer_commits_before_the_outcome(
    sqlite_db: DurableDb, observer: str
) -> None:
    """A step with no call commits its end at once when something outside the run sees
    it before the outcome commits (a listener, a hook); only unobserved, it waits for
    the terminal commit."""
    engine, inner = sqlite_db.engine(), sqlite_db.store()
    store = _Counting(inner)
    seen: list[int] = []

    def done_steps(*_: Any) -> None:
        with closing(sqlite3.connect(sqlite_db.location)) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM operative_journal WHERE run_id = 'o' AND kind = 'step.done'"
            ).fetchone()
        seen.append(count)

    @tool(idempotent=True)
    async def idem(n: int) -> str:
        """Idempotent."""
        return f"idem {n}"

    hooks: dict[str, Any] = {} if observer == "step.completed" else {observer: done_steps}
    agent = create_agent(generate=scripted([["idem"], []]), tools=[idem], name="w", **hooks)
    async with engine, inner:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="o")
        async with agent.open_run("go", durable=durable) as run:
            if observer == "step.completed":
                run.add_listener("step.completed", done_steps)
            await run.result()
    assert store.appends[-1] == ["Generated", "StepDone"]  # the answer: a commit of its own
    assert seen == ([1, 2] if observer != "on_run_end" else [2])


# -- a crash between the commits of a step ----------------------------------------------


def _db(tmp_path: Path, name: str) -> DurableDb:
    from .conftest import _sqlite

    (tmp_path / name).mkdir()
    return _sqlite(tmp_path / name)


async def _journal_of(db: DurableDb, script: list[list[str]]) -> list[Any]:
    engine, store = db.engine(), db.store()
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="p")
        async with make_agent(script, Counter()).open_run("go", durable=durable) as run:
            await run.result()
        entries: list[Any] = await store.read("p")
        return entries


async def _recover(db: DurableDb, entries: list[Any], script: list[list[str]]) -> Any:
    from operative.durable import recover

    executions: Counter[str] = Counter()
    engine, store = db.engine(), db.store()
    async with engine, store:
        lease = await engine.start(
            entries[0].record, run_id="p", worker_id="crashed", lease_seconds=60
        )
        for entry in entries[1:]:
            await store.append(lease, entry.seq, [entry.record])
        await engine.release(lease)
        results = await recover(
            engine=engine, checkpoint_store=store, agents={"worker": make_agent(script, executions)}
        )
    return results["p"], executions


async def test_a_crash_after_a_calls_start_reports_it_unknown(tmp_path: Path) -> None:
    """Cut after the step's first commit (answer and start of a call that is not
    idempotent): the call is reported unknown, never run again."""
    script = [["once"], []]
    full = await _journal_of(_db(tmp_path, "a"), script)
    kinds = [type(e.record) for e in full]
    cut = kinds.index(ToolStarted) + 1
    assert kinds[:cut] == [Started, Generated, ToolStarted]
    result, executions = await _recover(_db(tmp_path, "b"), full[:cut], script)
    assert executions == Counter()
    assert result.steps[0].results[0].error == UNKNOWN_OUTCOME


async def test_a_crash_inside_a_step_of_idempotent_calls_runs_it_again(tmp_path: Path) -> None:
    """Cut before an idempotent step's one commit: the journal ends at the previous
    step, and the step runs again whole (its answer asked for again, its calls run)."""
    script = [["idem"], ["idem"], []]
    full = await _journal_of(_db(tmp_path, "a"), script)
    done = [i for i, e in enumerate(full) if isinstance(e.record, StepDone)]
    result, executions = await _recover(_db(tmp_path, "b"), full[: done[0] + 1], script)
    assert executions == Counter({"idem:20": 1})
    assert [s.step for s in result.steps] == [1, 2, 3]


async def test_a_journal_cut_inside_an_idempotent_step_recovers(tmp_path: Path) -> None:
    """Journals cut between the records of the step's one commit (as a journal written
    one record per commit, before, could be): after the call's start, the idempotent
    call runs again; after its result, it does not."""
    script = [["idem"], []]
    full = await _journal_of(_db(tmp_path, "a"), script)
    kinds = [type(e.record) for e in full]
    assert kinds[:5] == [Started, Generated, ToolStarted, ToolSettled, StepDone]
    result, executions = await _recover(_db(tmp_path, "b"), full[:3], script)
    assert executions == Counter({"idem:10": 1})
    assert result.steps[0].results[0].outcome == "success"
    result, executions = await _recover(_db(tmp_path, "c"), full[:4], script)
    assert executions == Counter()
    assert result.steps[0].results[0].outcome == "success"
