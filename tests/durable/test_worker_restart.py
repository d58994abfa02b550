"""A worker restarted under its own ``worker_id`` takes its own runs back at once, and
fencing keeps the incarnation it replaced (dead or not) from writing.

Each backend in turn. Leases are wall-clock times an hour long, so a run is taken back
only by the restart rule, never because its lease expired; trio's clock is a frozen
``MockClock`` (virtual time that moves only if something waits for it), so the tests
also show that nothing waits.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from operative import GenerateRequest, GenerateResponse, create_agent
from operative.conversation import Message
from operative.durable import Durable, Generated, LeaseLostError, Started, recover
from operative.testing import ScriptedModel

from .conftest import DurableDb

HOUR = 3600.0


def _agent() -> Any:
    return create_agent(generate=ScriptedModel(lambda request: "recovered"), name="agent")


async def test_recover_under_the_dead_workers_id_resumes_its_run_at_once(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A worker died holding a run's lease; recover() with the same worker_id (a new
    process: new engine objects) finishes the run at once, and the dead incarnation's
    next journal write is refused."""
    dead_engine, dead_store = durable_db.engine(), durable_db.store()
    async with dead_engine, dead_store:
        started = Started(
            messages=(Message(id="u", role="user", content="hello"),), agent_name="agent"
        )
        lease = await dead_engine.start(started, run_id="r1", worker_id="w1", lease_seconds=HOUR)
        # ... and the process dies here: the lease is neither renewed nor released.
        async with durable_db.backend() as backend:
            engine, store = backend.engine, backend.checkpoint_store
            began = trio.current_time()
            # Another worker id waits out the lease.
            others = await recover(backend, agents={"agent": _agent()}, worker_id="w2")
            assert others == {}
            results = await recover(backend, agents={"agent": _agent()}, worker_id="w1")
            assert trio.current_time() == began  # nothing waited
            assert results["r1"].content == "recovered"
            record = await engine.get("r1")
            assert record is not None
            assert (record.status, record.lease_owner) == ("completed", None)
            assert record.fence > lease.fence
            # The old incarnation, were it still alive, can write nothing.
            message = Message(id="a", role="assistant", content="stale")
            with pytest.raises(LeaseLostError):
                await dead_store.append(lease, 1, [Generated(step=1, message=message)])
            with pytest.raises(LeaseLostError):
                await dead_engine.renew(lease, lease_seconds=HOUR)
            entries = await store.read("r1")
            assert not any(
                isinstance(entry.record, Generated) and entry.record.message.content == "stale"
                for entry in entries
            )


async def test_recover_in_the_running_worker_leaves_its_own_live_runs_alone(
    durable_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """recover() with the engine and worker id of a run this process is running does
    not take it: the run goes on and finishes under its own lease."""
    answered = trio.Event()
    asked = trio.Event()

    async def generate(request: GenerateRequest) -> GenerateResponse:
        asked.set()
        await answered.wait()
        return GenerateResponse(content="finished by its own worker")

    agent = create_agent(generate=generate, name="agent")
    async with durable_db.backend() as backend:
        engine = backend.engine
        durable = Durable(backend, run_id="r1", worker_id="w1", lease_seconds=HOUR)
        async with agent.open_run("hello", durable=durable) as run:
            await asked.wait()
            mine = await recover(backend, agents={"agent": _agent()}, worker_id="w1")
            assert mine == {}
            answered.set()
            result = await run.result()
        assert result.content == "finished by its own worker"
        record = await engine.get("r1")
        assert record is not None
        assert (record.status, record.fence) == ("completed", 2)  # one start, one finish
