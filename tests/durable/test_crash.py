"""Crashes: kill workers with SIGKILL anywhere, recover their runs in other processes.

A worker process (``_crash_worker.py``) runs several durable runs at once: a model whose
answer is a pure function of the conversation, tools that are idempotent or not, slow or
not, several per step. The test kills it at a seeded random point (after a number of
journal entries, after a delay, or while a chosen tool call runs), then starts workers
that recover the runs (``recover`` or ``serve_durable_runs``), some of them killed in
turn, the last ones sometimes two racing, and checks every run against an uninterrupted,
non-durable run of the same agent:

- every acknowledged run exists, and every run that exists finished (record and journal);
- its transcript (from the journal, and as the recovering worker reported it) and its
  outcome are the uninterrupted run's;
- its steps are 1..n and every call has a result;
- a call settled before a kill never ran again; a call started but not settled ran
  again if its tool is idempotent, and otherwise is reported "outcome unknown";
- the journal after a kill is a prefix of the final journal.

Then: ``engine.cancel`` from another process (a live worker, a dead worker whose lease
still runs, a run nobody holds), and a worker that stalls past its lease while another
takes its run over.

Every failure names its seed; ``OPERATIVE_CRASH_SEEDS=3,17`` runs only those seeds.
Workers are forks of one fork server (see ``_crash_worker.py``), which needs Linux.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest
import trio

from operative import RunResult
from operative.conversation import find_dangling_tool_calls
from operative.durable import (
    Finished,
    Generated,
    JournalEntry,
    StepDone,
    ToolSettled,
    ToolStarted,
    replay_journal,
    transcript,
)
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.testing._crash_procs import ForkServer
from operative.testing._crash_procs import Worker as KitWorker

from ._crash_worker import (
    IDEMPOTENT,
    MAXIMUM_STEPS,
    RELEASE,
    SLOW,
    TOOLS,
    Plan,
    build_agent,
    message_view,
    prompt,
)
from .conftest import DurableDb

pytestmark = [
    pytest.mark.skipif(
        not hasattr(os, "pidfd_open"), reason="the crash tests watch and kill workers by pidfd"
    ),
    pytest.mark.heavy,  # real workers, killed and recovered: seconds a test
]

WORKER = Path(__file__).with_name("_crash_worker.py")

CRASH_SEEDS = list(range(20))
SERVE_SEEDS = list(range(100, 104))
CONCURRENT_SCENARIOS = 3
POLL = 0.003
"""Seconds between two looks at the database, a log file or a worker."""
LEASE_SECONDS = 0.4
"""The lease of crashing workers: how long the next worker waits to claim their runs."""


def _seeds(default: list[int]) -> list[int]:
    chosen = os.environ.get("OPERATIVE_CRASH_SEEDS", "").strip()
    return [int(seed) for seed in chosen.split(",")] if chosen else default


# -- worker processes -----------------------------------------------------------------


@pytest.fixture(scope="module")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """``_crash_worker.py --fork-server``: forks a worker process per request."""
    directory = tmp_path_factory.mktemp("fork-server")
    server = ForkServer([sys.executable, str(WORKER), "--fork-server"], directory)
    try:
        yield server
    finally:
        server.close()


class Worker(KitWorker):
    """A worker process of these tests: ``release`` lets a stalled one go, and ``wait``
    fails the test if it does not exit."""

    def release(self) -> None:
        """Let a worker stalled in its ``stall`` tool (or ``on_step``) go."""
        self.send(RELEASE)

    async def wait(self, seconds: float = 60) -> bool:
        """Wait for the worker to exit; kill it and fail after ``seconds``."""
        if not await super().wait(seconds):
            raise AssertionError(f"{self.name} did not exit within {seconds} s\n{self.describe()}")
        return True


@attrs.define
class Workers:
    """Start workers over one database; the block they live in kills any left over."""

    server: ForkServer
    db: DurableDb
    directory: Path
    nursery: trio.Nursery
    started: list[Worker] = attrs.Factory(list)

    async def start(self, name: str, **config: Any) -> Worker:
        out, stderr = self.directory / f"{name}.out", self.directory / f"{name}.err"
        config.update(
            engine=self.db.engine_source,
            store=self.db.store_source,
            imports=self.db.imports,
            out=str(out),
            stderr=str(stderr),
        )
        pid = await trio.to_thread.run_sync(self.server.fork, config)
        worker = Worker(name, pid, out, stderr)
        self.started.append(worker)
        self.nursery.start_soon(worker.watch)
        return worker


@asynccontextmanager
async def _workers(server: ForkServer, db: DurableDb, directory: Path) -> AsyncIterator[Workers]:
    async with trio.open_nursery() as nursery:
        workers = Workers(server, db, directory, nursery)
        try:
            yield workers
        finally:
            for worker in workers.started:
                worker.kill()  # only those still running: the block failed


async def _until(condition: Callable[[], bool]) -> None:
    """Look at ``condition`` every ``POLL`` seconds until it holds."""
    while True:
        if condition():
            return
        await trio.sleep(POLL)


Log = dict[tuple[str, str, str, str], list[float]]
"""``(event, worker, run, call)`` → when the tool log says so (one time per line)."""


def _log(path: Path) -> Log:
    lines: Log = {}
    if path.exists():
        for line in path.read_text().splitlines():
            event, worker, run_id, call_id, _tool, at = line.split(" ")
            lines.setdefault((event, worker, run_id, call_id), []).append(float(at))
    return lines


async def _create_tables(db: DurableDb) -> None:
    """Create the tables before workers race to (and open the database once)."""
    engine, store = db.engine(), db.store()
    await engine.get("(none)")
    await store.read("(none)")
    await engine.aclose()
    await store.aclose()


# -- what an uninterrupted run does ----------------------------------------------------


async def reference(
    plan: Plan, unknown: frozenset[str] = frozenset(), maximum_steps: int = MAXIMUM_STEPS
) -> RunResult:
    """The run, uninterrupted and not durable; ``unknown`` calls get the unknown result."""
    agent = build_agent(delay_scale=0.0, unknown=unknown, maximum_steps=maximum_steps)
    async with agent.open_run(prompt(plan)) as run:
        return await run.result()


def _views(messages: Sequence[Any]) -> list[dict[str, Any]]:
    return [message_view(message) for message in messages]


def _printed(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a view looks like after a trip through JSON."""
    loaded: list[dict[str, Any]] = json.loads(json.dumps(views))
    return loaded


def _check_reported(reported: dict[str, Any], expected: RunResult, where: str) -> None:
    assert reported["finish_reason"] == str(expected.finish_reason), where
    assert reported["content"] == expected.content, where
    assert reported["usage"] == msgspec.to_builtins(expected.usage), where
    assert reported["steps"] == len(expected.steps), where
    assert reported["messages"] == _printed(_views(expected.conversation.messages)), where


def _calls(entries: Sequence[JournalEntry], kind: type[Any]) -> Counter[str]:
    """How many ``tool.started`` (or ``tool.settled``) records each call has."""
    counts: Counter[str] = Counter()
    for entry in entries:
        record = entry.record
        if isinstance(record, ToolStarted) and kind is ToolStarted:
            counts[record.call_id] += 1
        elif isinstance(record, ToolSettled) and kind is ToolSettled:
            counts[record.result.call_id] += 1
    return counts


# -- one crash scenario ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Scenario:
    """Runs for the first worker, where it dies and what recovers, all drawn from ``seed``.

    The first worker ``A`` dies by ``kill``: ``entries`` (once the runs have ``entries``
    journal entries), ``delay`` (``delay`` s after it is ready) or ``inflight`` (as soon
    as call ``target`` begins). Then recovering workers ``B``, ``C``, ... take over, one
    after the other; all but the last are killed too, after ``recovery_kills[i]`` more
    journal entries. The last is ``racers`` workers started together (two race to
    claim the runs).
    """

    seed: int
    runs: tuple[tuple[str, Plan], ...]
    maximum_steps: int
    stagger: float
    kill: str
    entries: int
    delay: float
    target: tuple[str, str]
    recovery_kills: tuple[int, ...]
    racers: int

    @classmethod
    def draw(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        runs: list[tuple[str, Plan]] = []
        for index in range(rng.randint(3, 5)):
            plan = tuple(
                tuple(rng.choice(TOOLS) for _ in range(rng.randint(1, 3)))
                for _ in range(rng.randint(1, 4))
            )
            runs.append((f"s{seed}-{index}", plan))
        # started; per step generated, started and settled per call, step.done; the
        # final answer (perhaps twice); finished
        total = sum(1 + sum(2 + 2 * len(step) for step in plan) + 3 for _, plan in runs)
        slow = [
            (run_id, f"c{number}-{index}")
            for run_id, plan in runs
            for number, step in enumerate(plan, 1)
            for index, name in enumerate(step)
            if name in SLOW
        ]
        kill = rng.choice(["entries", "entries", "delay", "inflight"])
        if kill == "inflight" and not slow:
            kill = "entries"
        entries = rng.randint(1, total)
        recovery_kills = tuple(
            rng.randint(0, max(1, (total - entries) // 2))
            for _ in range(rng.choice([0, 0, 1, 1, 2]))
        )
        return cls(
            seed=seed,
            runs=tuple(runs),
            maximum_steps=rng.choice([4, 5, 40]),
            stagger=rng.uniform(0, 0.03),
            kill=kill,
            entries=entries,
            delay=rng.uniform(0, 0.15),
            target=rng.choice(slow) if slow else ("", ""),
            recovery_kills=recovery_kills,
            racers=rng.choice([1, 1, 2]),
        )

    @property
    def stages(self) -> list[list[str]]:
        """The workers, in the order they run (the workers of a stage run together)."""
        last = "BCD"[len(self.recovery_kills)]
        return [
            ["A"],
            *[[name] for name in "BCD"[: len(self.recovery_kills)]],
            [last] if self.racers == 1 else [last, last + "2"],
        ]

    @property
    def run_ids(self) -> list[str]:
        return [run_id for run_id, _ in self.runs]


Journals = dict[str, list[JournalEntry]]


async def _journals_after_kill(engine: Any, store: Any, run_ids: Sequence[str]) -> Journals:
    """The journals as the next worker finds them: once the killed worker's leases expired.

    A write the killed worker had in flight may still commit after its death (PostgreSQL
    completes a COMMIT it received); by the time its leases expire, it has.
    """
    with trio.fail_after(30):
        while True:
            records = [await engine.get(run_id) for run_id in run_ids]
            if all(
                record is None
                or record.status != "running"
                or record.lease_expires_at < time.time()
                for record in records
            ):
                break
            await trio.sleep(POLL)
    return {run_id: await store.read(run_id) for run_id in run_ids}


async def _fences(engine: Any, run_ids: Sequence[str]) -> dict[str, int]:
    """Each run's fence: how many times it has been claimed so far."""
    records = {run_id: await engine.get(run_id) for run_id in run_ids}
    return {run_id: record.fence for run_id, record in records.items() if record is not None}


async def _wait_for_entries(worker: Worker, store: Any, run_ids: Sequence[str], count: int) -> None:
    """Wait until the runs' journals have ``count`` more entries (or the worker exited)."""
    seen = {run_id: len(await store.read(run_id)) - 1 for run_id in run_ids}
    total = 0
    while worker.running and total < count:
        for run_id in run_ids:
            new = await store.read(run_id, after=seen[run_id])
            if new:
                seen[run_id] = new[-1].seq
                total += len(new)
        await trio.sleep(POLL)


async def _kill_first(worker: Worker, scenario: Scenario, store: Any, log: Path) -> None:
    with trio.move_on_after(20):
        if scenario.kill == "delay":
            await _until(lambda: not worker.running or worker.said("ready"))
            await trio.sleep(scenario.delay)
        elif scenario.kill == "entries":
            await _wait_for_entries(worker, store, scenario.run_ids, scenario.entries)
        else:
            run_id, call_id = scenario.target
            began = ("begin", "A", run_id, call_id)
            await _until(lambda: not worker.running or began in _log(log))
    worker.kill()
    await worker.wait()


async def _kill_recovery(worker: Worker, scenario: Scenario, store: Any, entries: int) -> None:
    with trio.move_on_after(20):
        await _until(lambda: not worker.running or worker.said("claiming"))
        await _wait_for_entries(worker, store, scenario.run_ids, entries)
    worker.kill()
    await worker.wait()


async def _crash_and_recover(
    server: ForkServer, db: DurableDb, tmp_path: Path, seed: int, mode: str, stats: Counter[str]
) -> None:
    scenario = Scenario.draw(seed)
    log = tmp_path / f"tools-{seed}.log"
    common = {
        "agent": f"crash-agent-{seed}",  # a serving worker claims only this scenario's runs
        "log": str(log),
        "maximum_steps": scenario.maximum_steps,
        "lease_seconds": LEASE_SECONDS,
    }
    stages = scenario.stages
    journals: list[Journals] = []  # after each stage but the last
    fences: list[dict[str, int]] = []  # the runs' fences after each stage but the last
    engine, store = db.engine(), db.store()
    try:
        async with _workers(server, db, tmp_path) as workers:
            first = await workers.start(
                f"A-{seed}",
                mode="start",
                worker="A",
                runs=scenario.runs,
                stagger=scenario.stagger,
                **common,
            )
            await _kill_first(first, scenario, store, log)
            assert first.clean or first.killed, first.describe()
            journals.append(await _journals_after_kill(engine, store, scenario.run_ids))
            fences.append(await _fences(engine, scenario.run_ids))
            for index, stage in enumerate(stages[1:], 1):
                started = [
                    await workers.start(
                        f"{name}-{seed}",
                        mode=mode,
                        worker=name,
                        run_ids=scenario.run_ids,
                        **common,
                    )
                    for name in stage
                ]
                if index < len(stages) - 1:
                    (worker,) = started
                    await _kill_recovery(
                        worker, scenario, store, scenario.recovery_kills[index - 1]
                    )
                    assert worker.clean or worker.killed, worker.describe()
                    journals.append(await _journals_after_kill(engine, store, scenario.run_ids))
                    fences.append(await _fences(engine, scenario.run_ids))
                else:
                    for worker in started:
                        await worker.wait()
                        assert worker.clean, worker.describe()
        await _check_runs(scenario, engine, store, journals, fences, workers.started, log, stats)
    finally:
        await engine.aclose()
        await store.aclose()


async def _check_runs(
    scenario: Scenario,
    engine: Any,
    store: Any,
    journals: list[Journals],
    fences: list[dict[str, int]],
    workers: list[Worker],
    log_path: Path,
    stats: Counter[str],
) -> None:
    """Every run against its uninterrupted reference; every call against the tool log.

    ``fences`` are the runs' fences after each stage but the last. A run claimed more
    than once within a stage changed hands there: a worker stalled past its lease (a
    loaded machine) and the run was claimed again, by a worker beside it or by the same
    worker's next pass, so a call may have been cut within that stage."""
    log = _log(log_path)
    acked = workers[0].acked()
    last = [worker for worker in workers if worker.name[0] == scenario.stages[-1][0]]
    claimed = {
        run_id
        for worker in last
        for record in worker.records()
        if "claiming" in record
        for run_id in record["claiming"]
    }
    for run_id, plan in scenario.runs:
        where = f"run {run_id}"
        record = await engine.get(run_id)
        if record is None:
            stats["runs never started"] += 1
            assert run_id not in acked, f"{where} was acknowledged, then lost"
            assert not any(journal[run_id] for journal in journals), where
            assert not any(key[2] == run_id for key in log), where
            continue
        entries = await store.read(run_id)
        stages = [journal[run_id] for journal in journals] + [entries]
        for earlier, later in itertools.pairwise(stages):
            assert later[: len(earlier)] == earlier, f"{where}: recovery rewrote its journal"
        stats[f"runs cut after {type(stages[0][-1].record).__name__}"] += 1
        before = stages[-2]
        finished_before = bool(before) and isinstance(before[-1].record, Finished)
        assert (run_id in claimed) is not finished_before, where
        replay = replay_journal(run_id, entries)
        assert replay.finished is not None, where
        assert replay.partial is None, where
        assert record.status == "completed", (where, record)
        assert record.outcome is not None, where
        numbers = [step.step for step in replay.steps]
        assert numbers == list(range(1, len(numbers) + 1)), (where, numbers)
        for step in replay.steps:
            assert [r.call_id for r in step.results] == [c.id for c in step.tool_calls], where
        after = [stage.get(run_id, 0) for stage in fences] + [record.fence]
        taken_over = [now - before > 1 for before, now in zip([0, *after], after, strict=False)]
        if any(taken_over):
            stats["runs taken over within a stage"] += 1
        unknown = _check_calls(
            run_id, entries, scenario.stages, stages, log, stats, taken_over=taken_over
        )

        expected = await reference(plan, frozenset(unknown), scenario.maximum_steps)
        final = transcript(replay).messages
        assert _views(final) == _views(expected.conversation.messages), where
        assert len({message.id for message in final}) == len(final), f"{where}: repeated ids"
        outcome = record.outcome
        assert outcome.finish_reason == str(expected.finish_reason), where
        assert outcome.content == expected.content, where
        assert outcome.usage == expected.usage, where
        assert outcome.steps == len(expected.steps) == len(replay.steps), where
        assert outcome == replay.finished.outcome, where
        if run_id in claimed:
            reported = [worker.name for worker in last if run_id in worker.results()]
            assert reported, f"{where} was claimed but not reported"
        for worker in workers:
            if run_id in worker.results():
                _check_reported(worker.results()[run_id], expected, f"{where} by {worker.name}")


def _check_calls(
    run_id: str,
    entries: list[JournalEntry],
    workers: list[list[str]],
    stages: list[list[JournalEntry]],
    log: Log,
    stats: Counter[str],
    *,
    taken_over: Sequence[bool] = (),
) -> set[str]:
    """Check what each stage's workers ran against the journal after the stage (in
    ``stages``); return the calls cut short. ``taken_over[i]``: the run changed hands
    within stage ``i``, so a call may have been cut there too.

    An idempotent call may run more than once: again after a crash, or when a worker
    stalls past its lease and a worker (perhaps the same one) claims the run. Nothing
    runs after its ``tool.settled`` is committed, and a call of a tool that is not
    idempotent runs at most once.
    """
    started = [_calls(stage, ToolStarted) for stage in stages]
    settled = [_calls(stage, ToolSettled) for stage in stages]
    settled_at = {
        e.record.result.call_id: e.at for e in entries if isinstance(e.record, ToolSettled)
    }
    unknown: set[str] = set()
    stage_of = {name: index for index, names in enumerate(workers) for name in names}
    tool_of = {
        asked.id: asked.name
        for e in entries
        if isinstance(e.record, Generated)
        for asked in e.record.message.tool_calls
    }
    for (event, who, run, call), times in log.items():
        if run != run_id or event != "begin":
            continue
        index = stage_of[who]
        if tool_of.get(call) not in IDEMPOTENT:
            # A worker runs a call that is not idempotent only after journaling its
            # tool.started (an idempotent call's waits for the step's next commit) ...
            previous = started[index - 1][call] if index else 0
            assert started[index][call] > previous, f"{run_id} {call} ran unjournaled"
        # ... and never once its tool.settled is committed.
        assert max(times) < settled_at[call], f"{run_id} {call} ran after it settled"
    replay = replay_journal(run_id, entries)
    for step in replay.steps:
        for result in step.results:
            call = result.call_id
            what = f"run {run_id} call {call} ({result.tool_name})"
            begun = [
                sum(len(log.get(("begin", w, run_id, call), [])) for w in ws) for ws in workers
            ]
            ended = [sum(len(log.get(("end", w, run_id, call), [])) for w in ws) for ws in workers]
            assert settled[-1][call] == 1, f"{what} settled {settled[-1][call]} times"
            by = next(i for i, counts in enumerate(settled) if counts[call])
            assert not any(begun[by + 1 :]), f"{what} settled, then ran again: {begun}"
            cut = any(started[i][call] and not settled[i][call] for i in range(by))
            if result.error == UNKNOWN_OUTCOME:
                assert result.tool_name not in IDEMPOTENT, what
                within = by < len(taken_over) and taken_over[by]
                assert cut or within, f"{what} was never cut short"
                assert within or not begun[by], f"{what} ran, then was reported unknown"
                assert sum(begun) <= 1, (what, begun)
                unknown.add(call)
                stats["calls cut short, outcome unknown"] += 1
                continue
            assert result.outcome == "success", what
            assert begun[by] >= 1, (what, begun)
            assert ended[by] >= 1, (what, ended)
            if result.tool_name in IDEMPOTENT:
                # Its tool.started may not have been committed: a cut call is one that
                # ran in a stage that did not settle it.
                cut = any(begun[:by])
                stats["calls cut short, run again" if cut else "calls run once"] += 1
            else:
                assert not cut, f"{what} was cut short, then ran again"
                assert sum(begun) == sum(ended) == 1, (what, begun, ended)
                stats["calls run once"] += 1
    return unknown


async def _run_scenarios(
    server: ForkServer, db: DurableDb, tmp_path: Path, seeds: list[int], mode: str
) -> Counter[str]:
    await _create_tables(db)
    failures: list[str] = []
    stats: Counter[str] = Counter()
    limiter = trio.CapacityLimiter(CONCURRENT_SCENARIOS)

    async def one(seed: int) -> None:
        async with limiter:
            try:
                with trio.fail_after(60):
                    await _crash_and_recover(server, db, tmp_path, seed, mode, stats)
            except Exception:
                failures.append(f"seed {seed}: {traceback.format_exc()}")

    async with trio.open_nursery() as nursery:
        for seed in seeds:
            nursery.start_soon(one, seed)
    assert not failures, (
        f"{len(failures)} of {len(seeds)} crash scenarios failed (run one again with "
        "OPERATIVE_CRASH_SEEDS=<seed>):\n" + "\n".join(failures)
    )
    return stats


async def test_killed_workers_runs_are_recovered(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path
) -> None:
    """SIGKILL at seeded points; ``recover`` in new processes finishes every run."""
    seeds = _seeds(CRASH_SEEDS)
    stats = await _run_scenarios(fork_server, durable_db, tmp_path, seeds, "recover")
    if seeds == CRASH_SEEDS:  # the scenarios reach the paths they are meant to
        assert stats["calls cut short, outcome unknown"] > 0, stats
        assert stats["calls cut short, run again"] > 0, stats


async def test_serve_durable_runs_finishes_a_killed_workers_runs(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path
) -> None:
    """The same, recovered by ``serve_durable_runs`` (cancelled once all runs finished)."""
    await _run_scenarios(fork_server, durable_db, tmp_path, _seeds(SERVE_SEEDS), "serve")


# -- cancellation through the engine ---------------------------------------------------


async def test_engine_cancel_from_another_process(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path
) -> None:
    """``engine.cancel`` here stops the run there where it is (mid-step), ``aborted``."""
    reason = "stopped by the operator"
    long_plan: Plan = (("fetch",),) * 15
    short_plan: Plan = (("lookup", "charge"), ("note",))
    log = tmp_path / "tools.log"
    await _create_tables(durable_db)
    engine, store = durable_db.engine(), durable_db.store()
    try:
        async with _workers(fork_server, durable_db, tmp_path) as workers:
            worker = await workers.start(
                "A",
                mode="start",
                worker="A",
                log=str(log),
                runs=[["victim", long_plan], ["bystander", short_plan]],
                lease_seconds=30,
            )
            with trio.fail_after(30):
                while sum(isinstance(e.record, StepDone) for e in await store.read("victim")) < 2:
                    assert worker.running, worker.describe()
                    await trio.sleep(POLL)
            cancelled = await engine.cancel("victim", reason)
            assert cancelled.cancel_reason == reason
            done_at_cancel = sum(isinstance(e.record, StepDone) for e in await store.read("victim"))
            await worker.wait()
            assert worker.clean, worker.describe()

        record = await engine.get("victim")
        assert record is not None
        assert record.outcome is not None
        assert record.status == "aborted", record
        assert record.outcome.finish_reason == "aborted"
        assert record.outcome.abort_reason == reason
        assert record.cancel_reason == reason
        replay = replay_journal("victim", await store.read("victim"))
        assert replay.finished is not None
        assert replay.finished.outcome == record.outcome
        steps = len(replay.steps)
        assert [s.step for s in replay.steps] == list(range(1, steps + 1))
        assert 2 <= steps <= done_at_cancel + 1 < len(long_plan), (steps, done_at_cancel)
        # Stopped at once, as run.abort() stops it: the steps before are whole; a step
        # in flight is cut short, its call answered once (its result, or cancelled).
        messages = _views(transcript(replay).messages)
        expected = await reference(long_plan)
        reference_messages = _views(expected.conversation.messages)
        whole = 2 + 2 * steps
        assert messages[:whole] == reference_messages[:whole]
        assert all(m["outcome"] in (None, "success") for m in messages[:whole]), messages
        cut = replay.partial is not None
        logged = _log(log)
        begun = sum(len(t) for k, t in logged.items() if k[0] == "begin" and k[2] == "victim")
        if cut:
            assert replay.partial is not None
            assert replay.partial.step == steps + 1
            assert messages[whole] == reference_messages[whole]
            (answer,) = messages[whole + 1 :]
            assert answer["outcome"] in ("success", "cancelled"), answer
            ran = {"success": (1,), "cancelled": (0, 1)}[answer["outcome"]]
            assert begun - steps in ran, logged
        else:
            assert replay.finished.messages == ()
            assert len(messages) == whole, messages
            assert begun == steps, logged
        assert replay.usage == _usage_of_first_steps(expected, steps + cut)
        reported = worker.results()["victim"]
        assert reported["finish_reason"] == "aborted"
        assert reported["abort_reason"] == reason
        assert reported["messages"] == _printed(messages)

        bystander = await engine.get("bystander")
        assert bystander is not None
        assert bystander.status == "completed"
        expected = await reference(short_plan)
        _check_reported(worker.results()["bystander"], expected, "bystander")
        bystander_replay = replay_journal("bystander", await store.read("bystander"))
        assert _views(transcript(bystander_replay).messages) == _views(
            expected.conversation.messages
        )
    finally:
        await engine.aclose()
        await store.aclose()


async def test_cancel_while_its_worker_is_dead_stops_before_the_next_step(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path
) -> None:
    """A run cancelled between steps while its dead worker's lease still runs: the
    worker that recovers it ends it ``aborted`` at once, without a further step."""
    reason = "stopped while nobody ran it"
    plan: Plan = (("charge",), ("fetch", "note"), ("charge",))
    log = tmp_path / "tools.log"
    await _create_tables(durable_db)
    engine, store = durable_db.engine(), durable_db.store()
    try:
        async with _workers(fork_server, durable_db, tmp_path) as workers:
            first = await workers.start(
                "A",
                mode="start",
                worker="A",
                log=str(log),
                runs=[["orphan", plan]],
                lease_seconds=1.5,
                stall_after_step=1,  # step 1 is journaled, step 2 not begun
            )
            with trio.fail_after(30):
                while ("stalled", "A", "orphan", "step-1") not in _log(log):
                    assert first.running, first.describe()
                    await trio.sleep(POLL)
            first.kill()
            await first.wait()
            flagged = await engine.cancel("orphan", reason)
            assert flagged.status == "running", flagged  # its lease runs: only flagged
            assert flagged.cancel_reason == reason
            second = await workers.start(
                "B", mode="recover", worker="B", log=str(log), run_ids=["orphan"]
            )
            await second.wait()
            assert second.clean, second.describe()

        record = await engine.get("orphan")
        assert record is not None
        assert record.status == "aborted", record
        assert record.outcome is not None
        assert record.outcome.abort_reason == reason
        entries = await store.read("orphan")
        replay = replay_journal("orphan", entries)
        assert [type(e.record).__name__ for e in entries].count("Generated") == 1, entries
        assert [s.step for s in replay.steps] == [1]
        assert not [k for k in _log(log) if k[1] == "B"], "a tool ran after the cancel"
        expected = await reference(plan)
        messages = _views(transcript(replay).messages)
        assert messages == _views(expected.conversation.messages)[:4]
        reported = second.results()["orphan"]
        assert reported["finish_reason"] == "aborted"
        assert reported["abort_reason"] == reason
        assert reported["messages"] == _printed(messages)
    finally:
        await engine.aclose()
        await store.aclose()


async def test_cancel_of_an_unheld_run_cut_mid_step_answers_every_call(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path
) -> None:
    """A run whose worker died mid-step and whose lease expired is ended by ``cancel``
    itself; its transcript still answers every call, and nobody resumes it."""
    reason = "stopped after its worker died"
    plan: Plan = (("lookup", "stall", "note"), ("charge",))
    log = tmp_path / "tools.log"
    await _create_tables(durable_db)
    engine, store = durable_db.engine(), durable_db.store()
    try:
        async with _workers(fork_server, durable_db, tmp_path) as workers:
            first = await workers.start(
                "A",
                mode="start",
                worker="A",
                log=str(log),
                runs=[["orphan", plan]],
                lease_seconds=LEASE_SECONDS,
                stall_blocks=True,  # the stall call never returns: nobody releases it
            )
            with trio.fail_after(30):
                # Cut mid-step: the stall call runs and the step's answer is journaled
                # (with the first result that settles while the stall call still runs).
                while ("begin", "A", "orphan", "c1-1") not in _log(log) or not any(
                    isinstance(entry.record, Generated) for entry in await store.read("orphan")
                ):
                    assert first.running, first.describe()
                    await trio.sleep(POLL)
            first.kill()
            await first.wait()
            with trio.fail_after(30):
                while True:
                    record = await engine.get("orphan")
                    assert record is not None
                    if record.lease_expires_at < time.time():
                        break
                    await trio.sleep(POLL)
            ended = await engine.cancel("orphan", reason)
            assert ended.status == "aborted", ended  # nobody held it: ended right away
            second = await workers.start(
                "B", mode="recover", worker="B", log=str(log), run_ids=["orphan"]
            )
            await second.wait()
            assert second.clean, second.describe()
            assert second.records()[0] == {"claiming": []} or not second.said("claiming")

        record = await engine.get("orphan")
        assert record is not None
        assert record.outcome is not None
        assert record.outcome.abort_reason == reason
        replay = replay_journal("orphan", await store.read("orphan"))
        assert replay.finished is not None
        assert replay.finished.outcome == record.outcome
        final = transcript(replay)
        assert find_dangling_tool_calls(final) == (), _views(final.messages)
        answers = [m.tool_call_id for m in final.messages if m.role == "tool"]
        assert answers == ["c1-0", "c1-1", "c1-2"], _views(final.messages)
        assert not [k for k in _log(log) if k[1] == "B"]
    finally:
        await engine.aclose()
        await store.aclose()


def _usage_of_first_steps(expected: RunResult, steps: int) -> Any:
    """What the first ``steps`` generate calls of ``expected`` cost."""
    total = expected.steps[0].usage
    for step in expected.steps[1:steps]:
        total = total + step.usage
    return total


# -- a stalled worker loses its run ----------------------------------------------------


@pytest.mark.parametrize("release", ["after-claim", "after-finish"])
async def test_stalled_worker_loses_its_run(
    fork_server: ForkServer, durable_db: DurableDb, tmp_path: Path, release: str
) -> None:
    """Worker A stalls past its lease; B claims and finishes the run; A writes nothing more.

    A's ``stall`` call blocks its whole process until the test lets it go: once B has
    claimed the run, or once B has finished it. A then returns a ``STALE`` value that
    must never reach the journal: its writes fail with ``LeaseLostError``.
    """
    plan: Plan = (("lookup",), ("stall",), ("fetch", "note"), ("charge",))
    log = tmp_path / "tools.log"
    await _create_tables(durable_db)
    engine, store = durable_db.engine(), durable_db.store()
    try:
        async with _workers(fork_server, durable_db, tmp_path) as workers:
            first = await workers.start(
                "A",
                mode="start",
                worker="A",
                log=str(log),
                runs=[["stalled", plan]],
                lease_seconds=0.5,
                stall_blocks=True,
            )
            with trio.fail_after(30):
                while ("begin", "A", "stalled", "c2-0") not in _log(log):
                    assert first.running, first.describe()
                    await trio.sleep(POLL)
            second = await workers.start(
                "B", mode="recover", worker="B", log=str(log), run_ids=["stalled"]
            )
            with trio.fail_after(30):
                while True:
                    record = await engine.get("stalled")
                    assert record is not None
                    if release == "after-claim" and record.lease_owner == "B":
                        break
                    if release == "after-finish" and record.status != "running":
                        break
                    assert second.running, second.describe()
                    await trio.sleep(POLL)
            first.release()
            await second.wait()
            await first.wait()
            assert second.clean, second.describe()
            assert first.clean, first.describe()

        # A's stalled call finished, its result was refused, and A did nothing more.
        lost = first.results()["stalled"]
        assert lost["finish_reason"] in ("error", "aborted"), lost
        assert lost["error_type"] == "LeaseLostError" or "lost durable run" in (
            lost["abort_reason"] or ""
        ), lost
        logged = _log(log)
        assert {k[3] for k in logged if k[1] == "A"} == {"c1-0", "c2-0"}, logged
        assert len(logged["end", "A", "stalled", "c2-0"]) == 1
        # B ran the idempotent stalled call again, and everything after it.
        assert {k[3] for k in logged if k[1] == "B"} == {"c2-0", "c3-0", "c3-1", "c4-0"}
        assert all(len(times) == 1 for times in logged.values()), logged

        entries = await store.read("stalled")
        assert not any(b"STALE" in msgspec.json.encode(e.record) for e in entries)
        # A's start of the idempotent call waited for a commit that never came; B's.
        assert _calls(entries, ToolStarted)["c2-0"] == 1
        assert all(n == 1 for n in _calls(entries, ToolSettled).values())
        replay = replay_journal("stalled", entries)
        assert replay.finished is not None
        record = await engine.get("stalled")
        assert record is not None
        assert record.status == "completed"
        assert record.outcome == replay.finished.outcome
        expected = await reference(plan)
        assert _views(transcript(replay).messages) == _views(expected.conversation.messages)
        _check_reported(second.results()["stalled"], expected, "as B finished it")
    finally:
        await engine.aclose()
        await store.aclose()
