"""One object per backend: ``SqliteDurable(path)`` and ``PostgresDurable(dsn)`` carry the
engine and the checkpoint store over one connection pool, and are taken wherever
durability is asked for (``Durable``, ``recover``, ``serve_durable_runs``, sessions, the
run store). The keyword pair stays for engines of one's own; giving both is refused."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from operative import GenerateResponse, ToolCall, create_agent, tool
from operative.durable import (
    CheckpointStore,
    Durable,
    DurableEngine,
    PostgresCheckpointStore,
    PostgresDurable,
    PostgresEngine,
    SqliteCheckpointStore,
    SqliteDurable,
    SqliteEngine,
    recover,
    serve_durable_runs,
)
from operative.errors import InvalidArgument
from operative.kvstore import MemoryStore
from operative.runstore import PostgresRunStore, SqliteRunStore
from operative.sessions import create_session_store, open_session
from operative.testing import ScriptedModel

from .conftest import DurableDb

KINDS: dict[str, tuple[Any, Any, Any, Any]] = {
    "sqlite": (SqliteDurable, SqliteEngine, SqliteCheckpointStore, SqliteRunStore),
    "postgres": (PostgresDurable, PostgresEngine, PostgresCheckpointStore, PostgresRunStore),
}


def _agent(gate: trio.Event | None = None, entered: trio.Event | None = None) -> Any:
    """Step 1 calls ``wait`` (which waits for ``gate``, when given); step 2 answers."""

    @tool(idempotent=True)
    async def wait() -> str:
        """Wait for the gate."""
        if entered is not None:
            entered.set()
        if gate is not None:
            await gate.wait()
        return "waited"

    def answer(request: Any) -> GenerateResponse | str:
        if any(m.role == "tool" for m in request.conversation.messages):
            return "done"
        return GenerateResponse(tool_calls=(ToolCall(id="c1", name="wait"),))

    return create_agent(generate=ScriptedModel(answer), tools=[wait], name="waiter")


async def _shut_down_mid_call(backend: Any, run_id: str) -> None:
    """A durable run whose worker shuts down while its call runs: running, unleased."""
    entered = trio.Event()
    agent = _agent(gate=trio.Event(), entered=entered)
    with trio.CancelScope() as scope:
        async with agent.open_run("go", durable=Durable(backend, run_id=run_id)):
            await entered.wait()
            scope.cancel()
    record = await backend.engine.get(run_id)
    assert (record.status, record.lease_owner) == ("running", None)


async def test_a_backend_carries_the_engine_and_the_journal_over_one_pool(
    durable_db: DurableDb,
) -> None:
    backend_type, engine_type, store_type, _ = KINDS[durable_db.name]
    async with durable_db.backend() as backend:
        assert type(backend) is backend_type
        engine, store = backend.engine, backend.checkpoint_store
        assert (type(engine), type(store)) == (engine_type, store_type)
        assert isinstance(backend.engine, DurableEngine)
        assert isinstance(backend.checkpoint_store, CheckpointStore)
        assert engine._db is store._db is backend._db  # one pool
        assert engine.database == store.database == backend.database
        assert backend.database in repr(backend)
        # Both group committers run while the block is open...
        assert engine._queue is not None
        assert store._queue is not None
        # ... and the parts still work as the protocol form takes them.
        durable = Durable(engine=engine, checkpoint_store=store, run_id="r1")
        async with _agent().open_run("go", durable=durable) as run:
            await run.wait_durably_started()
        assert (await run.result()).content == "done"
    assert engine._queue is None
    assert store._queue is None
    assert "closed" in repr(backend)
    with pytest.raises(InvalidArgument, match=f"this {backend_type.__name__} is closed"):
        await engine.get("r1")


async def test_a_run_started_and_recovered_through_the_backend(durable_db: DurableDb) -> None:
    async with durable_db.backend() as backend:
        await _shut_down_mid_call(backend, "cut")
        results = await recover(backend, agents={"waiter": _agent()})
        assert results["cut"].content == "done"
        assert (await backend.engine.get("cut")).status == "completed"


async def test_serve_durable_runs_takes_the_backend(durable_db: DurableDb) -> None:
    async with durable_db.backend() as backend:
        await _shut_down_mid_call(backend, "served")
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    functools.partial(
                        serve_durable_runs, backend, agents={"waiter": _agent()}, poll_interval=0.05
                    )
                )
                while (await backend.engine.get("served")).status == "running":  # noqa: ASYNC110
                    await trio.sleep(0.05)  # the database is polled: no event to wait for
                nursery.cancel_scope.cancel()
        assert (await backend.engine.get("served")).status == "completed"


async def test_a_session_takes_the_backend_as_durable(sqlite_db: DurableDb) -> None:
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        async with open_session("s", store=sessions, agent=_agent(), durable=backend) as chat:
            result = await chat.run("go")
            assert result.content == "done"
            run_id = chat.session.runs[-1].run_id
            assert await chat.recover() is None
        record = await backend.engine.get(run_id)
        assert (record.status, record.session_id) == ("completed", "s")


async def test_the_run_store_opens_on_the_backend(durable_db: DurableDb) -> None:
    _, _, _, store_type = KINDS[durable_db.name]
    async with durable_db.backend() as backend:
        async with _agent().open_run("go", durable=Durable(backend, run_id="r1")) as run:
            await run.result()
        async with store_type(backend) as runs:
            assert runs.database == backend.database
            (summary,) = (await runs.runs()).items
            assert (summary.run_id, summary.status) == ("r1", "completed")


async def test_a_backend_used_without_async_with_commits_alone_and_closes(
    sqlite_db: DurableDb,
) -> None:
    backend = sqlite_db.backend()
    try:
        assert backend.checkpoint_store._queue is None  # no committer: each write alone
        async with _agent().open_run("go", durable=Durable(backend, run_id="r1")) as run:
            await run.result()
        assert (await backend.engine.get("r1")).status == "completed"
    finally:
        await backend.aclose()
    await backend.aclose()  # twice is harmless
    with pytest.raises(InvalidArgument, match="closed; create a new one"):
        async with backend:
            pass


async def test_a_backend_opens_once(sqlite_db: DurableDb) -> None:
    async with sqlite_db.backend() as backend:
        with pytest.raises(InvalidArgument, match="is open already; open it once"):
            async with backend:
                pass
        # Still usable: the refused second block changed nothing.
        async with _agent().open_run("go", durable=Durable(backend, run_id="r1")) as run:
            await run.result()
        assert (await backend.engine.get("r1")).status == "completed"


# -- what is refused, and what it says --------------------------------------------------


@pytest.fixture
async def backend(tmp_path: Path) -> Any:
    async with SqliteDurable(tmp_path / "runs.db") as opened:
        yield opened


async def test_a_backend_and_engine_or_checkpoint_store_are_one_error(backend: Any) -> None:
    engine, store = backend.engine, backend.checkpoint_store
    for extra in ({"engine": engine}, {"checkpoint_store": store}):
        with pytest.raises(InvalidArgument, match=r"Durable\(\) got a backend .* pass one of"):
            Durable(backend, **extra)
    message = "and engine= and checkpoint_store=: pass one of them"
    with pytest.raises(InvalidArgument, match=message):
        Durable(backend, engine=engine, checkpoint_store=store)
    with pytest.raises(InvalidArgument, match=r"recover\(\) got a backend"):
        await recover(backend, engine=engine, checkpoint_store=store, agents={"w": _agent()})
    with pytest.raises(InvalidArgument, match=r"serve_durable_runs\(\) got a backend"):
        await serve_durable_runs(backend, engine=engine, agents={"w": _agent()})
    sessions = create_session_store(MemoryStore())
    with pytest.raises(InvalidArgument, match=r"open_session\(\) got a backend"):
        async with open_session(
            "s", store=sessions, agent=_agent(), durable=backend, checkpoint_store=store
        ):
            pass


async def test_a_missing_or_half_given_database_says_what_to_pass(backend: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"needs a database: pass SqliteDurable\(path\)"):
        Durable()
    with pytest.raises(InvalidArgument, match=r"recover\(\) needs a database"):
        await recover(agents={"w": _agent()})
    with pytest.raises(InvalidArgument, match="got engine= without checkpoint_store="):
        Durable(engine=backend.engine)
    with pytest.raises(InvalidArgument, match="got checkpoint_store= without engine="):
        await recover(checkpoint_store=backend.checkpoint_store, agents={"w": _agent()})


async def test_a_first_argument_that_is_not_a_backend_says_what_to_pass(
    backend: Any, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgument, match=r"open the database with SqliteDurable\('runs.db'\)"):
        Durable("runs.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="goes as engine= and checkpoint_store="):
        Durable(backend.engine)
    with pytest.raises(InvalidArgument, match="goes as engine= and checkpoint_store="):
        await recover(backend.checkpoint_store, agents={"w": _agent()})
    sessions = create_session_store(MemoryStore())
    with pytest.raises(InvalidArgument, match=r"not a Durable: the session makes each turn"):
        async with open_session("s", store=sessions, agent=_agent(), durable=Durable(backend)):  # type: ignore[arg-type]
            pass
    with pytest.raises(InvalidArgument, match=r"takes SqliteDurable.* as durable="):
        async with open_session("s", store=sessions, agent=_agent(), durable="runs.db"):  # type: ignore[arg-type]
            pass


async def test_the_run_store_of_the_other_database_is_refused(backend: Any, tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(InvalidArgument, match=r"open SqliteRunStore\(SqliteDurable\) instead"):
        PostgresRunStore(backend)
    postgres = PostgresDurable("host=localhost dbname=nowhere password=secret")
    try:
        with pytest.raises(InvalidArgument) as refused:
            SqliteRunStore(postgres)  # type: ignore[arg-type]
        assert "PostgresRunStore(PostgresDurable)" in str(refused.value)
        assert "secret" not in str(refused.value)
    finally:
        await postgres.aclose()
