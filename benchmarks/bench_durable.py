"""What durability costs a run per step, and how long recovering 1,000 interrupted runs takes.

Measures, for each backend (SQLite, and PostgreSQL when one is available):

1. **Checkpoint overhead per step.** The run of ``bench_loop.py``: 20 steps, one
   ``add(a, b)`` tool call on each of the first 19 (arguments as a raw JSON string) and
   then an answer, through ``open_run(..., stop_when=no_tool_calls())`` with a model that
   returns prebuilt responses. Once in memory, once durable on each backend
   (``open_run(..., durable=Durable(...))``, one engine and checkpoint store per backend
   kept open across runs, as a worker would). Reported: median microseconds per step over
   interleaved runs (set-up amortised in), the overhead per step over the in-memory run,
   the marginal overhead of one more step (20-step run minus 1-step run, over 19), the
   fixed cost durability adds to a run (its 1-step run minus the in-memory one), and
   the commits per step (counted on one extra run by subclasses of the engine and store
   that count their writing calls; each is one transaction), and the marginal overhead
   divided by the marginal commits: what one journal write costs.
3. **Recovery.** ``--recover-runs`` (1,000) runs of one agent are started durably, all
   at once; each completes two tool-calling steps and then parks in its third model
   call. Once every run is parked the caller is cancelled: that is a shutdown, so each
   run releases its lease and its journal stops after step 2 (nine entries). Then one
   ``recover(...)`` call claims every run and finishes it (the model now answers step
   3). Reported: wall time of that call, runs/s and ms per run; and, for scale, how long
   starting and parking the runs took.

SQLite uses a file in a temporary directory (WAL, ``synchronous=NORMAL``). PostgreSQL
uses ``--dsn`` (or ``OPERATIVE_POSTGRES_DSN``); without one it starts a throwaway cluster
(``initdb`` + ``pg_ctl``, 127.0.0.1, ``fsync=off``, so its figures are an upper bound
for a server that syncs) in ``/tmp/operative-bench-durable-pg-*``, and prints why it
skips PostgreSQL when it cannot. Each phase gets a schema of its own (selected through
the DSN's ``search_path``), dropped afterwards. The cluster's directory names the
benchmark process that owns it (its pid and start time, in ``owner``): a benchmark
killed before it could stop its cluster (SIGKILL) leaves it behind, and the next one
stops it (``pg_ctl stop -m immediate``) and deletes it on start-up, as it does every
such directory whose owner is gone.

Usage::

    .venv/bin/python benchmarks/bench_durable.py                # full run
    .venv/bin/python benchmarks/bench_durable.py --quick        # smoke run, a few seconds
    .venv/bin/python benchmarks/bench_durable.py --json out.json --recover-runs 5000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import itertools
import json
import os
import pwd
import shutil
import sqlite3
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
import bench_storage
from _common import interleaved, machine, median, print_table, write_json
from bench_loop import (
    FLOOR_TOOLS,
    add,
    floor_model,
    floor_run,
    operative_model,
    operative_run,
    operative_script,
)

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    Toolbox,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative.durable import (
    CheckpointStore,
    Durable,
    DurableEngine,
    SqliteCheckpointStore,
    SqliteEngine,
    recover,
)

STEPS = 20
"""Steps in the per-step run: 19 with one tool call, then the answer."""
RECOVER_RUNS = 1000
PARK_AT = 3
"""The step whose model call parks in the recovery phase (steps before it complete)."""
CONCURRENT_STEPS = 5
"""Steps per run in the concurrency table: 4 with one tool call, then the answer."""

# --------------------------------------------------------------------------------------
# backends
# --------------------------------------------------------------------------------------

Opener = Callable[[], tuple[DurableEngine, CheckpointStore]]
WRITES: Counter[str] = Counter()
"""Writing calls made through the counting engine and store classes."""


def counting(cls: type[Any]) -> type[Any]:
    """A subclass of an engine or checkpoint store class that counts its writing calls."""

    def wrap(name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(cls, name)

        async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            WRITES[name] += 1
            return await method(self, *args, **kwargs)

        return counted

    writing = ("append", "start", "claim", "renew", "finish", "release")
    methods = {name: wrap(name) for name in writing if hasattr(cls, name)}
    return type(f"Counting{cls.__name__}", (cls,), methods)


def sqlite_opener(path: str, *, count: bool = False) -> Opener:
    engine_cls: type[Any] = counting(SqliteEngine) if count else SqliteEngine
    store_cls: type[Any] = counting(SqliteCheckpointStore) if count else SqliteCheckpointStore
    return lambda: (engine_cls(path), store_cls(path))


def postgres_classes() -> tuple[type[Any], type[Any]] | str:
    """``(PostgresEngine, PostgresCheckpointStore)``, or why they cannot be used here."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'operative[postgres]')"
    import operative.durable

    engine = getattr(operative.durable, "PostgresEngine", None)
    store = getattr(operative.durable, "PostgresCheckpointStore", None)
    if engine is None or store is None:
        return "operative.durable has no PostgresEngine / PostgresCheckpointStore"
    return engine, store


# --------------------------------------------------------------------------------------
# the throwaway PostgreSQL cluster, and the clusters of benchmarks that were killed
# --------------------------------------------------------------------------------------

CLUSTER_PREFIX = "operative-bench-durable-pg-"
"""The throwaway clusters' directories: ``<tmp>/<prefix><random>``."""
OWNER = "owner"
"""The file in a cluster's directory naming its benchmark process: ``<pid> <start time>``."""
UNCLAIMED_AFTER = 600.0
"""Seconds after which a cluster directory with no owner file is abandoned: a benchmark
writes the file as soon as it has created the directory, so only one killed in between
leaves a directory without it."""


def _started_at(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from ``/proc``), or ``None``
    if there is no such process; ``"?"`` where ``/proc`` cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    except OSError:
        return None
    # The fields after the command name (which may hold spaces and parentheses): the
    # 22nd field of the line, the process's start time, is the 20th of them.
    return stat.rpartition(")")[2].split()[19]


def _owner_alive(directory: Path) -> bool:
    """Whether the benchmark process that made ``directory`` is still running."""
    try:
        pid, _, started = (directory / OWNER).read_text().strip().partition(" ")
    except FileNotFoundError:
        try:
            age = time.time() - directory.stat().st_mtime
        except OSError:
            return False
        return age < UNCLAIMED_AFTER  # being set up right now, or abandoned long ago
    except OSError:
        return True  # unreadable: leave it alone
    if not pid.isdigit():
        return True
    now = _started_at(int(pid))
    return now is not None and (now == started or "?" in (now, started))


def _pg_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, or ``None``."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    initdb = shutil.which("initdb") or (str(found[-1]) if found else None)
    return None if initdb is None else Path(initdb).parent


def _as_owner_of(path: Path) -> list[str]:
    """The prefix that runs a command as the owner of ``path`` (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", pwd.getpwuid(path.stat().st_uid).pw_name, "--"]


def _postmaster(data: Path) -> int | None:
    """The pid of the postmaster serving ``data``, if one is alive."""
    try:
        pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    # The pid may have been reused since: only a postgres serving this very directory.
    return pid if os.fsencode(data) in command else None


def sweep_clusters(tmp: str | None = None) -> list[Path]:
    """Stop and delete the throwaway clusters of benchmarks that are gone (killed before
    they could clean up); the directories deleted. Only directories with this
    benchmark's prefix are looked at, and only those whose owner is no longer running
    are touched."""
    swept: list[Path] = []
    for directory in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{CLUSTER_PREFIX}*")):
        if directory.is_symlink() or not directory.is_dir() or _owner_alive(directory):
            continue
        data = directory / "data"
        if _postmaster(data) is not None:
            bin_dir = _pg_bin()
            if bin_dir is None:
                continue  # a live server and no pg_ctl: leave it be
            stop = [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
            subprocess.run([*_as_owner_of(data), *stop], capture_output=True, timeout=60)
            if _postmaster(data) is not None:
                print(f"could not stop the PostgreSQL server of {directory}", file=sys.stderr)
                continue
        shutil.rmtree(directory, ignore_errors=True)
        swept.append(directory)
    return swept


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[str | None]:
    """A DSN of a temporary cluster (stopped and deleted on the way out, or by the next
    benchmark if this one is killed), or ``None`` when one cannot be started."""
    with bench_storage.throwaway_postgres(CLUSTER_PREFIX, mark=_mark_owner) as dsn:
        yield dsn


def _mark_owner(directory: Path) -> None:
    """Name this process as the owner of the cluster in ``directory``."""
    (directory / OWNER).write_text(f"{os.getpid()} {_started_at(os.getpid())}\n")


_schemas = itertools.count()


@contextlib.contextmanager
def postgres_schema(dsn: str) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema, dropped on the way out."""
    import psycopg

    schema = f"bench_durable_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield f"{dsn} options='-csearch_path={schema}'"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def postgres_opener(
    dsn: str, classes: tuple[type[Any], type[Any]], *, count: bool = False
) -> Opener:
    engine_cls, store_cls = classes
    if count:
        engine_cls, store_cls = counting(engine_cls), counting(store_cls)
    return lambda: (engine_cls(dsn), store_cls(dsn))


# --------------------------------------------------------------------------------------
# the floor: a hand-written Trio loop with one durable write per step
# --------------------------------------------------------------------------------------

FLOOR_TABLE = (
    "CREATE TABLE IF NOT EXISTS floor_journal (run_id TEXT NOT NULL, seq BIGINT NOT NULL, "
    "record TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (run_id, seq))"
)
_floor_runs = itertools.count()

FloorWrite = Callable[[str, int, str], Awaitable[None]]
"""``write(run_id, seq, record)``: one durable insert, committed before it returns."""


async def floor_durable_run(generate: Any, write: FloorWrite, maximum_steps: int = 25) -> str:
    """bench_loop.py's floor loop, plus one durable write per step: the step's messages,
    JSON-encoded (as a journal row holds them), committed before the next step."""
    run_id = f"floor-{next(_floor_runs)}"
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "What is 1 + 1, twenty times over?"}
    ]
    loads, dumps = json.loads, json.dumps
    for step in range(1, maximum_steps + 1):
        await trio.lowlevel.checkpoint()
        response = await generate(messages, step)
        calls = response["tool_calls"]
        at = len(messages)
        messages.append({"role": "assistant", "content": response["content"], "tool_calls": calls})
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
        await write(run_id, step, dumps({"step": step, "messages": messages[at:]}))
        if not calls:
            return response["content"]  # type: ignore[no-any-return]
    return messages[-1]["content"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def sqlite_floor(path: str) -> AsyncIterator[FloorWrite]:
    """One WAL, ``synchronous=NORMAL`` connection; each write is one autocommitted INSERT
    in one ``trio.to_thread.run_sync`` call."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(FLOOR_TABLE)
    insert = "INSERT INTO floor_journal (run_id, seq, record, at) VALUES (?, ?, ?, ?)"
    limiter = trio.CapacityLimiter(1)  # one connection, one thread at a time

    async def write(run_id: str, seq: int, record: str) -> None:
        def insert_and_commit() -> None:
            conn.execute(insert, (run_id, seq, record, time.time()))

        await trio.to_thread.run_sync(insert_and_commit, limiter=limiter)

    try:
        yield write
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def postgres_floor(dsn: str) -> AsyncIterator[FloorWrite]:
    """One autocommit psycopg 3 connection (the client operative drives from worker
    threads); each write is one INSERT round trip in one ``trio.to_thread.run_sync``."""
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(FLOOR_TABLE)
    insert = "INSERT INTO floor_journal (run_id, seq, record, at) VALUES (%s, %s, %s, %s)"
    limiter = trio.CapacityLimiter(1)

    async def write(run_id: str, seq: int, record: str) -> None:
        def insert_and_commit() -> None:
            conn.execute(insert, (run_id, seq, record, time.time()))

        await trio.to_thread.run_sync(insert_and_commit, limiter=limiter)

    try:
        yield write
    finally:
        conn.close()


def _spread(values: Sequence[float]) -> dict[str, float | int]:
    return {"median": median(values), "min": min(values), "max": max(values), "n": len(values)}


# --------------------------------------------------------------------------------------
# 1. checkpoint overhead per step
# --------------------------------------------------------------------------------------


async def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


IDEMPOTENT_TOOLBOX = Toolbox([tool(_add, name="add", idempotent=True)])
"""bench_loop.py's ``add``, declared idempotent: a step with its call commits once."""


async def idempotent_run(generate: Any, durable: Durable) -> None:
    """bench_loop.py's run with the idempotent ``add``."""
    conversation = Conversation()
    conversation.append_user_message("What is 1 + 1, twenty times over?")
    async with open_run(
        generate=generate,
        conversation=conversation,
        toolbox=IDEMPOTENT_TOOLBOX,
        stop_when=stop_when.no_tool_calls(),
        durable=durable,
    ) as run:
        pass
    result = await run.result()
    if result.finish_reason != "stop-condition":  # pragma: no cover - a broken loop
        raise RuntimeError(f"run ended with {result.finish_reason}: {result.error!r}")


async def one_run(
    generate: Any, pair: tuple[DurableEngine, CheckpointStore] | None, idempotent: bool = False
) -> None:
    """bench_loop.py's run, durable on ``pair`` (in memory when ``None``); with
    ``idempotent`` its tool is declared idempotent."""
    if pair is None:
        await operative_run(generate)
        return
    durable = Durable(engine=pair[0], checkpoint_store=pair[1])
    if idempotent:
        await idempotent_run(generate, durable)
    else:
        await operative_run(generate, durable=durable)


async def count_commits(opener: Opener, steps: int, idempotent: bool = False) -> int:
    engine, store = opener()
    try:
        WRITES.clear()
        await one_run(operative_model(steps), (engine, store), idempotent)
        return sum(WRITES.values())
    finally:
        await engine.aclose()
        await store.aclose()


async def measure_per_step(
    openers: dict[str, Opener],
    counted: dict[str, Opener],
    repetitions: int,
    warmup: int,
    floors: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[FloorWrite]]]
    | None = None,
) -> dict[str, Any]:
    """Per-step figures of the in-memory and durable runs; with ``floors`` (per backend,
    a writer of one durable row), also the hand-written floor loop in memory and durable
    on each, interleaved with the rest, and each backend's ratio to its floor."""
    pairs = {name: opener() for name, opener in openers.items()}
    floors = floors or {}
    async with contextlib.AsyncExitStack() as stack:
        for engine, store in pairs.values():  # closed at the end (not entered: no group commit)
            stack.push_async_callback(engine.aclose)
            stack.push_async_callback(store.aclose)
        writers = {name: await stack.enter_async_context(make()) for name, make in floors.items()}
        long, short = operative_model(STEPS), operative_model(1)
        backends: dict[str, tuple[DurableEngine, CheckpointStore] | None] = {"memory": None}
        backends.update(pairs)
        backends.update({f"{name}, idempotent tool": pair for name, pair in pairs.items()})
        cases: dict[str, Callable[[], Awaitable[Any]]] = {}
        for name, pair in backends.items():
            idempotent = name.endswith("idempotent tool")
            cases[name] = functools.partial(one_run, long, pair, idempotent)
            cases[f"{name}_1"] = functools.partial(one_run, short, pair, idempotent)
        if writers:
            floor_long = floor_model(STEPS)
            cases["floor memory"] = functools.partial(floor_run, floor_long)
            for name, write in writers.items():
                cases[f"floor {name}"] = functools.partial(floor_durable_run, floor_long, write)
        samples = await interleaved(cases, warmup, repetitions)
    us = {name: median(values) / 1000 for name, values in samples.items()}
    memory, memory_1 = us["memory"], us["memory_1"]
    # Spreads: the repetitions cut into consecutive rounds, each figure a median per round.
    n_rounds = min(10, repetitions)
    size = repetitions // n_rounds
    chunks = [
        {name: median(values[k * size : (k + 1) * size]) / 1000 for name, values in samples.items()}
        for k in range(n_rounds)
    ]
    out: dict[str, Any] = {"steps": STEPS, "repetitions": repetitions, "warmup": warmup}
    if writers:
        out["floor"] = {
            name: {
                "us_per_step": us[f"floor {name}"] / STEPS,
                "overhead_us_per_step": _spread(
                    [(c[f"floor {name}"] - c["floor memory"]) / STEPS for c in chunks]
                ),
            }
            for name in writers
        }
        out["floor"]["memory"] = {"us_per_step": us["floor memory"] / STEPS}
    for name in backends:
        whole, one = us[name], us[f"{name}_1"]
        row: dict[str, Any] = {
            "us_per_step": whole / STEPS,
            "us_per_run": whole,
            "us_run_1_step": one,
            "overhead_us_per_step": (whole - memory) / STEPS,
            "overhead_us_per_step_spread": _spread(
                [(c[name] - c["memory"]) / STEPS for c in chunks]
            ),
            "overhead_us_per_step_marginal": ((whole - one) - (memory - memory_1)) / (STEPS - 1),
            "overhead_us_run_fixed": one - memory_1,
        }
        base, _, variant = name.partition(", ")
        if base in writers:
            floor_rounds = [(c[f"floor {base}"] - c["floor memory"]) / STEPS for c in chunks]
            row["floor_overhead_us_per_step"] = _spread(floor_rounds)
            row["x_floor"] = _spread(
                [
                    ((c[name] - c["memory"]) / STEPS) / max(f, 1e-9)
                    for c, f in zip(chunks, floor_rounds, strict=True)
                ]
            )
        if base in counted:
            idempotent = bool(variant)
            commits = await count_commits(counted[base], STEPS, idempotent)
            commits_1 = await count_commits(counted[base], 1, idempotent)
            row["commits_per_run"] = commits
            row["commits_per_step"] = commits / STEPS
            row["commits_per_step_marginal"] = marginal = (commits - commits_1) / (STEPS - 1)
            row["overhead_us_per_commit"] = row["overhead_us_per_step_marginal"] / max(
                marginal, 1e-9
            )
        out[name] = row
    return out


# --------------------------------------------------------------------------------------
# 2. durable steps/s with many concurrent runs
# --------------------------------------------------------------------------------------


async def measure_concurrency(
    opener: Opener, concurrency: Sequence[int], steps: int, rounds: int
) -> dict[str, Any]:
    """Durable steps/s with ``n`` runs at once (each ``steps`` steps, one ``add`` call on
    each but the last), on one engine and store opened as a worker opens them
    (``async with``). Rounds interleave the sizes; reported: median and spread."""
    generate = operative_model(steps)
    samples: dict[int, list[float]] = {n: [] for n in concurrency}
    engine, store = opener()
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store)

        async def one() -> None:
            await operative_run(generate, durable=durable)

        await one()  # warm up: connections, schema
        for _ in range(rounds):
            for n in concurrency:
                gc.collect()
                began = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for _ in range(n):
                        nursery.start_soon(one)
                wall = time.perf_counter() - began
                samples[n].append(n * steps / wall)
    return {
        str(n): {
            "runs": n,
            "steps_per_run": steps,
            "rounds": rounds,
            "steps_per_s": median(values),
            "steps_per_s_min": min(values),
            "steps_per_s_max": max(values),
        }
        for n, values in samples.items()
    }


# --------------------------------------------------------------------------------------
# 3. recovery of interrupted runs
# --------------------------------------------------------------------------------------


class ParkingModel:
    """Answers from the script, except that step ``PARK_AT`` parks while ``parking``."""

    def __init__(self, expected: int) -> None:
        self.responses = operative_script(PARK_AT)
        self.parking = True
        self.parked = 0
        self.expected = expected
        self.all_parked = trio.Event()

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        if request.step == PARK_AT and self.parking:
            self.parked += 1
            if self.parked == self.expected:
                self.all_parked.set()
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        return self.responses[request.step - 1]


async def measure_recovery(opener: Opener, runs: int) -> dict[str, Any]:
    model = ParkingModel(runs)
    agent = create_agent(generate=model, tools=[add], name="bench", maximum_steps=10)
    engine, store = opener()
    try:
        durable = Durable(engine=engine, checkpoint_store=store)

        async def start(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with agent.open_run("What is 1 + 1?", durable=durable) as run:
                await run.wait_durably_started()
                task_status.started()

        began = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(runs):
                nursery.start_soon(start)
            await model.all_parked.wait()
            parked_s = time.perf_counter() - began
            nursery.cancel_scope.cancel()  # a shutdown: every run releases its lease
        setup_s = time.perf_counter() - began
        interrupted = await engine.list(status="running", limit=runs + 1)
        if len(interrupted) != runs:  # pragma: no cover - a broken shutdown
            raise RuntimeError(f"{len(interrupted)} runs left running, not {runs}")
        entries = len(await store.read(interrupted[0].run_id))

        model.parking = False
        gc.collect()
        began = time.perf_counter()
        results = await recover(
            engine=engine, checkpoint_store=store, agents={"bench": agent}, limit=runs
        )
        wall = time.perf_counter() - began
        finished = sum(r.finish_reason == "stop-condition" for r in results.values())
        if finished != runs:  # pragma: no cover - a broken recovery
            raise RuntimeError(f"recover finished {finished} of {runs} runs")
        left = await engine.list(status="running", limit=1)
        if left:  # pragma: no cover - a broken recovery
            raise RuntimeError(f"run {left[0].run_id} is still running after recover")
    finally:
        await engine.aclose()
        await store.aclose()
    return {
        "runs": runs,
        "journal_entries_per_run": entries,
        "start_and_park_s": parked_s,
        "shutdown_s": setup_s - parked_s,
        "recover_s": wall,
        "runs_per_s": runs / wall,
        "ms_per_run": wall * 1000 / runs,
    }


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def _spread_text(value: dict[str, Any] | None, unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return (
        f"{value['median']:.{digits}f}{unit} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"
    )


def report(results: dict[str, Any]) -> None:
    m = results["machine"]
    print(
        f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, "
        f"trio {m.get('trio', '?')}, msgspec {m.get('msgspec', '?')}"
    )
    per = results.get("per_step") or {}
    rows = []
    for name in [name for name in per if isinstance(per[name], dict) and name != "floor"]:
        row = per[name]
        durable = name != "memory"
        rows.append(
            [
                "in memory" if not durable else f"durable, {name}",
                f"{row['us_per_step']:.1f}",
                f"{row['overhead_us_per_step']:.1f}" if durable else "-",
                f"{row['overhead_us_per_step_marginal']:.1f}" if durable else "-",
                f"{row['overhead_us_run_fixed']:.0f}" if durable else "-",
                f"{row['commits_per_step']:.2f}" if durable else "0",
                f"{row['commits_per_step_marginal']:.1f}" if durable else "0",
                f"{row['overhead_us_per_commit']:.0f}" if durable else "-",
                _spread_text(row.get("floor_overhead_us_per_step")),
                _spread_text(row.get("x_floor"), "x", 2),
            ]
        )
    if rows:
        print_table(
            f"checkpoint overhead: {per['steps']}-step run, 1 tool call/step, "
            f"median of {per['repetitions']} runs",
            [
                "",
                "us/step",
                "overhead us/step",
                "marginal us/step",
                "fixed us/run",
                "commits/step",
                "marginal commits/step",
                "us/commit",
                "floor overhead us/step",
                "x floor",
            ],
            rows,
        )
        for name, row in (per.get("floor") or {}).items():
            print(f"floor ({name}): {row['us_per_step']:.1f} us/step")
    concurrency = results.get("concurrency")
    if concurrency:
        rows = []
        for name, table in concurrency.items():
            for row in table.values():
                rows.append(
                    [
                        name,
                        f"{row['runs']:,}",
                        f"{row['steps_per_s']:,.0f}",
                        f"{row['steps_per_s_min']:,.0f}-{row['steps_per_s_max']:,.0f}",
                        f"{1e6 / row['steps_per_s']:.0f}",
                    ]
                )
        first = next(iter(next(iter(concurrency.values())).values()))
        print_table(
            f"durable concurrency: runs of {first['steps_per_run']} steps at once, "
            f"median of {first['rounds']} rounds",
            ["", "concurrent runs", "steps/s", "min-max", "us/step (wall)"],
            rows,
        )
    recovery = results.get("recovery")
    if recovery:
        print_table(
            f"recovery: runs interrupted after step {PARK_AT - 1}, one recover(...) call",
            ["", "runs", "journal entries/run", "start+park s", "recover s", "runs/s", "ms/run"],
            [
                [
                    name,
                    f"{row['runs']:,}",
                    row["journal_entries_per_run"],
                    f"{row['start_and_park_s']:.2f}",
                    f"{row['recover_s']:.2f}",
                    f"{row['runs_per_s']:,.0f}",
                    f"{row['ms_per_run']:.2f}",
                ]
                for name, row in recovery.items()
            ],
        )
    for note in results["notes"]:
        print(f"\nnote: {note}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--repetitions", type=int, default=None, help="timed runs (100)")
    parser.add_argument(
        "--recover-runs", type=int, default=None, help=f"interrupted runs ({RECOVER_RUNS})"
    )
    parser.add_argument("--dsn", default=os.environ.get("OPERATIVE_POSTGRES_DSN"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=None,
        help="concurrent runs in the concurrency table (1 100 1000)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="concurrency rounds (5)")
    parser.add_argument(
        "--only", choices=("per-step", "concurrency", "recovery"), nargs="+", default=None
    )
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (5 if args.quick else 100)
    warmup = 1 if args.quick else 10
    runs = args.recover_runs or (50 if args.quick else RECOVER_RUNS)
    concurrency = args.concurrency or ([1, 10, 50] if args.quick else [1, 100, 1000])
    rounds = args.rounds or (1 if args.quick else 5)
    phases = set(args.only or ("per-step", "concurrency", "recovery"))

    for directory in sweep_clusters():
        print(f"deleted {directory}, the PostgreSQL cluster of a benchmark that was killed")
    notes: list[str] = []
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick, "notes": notes}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        dsn: str | None = None
        classes: tuple[type[Any], type[Any]] | None = None
        if args.no_postgres:
            notes.append("PostgreSQL skipped (--no-postgres)")
        else:
            found = postgres_classes()
            if isinstance(found, str):
                notes.append(f"PostgreSQL skipped: {found}")
            else:
                classes = found
                dsn = args.dsn
                if not dsn:
                    dsn = stack.enter_context(throwaway_postgres())
                    if dsn is None:
                        notes.append(
                            "PostgreSQL skipped: no --dsn or OPERATIVE_POSTGRES_DSN, and no "
                            "initdb to start a throwaway cluster (apt install postgresql)"
                        )
                    else:
                        notes.append(
                            "PostgreSQL is a throwaway local cluster with fsync=off: an upper "
                            "bound for a server that syncs its commits"
                        )

        openers: dict[str, Opener] = {"sqlite": sqlite_opener(os.path.join(tmp, "steps.db"))}
        counted: dict[str, Opener] = {
            "sqlite": sqlite_opener(os.path.join(tmp, "count.db"), count=True)
        }
        recoveries: dict[str, Opener] = {"sqlite": sqlite_opener(os.path.join(tmp, "rec.db"))}
        floors: dict[str, Any] = {
            "sqlite": functools.partial(sqlite_floor, os.path.join(tmp, "floor.db"))
        }
        if dsn and classes is not None:
            openers["postgres"] = postgres_opener(
                stack.enter_context(postgres_schema(dsn)), classes
            )
            counted["postgres"] = postgres_opener(
                stack.enter_context(postgres_schema(dsn)), classes, count=True
            )
            recoveries["postgres"] = postgres_opener(
                stack.enter_context(postgres_schema(dsn)), classes
            )
            floors["postgres"] = functools.partial(
                postgres_floor, stack.enter_context(postgres_schema(dsn))
            )
        results["backends"] = list(openers)
        if "per-step" in phases:
            results["per_step"] = trio.run(
                measure_per_step, openers, counted, repetitions, warmup, floors
            )
        if "concurrency" in phases:
            results["concurrency"] = {
                name: trio.run(measure_concurrency, opener, concurrency, CONCURRENT_STEPS, rounds)
                for name, opener in openers.items()
            }
        if "recovery" in phases:
            results["recovery"] = {
                name: trio.run(measure_recovery, opener, runs)
                for name, opener in recoveries.items()
            }
    report(results)
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
