"""The run store over real durable runs: every query and filter, pages, cost, timings.

The ``fleet`` fixture runs five durable runs through ``agent.open_run(..., durable=...)``
against each backend, oldest first:

- ``multi``: three steps, four tool calls (two succeed, one has bad arguments, one
  raises), priced model; completed.
- ``aborted``: its only call parks; ``run.abort()`` while it runs.
- ``errored``: one step on an unpriced model, then the model fails (spending tokens).
- ``cancelled``: its call parks; ``engine.cancel`` meanwhile; the call settles, and the
  run stops there (the journal write of its result returns the cancellation).
- ``midflight``: its call parks; the caller is cancelled (a shutdown: the lease is
  released, nothing terminal is written).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from durable.conftest import DurableDb

from operative import (
    GenerateResponse,
    InvalidArgument,
    Message,
    RunResult,
    ToolCall,
    Usage,
    create_agent,
)
from operative.budgets import DEFAULT_PRICES, ModelPrice
from operative.durable import Durable, SqliteDurable, recover
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.errors import CorruptRecordError
from operative.runstore import (
    Page,
    PostgresRunStore,
    RunDetail,
    RunStore,
    RunSummary,
    SqliteRunStore,
    ToolCallRecord,
)
from operative.testing import ScriptedModel
from operative.tools import Tool, tool

GPT = "gpt-4o"
LOCAL = "local-llm"
ORDER = ["midflight", "cancelled", "errored", "aborted", "multi"]  # newest first


# -- tools and models --------------------------------------------------------------------


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def lookup(key: str) -> str:
    """Look a constant up by name."""
    return {"pi": "3.14159"}[key]


class Gate:
    """A ``wait`` tool that parks until the test releases it."""

    def __init__(self, *, idempotent: bool = False) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.calls = 0
        gate = self

        @tool(name="wait", idempotent=idempotent)
        async def wait(ticket: str) -> str:
            """Wait for a ticket to be served."""
            gate.calls += 1
            gate.entered.set()
            await gate.release.wait()
            return f"served {ticket}"

        self.tool: Tool = wait


class SpentError(RuntimeError):
    """A failed generate attempt that still reports the tokens it spent."""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message)
        self.usage = usage


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def answer(
    content: str,
    *calls: ToolCall,
    usage: Usage | tuple[int, int] = (10, 1),
    model: str | None = GPT,
) -> GenerateResponse:
    spent = usage if isinstance(usage, Usage) else Usage.of(*usage)
    return GenerateResponse(content=content, tool_calls=calls, usage=spent, model=model)


STEP2_USAGE = Usage(prompt=2000, completion=100, total=2600, cache_read=500)
MULTI_SCRIPT = [
    answer("adding", call("c1", "add", a=1, b=2), call("c2", "add", a=1, b="x"), usage=(1000, 500)),
    answer(
        "looking up",
        call("c3", "lookup", key="pi"),
        call("c4", "lookup", key="tau"),
        usage=STEP2_USAGE,
    ),
    answer("pi is 3.14159", usage=(3000, 50)),
]


def shape(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    """Messages without their ids (a replayed transcript gives tool messages new ones)."""
    return [(m.role, m.content, m.tool_calls, m.tool_call_id, m.outcome) for m in messages]


def price(usage: Usage, model: str = GPT) -> float:
    cost = DEFAULT_PRICES.cost_of(usage, model)
    assert cost is not None
    return cost


# -- the database ------------------------------------------------------------------------


def open_store(db: DurableDb, **options: Any) -> SqliteRunStore | PostgresRunStore:
    if db.name == "sqlite":
        return SqliteRunStore(db.location, **options)
    return PostgresRunStore(db.location, **options)


def store_of(backend: Any) -> SqliteRunStore | PostgresRunStore:
    """The run store over the database ``backend`` (a SqliteDurable, a PostgresDurable)
    writes runs to: opened on the backend itself."""
    if isinstance(backend, SqliteDurable):
        return SqliteRunStore(backend)
    return PostgresRunStore(backend)


@contextmanager
def raw(db: DurableDb) -> Iterator[Any]:
    """A plain connection to the database (autocommit), ``?`` placeholders for both."""
    if db.name == "sqlite":
        conn = sqlite3.connect(db.location, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(db.location, autocommit=True) as pg:

            class Adapter:
                def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
                    return pg.execute(sql.replace("?", "%s"), params)

            yield Adapter()


def snapshot(db: DurableDb) -> list[list[tuple[Any, ...]]]:
    with raw(db) as conn:
        return [
            [tuple(row) for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2")]
            for table in ("operative_runs", "operative_journal")
        ]


# -- the fleet ---------------------------------------------------------------------------


@attrs.define
class Fleet:
    db: DurableDb
    backend: Any
    results: dict[str, RunResult] = attrs.Factory(dict)

    @property
    def engine(self) -> Any:
        return self.backend.engine

    def durable(self, run_id: str, session_id: str | None = None) -> Durable:
        return Durable(
            self.backend,
            run_id=run_id,
            session_id=session_id,
            worker_id=f"worker-{run_id}",
        )

    async def run(self, agent: Any, run_id: str, session_id: str | None = None) -> RunResult:
        async with agent.open_run(
            f"task {run_id}", durable=self.durable(run_id, session_id)
        ) as run:
            result: RunResult = await run.result()
        self.results[run_id] = result
        return result

    async def park(
        self, agent: Any, gate: Gate, run_id: str, session_id: str | None = None
    ) -> None:
        """Start a run, and shut its caller down once its call is executing."""

        async def drive() -> None:
            async with agent.open_run(f"task {run_id}", durable=self.durable(run_id, session_id)):
                pass  # leaving the block waits for the run

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            await gate.entered.wait()
            nursery.cancel_scope.cancel()


async def build_fleet(db: DurableDb) -> Fleet:
    fleet = Fleet(db=db, backend=db.backend())
    calc = create_agent(generate=ScriptedModel(MULTI_SCRIPT), tools=[add, lookup], name="calc")
    await fleet.run(calc, "multi", session_id="s1")

    gate = Gate()
    waiter = create_agent(
        generate=ScriptedModel(
            [answer("waiting", call("w1", "wait", ticket="a"), usage=(100, 10))]
        ),
        tools=[gate.tool],
        name="calc",
    )
    async with waiter.open_run("task aborted", durable=fleet.durable("aborted", "s1")) as run:
        await gate.entered.wait()
        run.abort("user pressed stop")
        fleet.results["aborted"] = await run.result()

    failing = create_agent(
        generate=ScriptedModel(
            [
                answer("drafting", call("d1", "add", a=2, b=2), usage=(300, 30), model=LOCAL),
                SpentError("model backend down", Usage.of(40, 0)),
            ]
        ),
        tools=[add],
        name="writer",
    )
    await fleet.run(failing, "errored", session_id="s2")

    gate = Gate()
    stopped = create_agent(
        generate=ScriptedModel([answer("waiting", call("w2", "wait", ticket="b"), usage=(50, 5))]),
        tools=[gate.tool],
        name="writer",
    )
    async with stopped.open_run("task cancelled", durable=fleet.durable("cancelled")) as run:
        await gate.entered.wait()
        await fleet.engine.cancel("cancelled", "operator said stop")
        gate.release.set()
        fleet.results["cancelled"] = await run.result()

    gate = Gate()
    parked = create_agent(
        generate=ScriptedModel([answer("waiting", call("w3", "wait", ticket="c"), usage=(70, 7))]),
        tools=[gate.tool],
        name="calc",
    )
    await fleet.park(parked, gate, "midflight", session_id="s3")
    return fleet


@pytest.fixture
async def fleet(durable_db: DurableDb) -> AsyncIterator[Fleet]:
    built = await build_fleet(durable_db)
    try:
        yield built
    finally:
        await built.backend.aclose()


@pytest.fixture
async def store(fleet: Fleet) -> AsyncIterator[SqliteRunStore | PostgresRunStore]:
    async with open_store(fleet.db) as opened:
        yield opened


async def all_runs(store: RunStore, **filters: Any) -> list[RunSummary]:
    page = await store.runs(limit=1000, **filters)
    assert page.next_cursor is None
    return list(page.items)


async def ids(store: RunStore, **filters: Any) -> list[str]:
    return [run.run_id for run in await all_runs(store, **filters)]


async def detail(store: RunStore, run_id: str) -> RunDetail:
    found = await store.run(run_id)
    assert found is not None
    return found


def steps_of(records: Sequence[ToolCallRecord]) -> list[set[str]]:
    """Call ids grouped by run and step, in listed order (a step's calls run concurrently,
    so which of them started first is up to the scheduler)."""
    groups: list[tuple[tuple[str, int], set[str]]] = []
    for record in records:
        key = (record.run_id, record.step)
        if groups and groups[-1][0] == key:
            groups[-1][1].add(record.call_id)
        else:
            groups.append((key, {record.call_id}))
    return [ids for _, ids in groups]


async def calls(store: RunStore, **filters: Any) -> list[ToolCallRecord]:
    page = await store.tool_calls(limit=1000, **filters)
    assert page.next_cursor is None
    return list(page.items)


# -- runs --------------------------------------------------------------------------------


async def test_the_store_reads_what_the_engine_wrote_and_writes_nothing(
    fleet: Fleet, store: RunStore
) -> None:
    """Every durable run is listed, and no query changes a row of either table."""
    before = snapshot(fleet.db)
    assert await ids(store) == ORDER
    for run_id in ORDER:
        await detail(store, run_id)
    await calls(store)
    await store.usage()
    assert snapshot(fleet.db) == before
    assert isinstance(store, RunStore)


async def test_summaries_carry_status_outcome_steps_usage_and_lease(
    fleet: Fleet, store: RunStore
) -> None:
    """Each summary agrees with the run's result and with the engine's record."""
    runs = {run.run_id: run for run in await all_runs(store)}
    expected = {
        "multi": ("completed", "stop-condition", 3),
        "aborted": ("aborted", "aborted", 1),
        "errored": ("error", "error", 1),
        "cancelled": ("aborted", "aborted", 1),
        "midflight": ("running", None, 1),
    }
    for run_id, (status, finish_reason, steps) in expected.items():
        run = runs[run_id]
        assert (run.status, run.finish_reason, run.steps) == (status, finish_reason, steps)
        record = await fleet.engine.get(run_id)
        assert (run.created_at, run.updated_at) == (record.created_at, record.updated_at)
        assert run.agent_name == ("writer" if run_id in ("errored", "cancelled") else "calc")
        if run_id in fleet.results:
            result = fleet.results[run_id]
            assert run.usage == result.usage
            assert run.outcome is not None
            assert run.outcome.content == result.content
            assert run.lease_owner is None
    assert [runs[r].session_id for r in ORDER] == ["s3", None, "s2", "s1", "s1"]
    assert runs["aborted"].outcome.abort_reason == "user pressed stop"  # type: ignore[union-attr]
    assert not runs["aborted"].cancel_requested
    assert runs["cancelled"].cancel_requested
    assert runs["cancelled"].cancel_reason == "operator said stop"
    assert runs["cancelled"].outcome.abort_reason == "operator said stop"  # type: ignore[union-attr]
    errored = runs["errored"].outcome
    assert errored is not None
    assert "model backend down" in (errored.error or "")
    assert errored.error_type == "SpentError"
    midflight = runs["midflight"]
    # A shutdown released the lease: nobody holds the run, and nothing ended it.
    assert (midflight.lease_owner, midflight.lease_expires_at, midflight.outcome) == (None, 0, None)
    assert midflight.usage == Usage.of(70, 7)


async def test_runs_filter_by_status_agent_session_and_time(store: RunStore) -> None:
    """Every filter narrows the listing in SQL, alone and combined."""
    assert await ids(store, status="aborted") == ["cancelled", "aborted"]
    assert await ids(store, status=["running", "error"]) == ["midflight", "errored"]
    assert await ids(store, agent_name="writer") == ["cancelled", "errored"]
    assert await ids(store, session_id="s1") == ["aborted", "multi"]
    assert await ids(store, agent_name="calc", status="aborted") == ["aborted"]
    assert await ids(store, agent_name="nobody") == []
    created = {run.run_id: run.created_at for run in await all_runs(store)}
    assert await ids(store, since=created["errored"]) == ["midflight", "cancelled", "errored"]
    assert await ids(store, until=created["errored"]) == ["aborted", "multi"]
    window = {"since": created["aborted"], "until": created["midflight"]}
    assert await ids(store, **window) == ["cancelled", "errored", "aborted"]
    assert await ids(store, session_id="s1", **window) == ["aborted"]


async def test_runs_page_newest_first_with_cursors(store: RunStore) -> None:
    """Pages of two walk every run once, newest first, and the last page says so."""
    seen: list[str] = []
    sizes = []
    after: str | None = None
    for _ in range(10):
        page = await store.runs(limit=2, after=after)
        sizes.append(len(page.items))
        seen.extend(run.run_id for run in page.items)
        after = page.next_cursor
        if after is None:
            break
    assert seen == ORDER
    assert sizes == [2, 2, 1]
    filtered = await store.runs(agent_name="calc", limit=1)
    second = await store.runs(agent_name="calc", limit=1, after=filtered.next_cursor)
    assert [r.run_id for r in (*filtered.items, *second.items)] == ["midflight", "aborted"]
    exact = await store.runs(status="aborted", limit=2)
    assert len(exact.items) == 2
    assert exact.next_cursor is None


async def test_a_run_in_detail_has_its_steps_tool_calls_and_transcript(
    fleet: Fleet, store: RunStore
) -> None:
    """The multi-step run: steps, results, calls with outcomes and arguments, transcript."""
    found = await detail(store, "multi")
    listed = {run.run_id: run for run in await all_runs(store)}
    assert found.summary == listed["multi"]
    result = fleet.results["multi"]
    assert shape(found.transcript.messages) == shape(result.conversation.messages)
    assert [s.step for s in found.steps] == [1, 2, 3]
    assert [s.state for s in found.steps] == ["completed"] * 3
    assert [s.content for s in found.steps] == ["adding", "looking up", "pi is 3.14159"]
    assert [s.model for s in found.steps] == [GPT] * 3
    assert [s.usage for s in found.steps] == [Usage.of(1000, 500), STEP2_USAGE, Usage.of(3000, 50)]
    assert [s.tool_calls for s in found.steps] == [s.tool_calls for s in result.steps]
    assert [s.results for s in found.steps] == [s.results for s in result.steps]
    by_id = {c.call_id: c for c in found.tool_calls}
    # A step's calls run concurrently: in the order they started, step by step.
    assert steps_of(found.tool_calls) == [{"c1", "c2"}, {"c3", "c4"}]
    assert by_id["c1"].outcome == "success"
    assert by_id["c1"].result is not None
    assert by_id["c1"].result.value == 3
    assert by_id["c1"].arguments == {"a": 1, "b": 2}
    assert by_id["c2"].outcome == "error"
    assert "$.b" in (by_id["c2"].error or "")
    assert by_id["c3"].result is not None
    assert by_id["c3"].result.value == "3.14159"
    assert by_id["c4"].outcome == "error"
    assert by_id["c4"].result is not None
    assert "KeyError" in (by_id["c4"].result.detail or "")
    assert [(c.step, c.tool_name) for c in found.tool_calls] == [
        (1, "add"), (1, "add"), (2, "lookup"), (2, "lookup")
    ]  # fmt: skip
    for item in found.tool_calls:
        assert (item.attempts, item.unknown_outcome, item.in_flight) == (1, False, False)


async def test_timings_are_ordered(fleet: Fleet, store: RunStore) -> None:
    """Created ≤ step committed ≤ call started ≤ settled ≤ step completed ≤ updated."""
    for run_id in ORDER:
        found = await detail(store, run_id)
        summary = found.summary
        committed = [s.committed_at for s in found.steps]
        assert committed == sorted(committed)
        assert summary.created_at <= committed[0]
        starts = [c.started_at for c in found.tool_calls]
        assert starts == sorted(starts)
        for step in found.steps:
            assert step.completed_at is None or step.committed_at <= step.completed_at
            for item in found.tool_calls:
                if item.step != step.step:
                    continue
                assert step.committed_at <= item.started_at
                if item.settled_at is not None:
                    assert item.started_at <= item.settled_at
                    if step.completed_at is not None:
                        assert item.settled_at <= step.completed_at
                if item.duration is not None:
                    assert 0 <= item.duration <= item.settled_at - item.started_at + 0.05  # type: ignore[operator]
        for item in found.tool_calls:
            assert (item.duration is None) == (item.outcome in ("in-flight", "cancelled"))
    listed = await calls(store)
    assert [c.started_at for c in listed] == sorted((c.started_at for c in listed), reverse=True)


async def test_an_aborted_run_shows_its_cut_call_as_cancelled(store: RunStore) -> None:
    """A call cut by abort: ``cancelled``, settled when the run finished, no duration."""
    found = await detail(store, "aborted")
    (step,) = found.steps
    assert (step.state, step.results, step.completed_at) == ("aborted", (), None)
    (item,) = found.tool_calls
    assert (item.call_id, item.outcome, item.duration, item.result) == (
        "w1",
        "cancelled",
        None,
        None,
    )
    assert "user pressed stop" in (item.error or "")
    assert item.settled_at is not None
    assert item.settled_at >= item.started_at
    assert not item.unknown_outcome
    last = found.transcript.messages[-1]
    assert (last.role, last.tool_call_id, last.outcome) == ("tool", "w1", "cancelled")


async def test_a_cancelled_run_keeps_its_settled_call_then_stops(store: RunStore) -> None:
    """``engine.cancel`` while a call runs: the call settles, then the run stops there
    (learned from the step's commit, which holds the call's result: the step completes)."""
    found = await detail(store, "cancelled")
    assert [s.state for s in found.steps] == ["completed"]
    (item,) = found.tool_calls
    assert (item.outcome, item.error) == ("success", None)
    assert item.result is not None
    assert item.result.value == "served b"
    assert item.duration is not None
    assert item.duration > 0


async def test_a_run_left_mid_flight_shows_its_call_in_flight(store: RunStore) -> None:
    """A shutdown mid-call: the run is running, its step in progress, its call in flight."""
    found = await detail(store, "midflight")
    (step,) = found.steps
    assert (step.state, step.completed_at) == ("in-progress", None)
    (item,) = found.tool_calls
    assert item.in_flight
    assert item.outcome == "in-flight"
    assert (item.settled_at, item.duration, item.result, item.error) == (None, None, None, None)
    last = found.transcript.messages[-1]
    assert (last.role, [c.id for c in last.tool_calls]) == ("assistant", ["w3"])
    assert [c.call_id for c in await calls(store, outcome="in-flight")] == ["w3"]


async def test_recovery_of_a_call_with_unknown_outcome_shows_its_error(
    fleet: Fleet, store: RunStore
) -> None:
    """Recovered, the non-idempotent call settles as an error saying its outcome is unknown."""
    gate = Gate()
    agent = create_agent(generate=ScriptedModel(["gave up"]), tools=[gate.tool], name="calc")
    results = await recover(fleet.backend, agents={"calc": agent})
    assert list(results) == ["midflight"]
    assert gate.calls == 0
    found = await detail(store, "midflight")
    (item,) = [c for c in found.tool_calls if c.call_id == "w3"]
    assert (item.outcome, item.error, item.unknown_outcome) == ("error", UNKNOWN_OUTCOME, True)
    assert (item.attempts, item.duration) == (1, None)
    assert item.settled_at is not None
    assert item.settled_at > item.started_at
    assert found.summary.status == "completed"
    assert shape(found.transcript.messages) == shape(results["midflight"].conversation.messages)
    (listed,) = await calls(store, run_id="midflight")
    assert listed == item


async def test_an_idempotent_call_run_again_counts_its_attempts(durable_db: DurableDb) -> None:
    """Recovery runs an idempotent call again: two attempts, one result, first start kept."""
    fleet = Fleet(db=durable_db, backend=durable_db.backend())
    async with fleet.backend, store_of(fleet.backend) as store:
        gate = Gate(idempotent=True)
        script = [answer("waiting", call("i1", "wait", ticket="d")), answer("served")]
        agent = create_agent(generate=ScriptedModel(script), tools=[gate.tool], name="calc")
        await fleet.park(agent, gate, "again")
        (first,) = await calls(store)
        gate.release.set()
        again = create_agent(generate=ScriptedModel(script[1:]), tools=[gate.tool], name="calc")
        await recover(fleet.backend, agents={"calc": again})
        (item,) = await calls(store)
        assert (item.attempts, item.outcome, gate.calls) == (2, "success", 2)
        assert item.started_at == first.started_at
        assert item.duration is not None
        assert item.settled_at is not None
        assert (await detail(store, "again")).tool_calls == (item,)


async def test_cancelling_a_run_nobody_holds_leaves_its_call_unknown(
    fleet: Fleet, store: RunStore
) -> None:
    """A run cancelled while no worker held it: its open call is cancelled, outcome unknown."""
    await fleet.engine.cancel("midflight", "abandoned")
    found = await detail(store, "midflight")
    assert (found.summary.status, found.summary.cancel_reason) == ("aborted", "abandoned")
    assert [s.state for s in found.steps] == ["aborted"]
    (item,) = found.tool_calls
    assert (item.outcome, item.unknown_outcome, item.duration) == ("cancelled", True, None)
    assert item.settled_at is not None
    assert item.settled_at >= item.started_at
    assert [c.call_id for c in await calls(store, outcome="cancelled")] == ["w3", "w1"]
    assert await calls(store, outcome="in-flight") == []


async def test_unknown_runs_are_none(store: RunStore) -> None:
    """A run id nobody used has no detail."""
    assert await store.run("nobody") is None


# -- tool calls --------------------------------------------------------------------------


async def test_tool_calls_across_runs_filter_and_page(store: RunStore) -> None:
    """Calls newest first; by run, tool, outcome and start time; paged by cursor."""
    everything = await calls(store)
    assert steps_of(everything) == [{"w3"}, {"w2"}, {"d1"}, {"w1"}, {"c3", "c4"}, {"c1", "c2"}]
    assert {c.run_id for c in everything} == set(ORDER)
    assert steps_of(await calls(store, run_id="multi")) == [{"c3", "c4"}, {"c1", "c2"}]
    assert steps_of(await calls(store, tool_name="add")) == [{"d1"}, {"c1", "c2"}]
    assert steps_of(await calls(store, tool_name="wait", run_id="aborted")) == [{"w1"}]
    assert steps_of(await calls(store, outcome="error")) == [{"c4"}, {"c2"}]
    in_flight_or_cut = await calls(store, outcome=["cancelled", "in-flight"])
    assert steps_of(in_flight_or_cut) == [{"w3"}, {"w1"}]
    assert steps_of(await calls(store, tool_name="add", outcome="success")) == [{"d1"}, {"c1"}]
    assert await calls(store, tool_name="nothing") == []
    started = {c.call_id: c.started_at for c in everything}
    step_1, step_2 = min(started["c1"], started["c2"]), min(started["c3"], started["c4"])
    assert steps_of(await calls(store, since=started["d1"])) == [{"w3"}, {"w2"}, {"d1"}]
    assert steps_of(await calls(store, until=step_2)) == [{"c1", "c2"}]
    window = {"since": step_1, "until": started["w2"]}
    assert steps_of(await calls(store, tool_name="add", **window)) == [{"d1"}, {"c1", "c2"}]
    for filters in ({}, {"tool_name": "add"}, {"outcome": ["success", "error"]}):
        walked: list[ToolCallRecord] = []
        after: str | None = None
        for _ in range(10):
            page: Page[ToolCallRecord] = await store.tool_calls(limit=2, after=after, **filters)
            assert len(page.items) <= 2
            walked.extend(page.items)
            after = page.next_cursor
            if after is None:
                break
        assert walked == await calls(store, **filters)


async def test_tool_calls_listed_are_the_tool_calls_in_detail(store: RunStore) -> None:
    """Listing a run's calls gives exactly its detail's calls (newest first)."""
    for run_id in ORDER:
        found = await detail(store, run_id)
        assert await calls(store, run_id=run_id) == list(reversed(found.tool_calls))


# -- cost and usage ----------------------------------------------------------------------


async def test_cost_of_a_priced_run_and_none_for_unpriced_ones(fleet: Fleet) -> None:
    """Priced models cost their list price; unknown models or unattributed tokens: None."""
    async with open_store(fleet.db) as store:
        runs = {run.run_id: run for run in await all_runs(store)}
        multi = runs["multi"]
        expected = price(Usage.of(1000, 500)) + price(STEP2_USAGE) + price(Usage.of(3000, 50))
        assert multi.cost_usd == pytest.approx(expected)
        assert (multi.unpriced, multi.unpriced_models) == (False, ())
        (gpt,) = multi.by_model
        assert (gpt.model, gpt.steps, gpt.usage) == (GPT, 3, multi.usage)
        steps = (await detail(store, "multi")).steps
        assert [s.cost_usd for s in steps] == pytest.approx([price(s.usage) for s in steps])
        errored = runs["errored"]
        assert (errored.cost_usd, errored.unpriced, errored.unpriced_models) == (
            None,
            True,
            (LOCAL,),
        )
        assert errored.usage == Usage.of(340, 30)  # the step, and the failed attempt
        assert errored.by_model[0].usage == Usage.of(300, 30)
        assert errored.by_model[0].cost_usd is None
        assert runs["midflight"].cost_usd == pytest.approx(price(Usage.of(70, 7)))
    local = DEFAULT_PRICES.with_prices({LOCAL: ModelPrice(input_per_mtok=1.0, output_per_mtok=2.0)})
    async with open_store(fleet.db, prices=local) as store:
        assert store.prices is local
        errored = (await store.runs(agent_name="writer", status="error")).items[0]
        # Priced per model now, but 40 tokens of the failed attempt belong to no step.
        assert errored.by_model[0].cost_usd == pytest.approx((300 * 1.0 + 30 * 2.0) / 1e6)
        assert (errored.cost_usd, errored.unpriced, errored.unpriced_models) == (None, True, ())


async def test_usage_totals_sum_the_runs(store: RunStore) -> None:
    """Totals: runs by status, steps, tokens by kind and cost, over the same filters."""
    runs = await all_runs(store)
    totals = await store.usage()
    assert totals.runs == 5
    assert totals.runs_by_status == {"aborted": 2, "completed": 1, "error": 1, "running": 1}
    assert totals.steps == sum(run.steps for run in runs)
    assert totals.usage == sum((run.usage for run in runs), Usage())
    assert (totals.cost_usd, totals.unpriced, totals.unpriced_models) == (None, True, (LOCAL,))
    assert [m.model for m in totals.by_model] == [GPT, LOCAL]
    calc = await store.usage(agent_name="calc")
    calc_runs = [run for run in runs if run.agent_name == "calc"]
    assert calc.runs_by_status == {"aborted": 1, "completed": 1, "error": 0, "running": 1}
    assert calc.usage == sum((run.usage for run in calc_runs), Usage())
    assert calc.cost_usd == pytest.approx(sum(run.cost_usd or 0 for run in calc_runs))
    assert not calc.unpriced
    session = await store.usage(session_id="s1")
    assert session.runs == 2
    assert session.usage == Usage.of(6100, 660) + Usage(total=500, cache_read=500)
    created = {run.run_id: run.created_at for run in runs}
    window = await store.usage(since=created["errored"], until=created["midflight"])
    assert window.runs_by_status == {"aborted": 1, "completed": 0, "error": 1, "running": 0}
    nothing = await store.usage(agent_name="nobody")
    assert (nothing.runs, nothing.steps, nothing.usage, nothing.cost_usd) == (0, 0, Usage(), 0.0)


# -- corrupt rows ------------------------------------------------------------------------


async def corrupt(db: DurableDb, sql: str, *params: Any) -> None:
    with raw(db) as conn:
        conn.execute(sql, params)


async def test_a_corrupt_journal_entry_is_an_error_naming_run_and_seq(
    fleet: Fleet, store: RunStore
) -> None:
    """Unreadable records raise CorruptRecordError (run and seq named), never drop out."""
    db = fleet.db
    # seq 1 of "multi" is its first 'generated' entry, seq 2 a 'tool.started' one.
    with raw(db) as conn:
        (original,) = conn.execute(
            "SELECT record FROM operative_journal WHERE run_id = 'multi' AND seq = 1"
        ).fetchone()
    for bad in ("{not json", '{"type": "generated", "step": "one"}', '{"type": "generated"}'):
        await corrupt(
            db, "UPDATE operative_journal SET record = ? WHERE run_id = 'multi' AND seq = 1", bad
        )
        for query in (
            store.runs(),
            store.run("multi"),
            store.usage(),
            store.usage(agent_name="calc"),
            store.tool_calls(run_id="multi"),
        ):
            with pytest.raises(CorruptRecordError) as caught:
                await query
            assert "entry 1 of run 'multi'" in str(caught.value)
    await corrupt(
        db, "UPDATE operative_journal SET record = ? WHERE run_id = 'multi' AND seq = 1", original
    )
    assert (await detail(store, "multi")).summary.status == "completed"
    await corrupt(
        db, "UPDATE operative_journal SET record = 'garbage{' WHERE run_id = 'multi' AND seq = 2"
    )
    filtered: list[dict[str, Any]] = [
        {},
        {"tool_name": "add"},
        {"outcome": "success"},
        {"run_id": "multi"},
    ]
    for filters in filtered:
        with pytest.raises(CorruptRecordError) as caught:
            await store.tool_calls(**filters)
        assert "journal entry 2 of run 'multi'" in str(caught.value)
    # The other runs stay readable.
    assert (await detail(store, "errored")).summary.status == "error"
    assert await calls(store, run_id="errored")


async def test_a_corrupt_kind_or_run_row_is_an_error(fleet: Fleet, store: RunStore) -> None:
    """A kind column that lies, or a run row that does not decode, raises."""
    db = fleet.db
    await corrupt(db, "UPDATE operative_journal SET kind = 'step.done' WHERE run_id = 'aborted' "
                  "AND seq = 1")  # fmt: skip
    with pytest.raises(CorruptRecordError, match="journal entry 1 of run 'aborted'"):
        await store.run("aborted")
    await corrupt(db, "UPDATE operative_runs SET outcome = '{' WHERE run_id = 'errored'")
    for query in (store.runs(), store.run("errored"), store.usage()):
        with pytest.raises(CorruptRecordError, match="'errored'"):
            await query
    assert await ids(store, agent_name="calc", status="running") == ["midflight"]


# -- plumbing ----------------------------------------------------------------------------


async def test_arguments_are_checked_eagerly(store: RunStore) -> None:
    """Bad arguments are InvalidArgument before any query."""
    bad_calls: list[Any] = [
        store.runs(limit=0),
        store.runs(limit=True),
        store.runs(status="bogus"),  # type: ignore[arg-type]
        store.runs(since="yesterday"),  # type: ignore[arg-type]
        store.runs(until=float("nan")),
        store.runs(agent_name=3),  # type: ignore[arg-type]
        store.runs(after="not a cursor"),
        store.runs(after=42),  # type: ignore[arg-type]
        store.run(""),
        store.tool_calls(outcome="exploded"),  # type: ignore[arg-type]
        store.tool_calls(run_id=""),
        store.tool_calls(until="later"),  # type: ignore[arg-type]
        store.usage(session_id="a\x00b"),
    ]
    for pending in bad_calls:
        with pytest.raises(InvalidArgument):
            await pending
    page = await store.runs(limit=1)
    with pytest.raises(InvalidArgument, match="tool_calls"):
        await store.tool_calls(after=page.next_cursor)
    calls_page = await store.tool_calls(limit=1)
    with pytest.raises(InvalidArgument, match="runs"):
        await store.runs(after=calls_page.next_cursor)


def test_constructors_check_their_arguments(tmp_path: Path) -> None:
    """A store needs a file, a price table and a sane pool size."""
    for path in ("", ":memory:", "file:x.db"):
        with pytest.raises(InvalidArgument):
            SqliteRunStore(path)
    with pytest.raises(InvalidArgument):
        SqliteRunStore(tmp_path / "runs.db", prices={"gpt-4o": 1.0})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        SqliteRunStore(tmp_path / "runs.db", max_connections=0)
    with pytest.raises(InvalidArgument):
        SqliteRunStore(42)  # type: ignore[arg-type]


async def test_a_closed_store_refuses_queries(tmp_path: Path) -> None:
    """A store closes once; afterwards every query is InvalidArgument."""
    store = SqliteRunStore(tmp_path / "runs.db")
    assert (await store.runs()).items == ()  # an empty database: tables are created
    assert store.database == str((tmp_path / "runs.db").resolve())
    await store.aclose()
    await store.aclose()
    assert "closed" in repr(store)
    with pytest.raises(InvalidArgument, match="closed"):
        await store.runs()


async def test_the_sqlite_queries_use_indexes(tmp_path: Path) -> None:
    """SQLite plans the listings on indexes, never a full scan of the journal."""
    from operative._sql import SQLITE
    from operative.runstore._sql import Runs, ToolCalls, runs_page, tool_calls_page

    path = tmp_path / "runs.db"
    async with SqliteRunStore(path) as store:
        await store.runs()
    dialect = SQLITE
    conn = sqlite3.connect(path)
    try:

        def plan(query: tuple[str, list[Any]]) -> str:
            sql, params = query
            return "\n".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))

        assert "operative_store_runs_status" in plan(
            runs_page(dialect, Runs(statuses=["running"]), None, 10)
        )
        assert "operative_runs_agent" in plan(runs_page(dialect, Runs(agent_name="a"), None, 10))
        assert "operative_store_tool_calls" in plan(tool_calls_page(dialect, ToolCalls(), None, 9))
        since = plan(tool_calls_page(dialect, ToolCalls(since=1.0), None, 9))
        assert "USING INDEX operative_store_tool_calls (<expr>>?)" in since
        named = plan(tool_calls_page(dialect, ToolCalls(tool_name="add"), None, 9))
        assert named.count("USING INDEX operative_store_tool_names") == 2
        for query in (
            tool_calls_page(dialect, ToolCalls(), (time.time(), "r", 3), 9),
            tool_calls_page(dialect, ToolCalls(run_id="r", outcomes=["error"]), None, 9),
        ):
            assert "SCAN s\n" not in plan(query) + "\n"
    finally:
        conn.close()


async def test_records_that_waited_for_the_steps_commit_keep_their_own_times(
    durable_db: DurableDb,
) -> None:
    """A step whose calls are idempotent commits once, at its end; its answer, the call's
    start and its settling still show when they happened, not that commit's time."""
    now = [1_000.0]  # the stores' clock; the model and the tool move it on

    def clock() -> float:
        return now[0]

    backend = durable_db.backend(clock=clock)

    @tool(idempotent=True)
    async def slow(seconds: int) -> str:
        """Take a while."""
        now[0] += seconds
        return "done"

    class SlowModel(ScriptedModel):
        async def __call__(self, request: Any) -> GenerateResponse:
            now[0] += 5
            return await super().__call__(request)

    script = [answer("working", call("s1", "slow", seconds=10)), answer("finished")]
    agent = create_agent(generate=SlowModel(script), tools=[slow], name="calc")
    async with backend, open_store(durable_db) as store:
        durable = Durable(backend, run_id="timed")
        async with agent.open_run("go", durable=durable) as run:
            pass
        result = await run.result()
        assert result.finish_reason == "stop-condition", result.error
        found = await detail(store, "timed")
        first = found.steps[0]
        (item,) = found.tool_calls
        assert (first.committed_at, first.completed_at) == (1_005.0, 1_015.0)
        assert (item.started_at, item.settled_at) == (1_005.0, 1_015.0)
        (listed,) = await calls(store, run_id="timed")
        assert listed == item
        # Filtered on when the call started, not on the step's commit (at 1_015).
        assert await calls(store, since=1_005.0) == [item]
        assert await calls(store, since=1_010.0) == []
        assert await calls(store, until=1_010.0) == [item]
        assert await calls(store, until=1_005.0) == []
        assert await calls(store, tool_name="slow", since=1_005.0, until=1_006.0) == [item]


async def test_tool_calls_are_listed_and_paged_by_when_they_started(
    durable_db: DurableDb,
) -> None:
    """A call whose start waited for its step's commit is listed at its start time: after a
    call that started later but was committed first, and within the windows of its start."""
    now = [1_000.0]

    def clock() -> float:
        return now[0]

    backend = durable_db.backend(clock=clock)
    fleet = Fleet(db=durable_db, backend=backend)
    gate = Gate(idempotent=True)
    waiting = create_agent(
        generate=ScriptedModel([answer("waiting", call("a1", "wait", ticket="a")), "served"]),
        tools=[gate.tool],
        name="calc",
    )
    adding = create_agent(
        generate=ScriptedModel([answer("adding", call("b1", "add", a=1, b=2)), "3"]),
        tools=[add],
        name="calc",
    )
    async with backend, open_store(durable_db) as store:

        async def first() -> None:
            await fleet.run(waiting, "early")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first)
            await gate.entered.wait()  # a1 started at 1_000; its start waits for the step
            now[0] = 1_010.0
            await fleet.run(adding, "late")  # b1 starts (and is committed) at 1_010
            now[0] = 1_020.0
            gate.release.set()  # a1's start is committed with its result, at 1_020
        assert fleet.results["early"].finish_reason == "stop-condition"
        early = (await detail(store, "early")).tool_calls[0]
        late = (await detail(store, "late")).tool_calls[0]
        assert (early.call_id, early.started_at, early.settled_at) == ("a1", 1_000.0, 1_020.0)
        assert (late.call_id, late.started_at) == ("b1", 1_010.0)
        assert await calls(store) == [late, early]
        assert await calls(store, since=1_005.0) == [late]
        assert await calls(store, until=1_005.0) == [early]
        assert await calls(store, tool_name="wait", until=1_005.0) == [early]
        walked: list[ToolCallRecord] = []
        after: str | None = None
        while True:
            page = await store.tool_calls(limit=1, after=after)
            walked.extend(page.items)
            after = page.next_cursor
            if after is None:
                break
        assert walked == [late, early]


async def test_a_store_indexed_by_commit_time_is_reindexed_by_start_time(
    durable_db: DurableDb,
) -> None:
    """A database at version 1 of the run store (its tool-call indexes by commit time) is
    brought to version 2 when a store opens it: the time filters then search the index."""
    from operative._sql import POSTGRES, SQLITE
    from operative.runstore._schema import indexes
    from operative.runstore._sql import ToolCalls, tool_calls_page

    dialect = SQLITE if durable_db.name == "sqlite" else POSTGRES
    async with open_store(durable_db) as store:
        await store.runs()
    with raw(durable_db) as conn:
        for name in ("operative_store_tool_calls", "operative_store_tool_names"):
            conn.execute(f"DROP INDEX {name}")
        for statement in indexes(dialect):
            conn.execute(statement)
        conn.execute("UPDATE operative_schema SET version = 1 WHERE name = 'run store'")
    async with open_store(durable_db) as store:
        await store.runs()
    sql, params = tool_calls_page(dialect, ToolCalls(tool_name="add", since=1.0), None, 9)
    if durable_db.name == "sqlite":
        with raw(durable_db) as conn:
            (version,) = conn.execute(
                "SELECT version FROM operative_schema WHERE name = 'run store'"
            ).fetchone()
            plan = "\n".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        assert "USING INDEX operative_store_tool_names (<expr>=? AND <expr>>?)" in plan
    else:
        import psycopg

        with psycopg.connect(durable_db.location, autocommit=True) as pg:
            (version,) = pg.execute(
                "SELECT version FROM operative_schema WHERE name = 'run store'"
            ).fetchone() or (None,)
            pg.execute("SET enable_seqscan = off")  # the tables are tiny
            plan = "\n".join(row[0] for row in pg.execute("EXPLAIN " + sql, params))
        assert "operative_store_tool_names" in plan
        assert "COALESCE" in plan.partition("operative_store_tool_names")[2]
    assert version == 2
