"""A run's last records go with its outcome: ``DurableEngine.finish(..., journal=...)``.

Records nobody has observed yet (the last step's answer and end, when no listener
waits for them) are committed with the outcome, in one transaction, by any engine whose
``finish`` takes ``journal=``, not only the SQL ones. An engine whose ``finish``
predates the keyword still works: the run appends those records first.
"""

from __future__ import annotations

from typing import Any

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent, tool
from operative.durable import (
    Durable,
    Finished,
    Generated,
    Lease,
    RunRecord,
    StepDone,
    replay_journal,
)

from .conftest import DurableDb


class _Counting:
    """A checkpoint store that notes the kinds of the records of each append."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.appends: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, lease: Lease, seq: int, records: Any) -> str | None:
        self.appends.append([type(record).__name__ for record in records])
        cancel: str | None = await self._inner.append(lease, seq, records)
        return cancel


class _OtherEngine:
    """An engine of another kind than the SQL ones (it only wraps one), whose finish
    takes ``journal=``; it notes the kinds of the records each finish got."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.finishes: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def finish(
        self, lease: Lease, seq: int, finished: Finished, *, journal: Any = ()
    ) -> RunRecord:
        self.finishes.append([type(record).__name__ for record in journal])
        record: RunRecord = await self._inner.finish(lease, seq, finished, journal=journal)
        return record


class _OlderEngine:
    """An engine whose finish was written before ``journal=`` existed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.finishes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def finish(self, lease: Lease, seq: int, finished: Finished) -> RunRecord:
        self.finishes += 1
        record: RunRecord = await self._inner.finish(lease, seq, finished)
        return record


STEP_1 = ["Generated", "ToolStarted", "ToolSettled", "StepDone"]
"""The one commit of step 1 (its call is idempotent: nothing commits before it runs)."""


@tool(idempotent=True)
async def look_up() -> str:
    """Look something up."""
    return "found"


async def _generate(request: GenerateRequest) -> GenerateResponse:
    """Step 1 calls ``look_up``; step 2 answers."""
    if any(m.role == "assistant" for m in request.conversation.messages):
        return GenerateResponse(content="done")
    return GenerateResponse(
        content="looking", tool_calls=(ToolCall(id="c0", name="look_up", arguments={}),)
    )


async def _run(engine: Any, store: Any, run_id: str) -> Any:
    durable = Durable(engine=engine, checkpoint_store=store, run_id=run_id)
    agent = create_agent(generate=_generate, tools=[look_up], name="finisher")
    async with agent.open_run("go", durable=durable) as run:
        pass
    result = await run.result()
    assert result.finish_reason == "stop-condition", result.error
    return durable


async def _check_journal(store: Any, engine: Any, run_id: str) -> None:
    """The journal holds both steps and the outcome, in order, as the record says."""
    entries = await store.read(run_id)
    assert [e.seq for e in entries] == list(range(len(entries)))
    kinds = [type(e.record).__name__ for e in entries]
    assert kinds[-3:] == ["Generated", "StepDone", "Finished"], kinds
    assert isinstance(entries[-3].record, Generated)
    assert entries[-3].record.step == 2
    assert isinstance(entries[-2].record, StepDone)
    assert entries[-2].record.step == 2
    replay = replay_journal(run_id, entries)
    record = await engine.get(run_id)
    assert record is not None
    assert record.status == "completed"
    assert replay.finished is not None
    assert replay.finished.outcome == record.outcome


async def test_an_engine_of_another_kind_commits_the_last_records_with_the_outcome(
    sqlite_db: DurableDb,
) -> None:
    """The last step's records reach ``finish`` as ``journal=``, not an append of
    their own: the run's end is one commit."""
    inner, journal = sqlite_db.engine(), sqlite_db.store()
    engine, store = _OtherEngine(inner), _Counting(journal)
    async with inner, journal:
        durable = await _run(engine, store, "other")
        assert engine.finishes == [["Generated", "StepDone"]]
        assert store.appends == [STEP_1]  # step 2 has no commit of its own
        assert durable.finish_takes_journal
        await _check_journal(store, engine, "other")


async def test_an_engine_whose_finish_lacks_journal_gets_an_append_first(
    sqlite_db: DurableDb,
) -> None:
    """Without the keyword the last records are appended first, then the outcome is
    committed: the journal is the same."""
    inner, journal = sqlite_db.engine(), sqlite_db.store()
    engine, store = _OlderEngine(inner), _Counting(journal)
    async with inner, journal:
        durable = await _run(engine, store, "older")
        assert not durable.finish_takes_journal
        assert engine.finishes == 1
        assert store.appends == [STEP_1, ["Generated", "StepDone"]]
        await _check_journal(store, engine, "older")


def test_the_built_in_engines_take_journal(sqlite_db: DurableDb) -> None:
    """Read without inspecting anything for the SQL engines; a subclass that overrides
    ``finish`` is inspected like any other engine."""

    class Counting(type(sqlite_db.engine())):  # type: ignore[misc]
        async def finish(self, *args: Any, **kwargs: Any) -> Any:
            return await super().finish(*args, **kwargs)

    class Narrow(type(sqlite_db.engine())):  # type: ignore[misc]
        async def finish(self, lease: Lease, seq: int, finished: Finished) -> Any:
            return await super().finish(lease, seq, finished)

    store = sqlite_db.store()
    for engine_cls, takes in ((type(sqlite_db.engine()), True), (Counting, True), (Narrow, False)):
        durable = Durable(engine=engine_cls(sqlite_db.location), checkpoint_store=store)
        assert durable.finish_takes_journal is takes, engine_cls
