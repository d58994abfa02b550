"""Lazy agents run durably wherever agents do: durable runs and session turns,
``recover()``, ``serve_durable_runs`` and a session's ``recover()``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio

from operative import AgentRunContext, InvalidArgument, create_agent, create_lazy_agent
from operative._lazy._agent import LazyAgent
from operative.durable import Durable, recover, serve_durable_runs
from operative.errors import AgentContractError
from operative.kvstore import MemoryStore
from operative.sessions import create_session_store, open_session
from operative.testing import ScriptedModel

from .conftest import DurableDb
from .test_durable_runs import Script, make_agent, until


def lazy(script: Script, executions: Counter[str], gate: trio.Event | None = None) -> LazyAgent:
    """A lazy agent loading ``make_agent(script, ...)``; its runs are journaled as "worker"."""
    return create_lazy_agent(lambda: make_agent(script, executions, gate))


async def _cut_by_a_shutdown(db: DurableDb, script: Script, executions: Counter[str]) -> None:
    """Leave run "r1" journaled mid-step (a non-idempotent call in flight), its lease released."""
    gate = trio.Event()
    async with db.backend() as backend:
        durable = Durable(backend, run_id="r1")
        with trio.CancelScope() as scope:
            async with make_agent(script, executions, gate, gated=("once",)).open_run(
                "go", durable=durable
            ):
                await until(lambda: executions["once:20"])
                scope.cancel()


async def test_a_lazy_agents_durable_run_is_journaled(sqlite_db: DurableDb) -> None:
    """open_run(durable=...) on a lazy agent runs the loaded agent durably under that id."""
    executions: Counter[str] = Counter()
    agent = lazy([["idem"], []], executions)
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="d1")
        async with agent.open_run("go", durable=durable) as run:
            assert run.run_id == "d1"  # the loaded agent's durable run
            result = await run.result()
        record = await engine.get("d1")
    assert result.run_id == "d1"
    assert result.content == "final after 1 steps"
    assert record is not None
    assert record.status == "completed"


async def test_recover_resumes_a_journaled_run_with_a_lazy_agent(sqlite_db: DurableDb) -> None:
    """recover() finishes a run from its journal with a lazy agent; no settled call reruns."""
    executions: Counter[str] = Counter()
    script = [["idem"], ["once"], []]
    await _cut_by_a_shutdown(sqlite_db, script, executions)
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        results = await recover(
            backend,
            agents={"worker": lazy(script, executions)},
        )
        record = await engine.get("r1")
    assert results["r1"].content == "final after 2 steps"
    assert record is not None
    assert record.status == "completed"
    assert executions == Counter({"idem:10": 1, "once:20": 1})  # never twice


async def test_serve_durable_runs_resumes_with_a_lazy_agent(sqlite_db: DurableDb) -> None:
    """serve_durable_runs claims the released run and finishes it with a lazy agent."""
    executions: Counter[str] = Counter()
    script = [["idem"], ["once"], []]
    await _cut_by_a_shutdown(sqlite_db, script, executions)
    async with sqlite_db.backend() as backend:
        engine = backend.engine

        async def finished() -> bool:
            record = await engine.get("r1")
            return record is not None and record.status == "completed"

        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_durable_runs(
                    backend,
                    agents={"worker": lazy(script, executions)},
                    poll_interval=0.01,
                    task_status=task_status,
                )
            )
            # The engine works in threads: poll, with a guard (it takes milliseconds).
            with trio.fail_after(30):
                while not await finished():  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    assert executions == Counter({"idem:10": 1, "once:20": 1})


async def test_a_lazy_agent_that_does_not_load_leaves_the_run_to_a_later_recovery(
    sqlite_db: DurableDb,
) -> None:
    """A failed load resumes nothing and records nothing; once it loads, the run finishes."""
    now = [1000.0]
    executions: Counter[str] = Counter()
    script = [["idem"], ["once"], []]
    await _cut_by_a_shutdown(sqlite_db, script, executions)
    attempts: list[int] = []

    def loader() -> Any:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the registry is down")
        return make_agent(script, executions)

    agents = {"worker": create_lazy_agent(loader)}
    engine = sqlite_db.engine(clock=lambda: now[0])
    store = sqlite_db.store(clock=lambda: now[0])
    async with engine, store:
        assert await recover(engine=engine, checkpoint_store=store, agents=agents) == {}
        record = await engine.get("r1")
        assert record is not None
        assert record.status == "running"  # nothing terminal written
        assert record.lease_owner is not None  # claimed: it waits for its lease to expire
        now[0] += 60
        results = await recover(engine=engine, checkpoint_store=store, agents=agents)
    assert results["r1"].content == "final after 2 steps"
    assert executions == Counter({"idem:10": 1, "once:20": 1})


async def test_a_lazy_agent_without_durable_runs_is_refused(sqlite_db: DurableDb) -> None:
    """A lazy agent whose definition cannot run durably ends the run with a contract error."""

    class Plain:
        name = "plain"
        has_output = False

        async def run(self, input: Any, *, context: Any = None) -> Any:
            raise NotImplementedError

        def open_run(self, input: Any, *, context: Any = None) -> Any:
            return create_agent(generate=ScriptedModel(["hi"])).open_run(input, context=context)

    agent = create_lazy_agent(Plain)
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="p1")
        async with agent.open_run("go", durable=durable) as run:
            result = await run.result()
        assert await engine.get("p1") is None
    assert isinstance(result.error, AgentContractError)
    assert "durable" in str(result.error)


async def test_lazy_open_run_checks_durable_eagerly(sqlite_db: DurableDb) -> None:
    """durable= takes a Durable; a run id that disagrees with context.run_id is refused."""
    agent = create_lazy_agent(lambda: create_agent(generate=ScriptedModel(["hi"])))
    with pytest.raises(InvalidArgument, match="durable= takes"):
        agent.open_run("go", durable="yes")
    async with sqlite_db.backend() as backend:
        durable = Durable(backend, run_id="a")
        with pytest.raises(InvalidArgument, match="differ"):
            agent.open_run("go", context=AgentRunContext(run_id="b"), durable=durable)


# -- sessions -----------------------------------------------------------------------------


async def test_a_lazy_agent_runs_a_durable_session_turn(sqlite_db: DurableDb) -> None:
    """A durable session turn of a lazy agent is a durable run under the turn's id."""
    executions: Counter[str] = Counter()
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=lazy([["idem"], []], executions),
            durable=backend,
        ) as handle:
            result = await handle.run("hello")
        record = await engine.get(result.run_id)
    stored = await sessions.load("s")
    assert result.content == "final after 1 steps"
    assert record is not None
    assert record.status == "completed"
    assert record.session_id == "s"
    assert stored is not None
    assert stored.runs[0].run_id == result.run_id
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "stop-condition"


async def test_a_session_recovers_a_turn_with_a_lazy_agent(sqlite_db: DurableDb) -> None:
    """A turn cut by a shutdown is resumed by a session's recover() with a lazy agent."""
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["idem"], []]
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        with trio.CancelScope() as scope:
            async with (
                open_session(
                    "s",
                    store=sessions,
                    agent_name="worker",
                    agent=lazy(script, executions, gate),
                    durable=backend,
                ) as handle,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(handle.run, "hello")
                await until(lambda: executions)
                scope.cancel()  # the host process shuts down
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=lazy(script, executions),
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            result = await recovered.result()
        record = await engine.get(recovered.run_id)
    stored = await sessions.load("s")
    assert result.content == "final after 1 steps"
    assert record is not None
    assert record.status == "completed"
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "stop-condition"
    assert [m.role for m in stored.conversation_history.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


class Observed:
    """An agent that wraps another and passes ``durable=`` on (as the command line's does)."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.name = "worker"
        self.has_output = False

    async def run(self, input: Any, *, context: Any = None) -> Any:
        raise NotImplementedError

    def open_run(self, input: Any, *, context: Any = None, durable: Any = None) -> Any:
        return self._agent.open_run(input, context=context, durable=durable)


@pytest.mark.parametrize("wrapped", [False, True])
async def test_aborting_a_recovered_lazy_turn_at_once_ends_its_record_aborted(
    sqlite_db: DurableDb, wrapped: bool
) -> None:
    """An abort before the lazy run's agent ran still reaches the journal: the record, the
    session and the result all say aborted (nothing is left for another worker)."""
    gate = trio.Event()
    executions: Counter[str] = Counter()
    script = [["idem"], []]
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
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
        agent: Any = lazy(script, executions)
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=Observed(agent) if wrapped else agent,
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            recovered.abort("the operator said stop")
            result = await recovered.result()
        record = await engine.get(recovered.run_id)
    stored = await sessions.load("s")
    assert result.finish_reason == "aborted"
    assert record is not None
    assert record.status == "aborted"
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "aborted"
    assert executions == Counter({"idem:10": 1})  # the resumed run never ran a step
