"""``TemporalEngine``: start, follow, cancel and answer operative runs held by Temporal.

::

    async with TemporalEngine("127.0.0.1:7233") as engine:     # connects
        run_id = await engine.start_run("weather", "Porto?")   # durably accepted
        result = await engine.result(run_id)                   # from any process

The engine owns an asyncio loop on a thread of its own (the Temporal SDK is asyncio;
see :mod:`._bridge`) inside its own nursery; everything it offers is a Trio function.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from datetime import timedelta
from typing import Any

import msgspec
import trio
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from .._core._errors import ApprovalError, InvalidArgument, OperativeError
from .._core._results import RunResult
from .._core._types import ApprovalDecision
from ..conversation import Conversation, ConversationHistory, Message
from ..durable._errors import LeaseLostError, RunNotFoundError
from ..durable._records import JournalEntry, RunRecord, RunStatus
from ..durable._rows import check_limit, check_name, check_run_id, check_time, statuses
from ..kvstore._protocol import ConflictError
from ..steering import Configure, Pause, Resume, SteeringCommand
from ._bridge import AsyncioThread
from ._history import RunHistory, TemporalRunError
from ._wire import (
    CONFLICT,
    LEASE_LOST,
    NULL,
    SIGNAL_CANCEL,
    SIGNAL_STEER,
    UPDATE_APPROVE,
    WORKFLOW,
    Approve,
    Cancel,
    RunInput,
    encode,
)

__all__ = ["TemporalEngine", "TemporalRunError"]

logger = logging.getLogger("operative.temporal")

_PAGE = 1000


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidArgument(f"{name} takes seconds > 0, got {value!r}")
    return float(value)


class TemporalEngine:
    """Durable runs on a Temporal cluster (see ``docs/temporal.md``).

    Args:
        target: the frontend's ``host:port`` (the dev server: ``127.0.0.1:7233``).
        namespace: the Temporal namespace.
        task_queue: where runs are dispatched; workers serve the same queue.
        heartbeat_timeout: how long a worker may go silent before Temporal hands its
            runs to another worker (the engine that *starts* a run decides it). The
            worker heartbeats every third of it.
        rollover_events: history length past which a run continues as new at its next
            step (Temporal's own limit is 51,200 events).
    """

    def __init__(
        self,
        target: str,
        *,
        namespace: str = "default",
        task_queue: str = "operative",
        heartbeat_timeout: float = 30.0,
        rollover_events: int = 20_000,
    ) -> None:
        for name, value in (("target", target), ("namespace", namespace)):
            if not isinstance(value, str) or not value:
                raise InvalidArgument(f"{name}= takes a non-empty str, got {value!r}")
        if not isinstance(task_queue, str) or not task_queue:
            raise InvalidArgument(f"task_queue= takes a non-empty str, got {task_queue!r}")
        if (
            isinstance(rollover_events, bool)
            or not isinstance(rollover_events, int)
            or rollover_events < 50
        ):
            raise InvalidArgument(f"rollover_events= takes an int >= 50, got {rollover_events!r}")
        self.target = target
        self.namespace = namespace
        self.task_queue = task_queue
        self.heartbeat_timeout = _seconds("heartbeat_timeout=", heartbeat_timeout)
        self.rollover_events = rollover_events
        self.bridge = AsyncioThread()
        self._client: Client | None = None
        self._nursery_cm: Any = None

    @property
    def database(self) -> str:
        """Where the runs live: ``temporal://target/namespace``."""
        return f"temporal://{self.target}/{self.namespace}"

    def __repr__(self) -> str:
        return (
            f"TemporalEngine({self.target!r}, namespace={self.namespace!r}, "
            f"task_queue={self.task_queue!r})"
        )

    @property
    def client(self) -> Client:
        if self._client is None:
            raise OperativeError("the Temporal engine is not open: use `async with engine:`")
        return self._client

    # -- lifetime --------------------------------------------------------------------

    async def __aenter__(self) -> TemporalEngine:
        if self._nursery_cm is not None:
            raise OperativeError("this TemporalEngine is open already")
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        try:
            await nursery.start(self.bridge.serve)
            self._client = await self.bridge.call(self._connect)
        except BaseException as exc:
            self.bridge.stop()
            await self._nursery_cm.__aexit__(None, None, None)  # joins the loop's thread
            self._nursery_cm = None
            if isinstance(exc, Exception) and not isinstance(exc, OperativeError):
                raise OperativeError(
                    f"cannot connect to Temporal at {self.target!r} (namespace "
                    f"{self.namespace!r}): {exc}. Is the server running? "
                    "(`temporal server start-dev` starts one)"
                ) from exc
            raise
        return self

    async def _connect(self) -> Client:
        return await Client.connect(self.target, namespace=self.namespace)

    async def __aexit__(self, *exc_info: Any) -> None:
        manager, self._nursery_cm = self._nursery_cm, None
        self._client = None
        self.bridge.stop()
        if manager is not None:
            # The nursery holds only the loop's thread: the block's own exception is not
            # its business (handing it in would wrap it in an ExceptionGroup).
            await manager.__aexit__(None, None, None)

    async def aclose(self) -> None:
        await self.__aexit__(None, None, None)

    # -- starting and following ------------------------------------------------------

    async def start_run(
        self,
        agent_name: str,
        input: str | ConversationHistory | Conversation | Sequence[Message],
        *,
        run_id: str | None = None,
        session_id: str | None = None,
    ) -> str:
        """Start a run of the agent a worker knows as ``agent_name``; returns its id
        once Temporal durably accepted it (the workflow id is the run id).

        Raises:
            ConflictError: a run with this id exists already.
        """
        if not check_name("agent_name", agent_name):
            raise InvalidArgument("agent_name must name an agent the workers serve, not ''")
        check_name("session_id", session_id, optional=True)
        run_id = run_id if run_id is not None else os.urandom(12).hex()
        check_run_id(run_id)
        text: str | None = None
        messages = NULL
        if isinstance(input, str):
            text = input
        else:
            if isinstance(input, Conversation):
                history = input.current
            elif isinstance(input, ConversationHistory):
                history = input
            elif isinstance(input, Sequence) and all(isinstance(m, Message) for m in input):
                history = ConversationHistory(
                    messages=tuple(m for m in input if isinstance(m, Message))
                )
            else:
                raise InvalidArgument(
                    "input takes a str, a ConversationHistory, a Conversation or a list of "
                    f"Message, got {type(input).__name__}"
                )
            messages = msgspec.Raw(msgspec.json.encode(history))
        spec = RunInput(
            run_id=run_id,
            agent_name=agent_name,
            heartbeat_timeout=self.heartbeat_timeout,
            created_at=time.time(),
            session_id=session_id,
            text=text,
            messages=messages,
            rollover_events=self.rollover_events,
        )
        client = self.client

        async def start() -> None:
            await client.start_workflow(
                WORKFLOW,
                encode(spec),
                id=run_id,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                # A workflow task cut by a crash is retried after this (default 10 s):
                # the run's own writes wait for it, so keep it near the heartbeat.
                task_timeout=timedelta(seconds=min(10.0, max(1.0, self.heartbeat_timeout))),
                memo={"agent_name": agent_name, "session_id": session_id},
            )

        try:
            await self.bridge.call(start)
        except WorkflowAlreadyStartedError:
            raise ConflictError(run_id, expected=None, actual=1) from None
        return run_id

    async def history(self, run_id: str) -> RunHistory:
        """The run's state as its history says (no worker needed).

        Raises:
            RunNotFoundError: no run has this id.
        """
        check_run_id(run_id)
        return await self.bridge.call(self._history_async, run_id)

    async def _history_async(self, run_id: str) -> RunHistory:
        state = RunHistory(run_id)
        token = b""
        while True:
            events, token, _ = await self._page(run_id, "", token, False)
            state.feed(events)
            if not token:
                return state

    async def _steering_after(self, run_id: str, taken: int) -> list[SteeringCommand]:
        """Wait until the run was sent more than ``taken`` steering commands; all of
        them (asyncio side: a long poll on the history)."""
        state = RunHistory(run_id)
        token = b""
        run = ""
        while True:
            events, token, _ = await self._page(run_id, run, token, True)
            state.feed(events)
            if len(state.steering) > taken:
                return state.steering
            if state.next_run is not None and not token:
                run, token, state.next_run = state.next_run, b"", None

    async def _decision(self, run_id: str, call_id: str) -> ApprovalDecision:
        """Wait until ``engine.approve`` answers ``call_id`` (a long poll on the history)."""
        return await self.bridge.call(self._wait_decision, run_id, call_id)

    async def _wait_decision(self, run_id: str, call_id: str) -> ApprovalDecision:
        state = RunHistory(run_id)
        token = b""
        run = ""
        while True:
            events, token, _ = await self._page(run_id, run, token, True)
            state.feed(events)
            found = state.decisions.get(call_id)
            if found is not None:
                return ApprovalDecision(approved=found.approved, reason=found.reason)
            if state.next_run is not None and not token:
                run, token, state.next_run = state.next_run, b"", None

    async def _page(
        self, run_id: str, run: str, token: bytes, wait: bool
    ) -> tuple[list[Any], bytes, str]:
        """One page of a run's history (asyncio side)."""
        request = GetWorkflowExecutionHistoryRequest(
            namespace=self.namespace,
            execution=WorkflowExecution(workflow_id=run_id, run_id=run),
            next_page_token=token,
            maximum_page_size=_PAGE,
            wait_new_event=wait,
        )
        try:
            response = await self.client.workflow_service.get_workflow_execution_history(request)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise RunNotFoundError(run_id) from None
            raise
        return list(response.history.events), response.next_page_token, run

    async def follow(self, run_id: str) -> AsyncGenerator[JournalEntry, None]:
        """The run's journal entries as they are written, until the run ends.

        Each entry arrives once its write is accepted by Temporal (a long poll on the
        run's history): the generated messages, each call started and settled, each
        step done, and the outcome. Streamed text deltas are not durable and are not
        here. Continues across continue-as-new.
        """
        check_run_id(run_id)
        state = RunHistory(run_id)
        run = ""
        token = b""
        while True:
            events, token, _ = await self.bridge.call(self._page, run_id, run, token, True)
            for entry in state.feed(events):
                yield entry
            if state.next_run is not None and not token:
                run, token, state.next_run = state.next_run, b"", None
                continue
            if state.closed is not None and not token:
                return

    async def get(self, run_id: str) -> RunRecord | None:
        """The run's record (``status``, ``outcome``, lease owner...), or ``None``."""
        try:
            state = await self.history(run_id)
        except RunNotFoundError:
            return None
        return state.record()

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run to end; its result, rebuilt from its history.

        ``conversation`` is the transcript the journal holds and ``steps`` its
        completed steps; a run that ended in an error carries a
        :class:`TemporalRunError`. Raises :class:`RunNotFoundError` for an unknown id.
        """
        check_run_id(run_id)
        handle = self.client.get_workflow_handle(run_id)

        async def wait() -> None:
            try:
                await handle.result()
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise RunNotFoundError(run_id) from None
                raise
            except Exception:  # failed, terminated: read what the history says
                logger.debug("run %s closed without a result", run_id, exc_info=True)

        await self.bridge.call(wait)
        state = await self.history(run_id)
        return state.result()

    # -- from any process ------------------------------------------------------------

    async def cancel(self, run_id: str, reason: str = "cancelled") -> RunRecord:
        """End the run ``aborted``: a step in flight is stopped within one heartbeat
        (its tool calls cancelled as an abort cancels them), and a run no worker holds
        ends at once. A finished run is returned unchanged.

        Raises:
            RunNotFoundError: no run has this id.
        """
        check_run_id(run_id)
        if not isinstance(reason, str) or not reason:
            raise InvalidArgument(f"reason must be a non-empty str, not {reason!r}")
        handle = self.client.get_workflow_handle(run_id)
        payload = encode(Cancel(reason=reason))

        async def signal() -> None:
            try:
                await handle.signal(SIGNAL_CANCEL, payload)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
                # Finished (returned unchanged below) or unknown (get says None).

        await self.bridge.call(signal)
        record = await self.get(run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        return record

    async def approve(self, run_id: str, call_id: str, decision: bool | ApprovalDecision) -> None:
        """Answer a call of the run that waits for a person's approval.

        Raises:
            ApprovalError: no such call is waiting (``reason="not-waiting"``).
            RunNotFoundError: no run has this id.
        """
        check_run_id(run_id)
        check_name("call_id", call_id)
        if isinstance(decision, bool):
            decision = ApprovalDecision(approved=decision)
        if not isinstance(decision, ApprovalDecision):
            raise InvalidArgument(
                f"decision takes True, False or an ApprovalDecision, got {decision!r}"
            )
        payload = encode(
            Approve(call_id=call_id, approved=decision.approved, reason=decision.reason)
        )
        try:
            await self._update(run_id, UPDATE_APPROVE, payload)
        except _Refused as exc:
            raise ApprovalError(str(exc), reason="not-waiting") from None  # type: ignore[arg-type]
        except _Closed:
            raise ApprovalError(
                f"run {run_id!r} has ended: no call of it waits for an approval",
                reason="not-waiting",  # type: ignore[arg-type]
            ) from None

    async def steer(self, run_id: str, command: SteeringCommand) -> None:
        """Send a steering command (``Pause``, ``Resume``, ``Configure``) to the run.

        Recorded at once, even with no worker running; a running attempt takes it at its
        next step entry (a ``Pause`` parks the run there until a ``Resume``), and a run
        resumed elsewhere takes every command sent so far, in order.

        Raises:
            RunNotFoundError: no run has this id (or it has ended).
        """
        check_run_id(run_id)
        if not isinstance(command, Pause | Resume | Configure):
            raise InvalidArgument(
                f"steer takes a Pause, Resume or Configure command, got {command!r}"
            )
        handle = self.client.get_workflow_handle(run_id)
        payload = msgspec.json.encode(command)

        async def signal() -> None:
            try:
                await handle.signal(SIGNAL_STEER, payload)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise RunNotFoundError(run_id) from None
                raise

        await self.bridge.call(signal)

    async def _update(self, run_id: str, name: str, payload: bytes) -> bytes | None:
        handle = self.client.get_workflow_handle(run_id)

        async def update() -> bytes | None:
            try:
                reply: bytes | None = await handle.execute_update(name, payload, result_type=bytes)
            except WorkflowUpdateFailedError as exc:
                cause = exc.cause
                kind = cause.type if isinstance(cause, ApplicationError) else None
                message = str(cause) if cause is not None else str(exc)
                if kind == LEASE_LOST:
                    raise LeaseLostError(message, run_id=run_id) from None
                if kind == CONFLICT:
                    raise ConflictError(run_id, expected=None, actual=None) from None
                raise _Refused(message) from None
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    if "completed" in str(exc) or "closed" in str(exc):
                        raise _Closed(str(exc)) from None
                    raise RunNotFoundError(run_id) from None
                raise
            return reply

        return await self.bridge.call(update)

    async def list(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 100,
    ) -> list[RunRecord]:
        """Runs of this task queue matching every filter, newest first (the filters are
        checked as the SQL engines check them)."""
        check_limit(limit)
        check_name("agent_name", agent_name, optional=True)
        check_name("session_id", session_id, optional=True)
        since, until = check_time("since", since), check_time("until", until)
        wanted = statuses(status)
        query = [
            f"WorkflowType = '{WORKFLOW}'",
            f"TaskQueue = '{_quote(self.task_queue)}'",
            # A run that continued as new is one run: its latest execution stands for it.
            "ExecutionStatus != 'ContinuedAsNew'",
        ]
        if since is not None:
            query.append(f"StartTime >= '{_rfc3339(since)}'")
        if until is not None:
            query.append(f"StartTime < '{_rfc3339(until)}'")
        client = self.client

        async def ids() -> list[tuple[str, Mapping[str, Any]]]:
            return [
                (execution.id, await execution.memo())
                async for execution in client.list_workflows(" AND ".join(query))
            ]

        records: list[RunRecord] = []
        for run_id, memo in await self.bridge.call(ids):
            if agent_name is not None and memo.get("agent_name") != agent_name:
                continue
            if session_id is not None and memo.get("session_id") != session_id:
                continue
            record = await self.get(run_id)
            if record is None or (wanted is not None and record.status not in wanted):
                continue
            records.append(record)
        records.sort(key=lambda r: (-r.created_at, r.run_id))
        return records[:limit]


class _Refused(OperativeError):
    pass


class _Closed(OperativeError):
    pass


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1e6):06d}Z"
