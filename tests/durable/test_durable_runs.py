"""The durable branch of the loop, in one process: what is journaled, and recovery from
every point a crash could leave a journal at (a property test over journal prefixes).

Crashes in real processes (SIGKILL) are in ``test_crash.py``; the backends' contract in
``test_backends.py``.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operative import (
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    create_agent,
    open_run,
    tool,
)
from operative.conversation import ConversationHistory
from operative.durable import (
    Durable,
    Finished,
    Generated,
    SqliteCheckpointStore,
    SqliteEngine,
    Started,
    StepDone,
    ToolSettled,
    ToolStarted,
    recover,
    replay_journal,
    transcript,
)
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.errors import InvalidResponseError
from operative.kvstore import ConflictError, MemoryStore
from operative.sessions import create_session_store, open_session

from .conftest import DurableDb

# -- a deterministic agent: its answer is a function of the conversation ------------------

Script = list[list[str]]
"""Per step, the tools the model calls (an empty list: the final answer)."""


def scripted(script: Script) -> Any:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        step = 1 + sum(1 for m in request.conversation.messages if m.role == "assistant")
        if step > len(script) or not script[step - 1]:
            return GenerateResponse(content=f"final after {step - 1} steps")
        return GenerateResponse(
            content=f"step {step}",
            tool_calls=tuple(
                ToolCall(id=f"s{step}c{i}", name=name, arguments={"n": step * 10 + i})
                for i, name in enumerate(script[step - 1])
            ),
        )

    return generate


def make_agent(
    script: Script,
    executions: Counter[str],
    gate: trio.Event | None = None,
    gated: tuple[str, ...] = ("idem", "once"),
) -> Any:
    @tool(idempotent=True)
    async def idem(n: int) -> str:
        """Idempotent."""
        executions[f"idem:{n}"] += 1
        if gate is not None and "idem" in gated:
            await gate.wait()
        return f"idem {n}"

    @tool
    async def once(n: int) -> str:
        """Not idempotent."""
        executions[f"once:{n}"] += 1
        if gate is not None and "once" in gated:
            await gate.wait()
        return f"once {n}"

    return create_agent(generate=scripted(script), tools=[idem, once], name="worker")


async def until(condition: Any) -> None:
    """Poll (the work under test runs in worker threads, so no event can be awaited)."""
    while not condition():  # noqa: ASYNC110
        await trio.sleep(0.001)


def shape(history: ConversationHistory) -> list[tuple[Any, ...]]:
    """A transcript without message ids (they differ between processes)."""
    return [
        (
            m.role,
            m.text,
            tuple((c.id, c.name, msgspec.json.encode(c.arguments)) for c in m.tool_calls),
            m.tool_call_id,
            m.outcome,
        )
        for m in history.messages
    ]


def open_db(path: Path) -> tuple[SqliteEngine, SqliteCheckpointStore]:
    return SqliteEngine(path), SqliteCheckpointStore(path)


# -- what a durable run writes ------------------------------------------------------------


async def test_a_durable_run_journals_every_boundary(sqlite_db: DurableDb) -> None:
    executions: Counter[str] = Counter()
    agent = make_agent([["idem", "once"], []], executions)
    async with sqlite_db.backend() as backend:
        engine, store = backend.engine, backend.checkpoint_store
        durable = Durable(backend, run_id="r1")
        async with agent.open_run("go", durable=durable) as run:
            await run.wait_durably_started()
            result = await run.result()
        entries = await store.read("r1")
        record = await engine.get("r1")
    kinds = [type(e.record) for e in entries]
    assert kinds[:2] == [Started, Generated]
    # two calls, each started then settled (their order across calls may interleave)
    assert sorted(k.__name__ for k in kinds[2:6]) == sorted(
        ["ToolStarted", "ToolStarted", "ToolSettled", "ToolSettled"]
    )
    assert kinds[6:] == [StepDone, Generated, StepDone, Finished]
    assert [e.seq for e in entries] == list(range(len(entries)))
    assert record is not None
    assert record.status == "completed"
    assert record.outcome is not None
    assert record.outcome.content == "final after 1 steps"
    assert record.lease_owner is None
    replay = replay_journal("r1", entries)
    assert shape(transcript(replay)) == shape(result.conversation.current)
    assert result.run_id == "r1"


async def test_durable_and_in_memory_runs_agree(sqlite_db: DurableDb) -> None:
    script = [["once"], ["idem", "idem"], []]
    plain = await make_agent(script, Counter()).run("go")
    async with sqlite_db.backend() as backend:
        durable = Durable(backend)
        async with make_agent(script, Counter()).open_run("go", durable=durable) as run:
            result = await run.result()
    assert shape(result.conversation.current) == shape(plain.conversation.current)
    assert [s.step for s in result.steps] == [1, 2, 3]
    assert result.finish_reason == plain.finish_reason


async def test_wait_durably_started_raises_what_stopped_the_write(sqlite_db: DurableDb) -> None:
    agent = make_agent([[]], Counter())
    async with sqlite_db.backend() as backend:
        durable = Durable(backend, run_id="same")
        async with agent.open_run("one", durable=durable) as run:
            await run.wait_durably_started()
        async with agent.open_run("two", durable=durable) as again:
            with pytest.raises(ConflictError):
                await again.wait_durably_started()
            result = await again.result()
    assert result.finish_reason == "error"
    assert isinstance(result.error, ConflictError)


async def test_wait_durably_started_needs_a_durable_run() -> None:
    async with open_run(generate=scripted([[]]), conversation=ConversationHistory()) as run:
        with pytest.raises(InvalidArgument, match="not durable"):
            await run.wait_durably_started()


async def test_durable_refuses_an_engine_and_a_store_on_different_databases(
    tmp_path: Path,
) -> None:
    with pytest.raises(InvalidArgument, match="share one database"):
        Durable(
            engine=SqliteEngine(tmp_path / "a.db"),
            checkpoint_store=SqliteCheckpointStore(tmp_path / "b.db"),
        )
    with pytest.raises(InvalidArgument, match="durable= takes"):
        async with make_agent([[]], Counter()).open_run("x", durable="yes"):
            pass
    with pytest.raises(InvalidArgument, match="must not name a run_id"):
        create_agent(
            generate=scripted([[]]),
            durable=Durable(
                engine=SqliteEngine(tmp_path / "a.db"),
                checkpoint_store=SqliteCheckpointStore(tmp_path / "a.db"),
                run_id="fixed",
            ),
        )


async def test_an_engine_cancel_ends_the_run_aborted_at_the_next_step(
    sqlite_db: DurableDb,
) -> None:
    gate = trio.Event()
    executions: Counter[str] = Counter()
    agent = make_agent([["once"], ["once"], []], executions, gate)
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="c1")
        async with agent.open_run("go", durable=durable) as run:
            await until(lambda: executions)
            other = sqlite_db.engine()  # another process would hold its own engine
            async with other:
                flagged = await other.cancel("c1", "the operator said stop")
            assert flagged.status == "running"
            assert flagged.cancel_reason
            gate.set()
            result = await run.result()
        record = await engine.get("c1")
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "the operator said stop"
    assert [s.step for s in result.steps] == [1]  # step 1 finished; step 2 never began
    assert executions == Counter({"once:10": 1})
    assert record is not None
    assert record.status == "aborted"
    assert record.outcome is not None
    assert record.outcome.abort_reason == "the operator said stop"


async def test_cancelling_the_caller_releases_the_run_for_another_worker(
    sqlite_db: DurableDb,
) -> None:
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["idem"], ["once"], []]
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="s1")
        with trio.CancelScope() as scope:
            agent = make_agent(script, executions, gate, gated=("once",))
            async with agent.open_run("go", durable=durable):
                await until(lambda: executions["once:20"])
                scope.cancel()  # the worker shuts down mid-call
        record = await engine.get("s1")
        assert record is not None
        assert record.status == "running"
        assert record.lease_owner is None
        assert record.lease_expires_at == 0
        results = await recover(
            backend,
            agents={"worker": make_agent(script, executions)},
        )
        record = await engine.get("s1")
    result = results["s1"]
    assert record is not None
    assert record.status == "completed"
    assert record.fence == 3
    assert executions == Counter({"idem:10": 1, "once:20": 1})  # never twice
    unknown = result.steps[1].results[0]
    assert unknown.outcome == "error"
    assert unknown.error == UNKNOWN_OUTCOME
    assert result.content == "final after 2 steps"


async def test_a_run_whose_lease_was_taken_over_writes_nothing_more(
    sqlite_db: DurableDb,
) -> None:
    now = [1000.0]
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["once"], []]
    engine = sqlite_db.engine(clock=lambda: now[0])
    store = sqlite_db.store(clock=lambda: now[0])
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="t1", lease_seconds=60)
        async with make_agent(script, executions, gate).open_run("go", durable=durable) as run:
            await until(lambda: executions)
            now[0] += 120  # the lease expired: another worker claims the run
            (stolen,) = await engine.claim(worker_id="other", lease_seconds=60)
            gate.set()
            result = await run.result()
        entries = await store.read("t1")
        record = await engine.get("t1")
    assert stolen.fence == 2
    assert result.finish_reason == "error"
    assert type(result.error).__name__ == "LeaseLostError"
    assert record is not None
    assert record.status == "running"
    assert record.lease_owner == "other"
    assert not any(isinstance(e.record, ToolSettled) for e in entries)  # the stale write failed


# -- recovery from every journal prefix (property) ----------------------------------------

scripts = st.lists(
    st.lists(st.sampled_from(["idem", "once"]), min_size=1, max_size=3), min_size=0, max_size=3
).map(lambda steps: [*steps, []])


async def _full_run(path: Path, script: Script) -> tuple[ConversationHistory, list[Any]]:
    engine, store = open_db(path)
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="p")
        async with make_agent(script, Counter()).open_run("go", durable=durable) as run:
            result = await run.result()
        return result.conversation.current, await store.read("p")


async def _recover_prefix(
    path: Path, script: Script, entries: list[Any], executions: Counter[str]
) -> tuple[Any, Any]:
    engine, store = open_db(path)
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
        return results["p"], await engine.get("p")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=scripts, data=st.data())
def test_recovery_from_any_journal_prefix(script: Script, data: st.DataObject) -> None:
    """Cut the journal anywhere before 'finished': recovery ends the run as an
    uninterrupted one would, never runs a settled call again, re-runs an idempotent
    call cut mid-flight, and reports (never repeats) a non-idempotent one."""
    with tempfile.TemporaryDirectory() as directory:
        reference, journal = trio.run(_full_run, Path(directory) / "full.db", script)
        cut = data.draw(st.integers(min_value=1, max_value=len(journal) - 1), label="cut")
        prefix = journal[:cut]
        settled = {e.record.result.call_id for e in prefix if isinstance(e.record, ToolSettled)}
        started = {e.record.call_id: e.record.tool_name for e in prefix
                   if isinstance(e.record, ToolStarted)}  # fmt: skip
        # a step is done once its step.done is journaled: its calls are all settled
        in_flight = {call: name for call, name in started.items() if call not in settled}
        executions: Counter[str] = Counter()
        result, record = trio.run(
            _recover_prefix, Path(directory) / "cut.db", script, prefix, executions
        )
    assert record.status == "completed"
    assert result.finish_reason == "stop-condition"
    assert [s.step for s in result.steps] == list(range(1, len(script) + 1))
    by_call = {r.call_id: r for s in result.steps for r in s.results}
    for step in result.steps:
        for call in step.tool_calls:
            executed = executions[f"{call.name}:{call.arguments['n']}"]
            if call.id in settled:
                assert executed == 0, f"settled call {call.id} ran again"
            elif call.id in in_flight and call.name == "once":
                assert executed == 0, f"non-idempotent call {call.id} ran again"
                assert by_call[call.id].error == UNKNOWN_OUTCOME
            else:
                assert executed == 1, f"call {call.id} ran {executed} times"
    # A call reported as unknown differs from the reference only in its own result.
    unknown = {call for call, name in in_flight.items() if name == "once"}

    def masked(history: ConversationHistory) -> list[tuple[Any, ...]]:
        return [
            (row[0], "?", row[2], row[3], "?") if row[3] in unknown else row
            for row in shape(history)
        ]

    assert masked(result.conversation.current) == masked(reference)


# -- sessions -----------------------------------------------------------------------------


async def test_a_session_recovers_a_turn_cut_by_a_shutdown(sqlite_db: DurableDb) -> None:
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["idem"], []]
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        with trio.CancelScope() as scope:
            async with open_session(
                "s",
                store=sessions,
                agent_name="worker",
                agent=make_agent(script, executions, gate),
                durable=backend,
            ) as handle:

                async def turn() -> None:
                    await handle.run("hello")

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(turn)
                    await until(lambda: executions)
                    scope.cancel()  # the host process shuts down
        stored = await sessions.load("s")
        assert stored is not None
        assert [ref.outcome for ref in stored.runs] == [None]
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=make_agent(script, executions),
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            result = await recovered.result()
            assert await handle.recover() is None  # nothing left to resume
        stored = await sessions.load("s")
    assert result.content == "final after 1 steps"
    assert executions == Counter({"idem:10": 2})  # cut mid-flight, idempotent: run again
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "stop-condition"
    assert [m.role for m in stored.conversation_history.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_a_session_reconciles_a_turn_another_worker_finished(sqlite_db: DurableDb) -> None:
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["once"], []]
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        with trio.CancelScope() as scope:
            async with (
                open_session(
                    "s",
                    store=sessions,
                    agent_name="worker",
                    agent=make_agent(script, executions, gate),
                    durable=backend,
                ) as handle,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(handle.run, "hello")
                await until(lambda: executions)
                scope.cancel()
        # another worker finishes the run from the engine...
        done = await recover(backend, agents={"worker": make_agent(script, executions)})
        assert len(done) == 1
        # ...and the session, without agent or run options, stores what it ended with.
        async with open_session(
            "s", store=sessions, agent_name="worker", durable=backend
        ) as handle:
            assert await handle.recover() is None
        stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "stop-condition"
    tool_message = stored.conversation_history.messages[2]
    assert tool_message.role == "tool"
    assert UNKNOWN_OUTCOME in tool_message.text
    assert executions == Counter({"once:10": 1})


async def test_recover_needs_a_durable_session() -> None:
    sessions = create_session_store(MemoryStore())
    async with open_session("s", store=sessions, agent_name="worker") as handle:
        with pytest.raises(InvalidArgument, match="durable session"):
            await handle.recover()


async def test_a_run_whose_answer_cannot_be_journaled_ends_as_an_error_for_good(
    sqlite_db: DurableDb,
) -> None:
    """Unencodable metadata fails the run once, recorded; recovery never retries it."""

    async def model(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="x", metadata={"t": object()})

    agent = create_agent(generate=model, name="worker")
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="bad")
        async with agent.open_run("hi", durable=durable) as run:
            result = await run.result()
        record = await engine.get("bad")
        assert await recover(backend, agents={"worker": agent}) == {}
    assert result.finish_reason == "error"
    # Refused where the response is built, before anything of it is journaled.
    assert isinstance(result.error, InvalidResponseError)
    assert "metadata is not JSON-encodable" in str(result.error)
    assert record is not None
    assert record.status == "error"
    assert record.outcome is not None
    assert record.outcome.error_type == "InvalidResponseError"
