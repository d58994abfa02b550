"""Crash-test an agent: SIGKILL the processes running it, recover, check what was stored.

``crash_test("myapp.agents:make_agent", runs=50, kills=10)`` starts durable runs of the
agent the factory builds in worker processes, kills workers (and the workers recovering
their runs) with SIGKILL at points drawn from a seed, recovers every run, then races
``abort()`` and caller cancellations against the run's durable commits. It checks:

- every run acknowledged as durably started finishes (record and journal agree);
- journals and steps are contiguous, each call has one result;
- a call whose result was committed never runs again;
- a call of a tool that is not idempotent, cut short by a kill, is reported with the
  "outcome unknown" error and not run again;
- an effect a tool records with :func:`effect` happens once, unless marked repeatable;
- a journal written before a kill is never rewritten by recovery;
- after an abort or a shutdown racing a commit, the stored record agrees with the
  result (after recovery, for a shutdown).

It needs Linux (workers are watched and killed through pidfds) and an agent whose model
does not need a network (a :class:`~operative.testing.ScriptedModel` or a function).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from operative._core._errors import OperativeError

from ._crash_checks import check_effects
from ._crash_kit import CONCURRENT_ROUNDS, Kit, plan_rounds, run_races, run_round
from ._crash_procs import CrashKitError, ForkServer
from ._crash_worker import EFFECTS_ENV, effect, load_factory, read_effects

__all__ = [
    "EFFECTS_ENV",
    "CrashKitError",
    "CrashReport",
    "CrashTestFailure",
    "crash_test",
    "effect",
]


@attrs.frozen(kw_only=True)
class CrashReport:
    """What a crash test did and found."""

    seed: int
    """Pass it back as ``crash_test(..., seed=...)`` to replay the same kill points."""
    backend: str
    runs: int
    kills_planned: int
    kills_landed: int
    """Kills that hit a live worker (one that ended before its kill point is not killed)."""
    aborts: int
    seconds: float
    counts: dict[str, int]
    """What the runs went through: runs completed, calls cut short, races fired, ..."""
    problems: tuple[str, ...]
    """Each broken invariant, in words; empty when the agent passed."""
    directory: str | None
    """The workers' logs and the effect log, kept when a problem was found."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (
            f"crash test of {self.runs} runs, {self.kills_landed}/{self.kills_planned} kills "
            f"landed, {self.aborts} abort races on {self.backend} in {self.seconds} s, "
            f"seed {self.seed}: {'passed' if self.ok else f'{len(self.problems)} problems'}"
        )
        lines = [head, *(f"  {name}: {count}" for name, count in sorted(self.counts.items()))]
        if self.problems:
            lines.append("problems:")
            lines += [f"  - {problem}" for problem in self.problems[:30]]
            if len(self.problems) > 30:
                lines.append(f"  ... and {len(self.problems) - 30} more")
            lines.append(f"replay with crash_test(..., seed={self.seed}); logs in {self.directory}")
        return "\n".join(lines)


class CrashTestFailure(OperativeError, AssertionError):
    """The agent broke an invariant under crashes: ``report`` says which, and the seed
    that replays it. Fix the tool or the declaration the report names."""

    def __init__(self, report: CrashReport) -> None:
        super().__init__(str(report))
        self.report = report


def _factory_spec(factory: str | Callable[[], Any]) -> str:
    if isinstance(factory, str):
        if ":" not in factory:
            raise CrashKitError(f"pass the agent factory as 'module:function', not {factory!r}")
        return factory
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if module == "__main__":  # a script: its workers import it by its file's name
        script = getattr(sys.modules["__main__"], "__file__", None)
        if script is not None and str(Path(script).resolve().parent) in map(_resolved, sys.path):
            module = Path(script).stem
    if not module or module == "__main__" or "<locals>" in name:
        raise CrashKitError(
            f"{factory!r} cannot be imported by the worker processes: pass a module-level "
            "function, or its 'module:function' name"
        )
    return f"{module}:{name}"


def _resolved(path: str) -> str:
    return str(Path(path or ".").resolve())


def _backend(backend: str, directory: Path) -> dict[str, str]:
    if backend == "sqlite":
        return {"kind": "sqlite", "location": str(directory / "durable.db")}
    if backend.startswith(("postgresql://", "postgres://")) or "dbname=" in backend:
        return {"kind": "postgres", "location": backend}
    raise CrashKitError(f'backend must be "sqlite" or a PostgreSQL DSN, not {backend!r}')


def crash_test(
    agent_factory: str | Callable[[], Any],
    *,
    runs: int = 50,
    kills: int = 10,
    aborts: int = 10,
    backend: str = "sqlite",
    seed: int | None = None,
    prompts: Sequence[str] = ("Go.",),
    directory: str | os.PathLike[str] | None = None,
) -> CrashReport:
    """Crash-test the agent ``agent_factory`` builds; raise :class:`CrashTestFailure`
    naming what broke and the seed, or return the report.

    Args:
        agent_factory: a module-level function returning the agent (or its
            ``"module:function"`` name); worker processes import and call it.
        runs: durable runs started in worker processes.
        kills: SIGKILLs aimed at the workers (those starting runs and those recovering).
        aborts: further runs, in this process, whose durable commits meet an
            ``abort()`` or a cancellation of their caller.
        backend: ``"sqlite"`` (a file in ``directory``) or a PostgreSQL DSN.
        seed: replays a report's kill points and races (drawn when omitted).
        prompts: the runs' inputs, used in turn.
        directory: where the database and the logs go (a new temporary directory when
            omitted, removed when the test passes).
    """
    if not hasattr(os, "pidfd_open"):
        raise CrashKitError("the crash kit needs Linux 5.3+ (it kills workers through pidfds)")
    spec = _factory_spec(agent_factory)
    agent = load_factory(spec)()
    if seed is None:
        seed = random.SystemRandom().randrange(1_000_000)
    own_directory = directory is None
    where = Path(tempfile.mkdtemp(prefix="operative-crash-") if directory is None else directory)
    where.mkdir(parents=True, exist_ok=True)

    def idempotent(name: str) -> bool:
        tool = agent.toolbox.get(name)
        return bool(tool is not None and tool.idempotent)

    kit = Kit(spec, _backend(backend, where), where, idempotent)
    rng = random.Random(seed)
    prefix = f"crash-{seed}-{os.getpid()}-{time.time_ns() % 10**9}"
    rounds = plan_rounds(rng, prefix, list(prompts), runs, kills)
    start = time.monotonic()

    async def main() -> None:
        if runs:
            kit.server = ForkServer.for_factory(spec, where)
            try:
                limiter = trio.CapacityLimiter(CONCURRENT_ROUNDS)

                async def one(round: Any) -> None:
                    async with limiter:
                        await run_round(kit, round)

                async with trio.open_nursery() as nursery:
                    for round in rounds:
                        nursery.start_soon(one, round)
            finally:
                kit.server.close()
        await run_races(kit, rng, prefix, list(prompts), aborts)

    trio.run(main)
    kit.problems += check_effects(read_effects(kit.effects_path))
    report = CrashReport(
        seed=seed,
        backend="sqlite" if backend == "sqlite" else "postgresql",
        runs=runs,
        kills_planned=kills,
        kills_landed=kit.kills_landed,
        aborts=aborts,
        seconds=round(time.monotonic() - start, 2),
        counts=dict(Counter(kit.stats)),
        problems=tuple(kit.problems),
        directory=str(where) if kit.problems or not own_directory else None,
    )
    if report.problems:
        raise CrashTestFailure(report)
    if own_directory:
        shutil.rmtree(where, ignore_errors=True)
    return report
