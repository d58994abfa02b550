"""The crash kit's worker processes, and the effect log the user's tools write to.

``python -m operative.testing._crash_worker --fork-server module:factory`` imports the
factory's module (and trio, operative, psycopg) once, then forks one worker per JSON
config read from stdin and replies with its pid: a fresh interpreter would spend 0.3 to
0.6 s of CPU on those imports per worker. A worker runs ``trio.run`` on its own database
connections until it ends or the kit kills it with SIGKILL.

``mode`` in a config: ``start`` starts one durable run per ``runs`` entry and reports
``{"acked": run_id}`` once it is durably started; ``recover`` waits until the leases of
``run_ids`` expired and recovers them. Reports are JSON lines appended to ``out``.

The process machinery (:func:`serve_forks`, :func:`work`, :func:`emit`) and the two
modes' loops (:func:`start_runs`, :func:`recover_runs`) take what differs as arguments,
so operative's own crash tests run their workers on the same code with their own agent,
modes and reports.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import trio

EFFECTS_ENV = "OPERATIVE_CRASH_EFFECTS"
"""The environment variable naming the file :func:`effect` appends to."""
WORKER_ENV = "OPERATIVE_CRASH_WORKER"
"""The environment variable naming the worker process in the effect lines."""

_sink: ContextVar[tuple[str, str] | None] = ContextVar("operative_crash_effects", default=None)
"""Where effects of this task go, ``(file, worker)``, inside the kit's own process."""


def effect(key: str, context: Any = None, *, repeatable: bool = False) -> None:
    """Record a side effect of a tool (a charge, a sent mail, a written row) for the kit.

    Call it once per effect, from the tool, just after the effect happened. ``key``
    names the effect (include what makes it unique, such as the order id); ``context``
    is the tool's ``ToolContext`` (it ties the effect to its run and call);
    ``repeatable`` marks an effect that may happen more than once (a read, an upsert).
    Outside the crash kit it does nothing, so tools may call it in production.
    """
    target = _sink.get()
    path, worker = target if target is not None else (os.environ.get(EFFECTS_ENV), "")
    if not path:
        return
    line = {
        "worker": worker or os.environ.get(WORKER_ENV, "?"),
        "run": getattr(context, "run_id", "") or "",
        "call": getattr(context, "call_id", "") or "",
        "key": key,
        "repeatable": repeatable,
        "at": time.time(),
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, json.dumps(line).encode() + b"\n")  # one write: one whole line
        os.fsync(fd)
    finally:
        os.close(fd)


def read_effects(path: str) -> list[dict[str, Any]]:
    """Every whole line of an effect log (a line cut by SIGKILL is left out)."""
    try:
        with open(path, "rb") as file:
            lines = file.read().split(b"\n")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines[:-1] if line.strip()]


def load_factory(spec: str) -> Callable[[], Any]:
    """``"module:function"`` → the function."""
    module_name, _, name = spec.partition(":")
    factory: Callable[[], Any] = getattr(importlib.import_module(module_name), name)
    return factory


def open_backend(backend: dict[str, str]) -> tuple[Any, Any]:
    """A new engine and checkpoint store over the kit's database."""
    if backend["kind"] == "sqlite":
        from operative.durable import SqliteCheckpointStore, SqliteEngine

        return SqliteEngine(backend["location"]), SqliteCheckpointStore(backend["location"])
    from operative.durable import PostgresCheckpointStore, PostgresEngine

    return PostgresEngine(backend["location"]), PostgresCheckpointStore(backend["location"])


_out: list[int] = []
"""The worker's report file (its descriptor), once it is a worker."""

Mode = Callable[[dict[str, Any]], Awaitable[None]]
"""What a worker does with its config, in ``trio.run``."""
Report = Callable[[str, Any], dict[str, Any]]
"""The line a worker reports for a run that ended: ``(run_id, RunResult)`` → JSON."""


def emit(record: dict[str, Any]) -> None:
    """Report ``record`` as one JSON line of the worker's ``out`` file."""
    os.write(_out[0], json.dumps(record).encode() + b"\n")  # one write: one whole line


def _finish_reason(run_id: str, result: Any) -> dict[str, Any]:
    return {"run": run_id, "finish_reason": str(result.finish_reason)}


async def start_runs(
    engine: Any,
    store: Any,
    agent: Any,
    runs: Sequence[tuple[str, str]],
    *,
    worker: str,
    lease_seconds: float,
    report: Report = _finish_reason,
    stagger: float = 0.0,
) -> None:
    """Start a durable run per ``(run_id, prompt)``, concurrently (the ``i``-th after
    ``i * stagger`` seconds); report ``ready``, each ``acked`` run, and each result."""
    from operative.durable import Durable

    async def one(index: int, run_id: str, prompt: str) -> None:
        await trio.sleep(index * stagger)
        durable = Durable(
            engine=engine,
            checkpoint_store=store,
            run_id=run_id,
            worker_id=worker,
            lease_seconds=lease_seconds,
        )
        async with agent.open_run(prompt, durable=durable) as run:
            await run.wait_durably_started()
            emit({"acked": run_id})
            result = await run.result()
        emit(report(run_id, result))

    emit({"ready": True})
    async with trio.open_nursery() as nursery:
        for index, (run_id, prompt) in enumerate(runs):
            nursery.start_soon(one, index, run_id, prompt)
    await engine.aclose()
    await store.aclose()


async def claimable(engine: Any, run_ids: Sequence[str], *, seconds: float = 60) -> list[str]:
    """Wait until no running run of ``run_ids`` is leased (at most ``seconds``); return
    the running ones."""
    with trio.fail_after(seconds):
        while True:
            running = [
                record
                for record in [await engine.get(run_id) for run_id in run_ids]
                if record is not None and record.status == "running"
            ]
            if all(record.lease_expires_at <= time.time() for record in running):
                return [record.run_id for record in running]
            await trio.sleep(0.01)


async def recover_runs(
    engine: Any,
    store: Any,
    agents: Mapping[str, Any],
    run_ids: Sequence[str],
    *,
    worker: str,
    lease_seconds: float,
    report: Report = _finish_reason,
    seconds: float = 120,
    claim_seconds: float = 60,
) -> None:
    """Recover ``run_ids`` as their leases expire (until none is running, at most
    ``seconds``; each wait for expiring leases at most ``claim_seconds``); report which
    runs each round claims and each result."""
    from operative.durable import recover

    with trio.fail_after(seconds):
        while pending := await claimable(engine, run_ids, seconds=claim_seconds):
            emit({"claiming": pending})
            results = await recover(
                engine=engine,
                checkpoint_store=store,
                agents=agents,
                worker_id=worker,
                run_ids=pending,
                lease_seconds=lease_seconds,
            )
            for run_id, result in results.items():
                emit(report(run_id, result))
    await engine.aclose()
    await store.aclose()


async def _start(config: dict[str, Any]) -> None:
    engine, store = open_backend(config["backend"])
    agent = load_factory(config["factory"])()
    await start_runs(
        engine,
        store,
        agent,
        config["runs"],
        worker=config["worker"],
        lease_seconds=config["lease_seconds"],
    )


async def _recover(config: dict[str, Any]) -> None:
    engine, store = open_backend(config["backend"])
    agent = load_factory(config["factory"])()
    await recover_runs(
        engine,
        store,
        {agent.name: agent},
        config["run_ids"],
        worker=config["worker"],
        lease_seconds=config["lease_seconds"],
    )


_MODES: dict[str, Mode] = {"start": _start, "recover": _recover}


def _effects_of(config: dict[str, Any]) -> None:
    """Where the kit's workers log their tools' effects, for :func:`effect`."""
    os.environ[EFFECTS_ENV] = config["effects"]
    os.environ[WORKER_ENV] = config["worker"]


def work(
    config: dict[str, Any],
    modes: Mapping[str, Mode],
    prepare: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Become the worker ``config`` describes (in a fresh fork): stdin from
    ``/dev/null``, stdout and stderr to the file ``stderr``, reports to ``out``; then
    ``prepare(config)`` and ``trio.run`` of its ``mode``, and a last ``{"exit": 0}``."""
    stderr = os.open(config["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(stderr, 1)
    os.dup2(stderr, 2)
    _out.append(os.open(config["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    if prepare is not None:
        prepare(config)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)
    trio.run(modes[config["mode"]], config)
    emit({"exit": 0})


def serve_forks(
    modes: Mapping[str, Mode],
    *,
    preload: Callable[[], object] | None = None,
    prepare: Callable[[dict[str, Any]], None] | None = None,
    blocked: Collection[signal.Signals] = (),
) -> None:
    """Import everything once, say ``ready``, then fork a worker per config line read
    from stdin (:func:`work`) and reply with its pid.

    ``preload`` imports what the workers need beyond operative and psycopg (the user's
    factory); ``blocked`` are signals a worker blocks from the fork on, before any thread
    starts, so one sent early waits until the worker asks for it.
    """
    with contextlib.suppress(ImportError):  # without it, only SQLite workers run
        import psycopg  # noqa: F401  (imported once here rather than in every worker)
    import operative.durable  # noqa: F401

    if preload is not None:
        preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin.buffer:
        config = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            if blocked:
                signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
            code = 1
            try:
                work(config, modes, prepare)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fork-server"]:
        factory = sys.argv[2]
        serve_forks(_MODES, preload=lambda: load_factory(factory), prepare=_effects_of)
    else:
        work(json.loads(sys.argv[1]), _MODES, _effects_of)
