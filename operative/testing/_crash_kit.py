"""The crash kit's scenarios: SIGKILL rounds in worker processes, aborts racing commits."""

from __future__ import annotations

import random
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from ._crash_checks import Effects, check_journal, check_stored_run
from ._crash_procs import ForkServer, Worker
from ._crash_worker import _sink, claimable, load_factory, open_backend, read_effects

LEASE_SECONDS = 0.4
"""The lease of the workers the kit kills: how long the next one waits to claim."""
POLL = 0.003
CONCURRENT_ROUNDS = 2


@attrs.frozen
class Kill:
    """When to SIGKILL a worker: after ``count`` journal entries or effect lines, or after
    ``delay`` seconds."""

    how: str
    count: int = 0
    delay: float = 0.0

    @classmethod
    def draw(cls, rng: random.Random, runs: int, first: bool) -> Kill:
        how = rng.choice(["entries", "entries", "effects", "effects", "delay"])
        if how == "entries":
            return cls(how, count=rng.randint(1 if first else 0, 6 * runs))
        if how == "effects":
            return cls(how, count=rng.randint(1, 2 * runs))
        return cls(how, delay=rng.uniform(0.0, 0.25))


@attrs.frozen
class Round:
    """Runs started by one worker, killed, then recovered by workers killed in turn."""

    index: int
    runs: tuple[tuple[str, str], ...]
    kills: tuple[Kill, ...]


def plan_rounds(
    rng: random.Random, prefix: str, prompts: Sequence[str], runs: int, kills: int
) -> list[Round]:
    """Split ``runs`` and ``kills`` into rounds of one starting worker and its recoverers."""
    count = max(1, min(runs, (kills + 1) // 2)) if kills else 1
    share = [kills // count + (index < kills % count) for index in range(count)]
    rounds = []
    for index in range(count):
        ids = range(index, runs, count)
        batch = tuple((f"{prefix}-{i}", prompts[i % len(prompts)]) for i in ids)
        rounds.append(
            Round(
                index,
                batch,
                tuple(Kill.draw(rng, len(batch), n == 0) for n in range(share[index])),
            )
        )
    return rounds


@attrs.define
class Kit:
    """One crash test: its database, fork server, effect log and what it found."""

    factory: str
    backend: dict[str, str]
    directory: Path
    idempotent: Callable[[str], bool]
    server: ForkServer | None = None
    stats: Counter[str] = attrs.Factory(Counter)
    problems: list[str] = attrs.Factory(list)
    kills_landed: int = 0

    @property
    def effects_path(self) -> str:
        return str(self.directory / "effects.log")

    def effects_of(self, run_id: str) -> Effects:
        return [line for line in read_effects(self.effects_path) if line["run"] == run_id]

    async def start(self, nursery: trio.Nursery, name: str, **config: Any) -> Worker:
        assert self.server is not None
        out, stderr = self.directory / f"{name}.out", self.directory / f"{name}.err"
        config.update(
            factory=self.factory,
            backend=self.backend,
            effects=self.effects_path,
            worker=name,
            out=str(out),
            stderr=str(stderr),
            lease_seconds=LEASE_SECONDS,
        )
        pid = await trio.to_thread.run_sync(self.server.fork, config)
        worker = Worker(name, pid, out, stderr)
        nursery.start_soon(worker.watch)
        return worker


async def _until(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``condition`` (other processes' state: files, the database) until it holds."""
    while not await condition():  # noqa: ASYNC110 (no event to wait on across processes)
        await trio.sleep(POLL)


async def _kill_at(kit: Kit, worker: Worker, kill: Kill, store: Any, run_ids: list[str]) -> None:
    """Kill ``worker`` at ``kill`` (unless it ended before)."""

    async def said(key: str) -> bool:
        return not worker.running or worker.said(key)

    with trio.move_on_after(30):
        await _until(lambda: said("ready") if worker.name.endswith("start") else said("claiming"))
        if kill.how == "delay":
            await trio.sleep(kill.delay)
        elif kill.how == "effects":
            base = sum(len(kit.effects_of(run_id)) for run_id in run_ids)

            async def effects() -> bool:
                total = sum(len(kit.effects_of(run_id)) for run_id in run_ids)
                return not worker.running or total - base >= kill.count

            await _until(effects)
        else:
            seen = {run_id: len(await store.read(run_id)) for run_id in run_ids}

            async def entries() -> bool:
                total = 0
                for run_id in run_ids:
                    total += len(await store.read(run_id)) - seen[run_id]
                return not worker.running or total >= kill.count

            await _until(entries)
    worker.kill()
    await worker.wait()
    if worker.killed:
        kit.kills_landed += 1
        kit.stats[f"kills landed ({kill.how})"] += 1


async def _journals_after_kill(engine: Any, store: Any, run_ids: list[str]) -> list[list[Any]]:
    """The journals as the next worker finds them: once the killed worker's leases expired
    (a write in flight at the kill may commit until then)."""
    await claimable(engine, run_ids)
    return [list(await store.read(run_id)) for run_id in run_ids]


async def run_round(kit: Kit, round: Round) -> None:
    """Start, kill, recover (killing recoverers too), then check every run of the round."""
    run_ids = [run_id for run_id, _ in round.runs]
    snapshots: list[list[list[Any]]] = []
    engine, store = open_backend(kit.backend)
    try:
        async with trio.open_nursery() as nursery:
            name = f"r{round.index}-start"
            first = await kit.start(nursery, name, mode="start", runs=round.runs)
            workers = [first]
            if round.kills:
                await _kill_at(kit, first, round.kills[0], store, run_ids)
            elif not await first.wait():
                kit.problems.append(f"{first.describe()} did not finish within 120 s")
            if not first.killed and not first.clean:
                kit.problems.append(f"a worker failed: {first.describe()}")
            snapshots.append(await _journals_after_kill(engine, store, run_ids))
            for number, kill in enumerate([*round.kills[1:], None], 1):
                name = f"r{round.index}-recover{number}"
                worker = await kit.start(nursery, name, mode="recover", run_ids=run_ids)
                workers.append(worker)
                if kill is not None:
                    await _kill_at(kit, worker, kill, store, run_ids)
                    snapshots.append(await _journals_after_kill(engine, store, run_ids))
                elif not await worker.wait():
                    kit.problems.append(f"{worker.describe()} did not finish within 120 s")
                if not worker.killed and not worker.clean:
                    kit.problems.append(f"a recovering worker failed: {worker.describe()}")
        acked = first.acked()
        for index, run_id in enumerate(run_ids):
            kit.problems += await check_stored_run(
                run_id,
                engine,
                store,
                acked=run_id in acked,
                snapshots=[snapshot[index] for snapshot in snapshots],
                effects=kit.effects_of(run_id),
                idempotent=kit.idempotent,
                stats=kit.stats,
            )
    finally:
        await engine.aclose()
        await store.aclose()


# -- aborts and shutdowns racing durable commits -----------------------------------------

RACES = ("abort-before", "abort-during", "abort-after", "cancel-during", "cancel-after")
ABORT_REASON = "abort racing a durable write"


class Interference:
    """At write number ``at`` (of ``start``, ``append``, ``finish``) abort the run or
    cancel its caller: before, while, or just after the real write commits."""

    def __init__(self, at: int, mode: str) -> None:
        self.at = at
        self.mode = mode
        self.count = 0
        self.fired = False
        self.run: Any = None
        self.caller = trio.CancelScope()

    def wrap(self, inner: Any) -> Any:
        interference = self

        class Wrapped:
            def __getattr__(self, name: str) -> Any:
                value = getattr(inner, name)
                if name not in ("start", "append", "finish"):
                    return value
                return lambda *args, **kwargs: interference.write(value, *args, **kwargs)

        return Wrapped()

    def _fire(self) -> None:
        self.fired = True
        if self.mode.startswith("abort"):
            self.run.abort(ABORT_REASON)
        else:
            self.caller.cancel()

    async def write(self, method: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        index = self.count
        self.count += 1
        if index != self.at or self.run is None:
            return await method(*args, **kwargs)
        if self.mode == "abort-before":
            self._fire()
            await trio.lowlevel.checkpoint()
            return await method(*args, **kwargs)
        if self.mode.endswith("during"):
            self._fire()  # the write is in flight when the cancellation lands
            return await method(*args, **kwargs)
        value = await method(*args, **kwargs)
        self._fire()  # committed; the cancellation lands before the caller hears of it
        await trio.lowlevel.checkpoint()
        return value


async def race_one(kit: Kit, run_id: str, prompt: str, at: int, mode: str) -> None:
    """One run whose ``at``-th durable write meets ``mode``; check the stored record
    agrees with the result (after recovery, for a shutdown)."""
    from operative.durable import Durable, recover

    agent = load_factory(kit.factory)()
    where = f"run {run_id} ({mode} at write {at})"
    interference = Interference(at, mode)
    engine, store = open_backend(kit.backend)
    token = _sink.set((kit.effects_path, "race"))
    try:
        durable = Durable(
            engine=interference.wrap(engine),
            checkpoint_store=interference.wrap(store),
            run_id=run_id,
            worker_id="race",
        )
        result = None
        with interference.caller:
            async with agent.open_run(prompt, durable=durable) as run:
                interference.run = run
                result = await run.result()
        if result is None:  # the caller was cancelled: a shutdown, unless it had ended
            with trio.CancelScope(shield=True):
                result = await run.result()
        assert result is not None
        record = await engine.get(run_id)
        if record is None:
            kit.problems.append(f"{where}: no stored record after the run ended")
            return
        kit.stats[f"races fired ({mode})" if interference.fired else "races not reached"] += 1
        if record.status == "running":
            if not mode.startswith("cancel") or record.lease_owner is not None:
                kit.problems.append(f"{where}: left running ({record}) though {result}")
                return
            kit.stats["runs left to recovery by a shutdown"] += 1
            _sink.set((kit.effects_path, "race-recover"))
            recovered = await recover(
                engine=engine,
                checkpoint_store=store,
                agents={agent.name: agent},
                worker_id="race-recover",
                run_ids=[run_id],
            )
            result = recovered[run_id]
            record = await engine.get(run_id)
            assert record is not None
        if record.status == "running" or record.outcome is None:
            kit.problems.append(f"{where}: still running after recovery")
            return
        if record.outcome.finish_reason != str(result.finish_reason):
            kit.problems.append(
                f"{where}: the stored record says {record.outcome.finish_reason} but the "
                f"result says {result.finish_reason}"
            )
        if (
            mode.startswith("abort")
            and record.outcome.finish_reason == "aborted"
            and record.outcome.abort_reason != result.abort_reason
        ):
            kit.problems.append(
                f"{where}: aborted with {result.abort_reason!r}, stored "
                f"{record.outcome.abort_reason!r}"
            )
        entries = await store.read(run_id)
        kit.problems += check_journal(
            run_id, entries, kit.effects_of(run_id), kit.idempotent, kit.stats
        )
    except Exception:
        kit.problems.append(f"{where} raised:\n{traceback.format_exc()}")
    finally:
        _sink.reset(token)
        await engine.aclose()
        await store.aclose()


async def run_races(
    kit: Kit, rng: random.Random, prefix: str, prompts: Sequence[str], aborts: int
) -> None:
    for index in range(aborts):
        await race_one(
            kit,
            f"{prefix}-race-{index}",
            prompts[index % len(prompts)],
            rng.randint(0, 12),
            rng.choice(RACES),
        )


def elapsed_since(start: float) -> float:
    return round(time.monotonic() - start, 2)
