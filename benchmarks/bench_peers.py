"""operative against the field: the same agent work on operative, a bare Trio loop (the
floor), a hand-written Trio loop doing the work the design requires of a run (the
same-work floor), pydantic-ai, openai-agents and langgraph, in one invocation.

Each system is an adapter in ``benchmarks/peers/`` (see its ``__init__``): a scripted
model (pydantic-ai's ``FunctionModel``, a custom openai-agents ``Model``, a langchain-core
``BaseChatModel`` under langgraph's prebuilt ReAct agent) and tools that count their
executions. After every scenario the harness checks the count against the work asked
for, so no system can measure a shortcut. Every measurement of a system runs in a fresh
child process (``--child SYSTEM SCENARIO``); the peers run on asyncio there, operative and
the floor on Trio.

1. **Per-step overhead.** A 20-step run (19 steps with one ``add(a, b)`` tool call, raw
   JSON arguments, then an answer) and a 1-step run, interleaved; median µs per step of
   the 20-step run (set-up amortised in), the marginal µs of one more step, the 1-step
   run's fixed cost.
2. **Parallel tool calls.** One step asking for 50 ``wait(10 ms)`` calls, then an answer:
   median wall time of the run. 50 x 10 ms = 500 ms run one after another; a system that
   runs them concurrently needs a little over 10 ms.
3. **Concurrency.** 2,000 and 10,000 runs of 5 steps (4 tool calls, then an answer), the
   model sleeping 20 ms of real time per call, all started at once (a Trio nursery, an
   asyncio ``TaskGroup``). Wall time, runs/s, process CPU time, and peak RSS growth
   (``VmHWM`` over the RSS before the batch) per in-flight run. One batch per size; the
   smaller batch of the two floors and operative in three fresh processes each, in
   turn, so their ratios have a spread.
4. **Import time.** ``--imports`` (7) rounds of one fresh interpreter per system, in
   turn, importing what a program needs to build an agent with a tool on that system:
   the best time, and the per-round ratio to ``import trio`` (median and range).
5. **Durable checkpoint overhead per step.** operative on SQLite and PostgreSQL (through
   ``bench_durable.py``'s machinery: a throwaway local cluster with ``fsync=off``) next to
   langgraph's ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``) and ``InMemorySaver``:
   the 20-step run per step, minus the same run without persistence, over 20 steps.
6. **Same-process batches and the GC share** (both floors and operative). The 2,000-run
   batch of each in one process, in five rounds, each batch with the cyclic GC on and then off:
   the per-round wall-time ratio, and the share of the batch's CPU time the GC takes
   (``gc.callbacks`` timing, and the CPU time saved by ``gc.disable()``).
7. **Memory per in-flight run** (both floors and operative). 500 concurrent runs, each system
   in a fresh process: ``tracemalloc`` bytes held per in-flight run by allocating file
   (operative, trio, the benchmark's model and tools, the standard library, ...) and
   line, and GC-tracked objects per run by type (``gc.get_objects()``).

8. **The batch in instructions** (``--instructions``, both floors and operative, when
   valgrind is installed). The 2,000-run batch of scenario 6 under ``trio.testing.MockClock``
   (virtual time: no run waits for the wall clock, so the work is the same on any
   machine), counted by valgrind's cachegrind: instructions, first-level data cache misses
   and last-level misses per run, net of the same process with an empty batch. What a
   loaded machine cannot move: the time ratios of scenario 6 swing by a third between
   rounds on a shared VM; these stay within a percent.
9. **Peak RSS under virtual time** (both floors and operative). Scenario 3's peak RSS
   growth per run, with the batch on ``trio.testing.MockClock``: every run takes each step
   in the same scheduler tick, so all are at their fifth step together, whatever the
   machine's load. On the real clock the runs drift apart while thousands start, and how
   far decides how much each holds at the peak: fresh processes of the same code differ
   by a tenth. Fresh processes in turn, 2,000 runs and twice that; the difference of the
   two, over 2,000, is the memory one more run in flight costs (the marginal figure: the
   process's fixed overheads and the allocators' rounding to their arenas cancel out).

The per-step figures also come as per-round ratios (median and range over the rounds),
for the 20-step run and for the 1-step run (the fixed cost of a run).

Two floors. ``floor`` is a bare Trio loop over plain dicts: far less than a run of
operative must do. ``floor-same-work`` (``peers/floor_same_work.py``) does by hand, and as
cheaply as it can, what the design requires of every run: the caller's history
snapshotted, the loop in its own cancel scope, typed records with ids, tool arguments
decoded and validated by msgspec, a step record per step, a result record, one result per
call whatever ends the run. The ratios to the floor (``x_floor_*``) of scenarios 1, 3
(the smaller batch), 4 and 6 have twins to the same-work floor (``x_same_work_*``).

Systems whose packages are missing are skipped and named in the notes. ``--json PATH``
writes every figure (``benchmarks/report.py`` renders it); ``--markdown PATH`` the tables
of ratios to the floor; ``--plot PATH`` a PNG of per-step overhead and memory per run
(matplotlib). ``--quick`` is a smoke run.

Usage::

    python benchmarks/bench_peers.py --json out.json --markdown out.md --plot out.png
    .venv/bin/python benchmarks/bench_peers.py --quick --systems floor operative
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    machine,
    median,
    print_table,
    ratio_spread,
    read_status_kib,
    spread,
    write_json,
)

HERE = Path(__file__).resolve()
STEPS = 20
PARALLEL_CALLS = 50
PARALLEL_SLEEP = 0.010
CONCURRENT_STEPS = 5
MODEL_LATENCY = 0.020
BATCH_LIMIT = 60.0
"""Seconds after which a peer's concurrent batch is stopped, so the whole comparison fits
in 15 minutes on a 2-core machine (the 10,000-run batches of the peers would take minutes
each). Every run has started by then, so peak RSS still covers all of them in flight."""

SYSTEMS: dict[str, tuple[str, str]] = {
    # key: (adapter module, what a program imports to build an agent with a tool)
    "floor": ("peers.floor", "import trio"),
    "floor-same-work": ("peers.floor_same_work", "import trio, msgspec"),
    "operative": ("peers.operative_side", "import operative"),
    "pydantic-ai": ("peers.pydantic_ai_side", "import pydantic_ai, pydantic_ai.models.function"),
    "openai-agents": ("peers.openai_agents_side", "import agents"),
    "langgraph": ("peers.langgraph_side", "import langgraph.prebuilt, langchain_core.tools"),
}
SAME_WORK = "floor-same-work"
"""The second floor: a hand-written loop doing the work the design requires of a run
(``peers/floor_same_work.py``); operative's figures are also given as ratios to it."""
OURS = ("floor", SAME_WORK, "operative")
"""The systems measured in rounds beside the floor (batches, memory per run)."""
REQUIRES = {
    "pydantic-ai": "pydantic_ai",
    "openai-agents": "agents",
    "langgraph": "langgraph.prebuilt",
}

# --------------------------------------------------------------------------------------
# child side: one scenario of one system, printed as one JSON line
# --------------------------------------------------------------------------------------


def _drive(adapter: ModuleType, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    if adapter.RUNNER == "trio":
        import trio

        return trio.run(main)
    return asyncio.run(main())


def _check_calls(adapter: ModuleType, expected: int) -> None:
    if adapter.CALLS[0] != expected:
        raise RuntimeError(f"{adapter.NAME}: {adapter.CALLS[0]} tool executions, not {expected}")


ROUNDS = 10
"""Per-step samples are taken in this many rounds, every system once per round."""


def child_per_step(names: Sequence[str], repetitions: int, warmup: int) -> dict[str, Any]:
    """Every system's per-step figures, measured in one process, interleaved.

    A fresh process per system would compare processes as much as systems: on a shared
    VM one process can run 1.5x faster than the next, all through. Here every system is
    imported first, the heap is frozen (so no system pays the others' garbage
    collection), and the samples are taken in rounds, each system's event loop in turn.
    """
    adapters = {name: importlib.import_module(SYSTEMS[name][0]) for name in names}
    runs = {name: (a.make_steps(STEPS, 0.0), a.make_steps(1, 0.0)) for name, a in adapters.items()}
    samples: dict[str, dict[str, list[int]]] = {n: {"long": [], "short": []} for n in names}
    # The median of each round, per system: the spread of per-round ratios to the floor.
    rounds: dict[str, dict[str, list[float]]] = {n: {"long": [], "short": []} for n in names}
    gc.collect()
    gc.freeze()

    def sampler(name: str, count: int, record: bool) -> Callable[[], Coroutine[Any, Any, None]]:
        long, short = runs[name]
        read = adapters[name].answer

        async def main() -> None:
            taken: dict[str, list[int]] = {"long": [], "short": []}
            for _ in range(count):
                for kind, fn in (("long", long), ("short", short)):
                    # The answer is read inside the timing, so the run's result is freed
                    # there too, as the bare floor's loop frees its messages on return
                    # (held past it, a 20-step run's would be freed in the next run's).
                    start = time.perf_counter_ns()
                    answer = read(await fn())
                    elapsed = time.perf_counter_ns() - start
                    taken[kind].append(elapsed)
                    if answer != "the answer is 42":
                        raise RuntimeError(f"{name}: unexpected answer {answer!r}")
            if record:
                for kind, values in taken.items():
                    samples[name][kind] += values
                    rounds[name][kind].append(median(values) / 1000)

        return main

    per_round = -(-repetitions // ROUNDS)
    for name in names:
        _drive(adapters[name], sampler(name, warmup, record=False))
    for _ in range(ROUNDS):
        for name in names:
            _drive(adapters[name], sampler(name, per_round, record=True))
    out: dict[str, Any] = {}
    floor = rounds.get("floor")
    same = rounds.get(SAME_WORK)
    for name, adapter in adapters.items():
        _check_calls(adapter, (warmup + per_round * ROUNDS) * (STEPS - 1))
        long_ns, short_ns = samples[name]["long"], samples[name]["short"]
        whole, one = median(long_ns) / 1000, median(short_ns) / 1000
        ordered = sorted(long_ns)
        out[name] = {
            "repetitions": len(long_ns),
            "rounds": ROUNDS,
            "us_per_step": whole / STEPS,
            "us_per_step_p10": ordered[len(ordered) // 10] / 1000 / STEPS,
            "us_per_step_marginal": (whole - one) / (STEPS - 1),
            "us_run_1_step": one,
            "us_per_step_rounds": spread(v / STEPS for v in rounds[name]["long"]),
            "us_run_1_step_rounds": spread(rounds[name]["short"]),
            "tool_calls": adapter.CALLS[0],
        }
        if floor is not None:
            out[name]["x_floor_per_step"] = ratio_spread(rounds[name]["long"], floor["long"])
            out[name]["x_floor_run_1_step"] = ratio_spread(rounds[name]["short"], floor["short"])
        if same is not None:
            out[name]["x_same_work_per_step"] = ratio_spread(rounds[name]["long"], same["long"])
            out[name]["x_same_work_run_1_step"] = ratio_spread(rounds[name]["short"], same["short"])
    return out


def child_parallel(adapter: ModuleType, repetitions: int) -> dict[str, Any]:
    run = adapter.make_parallel(PARALLEL_CALLS, PARALLEL_SLEEP)
    walls: list[float] = []

    async def main() -> None:
        adapter.answer(await run())  # warm-up
        for _ in range(repetitions):
            start = time.perf_counter()
            adapter.answer(await run())
            walls.append(time.perf_counter() - start)

    _drive(adapter, main)
    _check_calls(adapter, (repetitions + 1) * PARALLEL_CALLS)
    wall = median(walls)
    return {
        "calls": PARALLEL_CALLS,
        "tool_sleep_s": PARALLEL_SLEEP,
        "wall_s": wall,
        "wall_min_s": min(walls),
        # One after another the calls need calls x sleep; call it parallel under half that.
        "parallel": wall < PARALLEL_CALLS * PARALLEL_SLEEP / 2,
        "tool_calls": adapter.CALLS[0],
    }


def child_concurrency(adapter: ModuleType, runs: int, limit: float | None) -> dict[str, Any]:
    """One batch of ``runs``; with ``limit``, a batch still running after that many seconds
    is reported as it stands and the process exits at once (every run has started by
    then, so peak RSS covers the runs in flight; cancelling thousands of runs would take
    a peer minutes and measure nothing)."""
    run = adapter.make_steps(CONCURRENT_STEPS, MODEL_LATENCY)
    state = {"in_flight": 0, "max_in_flight": 0, "done": 0, "cancelled": 0}

    async def tracked() -> None:
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            adapter.answer(await run())
        except BaseException:
            state["cancelled"] += 1
            raise
        finally:
            state["in_flight"] -= 1
            state["done"] += 1

    clock: dict[str, Any] = {}

    def summary(stopped: bool) -> dict[str, Any]:
        wall = time.perf_counter() - clock["start"]
        cpu = time.process_time() - clock["cpu"]
        after = read_status_kib("VmHWM")
        finished = state["done"] - state["cancelled"]
        per_run = CONCURRENT_STEPS - 1
        if not stopped:
            if finished != runs:
                raise RuntimeError(f"{adapter.NAME}: {finished} of {runs} runs finished")
            _check_calls(adapter, (warm + runs) * per_run)
        elif not (warm + finished) * per_run <= adapter.CALLS[0] <= (warm + runs) * per_run:
            raise RuntimeError(f"{adapter.NAME}: {adapter.CALLS[0]} tool executions for {finished}")
        return {
            "runs": runs,
            "finished": finished,
            "stopped_after_s": limit if stopped else None,
            "steps": CONCURRENT_STEPS,
            "model_latency_s": MODEL_LATENCY,
            "wall_s": wall,
            "runs_per_s": finished / wall,
            "cpu_s": cpu,
            "max_in_flight": state["max_in_flight"],
            "rss_before_kib": clock["before"]["VmRSS"],
            "hwm_after_kib": after["VmHWM"],
            # Every run is in flight at the peak, unless a stopped batch never started them all.
            "kib_per_run": (after["VmHWM"] - clock["before"]["VmRSS"]) / state["max_in_flight"],
            "tool_calls": adapter.CALLS[0],
        }

    def stop_now() -> None:
        print(json.dumps(summary(stopped=True)), flush=True)
        os._exit(0)

    async def batch(n: int, limit: float | None = None) -> None:
        if adapter.RUNNER == "trio":
            import trio

            async def stop_after(seconds: float) -> None:
                await trio.sleep(seconds)
                stop_now()

            async with trio.open_nursery() as outer:
                if limit:
                    outer.start_soon(stop_after, limit)
                async with trio.open_nursery() as nursery:
                    for _ in range(n):
                        nursery.start_soon(tracked)
                outer.cancel_scope.cancel()
        else:
            stopper = asyncio.get_running_loop().call_later(limit, stop_now) if limit else None
            async with asyncio.TaskGroup() as group:
                for _ in range(n):
                    group.create_task(tracked())
            if stopper is not None:
                stopper.cancel()

    warm = 10
    _drive(adapter, lambda: batch(warm))
    gc.collect()
    state.update(max_in_flight=0, done=0, cancelled=0)
    clock["before"] = read_status_kib("VmRSS", "VmHWM")
    clock["cpu"] = time.process_time()
    clock["start"] = time.perf_counter()
    _drive(adapter, lambda: batch(runs, limit))
    return summary(stopped=False)


def checked(
    adapter: ModuleType, run: Callable[[], Awaitable[Any]]
) -> Callable[[], Awaitable[None]]:
    """A batch's task: one run, its answer read by the adapter (which raises if the run
    did not end as scripted). The harness's frame, the same for every system: an
    adapter hands back its system's own run coroutine and adds no frame of its own."""
    answer = adapter.answer

    async def one() -> None:
        answer(await run())

    return one


async def _trio_batch(task: Callable[[], Awaitable[None]], n: int) -> None:
    import trio

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(task)


async def _asyncio_batch(task: Callable[[], Awaitable[None]], n: int) -> None:
    async with asyncio.TaskGroup() as group:
        for _ in range(n):
            group.create_task(task())  # type: ignore[arg-type]


def _batch(adapter: ModuleType, run: Callable[[], Awaitable[Any]], n: int) -> None:
    task = checked(adapter, run)
    if adapter.RUNNER == "trio":
        _drive(adapter, lambda: _trio_batch(task, n))
    else:
        _drive(adapter, lambda: _asyncio_batch(task, n))


BATCH_ROUNDS = 5
"""Rounds of the same-process batch comparison (``child_batch_rounds``)."""
FRESH_ROUNDS = 3
"""Fresh processes each for the floor's and operative's smallest batch (peak RSS)."""
MEMORY_RUNS = 500
"""Concurrent runs whose memory ``child_memory`` takes apart."""


def child_batch_rounds(names: Sequence[str], runs: int, rounds: int) -> dict[str, Any]:
    """Batches of ``runs`` concurrent 5-step runs, every system in one process, in rounds;
    each round runs every system's batch with the cyclic GC on and then off.

    The GC share of a batch is measured twice: the CPU time between ``gc.callbacks``'
    start and stop of every collection over the batch's process CPU time, and one minus the
    CPU time of the same batch with ``gc.disable()`` over the CPU time with it on. Peak
    RSS cannot be read here (``VmHWM`` only grows), so memory comes from the fresh
    processes of the concurrency scenario and ``child_memory``.
    """
    adapters = {name: importlib.import_module(SYSTEMS[name][0]) for name in names}
    made = {name: a.make_steps(CONCURRENT_STEPS, MODEL_LATENCY) for name, a in adapters.items()}
    gc_time = [0.0]
    started = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        # CPU time, as the batch's: on a loaded machine wall time would count preemption.
        if phase == "start":
            started[0] = time.process_time()
        else:
            gc_time[0] += time.process_time() - started[0]

    for name in names:
        _batch(adapters[name], made[name], 10)  # warm-up
    gc.collect()
    gc.freeze()
    taken: dict[str, dict[str, list[float]]] = {
        n: {k: [] for k in ("wall_s", "cpu_s", "gc_s", "cpu_no_gc_s", "wall_no_gc_s")}
        for n in names
    }
    collections: dict[str, int] = dict.fromkeys(names, 0)
    gc.callbacks.append(on_gc)
    try:
        for _ in range(rounds):
            for name in names:
                for enabled in (True, False):
                    gc.collect()
                    if not enabled:
                        gc.disable()
                    before = sum(stat["collections"] for stat in gc.get_stats())
                    gc_time[0] = 0.0
                    cpu, wall = time.process_time(), time.perf_counter()
                    _batch(adapters[name], made[name], runs)
                    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                    gc.enable()
                    if enabled:
                        taken[name]["wall_s"].append(wall)
                        taken[name]["cpu_s"].append(cpu)
                        taken[name]["gc_s"].append(gc_time[0])
                        collections[name] += (
                            sum(stat["collections"] for stat in gc.get_stats()) - before
                        )
                    else:
                        taken[name]["wall_no_gc_s"].append(wall)
                        taken[name]["cpu_no_gc_s"].append(cpu)
    finally:
        gc.callbacks.remove(on_gc)
    out: dict[str, Any] = {"runs": runs, "steps": CONCURRENT_STEPS, "rounds": rounds}
    floor = taken.get("floor")
    same = taken.get(SAME_WORK)
    for name, adapter in adapters.items():
        _check_calls(adapter, (10 + 2 * rounds * runs) * (CONCURRENT_STEPS - 1))
        t = taken[name]
        out[name] = {
            "wall_s": spread(t["wall_s"]),
            "cpu_s": spread(t["cpu_s"]),
            "gc_s": spread(t["gc_s"]),
            "gc_collections_per_batch": collections[name] / rounds,
            "gc_share_callbacks": spread(g / c for g, c in zip(t["gc_s"], t["cpu_s"], strict=True)),
            "gc_share_disabled": spread(
                1 - off / on for off, on in zip(t["cpu_no_gc_s"], t["cpu_s"], strict=True)
            ),
            "wall_no_gc_s": spread(t["wall_no_gc_s"]),
            "cpu_no_gc_s": spread(t["cpu_no_gc_s"]),
        }
        if floor is not None:
            out[name]["x_floor_wall"] = ratio_spread(t["wall_s"], floor["wall_s"])
            out[name]["x_floor_cpu"] = ratio_spread(t["cpu_s"], floor["cpu_s"])
        if same is not None:
            out[name]["x_same_work_wall"] = ratio_spread(t["wall_s"], same["wall_s"])
            out[name]["x_same_work_cpu"] = ratio_spread(t["cpu_s"], same["cpu_s"])
    return out


def _origin(filename: str) -> str:
    """Which code allocated a block, from the file of its allocating frame."""
    path = filename.replace("\\", "/")
    if "/operative/" in path:
        return "operative"
    if "/trio/" in path or "/outcome/" in path:
        return "trio"
    if "/msgspec/" in path:
        return "msgspec"
    if path.startswith("<attrs generated"):
        return "attrs (generated)"
    if "/benchmarks/" in path:
        return "benchmark (model, tools)"
    if "/asyncio/" in path:
        return "asyncio"
    if "/site-packages/" in path:
        return "other packages"
    return "python (stdlib, builtins)"


def _short(filename: str) -> str:
    """A source file's path from its package (``operative/_core/_step.py``, ``trio/...``,
    ``contextlib.py``), not where this machine keeps it."""
    path = filename.replace("\\", "/")
    for marker in ("/site-packages/", "/benchmarks/"):
        if marker in path:
            return path.split(marker)[-1]
    if "/operative/" in path:
        return "operative/" + path.rsplit("/operative/", 1)[-1]
    if "/lib/python" in path:
        return path.rsplit("/", 1)[-1]
    return path


def _type_census() -> dict[str, tuple[int, int]]:
    """Count and ``sys.getsizeof`` bytes of the GC-tracked objects, by type name."""
    found: dict[str, list[int]] = {}
    for obj in gc.get_objects():
        kind = type(obj)
        entry = found.setdefault(f"{kind.__module__}.{kind.__qualname__}", [0, 0])
        entry[0] += 1
        entry[1] += sys.getsizeof(obj)
    return {name: (count, size) for name, (count, size) in found.items()}


def child_memory(adapter: ModuleType, runs: int, top: int) -> dict[str, Any]:
    """What one in-flight run holds: ``runs`` concurrent 5-step runs, measured once every
    run has started and two model latencies have passed (every run is then between its
    first and last step, none finished).

    Reported per in-flight run: ``tracemalloc`` bytes still allocated over a snapshot
    taken before the batch, grouped by the allocating frame's file (operative, trio,
    the benchmark's own model and tools, the standard library, ...) and by source line;
    and the difference in GC-tracked objects (``gc.get_objects()``) by type, with their
    ``sys.getsizeof`` bytes (containers only: strings and numbers are not tracked).
    """
    import tracemalloc

    run = adapter.make_steps(CONCURRENT_STEPS, MODEL_LATENCY)
    state = {"in_flight": 0, "started": 0, "done": 0}
    found: dict[str, Any] = {}
    all_started: list[Any] = []  # the runner's Event, made inside its event loop

    async def tracked() -> None:
        state["in_flight"] += 1
        state["started"] += 1
        if state["started"] == runs:
            all_started[0].set()
        try:
            adapter.answer(await run())
        finally:
            state["in_flight"] -= 1
            state["done"] += 1

    def measure() -> None:
        # Taken inside the event loop while the runs are suspended in their model calls.
        found.update(
            in_flight=state["in_flight"],
            done_before=state["done"],
            snapshot=tracemalloc.take_snapshot(),
            census=_type_census(),
        )

    async def trio_main() -> None:
        import trio

        all_started.append(trio.Event())
        async with trio.open_nursery() as nursery:
            for _ in range(runs):
                nursery.start_soon(tracked)
            await all_started[0].wait()
            await trio.sleep(2 * MODEL_LATENCY)
            measure()

    async def asyncio_main() -> None:
        all_started.append(asyncio.Event())
        async with asyncio.TaskGroup() as group:
            for _ in range(runs):
                group.create_task(tracked())
            await all_started[0].wait()
            await asyncio.sleep(2 * MODEL_LATENCY)
            measure()

    _batch(adapter, run, 10)  # warm-up: imports, caches, lazily built tables
    gc.collect()
    census_before = _type_census()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    if adapter.RUNNER == "trio":
        _drive(adapter, trio_main)
    else:
        _drive(adapter, asyncio_main)
    tracemalloc.stop()
    _check_calls(adapter, (10 + runs) * (CONCURRENT_STEPS - 1))
    in_flight = found["in_flight"]
    if in_flight == 0:
        raise RuntimeError(f"{adapter.NAME}: no run in flight when the snapshot was taken")
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = (
        found["snapshot"].filter_traces(ignore).compare_to(before.filter_traces(ignore), "lineno")
    )
    by_origin: dict[str, float] = {}
    by_line: list[tuple[float, int, str]] = []
    for stat in diff:
        frame = stat.traceback[0]
        origin = _origin(frame.filename)
        by_origin[origin] = by_origin.get(origin, 0) + stat.size_diff
        if stat.size_diff > 0:
            where = _short(frame.filename)
            by_line.append((stat.size_diff, stat.count_diff, f"{where}:{frame.lineno}"))
    by_line.sort(reverse=True)
    census = found["census"]
    types = []
    for name, (count, size) in census.items():
        old_count, old_size = census_before.get(name, (0, 0))
        if count - old_count > 0:
            types.append((name, (count - old_count) / in_flight, (size - old_size) / in_flight))
    types.sort(key=lambda t: (-t[2], t[0]))
    total = sum(by_origin.values())
    return {
        "runs": runs,
        "in_flight": in_flight,
        "finished_before_snapshot": found["done_before"],
        "bytes_per_run": total / in_flight,
        "by_origin_bytes_per_run": {
            k: v / in_flight for k, v in sorted(by_origin.items(), key=lambda kv: -kv[1])
        },
        "top_lines": [
            {"where": where, "bytes_per_run": size / in_flight, "blocks_per_run": n / in_flight}
            for size, n, where in by_line[:top]
        ],
        "gc_objects_per_run": sum(t[1] for t in types),
        "top_types": [
            {"type": name, "objects_per_run": count, "bytes_per_run": size}
            for name, count, size in types[:top]
        ],
        "tool_calls": adapter.CALLS[0],
    }


def child_durable_operative(repetitions: int, warmup: int, postgres: bool) -> dict[str, Any]:
    """bench_durable.py's per-step measurement (memory, SQLite, PostgreSQL when possible)."""
    import bench_durable as bd
    import trio

    notes: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        openers: dict[str, Any] = {"sqlite": bd.sqlite_opener(os.path.join(tmp, "steps.db"))}
        counted: dict[str, Any] = {
            "sqlite": bd.sqlite_opener(os.path.join(tmp, "count.db"), count=True)
        }
        classes = bd.postgres_classes() if postgres else "not asked for (--no-postgres)"
        if isinstance(classes, str):
            notes.append(f"operative PostgreSQL skipped: {classes}")
        else:
            from bench_storage import throwaway_postgres

            dsn = os.environ.get("OPERATIVE_POSTGRES_DSN") or stack.enter_context(
                throwaway_postgres()
            )
            if dsn is None:
                notes.append("operative PostgreSQL skipped: no DSN and no initdb")
            else:
                openers["postgres"] = bd.postgres_opener(
                    stack.enter_context(bd.postgres_schema(dsn)), classes
                )
                counted["postgres"] = bd.postgres_opener(
                    stack.enter_context(bd.postgres_schema(dsn)), classes, count=True
                )
        per = trio.run(bd.measure_per_step, openers, counted, repetitions, warmup)
    return {"per_step": per, "notes": notes}


def child_durable_langgraph(repetitions: int, warmup: int) -> dict[str, Any]:
    """The 20-step run through langgraph with no checkpointer, InMemorySaver, AsyncSqliteSaver."""
    from peers import langgraph_side as lg

    notes: list[str] = []
    out: dict[str, Any] = {"steps": STEPS, "repetitions": repetitions}

    async def main(tmp: str) -> None:
        from langgraph.checkpoint.memory import InMemorySaver  # type: ignore[import-not-found,unused-ignore]

        savers: dict[str, Any] = {"none": None, "memory": InMemorySaver()}
        async with contextlib.AsyncExitStack() as stack:
            try:
                from langgraph.checkpoint.sqlite.aio import (  # type: ignore[import-not-found,unused-ignore]
                    AsyncSqliteSaver,
                )
            except ImportError as exc:
                notes.append(f"langgraph SQLite skipped: {exc}")
            else:
                path = os.path.join(tmp, "lg.db")
                savers["sqlite"] = await stack.enter_async_context(
                    AsyncSqliteSaver.from_conn_string(path)
                )
            graphs = {
                name: lg.graph(lg.steps_script(STEPS), 0.0, saver) for name, saver in savers.items()
            }
            samples: dict[str, list[int]] = {name: [] for name in graphs}
            for _ in range(warmup):
                for g in graphs.values():
                    await lg.run_graph(g)
            gc.collect()
            for _ in range(repetitions):
                for name, g in graphs.items():
                    start = time.perf_counter_ns()
                    await lg.run_graph(g)
                    samples[name].append(time.perf_counter_ns() - start)
            base = median(samples["none"]) / 1000
            for name, values in samples.items():
                whole = median(values) / 1000
                out[name] = {
                    "us_per_step": whole / STEPS,
                    "overhead_us_per_step": (whole - base) / STEPS,
                }
            if "sqlite" in savers:
                config = {"configurable": {"thread_id": "t-count"}}
                await savers["sqlite"].adelete_thread("t-count")
                await graphs["sqlite"].ainvoke(
                    {"messages": [("user", "What is 1 + 1?")]},
                    {"recursion_limit": 200, **config},
                )
                checkpoints = [c async for c in savers["sqlite"].alist(config)]
                out["sqlite"]["checkpoints_per_run"] = len(checkpoints)

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(tmp))
    counted_runs = (warmup + repetitions) * len(out.keys() - {"steps", "repetitions"})
    _check_calls(lg, (counted_runs + ("sqlite" in out)) * (STEPS - 1))
    return {"per_step": out, "notes": notes}


def _virtual_batch(adapter: ModuleType) -> Callable[[int], None]:
    """What runs a batch of ``n`` concurrent 5-step runs of ``adapter`` on
    ``trio.testing.MockClock`` (every run at each step in the same tick), once a 10-run
    batch has warmed it up."""
    import trio
    import trio.testing

    if adapter.RUNNER != "trio":
        raise RuntimeError(f"{adapter.NAME}: the virtual-time batch needs a Trio system")
    task = checked(adapter, adapter.make_steps(CONCURRENT_STEPS, MODEL_LATENCY))

    async def batch(n: int) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(task)

    def run(n: int) -> None:
        trio.run(batch, n, clock=trio.testing.MockClock(autojump_threshold=0))

    run(10)
    return run


def child_virtual_memory(adapter: ModuleType, runs: int) -> dict[str, Any]:
    """Scenario 9: peak RSS growth per run of a ``runs``-run batch on
    ``trio.testing.MockClock`` (every run at each step in the same tick), after a
    10-run warm-up; as scenario 3 reads it (``VmHWM`` over the RSS before the batch)."""
    batch = _virtual_batch(adapter)
    gc.collect()
    before = read_status_kib("VmRSS", "VmHWM")
    batch(runs)
    after = read_status_kib("VmHWM")
    _check_calls(adapter, (10 + runs) * (CONCURRENT_STEPS - 1))
    growth = after["VmHWM"] - before["VmRSS"]
    return {"runs": runs, "growth_kib": growth, "kib_per_run": growth / runs}


def virtual_memory(systems: Sequence[str], runs: int, rounds: int) -> dict[str, Any]:
    """Scenario 9 for ``systems`` (the floor first): fresh processes in turn, ``runs``
    and twice that per round. Per system, the peak RSS growth per run of the ``runs``
    batch and the marginal KiB of one more run in flight, with their per-round ratios to
    the floor and to the same-work floor."""
    taken: dict[str, dict[str, list[float]]] = {s: {"per_run": [], "marginal": []} for s in systems}
    for _ in range(rounds):
        for s in systems:
            small = in_child(s, "virtual-memory", "--runs", str(runs))
            large = in_child(s, "virtual-memory", "--runs", str(2 * runs))
            taken[s]["per_run"].append(small["kib_per_run"])
            taken[s]["marginal"].append((large["growth_kib"] - small["growth_kib"]) / runs)
    out: dict[str, Any] = {"runs": runs, "rounds": rounds}
    for s in systems:
        mine = taken[s]
        out[s] = {
            "kib_per_run_rounds": spread(mine["per_run"]),
            "marginal_kib_per_run_rounds": spread(mine["marginal"]),
        }
        for prefix, base in (("x_floor", "floor"), ("x_same_work", SAME_WORK)):
            if base in taken:
                out[s][f"{prefix}_kib_per_run"] = ratio_spread(
                    mine["per_run"], taken[base]["per_run"]
                )
                out[s][f"{prefix}_marginal"] = ratio_spread(
                    mine["marginal"], taken[base]["marginal"]
                )
    return out


def child_virtual_batch(adapter: ModuleType, runs: int) -> dict[str, Any]:
    """Scenario 6's batch under virtual time: ``runs`` concurrent 5-step runs with the
    model's 20 ms slept on a ``trio.testing.MockClock``, after a warm-up batch and with
    the heap frozen (``gc.freeze``), as ``child_batch_rounds`` does. ``runs`` of 0 runs
    everything but the batch: the baseline a count is taken net of."""
    batch = _virtual_batch(adapter)
    gc.collect()
    gc.freeze()
    before = sum(stat["collections"] for stat in gc.get_stats())
    batch(runs)
    collections = sum(stat["collections"] for stat in gc.get_stats()) - before
    _check_calls(adapter, (10 + runs) * (CONCURRENT_STEPS - 1))
    return {"runs": runs, "gc_collections": collections}


_CACHEGRIND = {
    "instructions": re.compile(r"I\s+refs:\s+([\d,]+)"),
    "d1_misses": re.compile(r"D1\s+misses:\s+([\d,]+)"),
    "ll_misses": re.compile(r"LL\s+misses:\s+([\d,]+)"),
}


def _cachegrind(system: str, runs: int) -> dict[str, int]:
    """valgrind's counts for one ``virtual-batch`` child process of ``runs`` runs."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=yes",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            str(HERE),
            "--child",
            system,
            "virtual-batch",
            "--runs",
            str(runs),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{system} virtual-batch under valgrind failed:\n{done.stderr[-3000:]}")
    counts = {}
    for key, pattern in _CACHEGRIND.items():
        found = pattern.search(done.stderr)
        if found is None:
            raise RuntimeError(f"cachegrind printed no {key}:\n{done.stderr[-2000:]}")
        counts[key] = int(found.group(1).replace(",", ""))
    counts["gc_collections"] = json.loads(done.stdout.strip().splitlines()[-1])["gc_collections"]
    return counts


def batch_instructions(systems: Sequence[str], runs: int) -> dict[str, Any]:
    """Scenario 8: per system, the batch's counts per run net of an empty batch, and each
    count's ratio to the floor's (one process each: the counts vary by under 1%)."""
    out: dict[str, Any] = {"runs": runs, "steps": CONCURRENT_STEPS, "clock": "MockClock"}
    for s in systems:
        full, empty = _cachegrind(s, runs), _cachegrind(s, 0)
        out[s] = {f"{key}_per_run": (full[key] - empty[key]) / runs for key in _CACHEGRIND} | {
            "gc_collections": full["gc_collections"]
        }
    floor = out["floor"]
    for s in systems:
        out[s]["x_floor"] = {
            key: out[s][f"{key}_per_run"] / floor[f"{key}_per_run"] for key in _CACHEGRIND
        }
    return out


def child(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("system")
    parser.add_argument("scenario")
    parser.add_argument("--repetitions", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--limit", type=float, default=None)
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    if args.scenario == "durable":
        if args.system == "operative":
            out = child_durable_operative(args.repetitions, args.warmup, not args.no_postgres)
        else:
            out = child_durable_langgraph(args.repetitions, args.warmup)
    elif args.scenario == "per-step":
        out = child_per_step(args.system.split(","), args.repetitions, args.warmup)
    elif args.scenario == "batch-rounds":
        out = child_batch_rounds(args.system.split(","), args.runs, args.repetitions)
    else:
        adapter = importlib.import_module(SYSTEMS[args.system][0])
        if args.scenario == "parallel":
            out = child_parallel(adapter, args.repetitions)
        elif args.scenario == "memory":
            out = child_memory(adapter, args.runs, args.repetitions)
        elif args.scenario == "virtual-batch":
            out = child_virtual_batch(adapter, args.runs)
        elif args.scenario == "virtual-memory":
            out = child_virtual_memory(adapter, args.runs)
        else:
            out = child_concurrency(adapter, args.runs, args.limit)
    print(json.dumps(out))
    return 0


# --------------------------------------------------------------------------------------
# parent side
# --------------------------------------------------------------------------------------


def in_child(system: str, scenario: str, *extra: str, timeout: float = 900) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE), "--child", system, scenario, *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{system} {scenario} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def import_time(statement: str) -> float:
    """One fresh interpreter's time for ``statement``, in milliseconds."""
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1]) * 1000


def import_rounds(systems: Sequence[str], attempts: int) -> dict[str, Any]:
    """``attempts`` rounds of one fresh interpreter per system, in turn: each system's
    best time, and the spread of its per-round ratio to the floor (``import trio``)."""
    taken: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(attempts):
        for s in systems:
            taken[s].append(import_time(SYSTEMS[s][1]))
    out: dict[str, Any] = {"attempts": attempts}
    for s in systems:
        out[s] = {
            "statement": SYSTEMS[s][1],
            "best_ms": min(taken[s]),
            "ms": spread(taken[s]),
            "x_floor": ratio_spread(taken[s], taken["floor"]),
            "x_floor_best": min(taken[s]) / min(taken["floor"]),
        }
        if SAME_WORK in taken:
            out[s]["x_same_work"] = ratio_spread(taken[s], taken[SAME_WORK])
    return out


def available(system: str) -> str | None:
    """None when the system can be measured here, else why not."""
    module = REQUIRES.get(system)
    if module is None:
        return None
    probe = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"{module} is not importable (not installed)"


def _ratio(value: float | None, floor: float | None) -> str:
    if value is None or not floor:
        return "-"
    return f"{value / floor:.1f}x"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def headline_rows(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    systems = results["systems"]
    per, par, imp = results["per_step"], results["parallel"], results["import_ms"]
    conc = results["concurrency"]
    floor = "floor"
    header = ["", "µs/step (x floor)", "50 x 10 ms tools, ms (parallel?)"]
    for n in results["batch_sizes"]:
        header += [f"{n:,} runs: wall s (x floor)", f"{n:,} runs: KiB/run (x floor)"]
    header.append("import ms (x floor)")
    rows = []
    for s in systems:
        p = per[s]["us_per_step"]
        row = [
            s,
            f"{p:,.1f} ({_ratio(p, per[floor]['us_per_step'])})",
            f"{par[s]['wall_s'] * 1000:,.0f} ({'yes' if par[s]['parallel'] else 'no'})",
        ]
        for n in results["batch_sizes"]:
            c, cf = conc[str(n)].get(s), conc[str(n)].get(floor)
            if c is None:
                row += ["-", "-"]
                continue
            if c.get("not_run_after"):
                row += ["not run", "-"]
                continue
            if c.get("stopped_after_s"):
                wall_cell = f"> {c['stopped_after_s']:.0f} ({c['finished']:,} done)"
            else:
                wall_cell = f"{c['wall_s']:,.2f} ({_ratio(c['wall_s'], cf and cf['wall_s'])})"
            row += [
                wall_cell,
                f"{c['kib_per_run']:,.1f} ({_ratio(c['kib_per_run'], cf and cf['kib_per_run'])})",
            ]
        row.append(f"{imp[s]:,.0f} ({_ratio(imp[s], imp[floor])})")
        rows.append(row)
    return header, rows


def durable_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    op = results["durable"].get("operative")
    if op:
        per = op["per_step"]
        for name in ("sqlite", "postgres"):
            if name in per:
                r = per[name]
                rows.append(
                    [
                        f"operative, {name}",
                        f"{per['memory']['us_per_step']:,.1f}",
                        f"{r['us_per_step']:,.1f}",
                        f"{r['overhead_us_per_step']:,.1f}",
                        f"{r.get('commits_per_step', 0):.2f} commits",
                    ]
                )
    lg = results["durable"].get("langgraph")
    if lg:
        per = lg["per_step"]
        for name in ("memory", "sqlite"):
            if name in per:
                r = per[name]
                label = "InMemorySaver" if name == "memory" else "AsyncSqliteSaver"
                rows.append(
                    [
                        f"langgraph, {label}",
                        f"{per['none']['us_per_step']:,.1f}",
                        f"{r['us_per_step']:,.1f}",
                        f"{r['overhead_us_per_step']:,.1f}",
                        f"{r['checkpoints_per_run'] / STEPS:.2f} checkpoints"
                        if "checkpoints_per_run" in r
                        else "-",
                    ]
                )
    return rows


DURABLE_HEADER = [
    "",
    "µs/step, not durable",
    "µs/step, durable",
    "overhead µs/step",
    "writes per step",
]


def markdown(results: dict[str, Any]) -> str:
    """``peers.md``: the tables ``report.py`` renders from these results, and the method."""
    import report

    m = results["machine"]
    found = report.Results.of({"peers": results})
    lines = [
        "# operative against the field",
        "",
        f"Produced by `benchmarks/bench_peers.py` on {results['date']}"
        f"{' (quick smoke run)' if results['quick'] else ''}. Machine: {m['cpu']}, "
        f"{m['cores']} cores, Python {m['python']}, {m['platform']}; load average "
        f"{results['load_before'][0]:.2f} before and {results['load_after'][0]:.2f} after the "
        "run (the machine is shared with other jobs, so wall times carry their noise).",
        "",
        "Versions: "
        + ", ".join(f"{name} {version}" for name, version in sorted(results["versions"].items()))
        + ".",
        "",
        "Ratios are to the floor: a bare hand-written Trio loop over plain dicts doing the same "
        "logical work. The same-work floor, a second hand-written Trio loop, also does what "
        "the design requires of a run (below). Every tool execution is counted and checked "
        "against the work asked for.",
        "",
        report.render("peers", found),
        "",
        report.render("batches", found),
        "",
        "## Against the same-work floor",
        "",
        report.render("same-work", found),
        "",
        f"- µs/step: median of {results['per_step']['floor']['repetitions']} "
        f"{STEPS}-step runs (one `add` tool call per step, then an answer), set-up amortised "
        f"in; every system in one process, in {ROUNDS} rounds of each system in turn, so "
        "the ratios compare systems, not processes.",
        f"- Tools: one step asking for {PARALLEL_CALLS} `wait(10 ms)` calls, then an answer; "
        "median wall time of the run (500 ms if the calls ran one after another).",
        f"- Batches: {CONCURRENT_STEPS}-step runs (4 tool calls), the model sleeping "
        f"{MODEL_LATENCY * 1000:.0f} ms per call, all started at once; one batch per size, each "
        "system in a fresh process; KiB/run is peak RSS growth over the pre-batch RSS, divided "
        "by the runs (all of them are in flight at the peak). A peer's batch still running "
        f"after {results['batch_limit_s']:.0f} s is stopped there (`> N` above, with the runs "
        "finished by then): the peers' 10,000-run batches would take several minutes each, "
        "and the whole comparison has to fit in 15 minutes. A stopped batch's KiB/run covers "
        "runs that had not all reached their later steps, so it can understate a finished "
        "run's footprint. The stop takes effect when the event loop next gets control; "
        "the process then reports and exits without unwinding the runs. A system whose "
        "smaller batch was stopped does not run the larger one (`not run`).",
        f"- Import: {results['import_attempts']} rounds of one fresh interpreter per system, "
        "in turn; the best time, and the median and range of the per-round ratios.",
        "",
        "## Durable checkpoint overhead per step",
        "",
        "| " + " | ".join(DURABLE_HEADER) + " |",
        "| " + " | ".join("---" for _ in DURABLE_HEADER) + " |",
        *("| " + " | ".join(row) + " |" for row in durable_rows(results)),
        "",
        "Same 20-step run, median of interleaved runs, minus the same system's run without "
        "persistence. operative's PostgreSQL is a throwaway local cluster with `fsync=off`; "
        "SQLite on both sides is a local file (operative: WAL, `synchronous=NORMAL`).",
    ]
    for name in ("fixed-cost", "import", "gc", "memory"):
        lines += ["", f"## {report.SECTIONS[name][0]}", "", report.render(name, found)]
    if results["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in results["notes"]]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib  # type: ignore[import-not-found,unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]

    systems = results["systems"]
    per = [results["per_step"][s]["us_per_step"] for s in systems]
    size = str(results["batch_sizes"][0])
    mem = [results["concurrency"][size].get(s, {}).get("kib_per_run", 0.0) for s in systems]
    colours = [
        "#999999"
        if s == "floor"
        else "#666666"
        if s == SAME_WORK
        else "#1f77b4"
        if s == "operative"
        else "#ff7f0e"
        for s in systems
    ]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, values, title, unit in (
        (left, per, f"per-step overhead ({STEPS}-step run, 1 tool call/step)", "µs per step"),
        (right, mem, f"memory per in-flight run ({int(size):,} concurrent runs)", "KiB per run"),
    ):
        bars = axis.bar(systems, values, color=colours)
        axis.set_yscale("log")
        axis.set_title(title, fontsize=10)
        axis.set_ylabel(f"{unit} (log scale)")
        axis.tick_params(axis="x", labelrotation=20)
        for bar, value in zip(bars, values, strict=True):
            axis.annotate(
                f"{value:,.1f}",
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=8,
            )
    fig.suptitle(f"{results['machine']['cpu']}, {results['machine']['cores']} cores", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def versions(systems: Sequence[str]) -> dict[str, str]:
    from importlib import metadata

    names = ["trio", "msgspec", "operative"]
    extra = {
        "pydantic-ai": ["pydantic-ai-slim", "pydantic"],
        "openai-agents": ["openai-agents", "openai"],
        "langgraph": ["langgraph", "langchain-core", "langgraph-checkpoint-sqlite"],
    }
    for s in systems:
        names += extra.get(s, [])
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--repetitions", type=int, default=None, help="per-step runs (100)")
    parser.add_argument(
        "--batches", type=int, nargs="+", default=None, help="batch sizes (2000 10000)"
    )
    parser.add_argument(
        "--batch-limit",
        type=float,
        default=None,
        help="seconds after which a peer's batch is stopped (60; 20 with --quick)",
    )
    parser.add_argument("--imports", type=int, default=None, help="import attempts (7)")
    parser.add_argument("--no-postgres", action="store_true", help="operative on SQLite only")
    parser.add_argument("--no-durable", action="store_true", help="skip scenario 5")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count the batch under virtual time with valgrind (scenario 8)",
    )
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--markdown", metavar="PATH")
    parser.add_argument("--plot", metavar="PATH")
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (5 if args.quick else 100)
    warmup = 1 if args.quick else 10
    batches = args.batches or ([50] if args.quick else [2000, 10000])
    attempts = args.imports or (2 if args.quick else 7)
    fresh_rounds = 1 if args.quick else FRESH_ROUNDS
    batch_rounds = 1 if args.quick else BATCH_ROUNDS
    memory_runs = 50 if args.quick else MEMORY_RUNS
    args.batch_limit = args.batch_limit or (20.0 if args.quick else BATCH_LIMIT)
    results_limit = args.batch_limit

    notes: list[str] = []
    systems = []
    for s in args.systems:
        why = available(s)
        if why is None:
            systems.append(s)
        else:
            notes.append(f"{s} skipped: {why}")
    if "floor" not in systems:
        systems.insert(0, "floor")
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "versions": versions(systems),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": list(os.getloadavg()),
        "quick": args.quick,
        "systems": systems,
        "batch_sizes": batches,
        "import_attempts": attempts,
        "batch_limit_s": results_limit,
        "notes": notes,
    }

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    reps = ["--repetitions", str(repetitions), "--warmup", str(warmup)]
    progress(f"per-step: {', '.join(systems)}, interleaved in one process")
    results["per_step"] = in_child(",".join(systems), "per-step", *reps)
    results["parallel"] = {}
    for s in systems:
        progress(f"parallel tools: {s}")
        results["parallel"][s] = in_child(
            s, "parallel", "--repetitions", "3" if args.quick else "9"
        )
    results["concurrency"] = {}
    stopped: dict[str, int] = {}
    ours = [s for s in systems if s in OURS]
    for n in sorted(batches):
        results["concurrency"][str(n)] = {}
        for s in systems:
            if s in stopped:
                # It could not finish a smaller batch in time; this one would only
                # spend minutes starting runs it cannot finish either.
                results["concurrency"][str(n)][s] = {"runs": n, "not_run_after": stopped[s]}
                continue
            if s in ours and n == min(batches):
                continue  # below: in rounds, alternating with the floor
            progress(f"{n:,} concurrent runs: {s}")
            limit = [] if s in ours else ["--limit", str(args.batch_limit)]
            result = in_child(s, "concurrency", "--runs", str(n), *limit)
            results["concurrency"][str(n)][s] = result
            if result.get("stopped_after_s"):
                stopped[s] = n
    # The smallest batch of the floor and operative: fresh processes in turn, so peak RSS
    # per run (which only a fresh process can read) comes with a spread too.
    n = min(batches)
    fresh: dict[str, list[dict[str, Any]]] = {s: [] for s in ours}
    for i in range(fresh_rounds):
        for s in ours:
            progress(f"{n:,} concurrent runs: {s}, fresh process {i + 1}/{fresh_rounds}")
            fresh[s].append(in_child(s, "concurrency", "--runs", str(n)))
    for s in ours:
        walls = [r["wall_s"] for r in fresh[s]]
        middle = sorted(fresh[s], key=lambda r: r["wall_s"])[len(walls) // 2]
        results["concurrency"][str(n)][s] = {
            **middle,
            "fresh_rounds": len(walls),
            "wall_s_rounds": spread(walls),
            "kib_per_run_rounds": spread(r["kib_per_run"] for r in fresh[s]),
            "x_floor_wall": ratio_spread(walls, [r["wall_s"] for r in fresh["floor"]]),
            "x_floor_kib_per_run": ratio_spread(
                [r["kib_per_run"] for r in fresh[s]],
                [r["kib_per_run"] for r in fresh["floor"]],
            ),
        }
        if SAME_WORK in fresh:
            results["concurrency"][str(n)][s].update(
                x_same_work_wall=ratio_spread(walls, [r["wall_s"] for r in fresh[SAME_WORK]]),
                x_same_work_kib_per_run=ratio_spread(
                    [r["kib_per_run"] for r in fresh[s]],
                    [r["kib_per_run"] for r in fresh[SAME_WORK]],
                ),
            )
    progress(f"{n:,} concurrent runs: {', '.join(ours)} in one process, GC on and off")
    results["batch_rounds"] = in_child(
        ",".join(ours), "batch-rounds", "--runs", str(n), "--repetitions", str(batch_rounds)
    )
    progress(f"{n:,} and {2 * n:,} runs in lockstep (MockClock): {', '.join(ours)}, peak RSS")
    results["virtual_memory"] = virtual_memory(ours, n, fresh_rounds)
    results["memory"] = {}
    for s in ours:
        progress(f"memory per in-flight run: {s}, {memory_runs} runs under tracemalloc")
        results["memory"][s] = in_child(
            s, "memory", "--runs", str(memory_runs), "--repetitions", "12"
        )
    if args.instructions:
        if shutil.which("valgrind") is None:
            notes.append("--instructions: valgrind is not installed; the batch was not counted")
        else:
            progress(f"{n:,} concurrent runs: {', '.join(ours)} under valgrind, virtual time")
            results["batch_instructions"] = batch_instructions(ours, n)
    progress(f"import time: {', '.join(systems)}, {attempts} rounds")
    results["import"] = import_rounds(systems, attempts)
    results["import_ms"] = {s: results["import"][s]["best_ms"] for s in systems}
    results["durable"] = {}
    if not args.no_durable:
        durable_reps = [
            "--repetitions",
            str(5 if args.quick else 30),
            "--warmup",
            "1" if args.quick else "3",
        ]
        for s in ("operative", "langgraph"):
            if s in systems:
                progress(f"durable checkpoints: {s}")
                extra = ["--no-postgres"] if args.no_postgres else []
                found = in_child(s, "durable", *durable_reps, *extra)
                results["durable"][s] = found
                notes.extend(found["notes"])
    results["load_after"] = list(os.getloadavg())
    results["elapsed_s"] = time.perf_counter() - started
    progress("done")

    header, rows = headline_rows(results)
    print_table("operative against the field (ratios to the bare Trio floor)", header, rows)
    print_table("durable checkpoint overhead per step", DURABLE_HEADER, durable_rows(results))
    import report

    found = report.Results.of({"peers": results})
    for name in ("fixed-cost", "import", "gc", "memory"):
        print(f"\n{report.SECTIONS[name][0]}\n\n{report.render(name, found)}")
    for note in notes:
        print(f"\nnote: {note}")
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
        print(f"wrote {args.markdown}")
    if args.plot:
        plot(results, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
