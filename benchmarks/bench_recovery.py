"""Recovery time after a crash: from the SIGKILL of a worker with runs in flight to all of
them finished by another worker, on SQLite and PostgreSQL, with the lease as a parameter.

Each round, on a fresh database:

1. A standby worker process runs ``serve_durable_runs(backend, agents=...)`` (as a fleet
   of workers would: it is polling before anything happens; ``poll_interval`` 1 s, the
   library's default, or ``--poll``).
2. A second worker process starts ``--runs`` (100) durable runs of one agent, staggered
   over a quarter of a second, each ``open_run(..., durable=Durable(backend,
   lease_seconds=L))``. A run has 5 steps with one tool call each, then a final answer:
   6 model calls, each sleeping 50-200 ms (a deterministic function of run and step), and
   5 calls of a tool that is *not* idempotent, which sleeps 10 ms, appends one line to an
   effects file (its side effect), and sleeps 10 ms more.
3. Once every run is acknowledged (``wait_durably_started()`` returned) and 0.1 s more,
   this process SIGKILLs that worker: the runs are spread over their steps, most waiting
   for the model, some in a tool call (whose outcome is then unknown).
4. The standby worker claims the runs once their leases expire and finishes them. This
   process watches the store (``engine.list``, every 25 ms) until every run is finished.

Figures, all read from the store (the engine's run records and the journal; times are
the workers' own ``time.time()`` on this one machine), per round:

- **total**: SIGKILL to the last run finished (its record's ``updated_at`` when it
  ended), and its parts, which add up to it:
- **lease expiry**: SIGKILL to the last lease of the dead worker expiring (its runs'
  ``lease_expires_at`` as it left them: ``lease_seconds`` after each run's start or last
  renewal, renewals coming every ``lease_seconds / 3``). With leases of 2 s and more the
  runs die younger than ``lease_seconds / 3``, before any renewal: the last lease is the
  last run's start's, about ``lease_seconds - 0.1`` s after the kill. Renewals would not
  shorten it: with runs renewing at every phase, one renewed just before the kill. The
  renewal period moves the *first* expiry (``2/3`` of the lease at the earliest);
- **claim**: from that expiry to the last claim (a claim sets the record's ``updated_at``
  and increments its fence; renewals leave ``updated_at`` alone): the wait for the
  standby worker's next poll, and the claim itself;
- **replay + finish**: from the last claim to the last run finished: reading and
  replaying the journals, and the runs' remaining steps.

A run's remaining steps take time of their own, crash or not: the model calls not yet
journaled and the tool calls after them (from the journal as the dead worker left it and
the deterministic latencies). **Net of remaining work** is the time from the SIGKILL
until every run is back where it was, ``max(finished - remaining work) - SIGKILL``;
**overhead per run** is ``finished - claimed - remaining work`` (journal read, replay,
commits, and the CPU the 100 runs share: two cores run both workers, the database
server and this watcher).

The goal (issue 44): every run finished within one lease plus one second of the
SIGKILL. The table says, per backend and lease, in how many rounds the total met it, and
the net figure against it.

Correctness, per round: every run completed with the expected answer, was claimed once
(its fence), and no tool call ran twice: each (run, step) appears at most once in the
effects file, and exactly once when the journal holds the call's success. A call cut by
the kill is reported to the model as of unknown outcome, not run again.

SQLite uses a file in a temporary directory. PostgreSQL uses ``--dsn`` (or
``OPERATIVE_POSTGRES_DSN``), else the throwaway cluster of ``bench_durable.py`` (``fsync
=off``); each round gets a schema of its own.

Usage::

    .venv/bin/python benchmarks/bench_recovery.py                       # both, leases 2,5,10
    .venv/bin/python benchmarks/bench_recovery.py --backend sqlite --lease 2 --rounds 1
    .venv/bin/python benchmarks/bench_recovery.py --lease 2,5 --poll 1,0.25 --rounds 3
    .venv/bin/python benchmarks/bench_recovery.py --quick             # smoke run, ~15 s

Writes ``benchmarks/results/recovery.json`` (``--json PATH`` for another file; a
``--quick`` run writes only where ``--json`` says).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import trio
from _common import machine, print_table, spread, write_json

from operative import Agent, GenerateRequest, GenerateResponse, ToolCall, create_agent, tool
from operative.durable import (
    Durable,
    Generated,
    JournalEntry,
    PostgresDurable,
    RunRecord,
    SqliteDurable,
    ToolSettled,
    ToolStarted,
    serve_durable_runs,
)

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "recovery.json"
AGENT = "recovery-bench"
STEPS = 5
"""Tool-calling steps per run; a sixth model call gives the final answer."""
MODEL_MS = (50, 200)
"""Model latency range (ms); each (run, step) gets a fixed value in it."""
TOOL_SECONDS = 0.02
"""The tool's sleep, half before its side effect and half after."""
STAGGER = 0.25
"""The runs start spread over this many seconds."""
KILL_AFTER = 0.1
"""Seconds between the last run acknowledged and the SIGKILL."""
WATCH_EVERY = 0.025
"""How often this process reads the run records while the runs recover."""
EFFECTS_ENV = "OPERATIVE_BENCH_RECOVERY_EFFECTS"


# --------------------------------------------------------------------------------------
# the agent (the same in both workers)
# --------------------------------------------------------------------------------------


def model_seconds(tag: str, step: int) -> float:
    """The model's latency for ``step`` (1-based; ``STEPS + 1`` is the answer) of ``tag``."""
    low, high = MODEL_MS
    return (low + zlib.crc32(f"{tag}:{step}".encode()) % (high - low + 1)) / 1000


def expected_answer(tag: str) -> str:
    return f"{tag}: {STEPS} steps done"


_effects_fd: int | None = None


def _record_effect(line: str) -> None:
    global _effects_fd
    if _effects_fd is None:
        _effects_fd = os.open(os.environ[EFFECTS_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(_effects_fd, line.encode())  # one write(2) to an O_APPEND file: whole lines


@tool(mutates=True)
async def act(run: str, step: int) -> str:
    """Do step ``step`` of run ``run`` (a side effect: doing it twice does it twice)."""
    await trio.sleep(TOOL_SECONDS / 2)
    _record_effect(f"{run} {step} {os.getpid()}\n")
    await trio.sleep(TOOL_SECONDS / 2)
    return f"step {step} done"


async def model(request: GenerateRequest) -> GenerateResponse:
    """A stand-in model whose answer and latency depend only on the conversation."""
    messages = request.conversation.messages
    tag = next(m.text for m in messages if m.role == "user")
    step = sum(m.role == "tool" for m in messages) + 1
    await trio.sleep(model_seconds(tag, step))
    if step <= STEPS:
        call = ToolCall(id=f"{tag}-{step}", name="act", arguments={"run": tag, "step": step})
        return GenerateResponse(tool_calls=(call,))
    return GenerateResponse(content=expected_answer(tag))


def make_agent() -> Agent:
    return create_agent(generate=model, tools=[act], name=AGENT)


def run_tag(index: int) -> str:
    return f"run-{index:04d}"


# --------------------------------------------------------------------------------------
# the two workers (this script, started with --worker)
# --------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def open_backend(spec: str) -> AsyncIterator[SqliteDurable | PostgresDurable]:
    """``sqlite:<path>`` or ``postgres:<dsn>``, opened with ``async with``."""
    kind, _, where = spec.partition(":")
    backend = SqliteDurable(where) if kind == "sqlite" else PostgresDurable(where)
    async with backend:
        yield backend


async def start_runs(spec: str, runs: int, lease: float) -> None:
    """Worker 1: start ``runs`` durable runs, say each one's id once it is acknowledged."""
    agent = make_agent()

    async def one(backend: SqliteDurable | PostgresDurable, index: int) -> None:
        await trio.sleep(STAGGER * index / runs)
        tag = run_tag(index)
        durable = Durable(backend, run_id=tag, worker_id="worker-1", lease_seconds=lease)
        async with agent.open_run(tag, durable=durable) as run:
            await run.wait_durably_started()
            print(f"acked {tag}", flush=True)
            await run.result()
        print(f"finished {tag}", flush=True)  # only if the kill came too late

    async with open_backend(spec) as backend, trio.open_nursery() as nursery:
        for index in range(runs):
            nursery.start_soon(one, backend, index)


async def serve(spec: str, runs: int, lease: float, poll: float) -> None:
    """Worker 2: ``serve_durable_runs`` until this process is stopped."""
    async with open_backend(spec) as backend, trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(
                serve_durable_runs,
                backend,
                agents={AGENT: make_agent()},
                worker_id="worker-2",
                lease_seconds=lease,
                poll_interval=poll,
                max_concurrent_runs=max(100, runs),  # the default, or room for every run
            )
        )
        print("ready", flush=True)


# --------------------------------------------------------------------------------------
# one round: start, kill, watch the store
# --------------------------------------------------------------------------------------


class Lines:
    """Lines read from a process's stdout."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def next(self) -> str | None:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


class RoundFailed(Exception):
    pass


def _log(path: Path) -> BinaryIO:
    """A worker's stderr file."""
    return open(path, "wb")


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _worker(role: str, spec: str, runs: int, lease: float, poll: float) -> list[str]:
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        role,
        "--db",
        spec,
        "--runs",
        str(runs),
        "--lease",
        str(lease),
        "--poll",
        str(poll),
    ]


def _at_kill(entries: list[JournalEntry], killed_at: float) -> list[JournalEntry]:
    """The journal as the dead worker left it (its entries were all committed before the
    kill; the recovering worker's, after its claim)."""
    return [entry for entry in entries if entry.at < killed_at]


def remaining_work(tag: str, before: list[JournalEntry]) -> float:
    """Seconds the run still had to go at the kill, crash or not: every model call whose
    answer was not journaled, and the tool calls they ask for (a call cut by the kill is
    not run again)."""
    generated = sum(isinstance(entry.record, Generated) for entry in before)
    models = sum(model_seconds(tag, step) for step in range(generated + 1, STEPS + 2))
    return models + TOOL_SECONDS * max(0, STEPS - generated)


async def one_round(spec: str, runs: int, lease: float, poll: float, tmp: Path) -> dict[str, Any]:
    effects = tmp / "effects.log"
    effects.touch()
    env = {**os.environ, EFFECTS_ENV: str(effects)}
    server_err, starter_err = tmp / "serve.err", tmp / "start.err"
    async with open_backend(spec) as observer:
        engine, journal = observer.engine, observer.checkpoint_store
        await engine.list(limit=1)  # connect, create the tables
        with _log(server_err) as err:
            server = await trio.lowlevel.open_process(
                _worker("serve", spec, runs, lease, poll),
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
        try:
            assert server.stdout is not None
            with trio.move_on_after(60):
                ready = await Lines(server.stdout).next()
            if ready != "ready":
                raise RoundFailed(f"the standby worker did not start:\n{_tail(server_err)}")
            with _log(starter_err) as err:
                starter = await trio.lowlevel.open_process(
                    _worker("start", spec, runs, lease, poll),
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=env,
                )
            try:
                assert starter.stdout is not None
                lines = Lines(starter.stdout)
                acked: set[str] = set()
                with trio.move_on_after(60):
                    while len(acked) < runs:
                        line = await lines.next()
                        if line is None:
                            break
                        if line.startswith("acked "):
                            acked.add(line.split()[1])
                if len(acked) < runs:
                    raise RoundFailed(
                        f"{len(acked)} of {runs} runs acknowledged:\n{_tail(starter_err)}"
                    )
                await trio.sleep(KILL_AFTER)
                load = os.getloadavg()[0]
                killed_at = time.time()
                starter.send_signal(signal.SIGKILL)
                await starter.wait()
            finally:
                if starter.returncode is None:
                    starter.kill()
                    await starter.wait()

            # The store as the dead worker left it, then watched until every run ended.
            cpu_at_kill = _cpu_seconds(server.pid)
            left = {r.run_id: r for r in await engine.list(agent_name=AGENT, limit=runs + 1)}
            claimed: dict[str, float] = {}
            ended: dict[str, RunRecord] = {}
            with trio.move_on_after(lease + 120):
                while len(ended) < runs:
                    for record in await engine.list(agent_name=AGENT, limit=runs + 1):
                        if record.run_id in ended:
                            continue
                        if record.status != "running":
                            ended[record.run_id] = record
                        elif record.fence > left[record.run_id].fence:
                            claimed.setdefault(record.run_id, record.updated_at)
                    if len(ended) < runs:
                        await trio.sleep(WATCH_EVERY)
            if len(ended) < runs:
                raise RoundFailed(
                    f"{len(ended)} of {runs} runs finished {lease + 120:.0f} s after the "
                    f"kill:\n{_tail(server_err)}"
                )
            server_cpu = _cpu_seconds(server.pid) - cpu_at_kill
        finally:
            server.terminate()
            await server.wait()
        journals = {tag: await journal.read(tag) for tag in ended}
    figures = analyse(runs, lease, killed_at, left, claimed, ended, journals, effects)
    figures["serving_worker_cpu_s"] = server_cpu
    figures["load_average_1min"] = load
    return figures


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used (from ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def analyse(
    runs: int,
    lease: float,
    killed_at: float,
    left: dict[str, RunRecord],
    claimed: dict[str, float],
    ended: dict[str, RunRecord],
    journals: dict[str, list[JournalEntry]],
    effects: Path,
) -> dict[str, Any]:
    """The round's figures and checks, from the store and the effects file."""
    in_flight = [r for r in left.values() if r.status == "running"]
    expiries = [r.lease_expires_at for r in in_flight]
    last_expiry = max(expiries)
    last_claim = max(claimed.values())
    last_end = max(r.updated_at for r in ended.values())

    counts = Counter(tuple(line.split()[:2]) for line in effects.read_text().splitlines())
    problems: list[str] = []
    duplicates = sorted(f"{run} step {step}" for (run, step), n in counts.items() if n > 1)
    if duplicates:
        problems.append(f"tool calls that ran twice: {', '.join(duplicates[:10])}")
    cut = unknown = 0
    resumed: list[float] = []
    remaining: dict[str, float] = {}
    for tag, record in sorted(ended.items()):
        entries = journals[tag]
        before = _at_kill(entries, killed_at)
        remaining[tag] = remaining_work(tag, before)
        started = {e.record.call_id for e in before if isinstance(e.record, ToolStarted)}
        settled = {e.record.result.call_id for e in before if isinstance(e.record, ToolSettled)}
        cut += len(started - settled)
        if started - settled and tag in claimed:
            # Its first commit (the cut call's "unknown" result) needs no model call: the
            # claim's return, the journal read, the replay and the resumed run's start.
            first = next(e.at for e in entries if e.at >= killed_at)
            resumed.append(first - claimed[tag])
        outcome = record.outcome
        if record.status != "completed" or outcome is None:
            problems.append(f"{tag} ended {record.status}")
        elif outcome.content != expected_answer(tag):
            problems.append(f"{tag} answered {outcome.content!r}")
        if record.fence != 3:  # 1 at the start, +1 for the claim, +1 for the finish
            problems.append(f"{tag} was claimed {record.fence - 2} times")
        results = [e.record.result for e in entries if isinstance(e.record, ToolSettled)]
        if len({r.call_id for r in results}) != STEPS:
            problems.append(f"{tag} settled {len(results)} calls, not {STEPS}")
        for result in results:
            step = result.call_id.rpartition("-")[2]
            ran = counts.get((tag, step), 0)
            if result.outcome == "success" and ran != 1:
                problems.append(f"{tag} step {step} succeeded with {ran} effects")
            elif result.outcome != "success":
                unknown += 1
    if len(ended) != runs or len(in_flight) != runs:
        problems.append(f"{len(in_flight)} runs in flight at the kill, {len(ended)} ended")

    # Net of each run's own remaining work: when every run was back where it stood.
    caught_up = max(ended[tag].updated_at - remaining[tag] for tag in ended)
    overhead = [
        ended[tag].updated_at - claimed[tag] - remaining[tag] for tag in ended if tag in claimed
    ]
    batches = Counter(round(at - killed_at, 3) for at in claimed.values())
    return {
        "runs_in_flight_at_kill": len(in_flight),
        "calls_in_flight_at_kill": cut,
        "total_s": last_end - killed_at,
        "lease_expiry_s": last_expiry - killed_at,
        "first_lease_expiry_s": min(expiries) - killed_at,
        "claim_s": last_claim - last_expiry,
        "replay_finish_s": last_end - last_claim,
        "net_of_remaining_work_s": caught_up - killed_at,
        "remaining_work_max_s": max(remaining.values()),
        "remaining_work_median_s": statistics.median(remaining.values()),
        "overhead_per_run_median_s": statistics.median(overhead),
        "overhead_per_run_max_s": max(overhead),
        "claims": [{"after_kill_s": at, "runs": n} for at, n in sorted(batches.items())],
        "claim_to_first_commit_s": (
            {"median": statistics.median(resumed), "max": max(resumed), "runs": len(resumed)}
            if resumed
            else None
        ),
        "claims_seen": len(claimed),
        "completed": sum(r.status == "completed" for r in ended.values()),
        "unknown_outcomes": unknown,
        "effects": sum(counts.values()),
        "duplicate_effects": len(duplicates),
        "goal_s": lease + 1.0,
        "goal_met": last_end - killed_at <= lease + 1.0,
        "problems": problems[:20],
    }


# --------------------------------------------------------------------------------------
# the benchmark
# --------------------------------------------------------------------------------------


def _summary(rounds: list[dict[str, Any]], lease: float) -> dict[str, Any]:
    keys = (
        "total_s",
        "lease_expiry_s",
        "claim_s",
        "replay_finish_s",
        "net_of_remaining_work_s",
        "remaining_work_max_s",
        "overhead_per_run_median_s",
        "overhead_per_run_max_s",
    )
    summary: dict[str, Any] = {key: spread(r[key] for r in rounds) for key in keys}
    summary["goal_s"] = lease + 1.0
    summary["goal_met_rounds"] = sum(r["goal_met"] for r in rounds)
    summary["net_goal_met_rounds"] = sum(r["net_of_remaining_work_s"] <= lease + 1 for r in rounds)
    summary["rounds"] = len(rounds)
    summary["correct"] = all(not r["problems"] for r in rounds)
    return summary


def _figure(value: dict[str, Any]) -> str:
    if value["rounds"] == 1:
        return f"{value['median']:.2f}"
    return f"{value['median']:.2f} ({value['min']:.2f}-{value['max']:.2f})"


def report(results: dict[str, Any]) -> None:
    rows = []
    for config in results["configs"]:
        s = config.get("summary")
        if s is None:
            rows.append(
                [config["backend"], config["lease_seconds"], config["poll_interval"]]
                + ["failed"] * 8
            )
            continue
        n = s["rounds"]
        rows.append(
            [
                config["backend"],
                f"{config['lease_seconds']:g}",
                f"{config['poll_interval']:g}",
                _figure(s["total_s"]),
                _figure(s["lease_expiry_s"]),
                _figure(s["claim_s"]),
                _figure(s["replay_finish_s"]),
                _figure(s["net_of_remaining_work_s"]),
                f"{s['goal_s']:g}",
                f"{s['goal_met_rounds']}/{n} (net {s['net_goal_met_rounds']}/{n})",
                "yes" if s["correct"] else "NO",
            ]
        )
    print_table(
        f"Recovery of {results['parameters']['runs']} runs in flight after a SIGKILL, seconds"
        " (median, min-max over rounds)",
        [
            "backend",
            "lease",
            "poll",
            "total",
            "lease expiry",
            "claim",
            "replay+finish",
            "net of remaining",
            "goal",
            "goal met",
            "correct",
        ],
        rows,
    )
    print(
        "\ngoal: every run finished within one lease plus one second of the SIGKILL "
        '("goal met": rounds whose total met it; net: rounds whose figure net of the '
        "runs' own remaining work met it)"
    )
    detail = []
    for config in results["configs"]:
        s = config.get("summary")
        if s is None:
            continue
        detail.append(
            [
                config["backend"],
                f"{config['lease_seconds']:g}",
                f"{config['poll_interval']:g}",
                _figure(s["remaining_work_max_s"]),
                f"{s['overhead_per_run_median_s']['median'] * 1000:.0f}",
                f"{s['overhead_per_run_max_s']['median'] * 1000:.0f}",
                " / ".join("+".join(str(c["runs"]) for c in r["claims"]) for r in config["rounds"]),
                " / ".join(str(r["calls_in_flight_at_kill"]) for r in config["rounds"]),
            ]
        )
    print_table(
        "Remaining work, overhead per run (finished - claimed - remaining work) and claims",
        [
            "backend",
            "lease",
            "poll",
            "remaining work max s",
            "overhead median ms",
            "overhead max ms",
            "runs per claim, per round",
            "calls cut",
        ],
        detail,
    )
    for config in results["configs"]:
        for index, r in enumerate(config.get("rounds", [])):
            for problem in r["problems"]:
                print(
                    f"PROBLEM {config['backend']} lease {config['lease_seconds']:g} "
                    f"round {index}: {problem}"
                )
        if "error" in config:
            print(
                f"FAILED {config['backend']} lease {config['lease_seconds']:g}: {config['error']}"
            )
    for note in results["notes"]:
        print(f"\nnote: {note}")


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--lease", default=None, help="lease seconds, comma-separated (2,5,10)")
    parser.add_argument("--runs", type=int, default=None, help="runs in flight (100)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per setting (3)")
    parser.add_argument(
        "--poll", default="1", help="serve_durable_runs poll_interval, comma-separated (1)"
    )
    parser.add_argument("--dsn", default=os.environ.get("OPERATIVE_POSTGRES_DSN"))
    parser.add_argument("--json", metavar="PATH", default=None)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--worker", choices=("start", "serve"), help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        lease = float(args.lease)
        if args.worker == "start":
            trio.run(start_runs, args.db, args.runs, lease)
        else:
            trio.run(serve, args.db, args.runs, lease, float(args.poll))
        return 0

    leases = _floats(args.lease or ("1" if args.quick else "2,5,10"))
    polls = _floats(args.poll)
    runs = args.runs or (20 if args.quick else 100)
    rounds = args.rounds or (1 if args.quick else 3)
    json_path = args.json or (None if args.quick else str(RESULTS))
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]

    notes: list[str] = []
    results: dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "goal": "every run finished within lease_seconds + 1 s of the SIGKILL",
        "parameters": {
            "runs": runs,
            "leases": leases,
            "poll_intervals": polls,
            "rounds": rounds,
            "steps": STEPS,
            "model_ms": list(MODEL_MS),
            "tool_s": TOOL_SECONDS,
            "stagger_s": STAGGER,
            "kill_after_s": KILL_AFTER,
        },
        "notes": notes,
        "configs": [],
    }
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        specs: dict[str, Any] = {}
        if "sqlite" in backends:
            specs["sqlite"] = lambda n: f"sqlite:{os.path.join(tmp, f'runs-{n}.db')}"
        if "postgres" in backends:
            import bench_durable

            dsn = args.dsn
            try:
                import psycopg  # noqa: F401
            except ImportError:
                notes.append("PostgreSQL skipped: psycopg is not installed")
            else:
                if not dsn:
                    for directory in bench_durable.sweep_clusters():
                        print(f"deleted {directory}, the cluster of a benchmark that was killed")
                    dsn = stack.enter_context(bench_durable.throwaway_postgres())
                    if dsn is None:
                        notes.append("PostgreSQL skipped: no --dsn and no initdb")
                    else:
                        notes.append(
                            "PostgreSQL is a throwaway local cluster with fsync=off, on the "
                            "same two cores as the workers"
                        )
                if dsn:
                    schemas = contextlib.ExitStack()
                    stack.enter_context(schemas)

                    def pg(n: int, dsn: str = dsn) -> str:
                        return "postgres:" + schemas.enter_context(
                            bench_durable.postgres_schema(dsn)
                        )

                    specs["postgres"] = pg
        counter = 0
        for backend, spec_of in specs.items():
            for lease in leases:
                for poll in polls:
                    config: dict[str, Any] = {
                        "backend": backend,
                        "lease_seconds": lease,
                        "poll_interval": poll,
                        "rounds": [],
                    }
                    results["configs"].append(config)
                    for index in range(rounds):
                        counter += 1
                        directory = Path(tmp) / f"round-{counter}"
                        directory.mkdir()
                        spec = spec_of(counter)
                        try:
                            figures = trio.run(one_round, spec, runs, lease, poll, directory)
                        except RoundFailed as exc:
                            config["error"] = str(exc)
                            print(f"{backend} lease {lease:g}: round {index} failed: {exc}")
                            break
                        config["rounds"].append(figures)
                        print(
                            f"{backend} lease {lease:g} poll {poll:g} round {index}: "
                            f"total {figures['total_s']:.2f} s = expiry "
                            f"{figures['lease_expiry_s']:.2f} + claim {figures['claim_s']:.2f}"
                            f" + replay/finish {figures['replay_finish_s']:.2f}; net "
                            f"{figures['net_of_remaining_work_s']:.2f}; "
                            f"{'ok' if not figures['problems'] else figures['problems'][0]}",
                            flush=True,
                        )
                    if config["rounds"]:
                        config["summary"] = _summary(config["rounds"], lease)
    report(results)
    if json_path:
        write_json(json_path, results)
        print(f"\nwrote {json_path}")
    failed = any(
        "error" in c or not c.get("summary", {}).get("correct", False) for c in results["configs"]
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
