"""``DurableEngine.cancel`` reaches a run in the middle of a step, as ``run.abort`` would.

Another process (here: a second engine object on the same database) asks for the
cancellation; the worker holding the run learns of it from its next lease renewal (every
``lease_seconds / 3``) or its next journal write, whichever comes first, and aborts the
run at once: a tool call or a model call in flight is cancelled, the run ends
``aborted`` with the reason asked for, and its record and journal say so (each call one
result, nothing left to recover).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import trio
import trio.testing

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent, tool
from operative.durable import (
    Durable,
    Generated,
    ToolSettled,
    ToolStarted,
    recover,
    replay_journal,
    transcript,
)

from .conftest import DurableDb

LEASE = 3.0
RENEWAL = LEASE / 3
"""How often the worker renews its lease, and so learns of a cancellation at the latest."""
REASON = "the operator cancelled it"


def _calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=f"c{i}", name=name, arguments={}) for i, name in enumerate(names))


def _scripted(*names: str) -> Any:
    """Step 1 calls ``names``; step 2 answers."""

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if any(m.role == "assistant" for m in request.conversation.messages):
            return GenerateResponse(content="done")
        return GenerateResponse(content="working", tool_calls=_calls(*names))

    return generate


def _one_result_per_call(messages: Any) -> dict[str, str]:
    """Each call answered exactly once; the outcome of each, by call id."""
    calls = [call.id for m in messages if m.role == "assistant" for call in m.tool_calls]
    answers = Counter(m.tool_call_id for m in messages if m.role == "tool")
    assert len(calls) == len(set(calls)), calls
    assert {c: answers.get(c, 0) for c in calls} == dict.fromkeys(calls, 1), (calls, answers)
    assert set(answers) <= set(calls), (calls, answers)
    return {m.tool_call_id: m.outcome for m in messages if m.role == "tool"}


async def _cancel_from_elsewhere(db: DurableDb, run_id: str) -> float:
    """Ask for the cancellation as another process would; the time it was committed."""
    other = db.engine()
    async with other:
        flagged = await other.cancel(run_id, REASON)
    assert flagged.status == "running", flagged  # held: the worker must stop it
    assert flagged.cancel_reason == REASON
    return trio.current_time()


async def _check_stored(db: DurableDb, engine: Any, store: Any, run_id: str) -> Any:
    """The record is aborted with the reason, and the journal agrees with it."""
    record = await engine.get(run_id)
    assert record is not None
    assert record.status == "aborted", record
    assert record.outcome is not None
    assert record.outcome.finish_reason == "aborted"
    assert record.outcome.abort_reason == REASON
    entries = await store.read(run_id)
    settled = Counter(e.record.result.call_id for e in entries if isinstance(e.record, ToolSettled))
    assert all(n == 1 for n in settled.values()), settled
    replay = replay_journal(run_id, entries)
    assert replay.finished is not None
    assert replay.finished.outcome == record.outcome
    return replay


async def test_a_cancel_reaches_a_long_tool_call_at_the_next_renewal(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A tool that would sleep a hundred leases is cancelled within one renewal interval
    of the cancel, and never runs again."""
    began = trio.Event()
    ended: list[str] = []

    @tool
    async def crawl() -> str:
        """Crawl for a very long time."""
        began.set()
        try:
            await trio.sleep(100 * LEASE)
        except trio.Cancelled:
            ended.append("cancelled")
            raise
        ended.append("completed")
        return "crawled"

    agent = create_agent(generate=_scripted("crawl"), tools=[crawl], name="crawler")
    async with durable_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        durable = Durable(backend, run_id="long-tool", lease_seconds=LEASE)
        with trio.fail_after(50 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                await began.wait()
                await trio.sleep(1.5 * RENEWAL)  # well inside the call, between renewals
                cancelled_at = await _cancel_from_elsewhere(durable_db, "long-tool")
                result = await run.result()
        took = trio.current_time() - cancelled_at
        assert took <= RENEWAL, f"the cancel took {took:g}s to land (renewal every {RENEWAL:g}s)"
        assert ended == ["cancelled"]
        assert result.finish_reason == "aborted"
        assert result.abort_reason == REASON
        assert [s.step for s in result.steps] == [1]
        assert [r.outcome for r in result.steps[0].results] == ["cancelled"]
        replay = await _check_stored(durable_db, engine, store, "long-tool")
        entries = await store.read("long-tool")
        assert [type(e.record) for e in entries[1:-1]] == [Generated, ToolStarted]
        assert _one_result_per_call(transcript(replay).messages) == {"c0": "cancelled"}
        # Finished for good: nothing to recover, nothing runs again.
        assert await recover(backend, agents={"crawler": agent}) == {}
    assert ended == ["cancelled"]


async def test_a_cancel_cuts_a_model_call_that_hangs(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A model call that does not answer is cut by the cancel within one renewal interval;
    nothing of the step is journaled."""
    asked = trio.Event()
    answered: list[str] = []

    async def hangs(request: GenerateRequest) -> GenerateResponse:
        asked.set()
        await trio.sleep(100 * LEASE)
        answered.append("answered")
        return GenerateResponse(content="too late")

    agent = create_agent(generate=hangs, name="stuck")
    async with durable_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        durable = Durable(backend, run_id="hung-model", lease_seconds=LEASE)
        with trio.fail_after(50 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                await asked.wait()
                await trio.sleep(2.5 * RENEWAL)
                cancelled_at = await _cancel_from_elsewhere(durable_db, "hung-model")
                result = await run.result()
        took = trio.current_time() - cancelled_at
        assert took <= RENEWAL, f"the cancel took {took:g}s to land (renewal every {RENEWAL:g}s)"
        assert answered == []
        assert result.finish_reason == "aborted"
        assert result.abort_reason == REASON
        assert result.steps == ()
        replay = await _check_stored(durable_db, engine, store, "hung-model")
        assert replay.steps == []
        assert replay.partial is None
        assert not any(isinstance(e.record, Generated) for e in await store.read("hung-model"))


async def test_a_cancel_returned_by_a_journal_write_cuts_the_step_at_once(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """No renewal comes before the step would end (the lease is an hour long): the
    cancel arrives with the journal entry of the call that settles first, and cuts the
    other call short there and then. The settled call keeps its result."""
    long_lease = 3600.0
    started: dict[str, trio.Event] = {"quick": trio.Event(), "slow": trio.Event()}
    go = trio.Event()
    ended: list[str] = []

    @tool
    async def quick() -> str:
        """Answer once told to."""
        started["quick"].set()
        await go.wait()
        ended.append("quick completed")
        return "quick answer"

    @tool
    async def slow() -> str:
        """Take ten minutes, less than a renewal interval."""
        started["slow"].set()
        try:
            await trio.sleep(long_lease / 6)
        except trio.Cancelled:
            ended.append("slow cancelled")
            raise
        ended.append("slow completed")
        return "slow answer"

    agent = create_agent(generate=_scripted("slow", "quick"), tools=[slow, quick], name="pair")
    async with durable_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        durable = Durable(backend, run_id="by-append", lease_seconds=long_lease)
        with trio.fail_after(long_lease):
            async with agent.open_run("go", durable=durable) as run:
                await started["quick"].wait()
                await started["slow"].wait()
                cancelled_at = await _cancel_from_elsewhere(durable_db, "by-append")
                go.set()  # quick settles: its journal entry returns the cancellation
                result = await run.result()
        took = trio.current_time() - cancelled_at
        assert took < 1.0, f"the cancel took {took:g}s to land"
        assert ended == ["quick completed", "slow cancelled"]
        assert result.finish_reason == "aborted"
        assert result.abort_reason == REASON
        outcomes = {r.call_id: (r.outcome, r.value) for r in result.steps[0].results}
        assert outcomes == {"c0": ("cancelled", None), "c1": ("success", "quick answer")}
        replay = await _check_stored(durable_db, engine, store, "by-append")
        entries = await store.read("by-append")
        settled = [e.record.result for e in entries if isinstance(e.record, ToolSettled)]
        assert [(r.call_id, r.outcome) for r in settled] == [("c1", "success")]
        stored = _one_result_per_call(transcript(replay).messages)
        assert stored == {"c0": "cancelled", "c1": "success"}
        assert await recover(backend, agents={"pair": agent}) == {}
    assert ended == ["quick completed", "slow cancelled"]


class _SlowSettle:
    """A checkpoint store whose ``tool.settled`` write takes one and a half renewal
    intervals: a renewal lands, with the cancellation, while the write is in flight."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.writing = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, lease: Any, seq: int, records: Any) -> str | None:
        if any(isinstance(record, ToolSettled) for record in records):
            self.writing.set()
            await trio.sleep(1.5 * RENEWAL)
        cancel: str | None = await self._inner.append(lease, seq, records)
        return cancel


async def test_a_cancel_landing_during_a_journal_write_lets_it_commit(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """The renewal aborts the run while a call's result is being journaled: the write
    still commits and is counted, the run ends aborted right after it (the step is cut
    short, not completed), and the journal stays consistent."""
    runs: Counter[str] = Counter()

    @tool
    async def charge() -> str:
        """Charge a card (not idempotent)."""
        runs["charge"] += 1
        return "charged"

    agent = create_agent(generate=_scripted("charge"), tools=[charge], name="shop")
    engine, store = durable_db.engine(), durable_db.store()
    slow = _SlowSettle(store)
    async with engine, store:
        durable = Durable(
            engine=engine, checkpoint_store=slow, run_id="mid-write", lease_seconds=LEASE
        )
        with trio.fail_after(50 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                await slow.writing.wait()
                cancelled_at = await _cancel_from_elsewhere(durable_db, "mid-write")
                result = await run.result()
        took = trio.current_time() - cancelled_at
        assert took <= 1.5 * RENEWAL, f"the run went on {took:g}s after the write"
        assert result.finish_reason == "aborted"
        assert result.abort_reason == REASON
        assert [(s.step, s.aborted) for s in result.steps] == [(1, True)]
        replay = await _check_stored(durable_db, engine, store, "mid-write")
        entries = await store.read("mid-write")
        assert [e.seq for e in entries] == list(range(len(entries)))
        settled = [e.record.result for e in entries if isinstance(e.record, ToolSettled)]
        assert [(r.call_id, r.outcome) for r in settled] == [("c0", "success")]
        assert set(_one_result_per_call(transcript(replay).messages)) == {"c0"}
        assert await recover(engine=engine, checkpoint_store=store, agents={"shop": agent}) == {}
    assert runs == Counter({"charge": 1})
