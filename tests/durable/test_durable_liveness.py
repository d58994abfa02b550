"""Liveness snapshots of durable runs say ``durability="durable"``, from the first one."""

from __future__ import annotations

from operative import create_agent, create_lazy_agent
from operative.durable import Durable
from operative.liveness import LivenessSnapshot
from operative.testing import ScriptedModel

from .conftest import DurableDb


async def test_an_agents_durable_run_reports_durable_snapshots(sqlite_db: DurableDb) -> None:
    """Every snapshot of a durable run says durable; an in-memory run's say process-local."""
    agent = create_agent(generate=ScriptedModel(["hi", "hi"]), name="w")
    seen: list[LivenessSnapshot] = []
    async with sqlite_db.backend() as backend:
        durable = Durable(backend, run_id="d1")
        async with agent.open_run("go", durable=durable) as run:
            run.subscribe_snapshot(seen.append)
            await run.result()
    assert seen[-1].terminal
    assert {s.durability for s in seen} == {"durable"}
    async with agent.open_run("go") as run:
        await run.result()
        assert run.snapshot().durability == "process-local"


async def test_a_lazy_agents_durable_run_reports_durable_snapshots(sqlite_db: DurableDb) -> None:
    """A lazy durable run says durable while its definition loads and after."""
    agent = create_lazy_agent(lambda: create_agent(generate=ScriptedModel(["hi"]), name="w"))
    seen: list[LivenessSnapshot] = []
    async with sqlite_db.backend() as backend:
        durable = Durable(backend, run_id="d2")
        async with agent.open_run("go", durable=durable) as run:
            run.subscribe_snapshot(seen.append)
            await run.result()
    assert seen[0].status == "starting"
    assert seen[-1].terminal
    assert {s.durability for s in seen} == {"durable"}


async def test_a_lazy_durable_run_aborted_before_loading_reports_durable(
    sqlite_db: DurableDb,
) -> None:
    """Its own terminal snapshot (the agent never ran) says durable too."""
    agent = create_lazy_agent(lambda: create_agent(generate=ScriptedModel(["hi"]), name="w"))
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="d3")
        opening = agent.open_run("go", durable=durable)
        opening.abort("changed my mind")
        async with opening as run:
            result = await run.result()
        snapshot = opening.snapshot()
        assert await engine.get("d3") is None  # never started: nothing to recover
    assert result.finish_reason == "aborted"
    assert snapshot.status == "aborted"
    assert snapshot.durability == "durable"
