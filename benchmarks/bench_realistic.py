# ruff: noqa: RUF002  (the tables print typographic signs on purpose)
"""The realistic-adapter variant: the model builds each step's response when it is called.

``bench_peers.py``'s adapters replay responses built before the run, so their per-step
figures leave out what a provider adapter pays every step: building the response
record, its tool calls and its usage from the provider's JSON. Here each system's model
builds them every step, in the system's own types (``benchmarks/realistic/``):
operative a ``GenerateResponse`` with a ``ToolCall`` (arguments a mapping) and a
``Usage``; the floor, a bare Trio loop over plain dicts with one
``trio.lowlevel.checkpoint()`` a step, dicts of the same shape; each peer its own
response classes (pydantic-ai ``ModelResponse``, openai-agents ``ModelResponse``,
langgraph's ``AIMessage`` under ``create_react_agent``).

The guard for "one run, one path" sets operative (``agent.run``) against the floor:

1. **Per step.** A ``--steps`` (20) step run (one ``add`` call a step, then the answer)
   and a 1-step run, every system in one process, in ``ROUNDS`` (10) rounds of each
   system in turn, the heap frozen after the imports (``bench_peers.py``'s scenario 1).
   Median µs per step of the long run (set-up amortised in), the marginal step, the
   1-step run; per-round ratios to the floor, and each peer's per-round ratio to
   operative (how many times slower than operative it is). Goals: operative ≤ 3× the
   floor; each peer ≥ 50× operative. In the same rounds, unless ``--no-prebuilt``, the
   floor's and operative's runs of ``bench_peers.py`` (``floor-prebuilt``,
   ``operative-prebuilt``: the same work over responses built before the run), so
   ``over_prebuilt_us_per_step`` says how much more a step costs each when its model
   builds the response (less the JSON decoding of the arguments, which the prebuilt
   adapters leave to the loop: they pass the arguments as a JSON string).
2. **Batch wall time.** ``--runs`` (2,000) concurrent 5-step runs, the model sleeping
   20 ms of real time per call, the floor's and operative's batches in one process in
   ``--batch-rounds`` (5) rounds, after a warm-up and with the heap frozen; the cyclic GC
   on. Goal: ≤ 1.5× the floor (the median of per-round ratios).
3. **Peak RSS per in-flight run.** The same batch in a fresh process per system, in
   turn, ``--fresh-rounds`` (3) rounds: growth of ``VmHWM`` over the RSS before the batch,
   per run (``bench_peers.child_concurrency``). Also in lockstep on
   ``trio.testing.MockClock`` (``bench_peers.child_virtual_memory``: every run at each
   step in the same tick, so the peak does not depend on how far the runs drifted
   apart), at ``--runs`` and twice that, for the marginal KiB of one more run. Goal:
   ≤ 1.5× the floor.

Every tool execution is counted and checked against the work asked for. Peers whose
packages are missing are skipped and named in the notes (``nox -s bench`` installs them;
the project's own venv does not have them).

``--json PATH`` writes every figure; ``benchmarks/report.py`` renders ``realistic.json``
(and ``realistic_before.json``, the baseline run of this variant) as the section
"Realistic adapter (one path)" of ``summary.md``. ``--quick`` is a smoke run.

Usage::

    nox -s bench                                      # writes results/realistic.json
    .venv/bin/python benchmarks/bench_realistic.py --quick --systems floor operative
    .nox/bench/bin/python benchmarks/bench_realistic.py --json OUT.json   # this part alone
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peers as bp
from _common import machine, median, print_table, ratio_spread, spread, write_json

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
STEPS = 20
ROUNDS = 10
"""Per-step samples are taken in this many rounds, every system once per round."""
SYSTEMS: dict[str, str] = {
    "floor": "realistic.floor",
    "operative": "realistic.operative_side",
    "pydantic-ai": "realistic.pydantic_ai_side",
    "openai-agents": "realistic.openai_agents_side",
    "langgraph": "realistic.langgraph_side",
    # bench_peers.py's adapters, which replay prebuilt responses: what building costs.
    "floor-prebuilt": "peers.floor",
    "operative-prebuilt": "peers.operative_side",
}
OURS = ("floor", "operative")
PEERS = ("pydantic-ai", "openai-agents", "langgraph")
PREBUILT = {"floor": "floor-prebuilt", "operative": "operative-prebuilt"}
"""Per-step only: the same runs with responses built before the run."""
BATCH_STEPS = bp.CONCURRENT_STEPS
MODEL_LATENCY = bp.MODEL_LATENCY

# --------------------------------------------------------------------------------------
# child side: one scenario, printed as one JSON line
# --------------------------------------------------------------------------------------


def child_per_step(
    names: Sequence[str], steps: int, repetitions: dict[str, int], warmup: int, rounds: int
) -> dict[str, Any]:
    """Every system's per-step figures in one process, in ``rounds`` rounds of each
    system in turn (``bench_peers.child_per_step``'s method; a peer takes fewer samples
    a round than the floor and operative, which are a hundred times faster)."""
    adapters = {name: importlib.import_module(SYSTEMS[name]) for name in names}
    runs = {n: (a.make_steps(steps, 0.0), a.make_steps(1, 0.0)) for n, a in adapters.items()}
    samples: dict[str, dict[str, list[int]]] = {n: {"long": [], "short": []} for n in names}
    medians: dict[str, dict[str, list[float]]] = {n: {"long": [], "short": []} for n in names}
    per_round = {n: -(-repetitions[n] // rounds) for n in names}
    gc.collect()
    gc.freeze()

    def sampler(name: str, count: int, record: bool) -> Callable[[], Coroutine[Any, Any, None]]:
        long, short = runs[name]
        read = adapters[name].answer

        async def main() -> None:
            taken: dict[str, list[int]] = {"long": [], "short": []}
            for _ in range(count):
                for kind, fn in (("long", long), ("short", short)):
                    start = time.perf_counter_ns()
                    answer = read(await fn())
                    taken[kind].append(time.perf_counter_ns() - start)
                    if answer != "the answer is 42":
                        raise RuntimeError(f"{name}: unexpected answer {answer!r}")
            if record:
                for kind, values in taken.items():
                    samples[name][kind] += values
                    medians[name][kind].append(median(values) / 1000)

        return main

    for name in names:
        bp._drive(adapters[name], sampler(name, warmup, record=False))
    for _ in range(rounds):
        for name in names:
            bp._drive(adapters[name], sampler(name, per_round[name], record=True))
    out: dict[str, Any] = {}
    floor, ours = medians.get("floor"), medians.get("operative")
    for name, adapter in adapters.items():
        bp._check_calls(adapter, (warmup + per_round[name] * rounds) * (steps - 1))
        long_ns, short_ns = samples[name]["long"], samples[name]["short"]
        whole, one = median(long_ns) / 1000, median(short_ns) / 1000
        mine = medians[name]
        out[name] = {
            "repetitions": len(long_ns),
            "rounds": rounds,
            "us_per_step": whole / steps,
            "us_per_step_marginal": (whole - one) / (steps - 1) if steps > 1 else None,
            "us_run_1_step": one,
            "us_per_step_rounds": spread(v / steps for v in mine["long"]),
            "us_run_1_step_rounds": spread(mine["short"]),
            "tool_calls": adapter.CALLS[0],
        }
        if floor is not None:
            out[name]["x_floor_per_step"] = ratio_spread(mine["long"], floor["long"])
            out[name]["x_floor_run_1_step"] = ratio_spread(mine["short"], floor["short"])
        if ours is not None and name in PEERS:
            # How many times operative's time a peer takes, round by round.
            out[name]["x_operative_per_step"] = ratio_spread(mine["long"], ours["long"])
    return out


def child_batch_rounds(names: Sequence[str], runs: int, rounds: int) -> dict[str, Any]:
    """``runs`` concurrent 5-step runs (20 ms model) of each system in one process, in
    ``rounds`` rounds of each in turn, after a 10-run warm-up and with the heap frozen;
    the cyclic GC on (``bench_peers.child_batch_rounds`` without its GC-off half)."""
    adapters = {name: importlib.import_module(SYSTEMS[name]) for name in names}
    made = {n: a.make_steps(BATCH_STEPS, MODEL_LATENCY) for n, a in adapters.items()}
    for name in names:
        bp._batch(adapters[name], made[name], 10)
    gc.collect()
    gc.freeze()
    taken: dict[str, dict[str, list[float]]] = {n: {"wall_s": [], "cpu_s": []} for n in names}
    for _ in range(rounds):
        for name in names:
            gc.collect()
            cpu, wall = time.process_time(), time.perf_counter()
            bp._batch(adapters[name], made[name], runs)
            taken[name]["wall_s"].append(time.perf_counter() - wall)
            taken[name]["cpu_s"].append(time.process_time() - cpu)
    out: dict[str, Any] = {"runs": runs, "steps": BATCH_STEPS, "rounds": rounds}
    floor = taken.get("floor")
    for name, adapter in adapters.items():
        bp._check_calls(adapter, (10 + rounds * runs) * (BATCH_STEPS - 1))
        t = taken[name]
        out[name] = {"wall_s": spread(t["wall_s"]), "cpu_s": spread(t["cpu_s"])}
        if floor is not None:
            out[name]["x_floor_wall"] = ratio_spread(t["wall_s"], floor["wall_s"])
            out[name]["x_floor_cpu"] = ratio_spread(t["cpu_s"], floor["cpu_s"])
    return out


def child(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("system")
    parser.add_argument("scenario")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--repetitions", default="")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args(argv)
    names = args.system.split(",")
    out: dict[str, Any]
    if args.scenario == "per-step":
        counts = [int(c) for c in args.repetitions.split(",")]
        out = child_per_step(
            names, args.steps, dict(zip(names, counts, strict=True)), args.warmup, args.rounds
        )
    elif args.scenario == "where":
        import operative

        out = {"path": os.path.dirname(operative.__file__)}
    elif args.scenario == "batch-rounds":
        out = child_batch_rounds(names, args.runs, args.rounds)
    else:
        adapter = importlib.import_module(SYSTEMS[args.system])
        if args.scenario == "concurrency":
            out = bp.child_concurrency(adapter, args.runs, None)
        elif args.scenario == "virtual-memory":
            out = bp.child_virtual_memory(adapter, args.runs)
        else:
            raise SystemExit(f"unknown scenario {args.scenario!r}")
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


def fresh_batches(runs: int, rounds: int) -> dict[str, Any]:
    """Scenario 3, real clock: the batch in a fresh process per system, in turn."""
    taken: dict[str, list[dict[str, Any]]] = {s: [] for s in OURS}
    for _ in range(rounds):
        for s in OURS:
            taken[s].append(in_child(s, "concurrency", "--runs", str(runs)))
    out: dict[str, Any] = {"runs": runs, "steps": BATCH_STEPS, "fresh_rounds": rounds}
    floor = taken["floor"]
    for s in OURS:
        mine = taken[s]
        out[s] = {
            "wall_s_rounds": spread(r["wall_s"] for r in mine),
            "kib_per_run_rounds": spread(r["kib_per_run"] for r in mine),
            "max_in_flight": min(r["max_in_flight"] for r in mine),
            "x_floor_wall": ratio_spread([r["wall_s"] for r in mine], [r["wall_s"] for r in floor]),
            "x_floor_kib_per_run": ratio_spread(
                [r["kib_per_run"] for r in mine], [r["kib_per_run"] for r in floor]
            ),
        }
    return out


def lockstep_memory(runs: int, rounds: int) -> dict[str, Any]:
    """Scenario 3 on ``MockClock``: ``runs`` and twice that per round, fresh processes
    in turn (``bench_peers.virtual_memory``'s method, on these adapters)."""
    taken: dict[str, dict[str, list[float]]] = {s: {"per_run": [], "marginal": []} for s in OURS}
    for _ in range(rounds):
        for s in OURS:
            small = in_child(s, "virtual-memory", "--runs", str(runs))
            large = in_child(s, "virtual-memory", "--runs", str(2 * runs))
            taken[s]["per_run"].append(small["kib_per_run"])
            taken[s]["marginal"].append((large["growth_kib"] - small["growth_kib"]) / runs)
    out: dict[str, Any] = {"runs": runs, "rounds": rounds}
    floor = taken["floor"]
    for s in OURS:
        mine = taken[s]
        out[s] = {
            "kib_per_run_rounds": spread(mine["per_run"]),
            "marginal_kib_per_run_rounds": spread(mine["marginal"]),
            "x_floor_kib_per_run": ratio_spread(mine["per_run"], floor["per_run"]),
            "x_floor_marginal": ratio_spread(mine["marginal"], floor["marginal"]),
        }
    return out


def operative_source() -> dict[str, Any]:
    """Which operative was measured: the package's directory, and for one inside this
    checkout the commit and whether ``operative/`` had uncommitted changes."""
    where = in_child("operative", "where")["path"]  # as the children import it
    found: dict[str, Any] = {"path": where}
    if Path(where).resolve().parent == ROOT:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
            ).stdout.strip()

        found["commit"] = git("rev-parse", "HEAD")
        found["uncommitted_changes"] = bool(git("status", "--porcelain", "--", "operative"))
    return found


def _x(figure: dict[str, Any] | None) -> str:
    if not figure:
        return "-"
    return f"{figure['median']:.2f}x ({figure['min']:.2f}-{figure['max']:.2f})"


def print_summary(results: dict[str, Any]) -> None:
    per = results["per_step"]
    steps = results["steps"]
    rows = [
        [
            s,
            f"{per[s]['us_per_step_rounds']['median']:,.1f}",
            "1x" if s == "floor" else _x(per[s].get("x_floor_per_step")),
            _x(per[s].get("x_operative_per_step")),
            f"{per[s]['us_run_1_step']:,.1f}",
        ]
        for s in results["systems"]
    ]
    print_table(
        f"realistic adapter: µs/step of a {steps}-step run (one process, in rounds)",
        ["", "µs/step", "x floor", "x operative", "1-step run µs"],
        rows,
    )
    batch, fresh, lock = results["batch_rounds"], results["concurrency"], results["lockstep"]
    op = "operative"
    print_table(
        f"realistic adapter: {batch['runs']:,} concurrent {BATCH_STEPS}-step runs",
        ["", "floor", "operative", "x floor"],
        [
            [
                "wall s (one process, GC on)",
                f"{batch['floor']['wall_s']['median']:.3f}",
                f"{batch[op]['wall_s']['median']:.3f}",
                _x(batch[op]["x_floor_wall"]),
            ],
            [
                "peak RSS KiB/run (fresh processes)",
                f"{fresh['floor']['kib_per_run_rounds']['median']:.1f}",
                f"{fresh[op]['kib_per_run_rounds']['median']:.1f}",
                _x(fresh[op]["x_floor_kib_per_run"]),
            ],
            [
                "peak RSS KiB/run (lockstep, MockClock)",
                f"{lock['floor']['kib_per_run_rounds']['median']:.1f}",
                f"{lock[op]['kib_per_run_rounds']['median']:.1f}",
                _x(lock[op]["x_floor_kib_per_run"]),
            ],
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    measured = [s for s in SYSTEMS if s not in PREBUILT.values()]
    parser.add_argument("--systems", nargs="+", default=measured, choices=measured)
    parser.add_argument("--steps", type=int, default=None, help="steps of the long run (20)")
    parser.add_argument(
        "--repetitions", type=int, default=None, help="per-step runs, floor and operative (300)"
    )
    parser.add_argument("--peer-repetitions", type=int, default=None, help="per peer (100)")
    parser.add_argument("--runs", type=int, default=None, help="batch size (2000)")
    parser.add_argument("--batch-rounds", type=int, default=None, help="(5)")
    parser.add_argument("--fresh-rounds", type=int, default=None, help="(3)")
    parser.add_argument(
        "--no-prebuilt",
        action="store_true",
        help="leave out the per-step runs of bench_peers.py's prebuilt-response adapters",
    )
    parser.add_argument("--label", default="", help="a note kept in the JSON")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    quick = args.quick
    steps = args.steps or (5 if quick else STEPS)
    if steps < 2:
        parser.error("--steps must be at least 2 (a tool call, then the answer)")
    ours_reps = args.repetitions or (6 if quick else 300)
    peer_reps = args.peer_repetitions or (3 if quick else 100)
    rounds = 3 if quick else ROUNDS
    warmup = 1 if quick else 10
    runs = args.runs or (50 if quick else 2000)
    batch_rounds = args.batch_rounds or (1 if quick else 5)
    fresh_rounds = args.fresh_rounds or (1 if quick else 3)

    notes: list[str] = []
    systems = []
    for s in args.systems:
        why = bp.available(s)
        if why is None:
            systems.append(s)
        else:
            notes.append(f"{s} skipped: {why}")
    for s in reversed(OURS):
        if s not in systems:
            systems.insert(0, s)
    if not args.no_prebuilt:
        systems += [PREBUILT[s] for s in OURS]
    started = time.perf_counter()

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {what}", file=sys.stderr, flush=True)

    results: dict[str, Any] = {
        "machine": machine(),
        "versions": bp.versions(systems),
        "operative_source": operative_source(),
        "label": args.label,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": list(os.getloadavg()),
        "quick": quick,
        "systems": systems,
        "steps": steps,
        "notes": notes,
    }
    reps = ",".join(str(peer_reps if s in PEERS else ours_reps) for s in systems)
    progress(f"per-step: {', '.join(systems)}, {rounds} rounds in one process")
    results["per_step"] = per_step = in_child(
        ",".join(systems),
        "per-step",
        "--steps",
        str(steps),
        "--repetitions",
        reps,
        "--warmup",
        str(warmup),
        "--rounds",
        str(rounds),
    )
    results["over_prebuilt_us_per_step"] = {
        s: per_step[s]["us_per_step_rounds"]["median"]
        - per_step[prebuilt]["us_per_step_rounds"]["median"]
        for s, prebuilt in PREBUILT.items()
        if prebuilt in per_step
    }
    ours = ",".join(OURS)
    progress(f"{runs:,} concurrent runs: {ours} in one process, {batch_rounds} rounds")
    results["batch_rounds"] = in_child(
        ours, "batch-rounds", "--runs", str(runs), "--rounds", str(batch_rounds)
    )
    progress(f"{runs:,} concurrent runs: {ours}, fresh processes, {fresh_rounds} rounds")
    results["concurrency"] = fresh_batches(runs, fresh_rounds)
    progress(f"{runs:,} and {2 * runs:,} runs in lockstep (MockClock): {ours}")
    results["lockstep"] = lockstep_memory(runs, fresh_rounds)
    results["load_after"] = list(os.getloadavg())
    results["elapsed_s"] = time.perf_counter() - started
    progress("done")
    print_summary(results)
    for note in notes:
        print(f"\nnote: {note}")
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
