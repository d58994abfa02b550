"""A durable run renews its lease from its writer task: no task of its own.

The writer task, idle between writes, wakes every ``lease_seconds / 3`` to renew; while
it makes a write for another task (a parallel call's result), that task renews when the
renewal falls due, so a slow write never lets the lease lapse. A renewal that returns a
cancellation aborts the run, one that finds the lease taken over aborts it for good, and
one that fails otherwise is tried again at the next interval. Times are trio's (a mock
clock), compared against the lease: a gap between renewals of ``lease_seconds`` would
let another worker claim the run.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
import trio
import trio.testing

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative.durable import Durable, ToolSettled

from .conftest import DurableDb

LEASE = 3.0
RENEWAL = LEASE / 3
REASON = "the operator cancelled it"


class _Watched:
    """An engine that notes, in trio time, when the run took its lease, each renewal
    (and the task that made it), and when the run finished."""

    def __init__(self, inner: Any, *, failures: int = 0) -> None:
        self._inner = inner
        self.failures = failures
        """Renewals that fail (a database hiccup) before they work again."""
        self.started: float | None = None
        self.renewals: list[tuple[float, str]] = []
        self.finished: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def start(self, *args: Any, **kwargs: Any) -> Any:
        self.started = trio.current_time()
        return await self._inner.start(*args, **kwargs)

    async def renew(self, lease: Any, *, lease_seconds: float) -> Any:
        self.renewals.append((trio.current_time(), trio.lowlevel.current_task().name))
        if self.failures:
            self.failures -= 1
            await trio.lowlevel.checkpoint()
            raise RuntimeError("the database hiccuped")
        return await self._inner.renew(lease, lease_seconds=lease_seconds)

    async def finish(self, *args: Any, **kwargs: Any) -> Any:
        self.finished = trio.current_time()
        return await self._inner.finish(*args, **kwargs)

    def longest_gap(self) -> float:
        """The longest the lease went unrenewed between the run's start and its finish."""
        assert self.started is not None
        assert self.finished is not None
        times = [self.started, *(at for at, _ in self.renewals), self.finished]
        return max(later - earlier for earlier, later in itertools.pairwise(times))


def _calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=f"c{i}", name=name, arguments={}) for i, name in enumerate(names))


def _scripted(*names: str) -> Any:
    """Step 1 calls ``names`` (at once); step 2 answers."""

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if any(m.role == "assistant" for m in request.conversation.messages):
            return GenerateResponse(content="done")
        return GenerateResponse(content="working", tool_calls=_calls(*names))

    return generate


async def test_a_durable_run_starts_its_loop_and_writer_tasks_only(sqlite_db: DurableDb) -> None:
    """The run's nursery holds the loop task and the writer task, nothing else, in
    ``agent.open_run`` and in ``open_run``: no separate lease renewer."""
    seen: list[tuple[str, list[str]]] = []

    async def generate(request: GenerateRequest) -> GenerateResponse:
        task = trio.lowlevel.current_task()
        nursery = task.parent_nursery
        assert nursery is not None
        seen.append((task.name, sorted(child.name for child in nursery.child_tasks)))
        return GenerateResponse(content="done")

    async with sqlite_db.backend() as backend:
        durable = Durable(backend, run_id="a")
        async with create_agent(generate=generate, name="a").open_run("go", durable=durable):
            pass
        conversation = Conversation()
        conversation.append_user_message("go")
        async with open_run(
            generate=generate,
            conversation=conversation,
            stop_when=stop_when.no_tool_calls(),
            durable=Durable(backend, run_id="b"),
        ) as run:
            pass
        result = await run.result()
    assert result.finish_reason == "stop-condition"
    assert seen == [
        ("operative run a", ["operative durable writer a", "operative run a"]),
        ("operative run b", ["operative durable writer b", "operative run b"]),
    ]


async def test_the_lease_is_renewed_through_a_long_tool_call_and_stops_with_the_run(
    sqlite_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A call that takes two leases: the idle writer task renews every third of a lease,
    and once the run has ended nothing renews any more."""

    @tool
    async def crunch() -> str:
        """Take a while."""
        await trio.sleep(2 * LEASE)
        return "crunched"

    inner = sqlite_db.engine()
    engine = _Watched(inner)
    store = sqlite_db.store()
    agent = create_agent(generate=_scripted("crunch"), tools=[crunch], name="long")
    async with inner, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="long", lease_seconds=LEASE)
        with trio.fail_after(20 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                pass
            result = await run.result()
        assert result.finish_reason == "stop-condition"
        assert len(engine.renewals) >= 5, engine.renewals
        assert engine.longest_gap() < LEASE / 2, engine.renewals
        assert {name for _, name in engine.renewals} == {"operative durable writer long"}
        renewed = len(engine.renewals)
        await trio.sleep(3 * LEASE)
        assert len(engine.renewals) == renewed  # the run is over: its renewals too
        record = await engine.get("long")
        assert record is not None
        assert record.status == "completed"


class _SlowFirstSettle:
    """A checkpoint store whose first ``tool.settled`` write takes ``seconds``; it notes
    which task made that write, and the cancellation the write returned."""

    def __init__(self, inner: Any, seconds: float) -> None:
        self._inner = inner
        self.seconds = seconds
        self.writing = trio.Event()
        self.written = trio.Event()
        self.task: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, lease: Any, seq: int, records: Any) -> str | None:
        slow = not self.writing.is_set() and any(isinstance(r, ToolSettled) for r in records)
        if slow:
            self.task = trio.lowlevel.current_task().name
            self.writing.set()
            await trio.sleep(self.seconds)
        cancel: str | None = await self._inner.append(lease, seq, records)
        if slow:
            self.written.set()
        return cancel


def _parallel_agent(name: str, ended: list[tuple[str, float]], slow_seconds: float) -> Any:
    """``quick`` settles as soon as ``slow`` runs (its result is committed by the
    writer task, as ``slow`` still runs); ``slow`` takes ``slow_seconds``. ``ended`` notes when each
    call ended, and how. Both are idempotent: no commit comes before they run."""

    running = trio.Event()

    @tool(idempotent=True)
    async def quick() -> str:
        """Answer once ``slow`` runs."""
        await running.wait()
        ended.append(("quick", trio.current_time()))
        return "quick answer"

    @tool(idempotent=True)
    async def slow() -> str:
        """Answer later."""
        running.set()
        try:
            await trio.sleep(slow_seconds)
        except trio.Cancelled:
            ended.append(("slow cancelled", trio.current_time()))
            raise
        ended.append(("slow", trio.current_time()))
        return "slow answer"

    return create_agent(generate=_scripted("slow", "quick"), tools=[slow, quick], name=name)


async def test_a_slow_write_in_the_writer_task_does_not_hold_up_the_renewal(
    sqlite_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A parallel call's result takes a lease and a half to commit, in the writer task:
    the task waiting for it renews meanwhile, so the lease never lapses and the run
    completes."""
    ended: list[tuple[str, float]] = []
    inner = sqlite_db.engine()
    engine = _Watched(inner)
    journal = sqlite_db.store()
    store = _SlowFirstSettle(journal, 1.5 * LEASE)
    agent = _parallel_agent("slow", ended, RENEWAL / 2)
    async with inner, journal:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="slow", lease_seconds=LEASE)
        with trio.fail_after(20 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                pass
            result = await run.result()
        assert store.task == "operative durable writer slow"  # the case this test is about
        assert result.finish_reason == "stop-condition", result.error
        assert [name for name, _ in ended] == ["quick", "slow"]
        assert engine.longest_gap() < LEASE / 2, engine.renewals
        record = await engine.get("slow")
        assert record is not None
        assert record.status == "completed"


async def test_a_cancel_learned_while_the_writer_task_writes_aborts_the_run_at_once(
    sqlite_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """A cancellation asked for while the writer task makes a slow write reaches the run
    at the next renewal (made by the task waiting for the write), not when the write
    ends: the call in flight is cancelled there. The write still commits, and the run
    ends aborted with the reason."""
    ended: list[tuple[str, float]] = []
    inner = sqlite_db.engine()
    engine = _Watched(inner)
    write = 1.2 * LEASE  # longer than a lease can go unrenewed; within the write's bound
    journal = sqlite_db.store()
    store = _SlowFirstSettle(journal, write)
    agent = _parallel_agent("stopped", ended, 10 * LEASE)
    async with inner, journal:
        durable = Durable(
            engine=engine, checkpoint_store=store, run_id="stopped", lease_seconds=LEASE
        )
        with trio.fail_after(20 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                await store.writing.wait()
                began = trio.current_time()
                other = sqlite_db.engine()
                async with other:
                    flagged = await other.cancel("stopped", REASON)
                asked = trio.current_time()
                assert flagged.status == "running"
                result = await run.result()
        assert store.task == "operative durable writer stopped"
        assert [name for name, _ in ended] == ["quick", "slow cancelled"]
        took = ended[1][1] - asked
        assert took <= RENEWAL, f"the cancel took {took:g}s to land"
        assert ended[1][1] < began + write  # before the write ended
        assert store.written.is_set()
        assert result.finish_reason == "aborted"
        assert result.abort_reason == REASON
        settled = [e.record.result for e in await store.read("stopped")
                   if isinstance(e.record, ToolSettled)]  # fmt: skip
        assert [r.call_id for r in settled] == ["c1"]  # quick's, committed after all
        record = await engine.get("stopped")
        assert record is not None
        assert record.status == "aborted"


async def test_a_lease_taken_over_during_a_long_call_aborts_the_run_and_stops_renewing(
    sqlite_db: DurableDb, mock_clock: trio.testing.MockClock
) -> None:
    """Another worker claims the run (its lease ran out on the database's clock): the
    next renewal raises LeaseLostError, the run is aborted with it, writes nothing more,
    and renews no more."""
    now = [1_000.0]
    began = trio.Event()

    @tool
    async def crunch() -> str:
        """Take a while."""
        began.set()
        await trio.sleep(10 * LEASE)
        return "crunched"

    inner = sqlite_db.engine(clock=lambda: now[0])
    engine = _Watched(inner)
    store = sqlite_db.store(clock=lambda: now[0])
    agent = create_agent(generate=_scripted("crunch"), tools=[crunch], name="lost")
    async with inner, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="lost", lease_seconds=LEASE)
        with trio.fail_after(20 * LEASE):
            async with agent.open_run("go", durable=durable) as run:
                await began.wait()
                now[0] += 2 * LEASE
                other = sqlite_db.engine(clock=lambda: now[0])
                async with other:
                    (stolen,) = await other.claim(worker_id="other", lease_seconds=600)
                result = await run.result()
            renewed = len(engine.renewals)
            await trio.sleep(3 * LEASE)
        assert len(engine.renewals) == renewed
        assert result.finish_reason == "aborted"
        assert "lost durable run 'lost'" in (result.abort_reason or ""), result.abort_reason
        assert engine.finished is None  # nothing terminal from the stale worker
        record = await engine.get("lost")
        assert record is not None
        assert (record.status, record.lease_owner, record.fence) == ("running", "other", 2)
        assert stolen.fence == 2
        assert not any(isinstance(e.record, ToolSettled) for e in await store.read("lost"))


async def test_a_failed_renewal_is_logged_and_tried_again(
    sqlite_db: DurableDb, mock_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that fails for another reason than a lost lease is logged, and the next
    interval renews again; the run goes on and completes."""

    @tool
    async def crunch() -> str:
        """Take a while."""
        await trio.sleep(2 * LEASE)
        return "crunched"

    inner = sqlite_db.engine()
    engine = _Watched(inner, failures=1)
    store = sqlite_db.store()
    agent = create_agent(generate=_scripted("crunch"), tools=[crunch], name="hiccup")
    async with inner, store:
        durable = Durable(
            engine=engine, checkpoint_store=store, run_id="hiccup", lease_seconds=LEASE
        )
        with caplog.at_level(logging.WARNING, logger="operative.durable"):
            with trio.fail_after(20 * LEASE):
                async with agent.open_run("go", durable=durable) as run:
                    pass
                result = await run.result()
        assert result.finish_reason == "stop-condition"
        assert engine.failures == 0
        assert len(engine.renewals) >= 5, engine.renewals
        times = [at for at, _ in engine.renewals]
        assert times[1] - times[0] < LEASE / 2  # tried again at the next interval
        assert any("renewing the lease of run hiccup failed" in r.message for r in caplog.records)
        record = await engine.get("hiccup")
        assert record is not None
        assert record.status == "completed"
