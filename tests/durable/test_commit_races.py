"""Aborts, shutdowns and failures that meet a durable run while it commits.

Each durable write (the run record, a journal entry, the terminal record) is atomic with
respect to cancellation: whatever ends the run, the stored record agrees with the result,
each call has one result, steps are contiguous, and a call that settled (or that an
abort forbade) never runs again. A terminal commit that does not finish makes
``result()`` raise :class:`~operative.CleanupError`, and recovery finishes the run.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operative import (
    CleanupError,
    GenerateRequest,
    GenerateResponse,
    RunResult,
    ToolCall,
    create_agent,
)
from operative.durable import Durable, ToolSettled, recover, replay_journal, transcript
from operative.durable._records import Started, StepDone
from operative.testing._crash_kit import RACES, Interference

from .conftest import DurableDb
from .test_durable_runs import Script, make_agent, shape

_ids = itertools.count()


class _Wall:
    """The engines' wall clock, moved by the test (leases expire without waiting)."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


# -- interference at the n-th write (the crash kit's Interference) ------------------------

MODES = RACES


scripts = st.lists(
    st.lists(st.sampled_from(["idem", "once"]), min_size=1, max_size=2), min_size=1, max_size=3
).map(lambda steps: [*steps, []])


async def _race(db: DurableDb, script: Script, at: int, mode: str) -> None:
    run_id = f"race{next(_ids)}"
    executions: Counter[str] = Counter()
    agent = make_agent(script, executions)
    plan = Interference(at, mode)
    engine, store = db.engine(), db.store()
    async with engine, store:
        durable = Durable(
            engine=plan.wrap(engine),
            checkpoint_store=plan.wrap(store),
            run_id=run_id,
            worker_id="w1",
        )
        result: RunResult | None = None
        with plan.caller:
            async with agent.open_run("go", durable=durable) as run:
                plan.run = run
                result = await run.result()
        if result is None:  # the caller was cancelled: a shutdown, unless it had ended
            assert plan.mode.startswith("cancel")
            with trio.CancelScope(shield=True):
                result = await run.result()
        assert result is not None
        record = await engine.get(run_id)
        assert record is not None
        entries = await store.read(run_id)
        _check_journal(entries)
        settled_before = {
            e.record.result.call_id for e in entries if isinstance(e.record, ToolSettled)
        }
        first_executions = Counter(executions)
        if record.status == "running":
            # Only a shutdown leaves a run for recovery, and it leaves it unleased.
            assert mode.startswith("cancel"), (record, result)
            assert record.lease_owner is None, record
            assert record.outcome is None
            recovered = await recover(
                engine=engine, checkpoint_store=store, agents={"worker": agent}, worker_id="w2"
            )
            result = recovered[run_id]
            record = await engine.get(run_id)
            assert record is not None
            entries = await store.read(run_id)
            _check_journal(entries)
            for call_id in settled_before:
                # A call that settled before the shutdown never runs again.
                step, index = map(int, call_id[1:].split("c"))
                key = f"{script[step - 1][index]}:{step * 10 + index}"
                assert executions[key] == first_executions[key], call_id
        assert record.status != "running", record
        assert record.outcome is not None
        assert record.outcome.finish_reason == str(result.finish_reason), (record, result)
        if mode.startswith("abort") and plan.fired and record.outcome.finish_reason == "aborted":
            assert result.abort_reason == "abort racing a durable write"
        # Each call one result, in the run's transcript and in the stored journal.
        _one_result_per_call(result.conversation.current.messages)
        replay = replay_journal(run_id, entries)
        assert [s.step for s in replay.steps] == list(range(1, len(replay.steps) + 1))
        assert all(count <= 1 for key, count in executions.items() if key.startswith("once"))
        if record.outcome.finish_reason != "error":
            _one_result_per_call(_stored_messages(entries))


def _stored_messages(entries: list[Any]) -> list[Any]:
    return list(transcript(replay_journal(entries[0].run_id, entries)).messages)


def _one_result_per_call(messages: Any) -> None:
    calls = [call.id for m in messages if m.role == "assistant" for call in m.tool_calls]
    answers = Counter(m.tool_call_id for m in messages if m.role == "tool")
    assert len(calls) == len(set(calls))
    assert {c: answers.get(c, 0) for c in calls} == dict.fromkeys(calls, 1), (calls, answers)
    assert set(answers) <= set(calls)


def _check_journal(entries: list[Any]) -> None:
    """Sequence numbers contiguous; a call settles at most once; steps done in order."""
    assert [e.seq for e in entries] == list(range(entries[0].seq, entries[0].seq + len(entries)))
    settled = Counter(e.record.result.call_id for e in entries if isinstance(e.record, ToolSettled))
    assert all(n == 1 for n in settled.values()), settled
    done = [e.record.step for e in entries if isinstance(e.record, StepDone)]
    assert done == list(range(1, len(done) + 1)), done


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=scripts, at=st.integers(0, 14), mode=st.sampled_from(MODES))
async def test_aborts_and_shutdowns_racing_durable_writes(
    durable_db: DurableDb, script: Script, at: int, mode: str
) -> None:
    """Whatever write an abort or a shutdown meets, and whenever: the stored record ends
    terminal and agrees with the result (after recovery for a shutdown), one result per
    call, contiguous steps, settled calls never re-run."""
    await _race(durable_db, script, at, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("at", range(8))
async def test_each_write_of_a_two_step_run(durable_db: DurableDb, at: int, mode: str) -> None:
    """Every write of a run with one tool step, met by every kind of interference."""
    await _race(durable_db, [["idem", "once"], []], at, mode)


# -- a terminal commit that does not finish -----------------------------------------------


def _hold_write_lock(db: DurableDb) -> Callable[[], None]:
    """Take the database's write lock on the runs table from another connection, as
    another process would; returns its release."""
    if db.name == "sqlite":
        conn = sqlite3.connect(db.location, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")

        def release_sqlite() -> None:
            conn.execute("ROLLBACK")
            conn.close()

        return release_sqlite
    import psycopg

    pg = psycopg.connect(db.location)
    pg.execute("LOCK TABLE operative_runs IN ACCESS EXCLUSIVE MODE")

    def release_postgres() -> None:
        pg.rollback()
        pg.close()

    return release_postgres


async def test_an_uncommitted_terminal_run_never_reads_as_a_success(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """Another connection holds the write lock while the run commits its outcome:
    result() raises CleanupError after cleanup_timeout, the record stays running, and
    recovery finishes the run without running its tools again."""
    executions: Counter[str] = Counter()
    worker = make_agent([["idem", "once"], []], executions)
    wall = _Wall()
    engine, store = durable_db.engine(clock=wall), durable_db.store(clock=wall)
    releases: list[Callable[[], None]] = []

    def lock(result: Any) -> None:
        releases.append(_hold_write_lock(durable_db))

    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="stuck", worker_id="w1")
        stuck = create_agent(
            generate=worker.generate,
            tools=list(worker.toolbox),
            name="worker",
            on_run_end=lock,
            cleanup_timeout=5,
        )
        async with stuck.open_run("go", durable=durable) as run:
            pass
        with pytest.raises(CleanupError, match="cleanup_timeout=5s") as caught:
            await run.result()
        with pytest.raises(CleanupError):  # cached: raised again, never a success
            await run.unwrap()
        unfinished = caught.value.result
        assert unfinished is not None
        assert unfinished.finish_reason == "stop-condition"
        releases.pop()()
        record = await engine.get("stuck")
        assert record is not None
        assert record.status == "running"
        assert record.outcome is None
        assert dict(executions) == {"idem:10": 1, "once:11": 1}

        wall.now += 31  # the lease the stuck process held runs out
        recovered = await recover(
            engine=engine, checkpoint_store=store, agents={"worker": worker}, worker_id="w2"
        )
        assert recovered["stuck"].finish_reason == "stop-condition"
        record = await engine.get("stuck")
        assert record is not None
        assert record.status == "completed"
        assert dict(executions) == {"idem:10": 1, "once:11": 1}
        assert shape(recovered["stuck"].conversation.current) == shape(
            unfinished.conversation.current
        )


async def test_a_failed_terminal_commit_rejects_result(sqlite_db: DurableDb) -> None:
    """A terminal commit that raises (the database went away) is a CleanupError from
    result(), with the storage failure as its cause."""

    async def model(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="done")

    agent = create_agent(generate=model, name="worker")
    engine, store = sqlite_db.engine(), sqlite_db.store()

    class Gone(Exception):
        pass

    async with engine, store:

        async def broken_finish(*args: Any, **kwargs: Any) -> Any:
            await trio.lowlevel.checkpoint()
            raise Gone("the database went away")

        class Engine:
            def __getattr__(self, name: str) -> Any:
                return broken_finish if name == "finish" else getattr(engine, name)

        durable = Durable(engine=Engine(), checkpoint_store=store, run_id="gone")
        with pytest.raises(CleanupError) as caught:
            async with agent.open_run("hi", durable=durable) as run:
                pass
            await run.result()
        assert isinstance(caught.value.__cause__, Gone)
        record = await engine.get("gone")
        assert record is not None
        assert record.status == "running"


@pytest.mark.heavy  # the shutdown comes after five seconds on the real clock
async def test_a_call_parked_for_approval_is_asked_again_after_a_shutdown(
    sqlite_db: DurableDb,
) -> None:
    """A run shut down while a person decides journals the call as not run; recovery
    parks it again and runs it once it is approved."""
    ran: list[int] = []
    from operative import tool
    from operative.tools import ApprovalDecision

    @tool(version="1", mutates=True)
    async def save(n: int) -> str:
        """Mutates."""
        ran.append(n)
        return f"saved {n}"

    async def model(request: GenerateRequest) -> GenerateResponse:
        if any(m.role == "tool" for m in request.conversation.messages):
            return GenerateResponse(content="done")
        return GenerateResponse(tool_calls=(ToolCall(id="c1", name="save", arguments={"n": 1}),))

    asked: list[str] = []

    async def hang(pending: Any) -> ApprovalDecision:
        asked.append("first")
        await trio.sleep_forever()
        raise AssertionError

    async def approve(pending: Any) -> ApprovalDecision:
        asked.append("again")
        return ApprovalDecision(approved=True)

    engine, store = sqlite_db.engine(), sqlite_db.store()
    async with engine, store:
        first = create_agent(generate=model, tools=[save], name="worker", on_approval=hang)
        durable = Durable(engine=engine, checkpoint_store=store, run_id="parked")
        with trio.move_on_after(5) as scope:
            async with first.open_run("go", durable=durable) as run:
                await run.result()
        assert scope.cancelled_caught
        assert asked == ["first"]
        assert ran == []
        record = await engine.get("parked")
        assert record is not None
        assert record.status == "running"
        assert record.lease_owner is None
        second = create_agent(generate=model, tools=[save], name="worker", on_approval=approve)
        results = await recover(engine=engine, checkpoint_store=store, agents={"worker": second})
    assert results["parked"].content == "done"
    assert asked == ["first", "again"]
    assert ran == [1]


async def test_a_write_the_writer_never_took_is_made_by_its_caller(
    durable_db: DurableDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's writer task stops (its nursery cancelled) with a write queued: the
    write is not lost, its caller makes it itself and learns its outcome."""
    from operative.durable._driver import DurableDriver
    from operative.durable._writer import RunWriter

    in_task: list[str] = []
    commit_in_task = RunWriter.commit_in_task

    async def counted(self: RunWriter, write: Any, what: str) -> None:
        in_task.append(what)
        await commit_in_task(self, write, what)

    monkeypatch.setattr(RunWriter, "commit_in_task", counted)
    engine, store = durable_db.engine(), durable_db.store()
    try:
        lease = await engine.start(
            Started(messages=(), agent_name="a"), run_id="r", worker_id="w", lease_seconds=60
        )
        driver = DurableDriver(Durable(engine=engine, checkpoint_store=store), lease=lease)
        writer = driver._writer
        async with trio.open_nursery() as nursery:
            writer.start(nursery, name="writer")  # as start_tasks does
            await trio.testing.wait_all_tasks_blocked()  # the writer waits for work
            writer._scope.cancel()  # it stops at its next turn...
            await driver._append([StepDone(step=1)])  # ...with this write queued
        assert writer._writes is None
        assert in_task == ["journal entry 1 of run r"]  # made by the caller, once
        assert driver._seq == 2
        assert [e.seq for e in await store.read("r")] == [0, 1]
    finally:
        await engine.aclose()
        await store.aclose()
