"""What one step of operative's loop costs, and how many runs fit in flight at once.

Measures, in one invocation, against *the floor* (a bare hand-written Trio agent loop
over plain dicts doing the same logical work, with one ``trio.lowlevel.checkpoint()``
per step):

1. **Per-step overhead.** A 20-step run, one tool call per step (an ``add(a, b)``
   async tool, arguments as the provider's raw JSON string) for 19 steps and then a
   final text answer, through ``operative.open_run(..., stop_when=no_tool_calls())``.
   The model is a plain async function returning prebuilt responses (no sleeping), so
   what is timed is the loop itself. Reported: median microseconds per step over many
   runs (after warm-up, ``time.perf_counter_ns``), run set-up amortised in; the run's
   fixed cost (a 1-step run) and the marginal cost of one more step; the same with a
   ``"*"`` event listener attached (every event built and delivered).
2. **Concurrency.** ``--runs`` (default 2,000) runs of 5 steps (a tool call on 4, then
   an answer), the model sleeping 20 ms of real time per call, all started in one
   nursery. Reported: wall time, runs/s, and memory per in-flight run: the growth of
   the process's peak RSS (``VmHWM``, cross-checked by sampling ``VmRSS`` every 2 ms)
   over the RSS before the batch, divided by the number of runs; the process CPU time
   of the batch (wall time on a shared machine also counts the neighbours); and the
   ``tracemalloc`` peak per run in a second, untimed batch. Each side runs in a fresh
   child process, so neither inherits the other's freed memory.
   The same through ``agent.run(...)``, which runs the loop in the caller's task when
   nothing must run beside it (``open_run``'s block may, so it keeps its nursery).
3. **Per in-flight run.** All runs parked at step 3's model call: the GC-tracked objects
   and the ``tracemalloc`` bytes per run (by type and by allocating line), and the
   collector's share of a batch's CPU time (the batch with ``gc`` on, then off).
4. Ratios to the floor for every figure, and the machine.

``--profile`` adds a cProfile of the per-step path: the top functions of operative's
own code, in microseconds per step.

Usage::

    .venv/bin/python benchmarks/bench_loop.py                # full run
    .venv/bin/python benchmarks/bench_loop.py --quick        # smoke run, a few seconds
    .venv/bin/python benchmarks/bench_loop.py --json out.json --runs 5000 --profile
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved, machine, median, print_table, read_status_kib, write_json

import operative
import operative.budgets
import operative.retry
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    Toolbox,
    ToolCall,
    open_run,
    stop_when,
    tool,
)

STEPS = 20
"""Steps in the per-step run: 19 with one tool call, then the answer."""
CONCURRENT_STEPS = 5
MODEL_LATENCY = 0.020
"""Seconds each generate call sleeps in the concurrency batch (real time)."""

TARGET_US_PER_STEP = 30.0
TARGET_BATCH_WALL = 1.5
TARGET_KIB_PER_RUN = 25.0
TARGET_BATCH_RUNS = 2000

# --------------------------------------------------------------------------------------
# operative side
# --------------------------------------------------------------------------------------


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLBOX = Toolbox([add])
NO_TOOL_CALLS = stop_when.no_tool_calls()


def operative_script(steps: int) -> tuple[GenerateResponse, ...]:
    calls = [
        GenerateResponse(
            tool_calls=(ToolCall(id=f"call_{k}", name="add", arguments=f'{{"a": {k}, "b": 1}}'),)
        )
        for k in range(1, steps)
    ]
    return (*calls, GenerateResponse(content="the answer is 42"))


def operative_model(steps: int, latency: float = 0.0) -> Callable[..., Awaitable[Any]]:
    script = operative_script(steps)
    if latency:

        async def slow(request: GenerateRequest) -> GenerateResponse:
            await trio.sleep(latency)
            return script[request.step - 1]

        return slow

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    return generate


def _noop(event: object) -> None:
    pass


# An inactive budget (limits far above what the run spends) and a retry policy that
# never fires: what the economics features cost a run that does not need them.
GUARDED: dict[str, Any] = {
    "budget": operative.budgets.Budget(max_tokens=10**9, max_requests=10**6, max_tool_calls=10**6),
    "retry": operative.retry.RetryOptions(),
}


async def operative_run(
    generate: Any, *, listen: bool = False, guarded: bool = False, **options: Any
) -> str:
    """One run of the benchmark's work; ``options`` go to ``open_run`` (``durable=``,
    ``instrumentation=``: the other benchmarks time the same run with them)."""
    conversation = Conversation()
    conversation.append_user_message("What is 1 + 1, twenty times over?")
    if guarded:
        options = {**GUARDED, **options}
    async with open_run(
        generate=generate,
        conversation=conversation,
        toolbox=TOOLBOX,
        stop_when=NO_TOOL_CALLS,
        **options,
    ) as run:
        if listen:
            run.add_listener("*", _noop)
    result = await run.result()
    if result.finish_reason != "stop-condition":  # pragma: no cover - a broken loop
        raise RuntimeError(f"run ended with {result.finish_reason}: {result.error!r}")
    return result.content


async def operative_agent_run(generate: Any) -> str:
    """The same run through ``agent.run(...)``: nothing runs beside the loop, so it runs
    in the caller's task with no nursery (``open_run``'s block may run beside it)."""
    agent = AGENTS.get(generate)
    if agent is None:
        agent = AGENTS[generate] = operative.create_agent(
            generate=generate, toolbox=TOOLBOX, stop_when=NO_TOOL_CALLS
        )
    result = await agent.run("What is 1 + 1, twenty times over?")
    if result.finish_reason != "stop-condition":  # pragma: no cover - a broken loop
        raise RuntimeError(f"run ended with {result.finish_reason}: {result.error!r}")
    return result.content


AGENTS: dict[Any, operative.Agent] = {}


# --------------------------------------------------------------------------------------
# the floor: a minimal honest agent loop, plain dicts
# --------------------------------------------------------------------------------------


async def floor_add(a: int, b: int) -> int:
    return a + b


FLOOR_TOOLS: dict[str, tuple[Callable[..., Awaitable[Any]], dict[str, type]]] = {
    "add": (floor_add, {"a": int, "b": int}),
}


def _floor_script(steps: int) -> tuple[dict[str, Any], ...]:
    calls = [
        {
            "content": "",
            "tool_calls": [
                {"id": f"call_{k}", "name": "add", "arguments": f'{{"a": {k}, "b": 1}}'}
            ],
        }
        for k in range(1, steps)
    ]
    return (*calls, {"content": "the answer is 42", "tool_calls": []})


def floor_model(steps: int, latency: float = 0.0) -> Callable[..., Awaitable[Any]]:
    script = _floor_script(steps)
    if latency:

        async def slow(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
            await trio.sleep(latency)
            return script[step - 1]

        return slow

    async def generate(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
        return script[step - 1]

    return generate


async def floor_run(generate: Any, maximum_steps: int = 25) -> str:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 1 + 1, twenty times over?"}
    ]
    loads, dumps = json.loads, json.dumps
    for step in range(1, maximum_steps + 1):
        await trio.lowlevel.checkpoint()
        response = await generate(messages, step)
        calls = response["tool_calls"]
        messages.append({"role": "assistant", "content": response["content"], "tool_calls": calls})
        if not calls:
            return response["content"]  # type: ignore[no-any-return]
        for call in calls:
            entry = FLOOR_TOOLS.get(call["name"])
            try:
                if entry is None:
                    raise LookupError(f"unknown tool {call['name']!r}")
                fn, params = entry
                arguments = loads(call["arguments"])
                if not isinstance(arguments, dict) or any(
                    type(arguments.get(name)) is not kind for name, kind in params.items()
                ):
                    raise TypeError("invalid arguments")
                content = dumps(await fn(**arguments))
            except Exception as exc:
                content = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages[-1]["content"]  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------
# 1. per-step overhead
# --------------------------------------------------------------------------------------


async def measure_per_step(repetitions: int, warmup: int) -> dict[str, Any]:
    op20, op1 = operative_model(STEPS), operative_model(1)
    fl20, fl1 = floor_model(STEPS), floor_model(1)
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "floor": lambda: floor_run(fl20),
        "floor_1": lambda: floor_run(fl1),
        "operative": lambda: operative_run(op20),
        "operative_1": lambda: operative_run(op1),
        "operative_events": lambda: operative_run(op20, listen=True),
        "operative_events_1": lambda: operative_run(op1, listen=True),
        "operative_guarded": lambda: operative_run(op20, guarded=True),
        "operative_guarded_1": lambda: operative_run(op1, guarded=True),
        "operative_agent": lambda: operative_agent_run(op20),
        "operative_agent_1": lambda: operative_agent_run(op1),
    }
    samples = await interleaved(cases, warmup, repetitions)
    runs_us = {name: median(values) / 1000 for name, values in samples.items()}
    out: dict[str, Any] = {"steps": STEPS, "repetitions": repetitions, "warmup": warmup}
    for name in ("floor", "operative", "operative_events", "operative_guarded", "operative_agent"):
        whole, one = runs_us[name], runs_us[f"{name}_1"]
        ordered = sorted(samples[name])
        out[name] = {
            "us_per_step": whole / STEPS,
            "us_per_step_p10": ordered[len(ordered) // 10] / 1000 / STEPS,
            "us_per_run": whole,
            "us_run_fixed": one,
            "us_per_step_marginal": (whole - one) / (STEPS - 1),
        }
    return out


# --------------------------------------------------------------------------------------
# 2. concurrency (each side in a fresh child process)
# --------------------------------------------------------------------------------------


SIDES = ("floor", "operative", "operative_agent")
"""The concurrency batch's sides: the floor, ``open_run``, ``agent.run``."""


def _one_run(side: str, generate_floor: Any, generate_op: Any) -> Callable[[], Awaitable[Any]]:
    if side == "operative":
        return lambda: operative_run(generate_op)
    if side == "operative_agent":
        return lambda: operative_agent_run(generate_op)
    return lambda: floor_run(generate_floor)


async def _batch(side: str, runs: int, sampler: bool) -> dict[str, Any]:
    one = _one_run(
        side,
        floor_model(CONCURRENT_STEPS, MODEL_LATENCY),
        operative_model(CONCURRENT_STEPS, MODEL_LATENCY),
    )

    state = {"in_flight": 0, "max_in_flight": 0, "done": 0, "peak_rss": 0, "in_flight_at_peak": 0}

    async def tracked() -> None:
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        try:
            await one()
        finally:
            state["in_flight"] -= 1
            state["done"] += 1

    async def sample(cancel: trio.CancelScope) -> None:
        with cancel:
            while True:
                rss = read_status_kib("VmRSS")["VmRSS"]
                if rss > state["peak_rss"]:
                    state["peak_rss"] = rss
                    state["in_flight_at_peak"] = state["in_flight"]
                await trio.sleep(0.002)

    sampler_scope = trio.CancelScope()
    start = time.perf_counter()
    async with trio.open_nursery() as outer:
        if sampler:
            outer.start_soon(sample, sampler_scope)
        async with trio.open_nursery() as nursery:
            for _ in range(runs):
                nursery.start_soon(tracked)
        wall = time.perf_counter() - start
        sampler_scope.cancel()
    if state["done"] != runs:  # pragma: no cover - a broken loop
        raise RuntimeError(f"only {state['done']} of {runs} runs finished")
    return {"wall_s": wall, **state}


PARK_STEP = 3
"""The step at which the runs of the object count wait for each other."""


async def _parked(side: str, runs: int, top: int) -> dict[str, Any]:
    """Start ``runs`` runs, let every one reach the model call of step ``PARK_STEP``
    (mid-run: the run's tasks, frames and records all alive), then count what the
    collector tracks and what ``tracemalloc`` sees allocated, per run."""
    arrived = [0]
    all_parked = trio.Event()
    release = trio.Event()
    op_script = operative_script(CONCURRENT_STEPS)
    fl_script = _floor_script(CONCURRENT_STEPS)

    async def park() -> None:
        arrived[0] += 1
        if arrived[0] == runs:
            all_parked.set()
        await release.wait()

    async def op_generate(request: GenerateRequest) -> GenerateResponse:
        if request.step == PARK_STEP:
            await park()
        else:
            await trio.lowlevel.checkpoint()
        return op_script[request.step - 1]

    async def fl_generate(messages: list[dict[str, Any]], step: int) -> dict[str, Any]:
        if step == PARK_STEP:
            await park()
        else:
            await trio.lowlevel.checkpoint()
        return fl_script[step - 1]

    one = _one_run(side, fl_generate, op_generate)
    out: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:
        await trio.lowlevel.checkpoint()
        gc.collect()
        before_types = Counter(type(o).__name__ for o in gc.get_objects())
        tracemalloc.start()
        before_trace = tracemalloc.take_snapshot()
        for _ in range(runs):
            nursery.start_soon(one)
        await all_parked.wait()
        parked_trace = tracemalloc.take_snapshot()
        tracemalloc.stop()
        gc.collect()
        parked_types = Counter(type(o).__name__ for o in gc.get_objects())
        grown = parked_types - before_types
        out["gc_objects_per_run"] = sum(grown.values()) / runs
        out["gc_objects_by_type"] = {
            name: count / runs for name, count in grown.most_common(top) if count >= runs
        }
        diff = parked_trace.compare_to(before_trace, "lineno")
        out["traced_kib_per_run_parked"] = sum(d.size_diff for d in diff) / 1024 / runs
        out["traced_by_line"] = [
            {
                "where": f"{Path(d.traceback[0].filename).name}:{d.traceback[0].lineno}",
                "bytes_per_run": d.size_diff / runs,
                "blocks_per_run": d.count_diff / runs,
            }
            for d in sorted(diff, key=lambda d: d.size_diff, reverse=True)[:top]
        ]
        release.set()
    return out


def _gc_share(side: str, runs: int) -> dict[str, Any]:
    """CPU time of a batch with the collector on, then off (alternating, 3 rounds each):
    the collector's share of the batch."""
    with_gc: list[float] = []
    without: list[float] = []
    for _ in range(3):
        for enabled, samples in ((True, with_gc), (False, without)):
            gc.collect()
            if not enabled:
                gc.disable()
            try:
                cpu = time.process_time()
                trio.run(_batch, side, runs, False)
                samples.append(time.process_time() - cpu)
            finally:
                gc.enable()
    on, off = median(with_gc), median(without)
    return {"cpu_s_gc_on": on, "cpu_s_gc_off": off, "gc_share": (on - off) / on if on else 0.0}


def child_concurrency(side: str, runs: int) -> dict[str, Any]:
    """Runs in a fresh process: warm up, one timed batch (RSS), one traced batch."""
    trio.run(_batch, side, min(10, runs), False)  # import-time and first-call costs
    gc.collect()
    before = read_status_kib("VmRSS", "VmHWM")
    collections = sum(stat["collections"] for stat in gc.get_stats())
    cpu = time.process_time()
    timed = trio.run(_batch, side, runs, True)
    cpu = time.process_time() - cpu
    collections = sum(stat["collections"] for stat in gc.get_stats()) - collections
    after = read_status_kib("VmRSS", "VmHWM")
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    trio.run(_batch, side, runs, False)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    objects = trio.run(_parked, side, runs, 12)
    share = _gc_share(side, runs)
    growth_hwm = after["VmHWM"] - before["VmRSS"]
    growth_sampled = timed["peak_rss"] - before["VmRSS"]
    return {
        "runs": runs,
        "steps": CONCURRENT_STEPS,
        "model_latency_s": MODEL_LATENCY,
        "wall_s": timed["wall_s"],
        "runs_per_s": runs / timed["wall_s"],
        "cpu_s": cpu,
        "gc_collections": collections,
        "max_in_flight": timed["max_in_flight"],
        "in_flight_at_sampled_peak": timed["in_flight_at_peak"],
        "rss_before_kib": before["VmRSS"],
        "hwm_after_kib": after["VmHWM"],
        "kib_per_run_rss": growth_hwm / runs,
        "kib_per_run_rss_sampled": growth_sampled / runs,
        "kib_per_run_tracemalloc": traced_peak / 1024 / runs,
        **objects,
        **share,
    }


def measure_concurrency(runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in SIDES:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", side, "--runs", str(runs)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the {side} batch failed:\n{proc.stderr}")
        out[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------------------
# profile of the per-step path
# --------------------------------------------------------------------------------------


def profile_per_step(runs: int, top: int) -> list[dict[str, Any]]:
    """cProfile ``runs`` 20-step runs; operative's own functions by self time per step.

    Only Python-level functions appear: msgspec struct construction and other C calls
    are charged to their caller's self time. cProfile inflates every Python call several
    times over, so compare rows with each other, not with the timings above.
    """
    import cProfile
    import pstats

    generate = operative_model(STEPS)

    async def many() -> None:
        for _ in range(runs):
            await operative_run(generate)

    trio.run(many)  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    trio.run(many)
    profiler.disable()
    stats = pstats.Stats(profiler)
    root = str(Path(operative.__file__).resolve().parent)
    steps = runs * STEPS
    rows = []
    for (filename, line, name), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        if filename.startswith(root):
            where = f"{Path(filename).relative_to(Path(root).parent)}:{line}"
        elif filename.startswith("<attrs generated") and " operative." in filename:
            where = filename.strip("<>").split()[-1]  # an attrs class's generated method
        else:
            continue
        rows.append(
            {
                "function": f"{where}({name})",
                "calls_per_step": ncalls / steps,
                "self_us_per_step": tottime * 1e6 / steps,
                "cumulative_us_per_step": cumtime * 1e6 / steps,
            }
        )
    rows.sort(key=lambda row: row["self_us_per_step"], reverse=True)
    return rows[:top]


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def _ratio(value: float, floor: float) -> str:
    return f"{value / floor:.1f}x" if floor else "-"


def report(results: dict[str, Any]) -> None:
    m = results["machine"]
    print(
        f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, "
        f"trio {m.get('trio', '?')}, msgspec {m.get('msgspec', '?')}"
    )
    per = results["per_step"]
    floor = per["floor"]
    rows = []
    for label, key in (
        ("floor (bare trio loop)", "floor"),
        ("operative", "operative"),
        ('operative + "*" listener', "operative_events"),
        ("operative + idle budget + retry", "operative_guarded"),
        ("operative, agent.run (in the caller's task)", "operative_agent"),
    ):
        row = per[key]
        rows.append(
            [
                label,
                f"{row['us_per_step']:.1f}",
                _ratio(row["us_per_step"], floor["us_per_step"]),
                f"{row['us_per_step_p10']:.1f}",
                f"{row['us_per_step_marginal']:.1f}",
                _ratio(row["us_per_step_marginal"], floor["us_per_step_marginal"]),
                f"{row['us_run_fixed']:.1f}",
                _ratio(row["us_run_fixed"], floor["us_run_fixed"]),
            ]
        )
    print_table(
        f"per-step overhead: {per['steps']}-step run, 1 tool call/step, "
        f"median of {per['repetitions']} runs",
        [
            "",
            "us/step",
            "x floor",
            "p10",
            "marginal us/step",
            "x floor",
            "1-step run us",
            "x floor",
        ],
        rows,
    )
    conc = results["concurrency"]
    cf, co = conc["floor"], conc["operative"]
    rows = []
    sides = [("floor (bare trio loop)", cf), ("operative", co)]
    if "operative_agent" in conc:
        sides.append(("operative, agent.run", conc["operative_agent"]))
    for label, row in sides:
        rows.append(
            [
                label,
                f"{row['wall_s']:.3f}",
                _ratio(row["wall_s"], cf["wall_s"]),
                f"{row['runs_per_s']:.0f}",
                _ratio(row["runs_per_s"], cf["runs_per_s"]),
                f"{row['cpu_s']:.3f}",
                _ratio(row["cpu_s"], cf["cpu_s"]),
                f"{row['kib_per_run_rss']:.1f}",
                _ratio(row["kib_per_run_rss"], cf["kib_per_run_rss"]),
                f"{row['kib_per_run_tracemalloc']:.1f}",
                _ratio(row["kib_per_run_tracemalloc"], cf["kib_per_run_tracemalloc"]),
            ]
        )
    print_table(
        f"concurrency: {co['runs']} runs x {co['steps']} steps, model sleeps "
        f"{co['model_latency_s'] * 1000:.0f} ms, one nursery (max in flight: "
        f"{co['max_in_flight']})",
        [
            "",
            "wall s",
            "x floor",
            "runs/s",
            "x floor",
            "cpu s",
            "x floor",
            "KiB/run RSS",
            "x floor",
            "KiB/run traced",
            "x floor",
        ],
        rows,
    )
    rows = []
    for label, row in sides:
        rows.append(
            [
                label,
                f"{row['gc_objects_per_run']:.1f}",
                _ratio(row["gc_objects_per_run"], cf["gc_objects_per_run"]),
                f"{row['traced_kib_per_run_parked']:.2f}",
                _ratio(row["traced_kib_per_run_parked"], cf["traced_kib_per_run_parked"]),
                f"{row['gc_share'] * 100:.0f}%",
            ]
        )
    print_table(
        f"per in-flight run, all {co['runs']} runs parked at step {PARK_STEP}'s model call; "
        "the collector's share of a batch's CPU time (gc on vs gc.disable())",
        ["", "GC-tracked objects", "x floor", "traced KiB", "x floor", "GC share"],
        rows,
    )
    for label, row in sides[1:]:
        print(f"\n{label}: GC-tracked objects per run by type")
        print("  " + ", ".join(f"{n} {c:.1f}" for n, c in row["gc_objects_by_type"].items()))
        print(f"{label}: traced bytes per run by allocating line")
        for entry in row["traced_by_line"]:
            print(
                f"  {entry['where']:40s} {entry['bytes_per_run']:8.0f} B "
                f"{entry['blocks_per_run']:5.1f} blocks"
            )
    targets = results["targets"]
    print("\ntargets:")
    for name, target in targets.items():
        verdict = "ok" if target["met"] else "MISSED"
        print(f"  {name}: {target['value']:.2f} (target <= {target['limit']}) {verdict}")
    if results.get("profile"):
        print_table(
            "profile: operative's own functions by self time (cProfile inflates every "
            "call; compare rows, not totals)",
            ["function", "calls/step", "self us/step", "cum us/step"],
            [
                [
                    row["function"],
                    f"{row['calls_per_step']:.2f}",
                    f"{row['self_us_per_step']:.2f}",
                    f"{row['cumulative_us_per_step']:.2f}",
                ]
                for row in results["profile"]
            ],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--runs", type=int, default=None, help="concurrent runs (2000)")
    parser.add_argument("--repetitions", type=int, default=None, help="timed runs (300)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--profile", action="store_true", help="cProfile the per-step path")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    runs = args.runs or (200 if args.quick else TARGET_BATCH_RUNS)
    if args.child:
        print(json.dumps(child_concurrency(args.child, runs)))
        return 0
    repetitions = args.repetitions or (20 if args.quick else 300)
    warmup = 3 if args.quick else 30

    results: dict[str, Any] = {"machine": machine(), "quick": args.quick}
    results["per_step"] = trio.run(measure_per_step, repetitions, warmup)
    results["concurrency"] = measure_concurrency(runs)
    per, conc = results["per_step"], results["concurrency"]["operative"]
    results["targets"] = {
        "operative us/step": {
            "value": per["operative"]["us_per_step"],
            "limit": TARGET_US_PER_STEP,
        },
        f"operative {runs}-run batch wall s": {
            "value": conc["wall_s"],
            "limit": TARGET_BATCH_WALL,
        },
        "operative KiB per in-flight run": {
            "value": conc["kib_per_run_rss"],
            "limit": TARGET_KIB_PER_RUN,
        },
    }
    for target in results["targets"].values():
        target["met"] = target["value"] <= target["limit"]
    if args.profile:
        results["profile"] = profile_per_step(20 if args.quick else 200, 25)
    report(results)
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
