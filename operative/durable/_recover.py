"""Recovery: claim runs whose worker is gone and finish them from their journals.

::

    recover(backend, agents=...)     one pass: claim, resume every claimed run, return
    └── nursery                      their results
        └── resumed runs             each an ``agent.open_run`` with the replayed state

    serve_durable_runs(backend, ...) forever: claim as capacity allows, resume, poll again
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._core._errors import InvalidArgument
from .._core._results import RunResult
from .._lazy._agent import resolve_agent
from ._backend import durable_parts
from ._protocols import CheckpointStore, DurableEngine
from ._records import Lease
from ._replay import replay_journal
from ._routing import Durable, Resumed, default_worker_id

if TYPE_CHECKING:
    from ._postgres import PostgresDurable
    from ._sqlite import SqliteDurable

__all__ = ["recover", "resume", "serve_durable_runs"]

logger = logging.getLogger("operative.durable")


def _check_agents(agents: Mapping[str, Any]) -> None:
    if not isinstance(agents, Mapping) or not agents:
        raise InvalidArgument(
            "agents= takes a mapping {agent name: agent} naming every agent whose runs "
            "this worker may resume"
        )
    for name, agent in agents.items():
        if not callable(getattr(agent, "open_run", None)):
            raise InvalidArgument(f"agents[{name!r}] is not an agent (it has no open_run)")


def _parts(
    backend: object, engine: Any, checkpoint_store: Any, call: str
) -> tuple[DurableEngine, CheckpointStore]:
    """The pair ``call`` runs on, checked as :class:`Durable` checks it."""
    engine, checkpoint_store = durable_parts(backend, engine, checkpoint_store, call=call)
    Durable(engine=engine, checkpoint_store=checkpoint_store)  # one database, the right types
    return engine, checkpoint_store


async def resume(
    lease: Lease,
    *,
    engine: DurableEngine,
    checkpoint_store: CheckpointStore,
    agent: Any,
    lease_seconds: float = 30.0,
) -> RunResult | None:
    """Continue one claimed run to its end; ``None`` when its journal says it finished.

    ``agent`` may be lazy: its definition loads before the run resumes.

    Raises:
        CorruptRecordError: the journal cannot be replayed (the run is left claimed
            until its lease expires, and nothing is written).
        AsyncDefinitionLoadError, AgentContractError: a lazy agent's definition did not
            load (likewise: the run is left claimed until its lease expires).
    """
    entries = await checkpoint_store.read(lease.run_id)
    replay = replay_journal(lease.run_id, entries)
    if replay.finished is not None:
        return None
    agent = await resolve_agent(agent)
    durable = Durable(
        engine=engine,
        checkpoint_store=checkpoint_store,
        run_id=lease.run_id,
        worker_id=lease.worker_id,
        lease_seconds=lease_seconds,
        session_id=lease.session_id,
    )
    routing = Resumed(durable=durable, lease=lease, replay=replay)
    async with agent.open_run(replay.history, durable=routing) as run:
        result: RunResult = await run.result()
    return result


async def _resume_logged(
    lease: Lease,
    *,
    engine: DurableEngine,
    checkpoint_store: CheckpointStore,
    agents: Mapping[str, Any],
    lease_seconds: float,
) -> RunResult | None:
    """:func:`resume`, with a failure logged instead of raised (other runs go on)."""
    try:
        return await resume(
            lease,
            engine=engine,
            checkpoint_store=checkpoint_store,
            agent=agents[lease.agent_name],
            lease_seconds=lease_seconds,
        )
    except Exception:
        logger.exception("durable run %s could not be resumed", lease.run_id)
        return None


async def recover(
    backend: SqliteDurable | PostgresDurable | None = None,
    *,
    agents: Mapping[str, Any],
    engine: DurableEngine | None = None,
    checkpoint_store: CheckpointStore | None = None,
    worker_id: str | None = None,
    lease_seconds: float = 30.0,
    run_ids: Sequence[str] | None = None,
    limit: int = 1000,
) -> dict[str, RunResult]:
    """Resume every runnable run of ``agents`` (lease expired) and return their results.

    Runs resume concurrently, each in this call's nursery. A run whose journal cannot be
    replayed is logged and skipped (it stays as it is). Cancelling this call is a
    shutdown: the runs release their leases for another worker.

    Args:
        backend: the database (:class:`SqliteDurable`, :class:`PostgresDurable`).
        agents: ``{agent name: agent}``; only runs of these agents are claimed.
        engine: instead of ``backend``, for an engine of your own, with
            ``checkpoint_store``.
        checkpoint_store: with ``engine``: its journal.
        worker_id: the lease owner recorded (default: host, pid and a random suffix).
        run_ids: only these runs.
        limit: at most this many runs.
    """
    engine, checkpoint_store = _parts(backend, engine, checkpoint_store, "recover()")
    _check_agents(agents)
    worker = worker_id or default_worker_id()
    leases = await engine.claim(
        worker_id=worker,
        lease_seconds=lease_seconds,
        limit=limit,
        run_ids=run_ids,
        agent_names=list(agents),
    )
    results: dict[str, RunResult] = {}

    async def one(lease: Lease) -> None:
        result = await _resume_logged(
            lease,
            engine=engine,
            checkpoint_store=checkpoint_store,
            agents=agents,
            lease_seconds=lease_seconds,
        )
        if result is not None:
            results[lease.run_id] = result

    async with trio.open_nursery() as nursery:
        for lease in leases:
            nursery.start_soon(one, lease, name=f"operative recovered run {lease.run_id}")
    return results


async def serve_durable_runs(
    backend: SqliteDurable | PostgresDurable | None = None,
    *,
    agents: Mapping[str, Any],
    engine: DurableEngine | None = None,
    checkpoint_store: CheckpointStore | None = None,
    worker_id: str | None = None,
    lease_seconds: float = 30.0,
    poll_interval: float = 1.0,
    max_concurrent_runs: int = 100,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Forever: claim runnable runs (up to ``max_concurrent_runs`` at once) and run them.

    Start it in a nursery (``await nursery.start(functools.partial(serve_durable_runs,
    backend, agents=...))`` returns once it polls). Cancel the nursery to stop: runs in
    flight release their leases, so another worker picks them up at once. ``backend``,
    or ``engine=`` with ``checkpoint_store=``, as for :func:`recover`.
    """
    engine, checkpoint_store = _parts(backend, engine, checkpoint_store, "serve_durable_runs()")
    _check_agents(agents)
    if not isinstance(poll_interval, int | float) or not 0 < poll_interval < math.inf:
        raise InvalidArgument(f"poll_interval must be seconds > 0, not {poll_interval!r}")
    if not isinstance(max_concurrent_runs, int) or max_concurrent_runs < 1:
        raise InvalidArgument(f"max_concurrent_runs must be >= 1, not {max_concurrent_runs!r}")
    worker = worker_id or default_worker_id()
    running = 0
    finished = trio.Event()

    async def one(lease: Lease) -> None:
        nonlocal running, finished
        try:
            await _resume_logged(
                lease,
                engine=engine,
                checkpoint_store=checkpoint_store,
                agents=agents,
                lease_seconds=lease_seconds,
            )
        finally:
            running -= 1
            finished.set()

    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            free = max_concurrent_runs - running
            leases: list[Lease] = []
            if free > 0:
                try:
                    leases = await engine.claim(
                        worker_id=worker,
                        lease_seconds=lease_seconds,
                        limit=free,
                        agent_names=list(agents),
                    )
                except Exception:
                    logger.warning("claiming durable runs failed; trying again", exc_info=True)
            for lease in leases:
                running += 1
                nursery.start_soon(one, lease, name=f"operative recovered run {lease.run_id}")
            if len(leases) == free and free > 0:
                continue  # there may be more waiting: claim again at once
            finished = trio.Event()
            with trio.move_on_after(poll_interval):
                if running >= max_concurrent_runs:
                    await finished.wait()
                else:
                    await trio.sleep_forever()
