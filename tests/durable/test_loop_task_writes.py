"""Writes the loop task makes itself: no hand-off to the writer task, and still bounded.

A durable write from the run's loop task is made in that task, shielded. A cancellation
that arrives while it is in flight (an abort through the run scope, a deadline added to
the run, the caller cancelled) bounds it by ``lease_seconds`` from then on, as the writer
task's writes are bounded: a write still unfinished then has an unknown outcome, and the
run writes nothing more. With another extension wrapping the loop (a guardrail's scope,
which the run scope cannot see), the writes go to the writer task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from operative import CleanupError, FinishReason, create_agent, tool
from operative.durable import Durable
from operative.guardrails import InputGuardrail

from .conftest import DurableDb
from .test_durable_runs import scripted

LEASE_SECONDS = 30.0


class _Watched:
    """A checkpoint store whose appends record the task making them; the ``hang``-th
    append (0-based) never returns until cancelled."""

    def __init__(self, inner: Any, hang: int | None = None) -> None:
        self._inner = inner
        self._hang = hang
        self.tasks: list[str] = []
        self.hanging = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        index = len(self.tasks)
        self.tasks.append(trio.lowlevel.current_task().name)
        if index == self._hang:
            self.hanging.set()
            await trio.sleep_forever()
        return await self._inner.append(*args, **kwargs)


@tool(idempotent=True)
async def idem(n: int) -> str:
    """Idempotent."""
    await trio.lowlevel.checkpoint()
    return f"idem {n}"


def _agent(**options: Any) -> Any:
    """Step 1 calls ``idem`` (its end commits), step 2 answers."""
    return create_agent(generate=scripted([["idem"], []]), tools=[idem], name="worker", **options)


async def test_the_loop_tasks_writes_are_made_in_it(durable_db: DurableDb) -> None:
    engine, store = durable_db.engine(), durable_db.store()
    watched = _Watched(store)
    try:
        durable = Durable(engine=engine, checkpoint_store=watched, lease_seconds=LEASE_SECONDS)
        async with _agent().open_run("go", durable=durable) as run:
            pass
        result = await run.result()
        assert result.finish_reason == FinishReason.STOP_CONDITION
        assert watched.tasks, "the run journaled nothing"
        assert not any(name.startswith("operative durable writer") for name in watched.tasks)
        assert [e.seq for e in await store.read(run.run_id)] == list(range(8))
    finally:
        await engine.aclose()
        await store.aclose()


async def test_with_a_guardrail_scope_the_writer_task_makes_them(durable_db: DurableDb) -> None:
    """A guardrail's scope around the loop may be cancelled without the run scope
    knowing: the loop task then hands its writes to the writer task, which sees every
    cancellation while it waits."""

    async def allow(text: str, context: Any) -> None:
        await trio.lowlevel.checkpoint()

    engine, store = durable_db.engine(), durable_db.store()
    watched = _Watched(store)
    try:
        durable = Durable(engine=engine, checkpoint_store=watched, lease_seconds=LEASE_SECONDS)
        agent = _agent(guardrails=[InputGuardrail(allow)])
        async with agent.open_run("go", durable=durable) as run:
            pass
        result = await run.result()
        assert result.finish_reason == FinishReason.STOP_CONDITION
        assert watched.tasks
        assert all(name.startswith("operative durable writer") for name in watched.tasks)
    finally:
        await engine.aclose()
        await store.aclose()


async def _abort(run: Any, caller: trio.CancelScope) -> None:
    run.abort("stop now")


async def _add_deadline(run: Any, caller: trio.CancelScope) -> None:
    run._control.add_deadline(run._control.now() + 1.0, FinishReason.ABORTED, "too late")


async def _cancel_caller(run: Any, caller: trio.CancelScope) -> None:
    caller.cancel()


def _writer_of(run: Any) -> Any:
    (driver,) = [e for e in run._control.extensions if e.durable]
    return driver._writer


@pytest.mark.parametrize("stop", [_abort, _add_deadline, _cancel_caller])
async def test_a_loop_task_write_in_flight_is_bounded_once_cancelled(
    durable_db: DurableDb,
    mock_clock: trio.testing.MockClock,
    stop: Callable[[Any, trio.CancelScope], Awaitable[None]],
) -> None:
    """The step's commit hangs; the cancellation that comes meanwhile (from the run
    scope, as a deadline, or from outside the run) bounds it by ``lease_seconds``: the
    run then stops writing, and its outcome is not reported as committed."""
    engine, store = durable_db.engine(), durable_db.store()
    watched = _Watched(store, hang=0)
    try:
        durable = Durable(engine=engine, checkpoint_store=watched, lease_seconds=LEASE_SECONDS)
        with trio.CancelScope() as caller:
            async with _agent().open_run("go", durable=durable) as run:
                await watched.hanging.wait()
                began = trio.current_time()
                await stop(run, caller)
        ended = trio.current_time()
        assert not any(name.startswith("operative durable writer") for name in watched.tasks)
        unknown = _writer_of(run).unknown
        assert unknown is not None
        assert "did not finish within lease_seconds=30s" in unknown
        # Bounded from the cancellation on (a deadline's: from when it fires).
        assert ended - began <= 1.0 + LEASE_SECONDS + 1.0
        if stop is not _cancel_caller:
            with pytest.raises(CleanupError):
                await run.result()  # the outcome is not committed: never a success
        record = await engine.get(run.run_id)
        assert record is not None
        assert record.status == "running"  # nothing terminal committed: recover() ends it
    finally:
        await engine.aclose()
        await store.aclose()
