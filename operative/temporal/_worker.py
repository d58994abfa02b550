"""``serve_temporal_worker``: run the operative runs Temporal dispatches to this process.

::

    serve_temporal_worker(engine, agents=...)
    ├── the Temporal worker (asyncio thread)   workflows + the run activity
    └── runs nursery (Trio)
        └── one attempt per activity           agent.open_run(..., durable=<the journal>)

The activity is a thin asyncio coroutine: it starts the attempt in the runs nursery and
waits for it, and turns Temporal's cancellation of the activity into the right Trio
action: a cancellation the workflow asked for (``engine.cancel``) is ``run.abort(reason)``;
a worker shutdown or a lapsed heartbeat is a shutdown (nothing terminal is written, and
Temporal retries the attempt elsewhere, where it resumes from the journal).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import attrs
import trio
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from .._agent import Agent
from .._core._errors import CorruptRecordError, InvalidArgument, OperativeError
from .._core._extension import Extension, Step
from .._core._results import StepResult
from .._core._types import ApprovalDecision, PendingApproval
from .._lazy._agent import resolve_agent
from ..conversation import ConversationHistory
from ..durable._errors import LeaseLostError
from ..durable._replay import replay_journal
from ..durable._routing import Durable, Resumed, default_worker_id
from ..steering import Steering, SteeringCommand
from ._bridge import Shutdown
from ._engine import TemporalEngine
from ._journal import AttemptJournal
from ._wire import (
    ACTIVITY,
    NON_RETRYABLE,
    ActivityInput,
    ActivityReply,
    decode,
    encode,
)
from ._workflow import RunWorkflow

__all__ = ["serve_temporal_worker"]

logger = logging.getLogger("operative.temporal")

_SHUTDOWN_BOUND = 30.0


class _Fatal(OperativeError):
    """The run cannot go on anywhere: it ends ``error`` (not retried)."""


@attrs.define
class _Control:
    """How the activity steers its attempt from the asyncio side."""

    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    run: Any = None
    abort_reason: str | None = None
    shutdown_reason: str | None = None

    def abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        if self.run is not None:
            self.run.abort(reason)

    def shutdown(self, why: str) -> None:
        if self.shutdown_reason is None:
            self.shutdown_reason = why
        self.scope.cancel()


@attrs.frozen
class _Rollover:
    """A feature that stops the attempt between steps once the workflow asks to
    continue as new (the next attempt goes on from the journal, in the new run)."""

    journal: AttemptJournal
    control: _Control
    steering: _RunSteering | None

    def extension(self, config: Any) -> Extension:
        return _RolloverExtension(self.journal, self.control, self.steering)


class _RolloverExtension(Extension):
    __slots__ = ("_control", "_journal", "_steering")

    def __init__(
        self, journal: AttemptJournal, control: _Control, steering: _RunSteering | None
    ) -> None:
        self._journal = journal
        self._control = control
        self._steering = steering

    def wrap_step(self, run: Any, step: int, body: Step) -> Step:
        async def rolled_over() -> StepResult:
            if self._journal.rollover and self._control.abort_reason is None:
                self._control.shutdown("rollover")
            else:
                steering = self._steering
                if steering is not None and self._journal.steers > steering.taken:
                    await steering.catch_up()  # before the step's steering entry reads it
            return await body()

        return rolled_over


class _RunSteering(Steering):
    """A run's steering gate on a worker: its commands come from the run's history.

    Commands sent while the run works are taken at its next step entry (the journal's
    replies say how many there are); while the run is parked on a ``Pause``, a long
    poll on the history waits for the ``Resume``.
    """

    def __init__(self, engine: TemporalEngine, run_id: str) -> None:
        super().__init__(run_id)
        self._engine = engine
        self._run_id = run_id
        self._taken = 0

    @property
    def taken(self) -> int:
        return self._taken

    def take(self, commands: list[SteeringCommand]) -> None:
        for command in commands[self._taken :]:
            outcome = self.submit(command)
            if outcome.status != "accepted":
                logger.warning(
                    "steering command %s of run %s was %s: %s",
                    outcome.command_id,
                    self._run_id,
                    outcome.status,
                    outcome.reason,
                )
        self._taken = max(self._taken, len(commands))

    async def catch_up(self) -> None:
        try:
            state = await self._engine.history(self._run_id)
        except Exception:
            # Taken at a later step entry (or while parked) instead: steering waits, the
            # run does not fail for it.
            logger.warning("reading the steering of run %s failed", self._run_id, exc_info=True)
            return
        self.take(state.steering)

    async def wait_for_resume(self) -> None:
        if not self.desired_state().paused:
            await trio.lowlevel.checkpoint()
            return
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                while True:
                    try:
                        commands = await self._engine.bridge.call(
                            self._engine._steering_after, self._run_id, self._taken
                        )
                    except Exception:
                        logger.warning(
                            "following the steering of run %s failed; trying again",
                            self._run_id,
                            exc_info=True,
                        )
                        await trio.sleep(1.0)
                        continue
                    self.take(commands)

            nursery.start_soon(follow, name=f"operative steering of {self._run_id}")
            await super().wait_for_resume()
            nursery.cancel_scope.cancel()


def _parks(agent: Agent) -> bool:
    toolbox = agent.toolbox
    return toolbox.approval_policy is not None or any(t.needs_approval for t in toolbox)


async def _attempt(
    engine: TemporalEngine,
    agents: Mapping[str, Any],
    spec: ActivityInput,
    *,
    activity_id: str,
    attempt: int,
    worker_id: str,
    heartbeat: Any,
    control: _Control,
) -> ActivityReply:
    """One attempt of one run, in Trio, inside the attempt's shutdown scope (which the
    activity cancels when the worker stops or the attempt's heartbeat lapsed)."""
    reply = ActivityReply()
    with control.scope:
        reply = await _claim_and_run(
            engine,
            agents,
            spec,
            activity_id=activity_id,
            attempt=attempt,
            worker_id=worker_id,
            heartbeat=heartbeat,
            control=control,
        )
    if control.scope.cancelled_caught:
        if control.shutdown_reason == "rollover":
            return ActivityReply(rollover=True)
        raise Shutdown(control.shutdown_reason or "the worker is shutting down")
    return reply


async def _claim_and_run(
    engine: TemporalEngine,
    agents: Mapping[str, Any],
    spec: ActivityInput,
    *,
    activity_id: str,
    attempt: int,
    worker_id: str,
    heartbeat: Any,
    control: _Control,
) -> ActivityReply:
    """Claim the run, read its journal, run or resume it."""
    journal = AttemptJournal(
        engine,
        run_id=spec.run_id,
        agent_name=spec.agent_name,
        session_id=spec.session_id,
        worker_id=worker_id,
        heartbeat=heartbeat,
    )
    if spec.agent_name not in agents:
        raise _Fatal(
            f"no agent named {spec.agent_name!r} is served on task queue "
            f"{engine.task_queue!r} (this worker serves {sorted(agents)}): every worker "
            "of a task queue must serve the same agents"
        )
    try:
        await journal.take(activity_id, attempt)
    except LeaseLostError:
        record = await engine.get(spec.run_id)
        if record is not None and record.status != "running":
            # Finished by an earlier attempt whose own completion never reached Temporal
            # (its worker died just after): nothing is left to do.
            return ActivityReply()
        raise
    if journal.cancel_reason is not None and control.abort_reason is None:
        control.abort_reason = journal.cancel_reason
    try:
        entries = await journal.read(spec.run_id)
        replay = replay_journal(spec.run_id, entries) if entries else None
        agent = await resolve_agent(agents[spec.agent_name])
    except CorruptRecordError as exc:
        raise _Fatal(str(exc)) from None
    if replay is not None and replay.finished is not None:
        return ActivityReply()
    if not isinstance(agent, Agent):
        raise _Fatal(f"agents[{spec.agent_name!r}] is not an operative Agent: {agent!r}")
    options = dict(agent.options)
    steering: _RunSteering | None = None
    if options.get("steering") is None:
        steering = _RunSteering(engine, spec.run_id)
        options["steering"] = steering
        if journal.steers:
            await steering.catch_up()
    rollover = _Rollover(journal, control, steering)
    options["extensions"] = (*options.get("extensions", ()), rollover)
    if options.get("on_approval") is None and _parks(agent):

        async def decide(pending: PendingApproval) -> ApprovalDecision:
            return await engine._decision(spec.run_id, pending.call_id)

        options["on_approval"] = decide
    agent = attrs.evolve(agent, options=options)
    durable = Durable(
        engine=journal,
        checkpoint_store=journal,
        run_id=spec.run_id,
        worker_id=worker_id,
        lease_seconds=spec.heartbeat_timeout,
        session_id=spec.session_id,
    )
    lease = journal.lease(spec.heartbeat_timeout)
    routing: Any
    if replay is None:
        routing = durable
        run_input: Any = spec.text
        if bytes(spec.messages) != b"null":
            run_input = decode(spec.messages, ConversationHistory)
    else:
        routing = Resumed(durable=durable, lease=lease, replay=replay)
        run_input = replay.history
    async with agent.open_run(run_input, durable=routing) as run:
        control.run = run
        if control.abort_reason is not None:
            run.abort(control.abort_reason)
        try:
            await run.result()
        except LeaseLostError:
            raise Shutdown("another attempt holds the run") from None
    return ActivityReply()


def _activity(
    engine: TemporalEngine,
    agents: Mapping[str, Any],
    runs: list[trio.Nursery],
    worker_id: str,
) -> Any:
    bridge = engine.bridge

    @activity.defn(name=ACTIVITY)
    async def run_operative(raw: bytes) -> bytes:
        info = activity.info()
        spec = decode(raw, ActivityInput)
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()

        def heartbeat() -> None:  # called in Trio: the heartbeat is sent from asyncio
            loop.call_soon_threadsafe(context.run, activity.heartbeat)

        if not runs:
            raise ApplicationError("the worker is shutting down", type="OperativeShutdown")
        control = _Control()
        future = bridge.start_trio(
            runs[0],
            functools.partial(
                _attempt,
                engine,
                agents,
                spec,
                activity_id=info.activity_id,
                attempt=info.attempt,
                worker_id=worker_id,
                heartbeat=heartbeat,
                control=control,
            ),
            name=f"operative temporal run {spec.run_id} attempt {info.attempt}",
        )
        activity.heartbeat()
        interval = spec.heartbeat_timeout / 3
        while True:
            try:
                if control.run is None:
                    # Claiming and reading the journal: heartbeat from here until the
                    # run's durable writer (a Trio task that renews the lease: a stuck
                    # loop stops it) takes over.
                    reply = await asyncio.wait_for(asyncio.shield(future), interval)
                else:
                    reply = await asyncio.shield(future)
            except TimeoutError:
                activity.heartbeat()
                continue
            except asyncio.CancelledError:
                if future.done():
                    continue
                details = activity.cancellation_details()
                if details is not None and details.cancel_requested:
                    reason = await _cancel_reason(engine, spec.run_id)
                    bridge.run_sync_soon(control.abort, reason)
                else:
                    why = "the worker is shutting down"
                    if details is not None and (details.timed_out or details.not_found):
                        why = "the attempt's heartbeat lapsed; another attempt holds the run"
                    bridge.run_sync_soon(control.shutdown, why)
                continue
            except Shutdown as exc:
                raise ApplicationError(
                    f"attempt {info.attempt} of run {spec.run_id} stopped ({exc}); "
                    "Temporal dispatches the run again and it resumes from its journal",
                    type="OperativeShutdown",
                ) from None
            except _Fatal as exc:
                raise ApplicationError(str(exc), type=NON_RETRYABLE, non_retryable=True) from None
            return encode(reply)

    return run_operative


async def _cancel_reason(engine: TemporalEngine, run_id: str) -> str:
    """The reason of the cancellation the run's history records (asyncio side)."""
    try:
        state = await engine._history_async(run_id)
    except Exception:
        logger.warning("reading the cancel reason of run %s failed", run_id, exc_info=True)
        return "cancelled"
    return state.cancel_reason or "cancelled"


async def serve_temporal_worker(
    engine: TemporalEngine,
    *,
    agents: Mapping[str, Any],
    worker_id: str | None = None,
    max_concurrent_runs: int = 100,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the runs of ``engine``'s task queue until cancelled.

    Start it in a nursery (``await nursery.start(serve_temporal_worker, engine,
    agents=...)`` returns once it polls). Cancelling it is a shutdown, not an abort:
    runs in flight stop without writing anything terminal and Temporal hands them to
    another worker at once, where they resume from their journals.

    Args:
        agents: ``{name: agent}``; ``start_run`` names one of them. Every worker of a
            task queue must serve the same agents.
        worker_id: recorded as the holder of each run (default: host, pid, random).
        max_concurrent_runs: runs this process drives at once.
    """
    if not isinstance(engine, TemporalEngine):
        raise InvalidArgument(f"serve_temporal_worker takes a TemporalEngine, got {engine!r}")
    if not isinstance(agents, Mapping) or not agents:
        raise InvalidArgument("agents= takes a mapping {name: agent} of the agents to serve")
    for name, agent in agents.items():
        if not callable(getattr(agent, "open_run", None)):
            raise InvalidArgument(f"agents[{name!r}] is not an agent (it has no open_run)")
    if (
        isinstance(max_concurrent_runs, bool)
        or not isinstance(max_concurrent_runs, int)
        or max_concurrent_runs < 1
    ):
        raise InvalidArgument(f"max_concurrent_runs must be >= 1, not {max_concurrent_runs!r}")
    worker_id = worker_id or default_worker_id()
    bridge = engine.bridge
    client = engine.client
    heartbeat = engine.heartbeat_timeout
    runs_nursery: list[trio.Nursery] = []

    async def make() -> Worker:
        restrictions = SandboxRestrictions.default.with_passthrough_modules("operative", "msgspec")
        return Worker(
            client,
            task_queue=engine.task_queue,
            workflows=[RunWorkflow],
            activities=[_activity(engine, agents, runs_nursery, worker_id)],
            workflow_runner=SandboxedWorkflowRunner(restrictions=restrictions),
            max_concurrent_activities=max_concurrent_runs,
            sticky_queue_schedule_to_start_timeout=timedelta(seconds=min(1.0, heartbeat)),
            graceful_shutdown_timeout=timedelta(seconds=_SHUTDOWN_BOUND),
            identity=worker_id,
        )

    worker = await bridge.call(make)
    worker_done = trio.Event()
    failure: list[BaseException] = []
    async with trio.open_nursery() as outer:
        runs_scope = trio.CancelScope()

        async def run_worker() -> None:
            with trio.CancelScope(shield=True):
                try:
                    await bridge.call(worker.run)
                except BaseException as exc:
                    failure.append(exc)
                finally:
                    worker_done.set()
                    runs_scope.cancel()

        outer.start_soon(run_worker, name=f"operative temporal worker {worker_id}")
        try:
            with runs_scope:
                async with trio.open_nursery() as runs:
                    runs_nursery.append(runs)
                    task_status.started()
                    await trio.sleep_forever()
        finally:
            runs_nursery.clear()
            # The runs have stopped: their activities report it (Temporal dispatches
            # them again), then the worker drains and stops.
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + _SHUTDOWN_BOUND + 5
                if not worker_done.is_set():
                    await bridge.call(worker.shutdown)
                await worker_done.wait()
    if failure:
        raise OperativeError(f"the Temporal worker stopped: {failure[0]}") from failure[0]
