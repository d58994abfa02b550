"""``open_session`` and ``SessionHandle``: runs, timers and human waits on one session.

::

    open_session(...)              session nursery: leaving it ends every task it holds
    ├── (caller) handle.run(...)   reserve → open_run → settle (one conditional write)
    ├── (caller) handle.monitor()  a run per tick on trio's clock until ``until(result)``
    └── start_monitor(...)         the same loop, as a task of the session nursery

A run is reserved first (the user message and an unsettled ``RunRef`` are written), then
run, then settled: its transcript and outcome are written together by one
``SessionStore.update``. When that write fails the run's outcome is not reported as a
success: ``run`` raises :class:`~operative.sessions.SessionPersistenceError` (carrying the result),
and the stored ``RunRef`` keeps no outcome.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._agent import AgentRunContext, RunHandle, RunnableAgent
from .._core._errors import CleanupError, InvalidArgument
from .._core._event_hub import EventHub, Listener
from .._core._events import SessionLoaded, SessionSaved
from .._core._instrument_hook import reset_conversation_id, set_conversation_id
from .._core._open_run import open_run
from .._core._results import RunResult
from .._core._run import control_of
from .._core._run_state import is_shutdown
from .._lazy._agent import resolve_agent
from ..conversation import ContentPart, Conversation, ConversationHistory, Message
from ..liveness import (
    LivenessSnapshot,
    LivenessTracker,
    SnapshotObserver,
    SnapshotStream,
    SnapshotSubscription,
    StallPolicy,
)
from ._duration import Duration, parse_duration
from ._errors import MissingRunOptionsError
from ._monitor import (
    CancellableScope,
    MonitorResult,
    check_monitor,
    run_monitor,
    start_monitor,
)
from ._records import AgentSession, RunOutcome, RunRef, checked_input
from ._settle import settle_run, settle_unstarted, store_outcome
from ._signals import SignalBoard, current_handle
from ._store import SessionStore

if TYPE_CHECKING:
    from ._durable import RecoveredRun, SessionDurability
    from ._events import SessionRecoverFailed

__all__ = ["SessionHandle"]

logger = logging.getLogger("operative.sessions")

SessionInput = str | Sequence[ContentPart]


class SessionHandle:
    """One session, opened by :func:`open_session`: run turns, wait, watch, signal.

    Runs and timers live in the tasks that call them (or, for :meth:`start_monitor`, in
    the ``open_session`` block's nursery); nothing outlives the block.
    """

    def __init__(
        self,
        *,
        session: AgentSession,
        store: SessionStore,
        agent: RunnableAgent | None,
        run_options: Mapping[str, Any] | None,
        nursery: trio.Nursery,
        cleanup_timeout: float,
        durability: SessionDurability | None = None,
    ) -> None:
        self._durability = durability
        self._session = session
        self._store = store
        self._agent = agent
        self._run_options = run_options
        self._nursery = nursery
        self._cleanup_timeout = cleanup_timeout
        self._tracker = LivenessTracker(session.id, kind="session")
        self._hub = EventHub()
        self._recover_listeners: list[list[Listener]] = []
        self._run_hubs: dict[str, EventHub] = {}
        """The event hubs of this handle's runs in progress, by run id."""
        self._loaded: SessionLoaded | None = None
        self._runs: set[RunHandle] = set()
        self._scopes: set[trio.CancelScope] = set()
        self._signals = SignalBoard(self._tracker)
        self._turns: set[str] = set()
        self._recovered: list[RecoveredRun] = []
        """The runs recover() resumed (for closed())."""
        """Ids of the runs this handle runs now (reserving, running or settling)."""
        self._cancels = 0
        """How many times cancel() was called: a turn started before a cancel aborts."""
        self._cancel_reason = ""

    def __repr__(self) -> str:
        return f"<SessionHandle {self.id} {self._tracker.status} runs={len(self._session.runs)}>"

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def session(self) -> AgentSession:
        """The session as this handle last stored or loaded it."""
        return self._session

    @property
    def store(self) -> SessionStore:
        return self._store

    # -- events ----------------------------------------------------------------------

    def add_listener(self, type: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for ``session.loaded``, ``session.saved`` or
        ``session.recover`` (a :class:`SessionRecoverFailed`), or ``"*"`` for all three.

        A listener for ``session.loaded`` added after the block opened is called at once
        with the load that opened this handle. Returns a remover.
        """
        if type not in ("session.loaded", "session.saved", "session.recover", "*"):
            raise InvalidArgument(
                "a session handle emits 'session.loaded', 'session.saved' and "
                f"'session.recover', not {type!r}; listen to a run's events on the run"
            )
        if type == "session.recover":
            return self._add_recover_listener(listener)
        remove = self._hub.add_listener(type, listener)
        if type == "*":
            remove_recover = self._add_recover_listener(listener)

            def remove_both() -> None:
                remove()
                remove_recover()

            if self._loaded is not None:
                listener(self._loaded)
            return remove_both
        if type == "session.loaded" and self._loaded is not None:
            listener(self._loaded)
        return remove

    def _add_recover_listener(self, listener: Listener) -> Callable[[], None]:
        # session.recover is the handle's own event (not a run event the hub knows).
        if not callable(listener):
            raise InvalidArgument(f"listener must be callable, got {listener!r}")
        entry = [listener]
        self._recover_listeners.append(entry)

        def remove() -> None:
            if entry in self._recover_listeners:
                self._recover_listeners.remove(entry)

        return remove

    def _announce_load(self, is_new: bool) -> None:
        self._loaded = self._loaded_event("", is_new)

    def _loaded_event(self, run_id: str, is_new: bool) -> SessionLoaded:
        session = self._session
        return SessionLoaded(
            run_id=run_id,
            time=trio.current_time(),
            session_id=session.id,
            agent_name=session.agent_name,
            revision=session.revision,
            is_new=is_new,
            message_count=len(session.conversation_history.messages),
        )

    def _emit_recover(self, event: SessionRecoverFailed) -> None:
        for (listener,) in tuple(self._recover_listeners):
            try:
                listener(event)
            except Exception:
                logger.exception("session %r: a session.recover listener raised", self.id)

    def _announce_save(self, run_id: str, outcome: str | None = None) -> None:
        run_hub = self._run_hubs.get(run_id)
        if outcome is not None:
            self._run_hubs.pop(run_id, None)
        hubs = [hub for hub in (self._hub, run_hub) if hub is not None]
        if not any(hub.wants("session.saved") for hub in hubs):
            return
        event = self._saved(run_id, outcome)
        for hub in hubs:
            if hub.wants("session.saved"):
                hub.emit_nowait(event)

    def _saved(self, run_id: str, outcome: str | None) -> SessionSaved:
        session = self._session
        return SessionSaved(
            run_id=run_id,
            time=trio.current_time(),
            session_id=session.id,
            agent_name=session.agent_name,
            revision=session.revision,
            message_count=len(session.conversation_history.messages),
            outcome=outcome,
        )

    def _attach_run(self, run_id: str, run: object) -> None:
        """Put the session's events for ``run_id`` on the run's own events too.

        Called as the run opens, before its loop starts: the run's listeners and event
        streams get ``session.loaded`` (the session the run starts from) and the
        ``session.saved`` of its reservation; its terminal ``session.saved`` (the outcome
        stored, after the run's terminal event) reaches the run's listeners.
        """
        control = control_of(run)
        hub = None if control is None else control.hub
        if not isinstance(hub, EventHub):
            return  # a run handle of another kind: the handle's listeners still get them
        self._run_hubs[run_id] = hub
        if hub.wants("session.loaded"):
            hub.emit_nowait(self._loaded_event(run_id, is_new=False))
        if hub.wants("session.saved"):
            hub.emit_nowait(self._saved(run_id, None))

    # -- runs ------------------------------------------------------------------------

    async def run(self, input: SessionInput) -> RunResult:
        """Run one turn: ``input`` is the user's message; returns the run's result.

        The user message and the run's ``RunRef`` are stored first; when the run ends,
        its transcript and outcome are stored in one conditional write. A run stopped by
        :meth:`cancel` returns a result with ``finish_reason == "aborted"``, stored too.

        Raises:
            MissingRunOptionsError: the handle has no ``agent=`` or ``run_options=``
                (raised before anything is written).
            AsyncDefinitionLoadError: a lazy agent's definition did not load (raised
                before anything is written; the next turn loads again).
            SessionPersistenceError: the run ended but its outcome could not be stored;
                ``.result`` is the run's result.
        """
        if self._agent is None and self._run_options is None:
            raise MissingRunOptionsError(
                f"session {self.id!r} has nothing to run: pass agent= or run_options= to "
                "open_session()"
            )
        scratch = Conversation()
        user = scratch.append_user_message(checked_input(input))
        # The definition the turn runs (a lazy agent loads it now: a load that fails
        # raises here, before anything is stored); its instructions open a new session.
        agent = await resolve_agent(self._agent) if self._agent is not None else None
        instructions = getattr(agent, "instructions", None)
        system: Message | None = None
        if isinstance(instructions, str) and instructions:
            system = Conversation().append_system_message(instructions)
        run_id = "run_" + os.urandom(12).hex()
        started_at = self._store.clock()

        def reserve(current: AgentSession) -> AgentSession:
            history = current.conversation_history
            messages = history.messages
            if not messages and system is not None:
                messages = (system,)
            ref = RunRef(
                run_id=run_id,
                user_message_id=user.id,
                base_conversation_metadata=dict(history.metadata),
                started_at=started_at,
            )
            return msgspec.structs.replace(
                current,
                conversation_history=ConversationHistory(
                    messages=(*messages, user), metadata=history.metadata
                ),
                runs=(*current.runs, ref),
            )

        cancels = self._cancels
        self._turns.add(run_id)
        try:
            return await self._run_reserved(run_id, reserve, agent, cancels)
        finally:
            self._turns.discard(run_id)

    async def _run_reserved(
        self,
        run_id: str,
        reserve: Callable[[AgentSession], AgentSession],
        agent: RunnableAgent | None,
        cancels: int,
    ) -> RunResult:
        try:
            self._session = await self._store.update(self.id, reserve)
        except BaseException:
            # A store may commit and then deliver the caller's cancellation: settle a
            # reservation that landed as aborted, so no turn stays without an outcome.
            with trio.CancelScope(shield=True):
                await self._settle_unstarted(run_id)
            raise
        self._announce_save(run_id)
        base = self._session.conversation_history
        self._tracker.pulse("progress")
        token = current_handle.set(self)
        # Traced runs of this session carry its id as gen_ai.conversation.id.
        conversation = set_conversation_id(self.id)
        result: RunResult | None = None
        failure: BaseException | None = None
        handle: RunHandle | None = None
        try:
            try:
                async with self._open_run(agent, base, run_id) as handle:
                    self._runs.add(handle)
                    self._attach_run(run_id, handle)
                    if self._cancels != cancels:
                        # cancel() came while the turn was being reserved.
                        handle.abort(self._cancel_reason)
                    result = await handle.result()
            finally:
                if handle is not None:
                    self._runs.discard(handle)
        except BaseException as exc:  # re-raised below, once the outcome is stored
            failure = exc
        finally:
            current_handle.reset(token)
            reset_conversation_id(conversation)
        # Ctrl-C, a cancelled caller, or a terminal commit that did not finish: the
        # durable run stays claimable, and whoever recovers it stores the outcome.
        shutdown = (
            self._durability is not None
            and self._cancels == cancels
            and (is_shutdown(failure) or isinstance(failure, CleanupError))
        )
        with trio.CancelScope(shield=True):
            if result is None and handle is not None:
                with trio.move_on_after(self._cleanup_timeout), contextlib.suppress(CleanupError):
                    result = await handle.result()
            try:
                if not shutdown:
                    await self._settle(run_id, base, result, failure)
                # else: the durable run was released for another worker; its RunRef
                # stays open until that worker (or recover()) stores the outcome.
            finally:
                self._run_hubs.pop(run_id, None)
        self._tracker.pulse("progress")
        if failure is not None:
            raise failure
        assert result is not None
        return result

    async def _settle_unstarted(self, run_id: str) -> None:
        """Record ``run_id`` as aborted if its reservation was stored (bounded)."""
        await settle_unstarted(self, run_id)

    def _open_run(self, agent: RunnableAgent | None, base: ConversationHistory, run_id: str) -> Any:
        durable = None
        if self._durability is not None:
            durable = self._durability.routing(run_id, self.id)
        if agent is not None:
            context = AgentRunContext(run_id=run_id)
            if durable is None:
                return agent.open_run(base, context=context)
            return agent.open_run(base, context=context, durable=durable)  # type: ignore[call-arg]
        assert self._run_options is not None
        return open_run(
            conversation=Conversation.from_history(base),
            run_id=run_id,
            durable=durable,
            **self._run_options,
        )

    async def recover(self) -> RecoveredRun | None:
        """Reconnect to this session's unsettled durable turns.

        Every turn the session records as open (and no run of this handle holds) is
        looked at, newest first. A turn another worker already finished gets its
        outcome and transcript stored; one whose run record was never committed is
        stored as aborted. The newest turn the engine still runs and nobody holds is
        claimed and resumed as a task of the ``open_session`` block: the returned
        :class:`RecoveredRun`'s ``result()`` waits for it and for its stored outcome
        (another such turn waits for the next ``recover()``). Returns ``None`` when
        there is nothing to resume (no turn open, or none the engine still runs) or
        resuming failed.

        Each failure (reading the engine, loading a lazy agent, claiming, resuming, or
        storing a finished turn's outcome) is emitted as a ``session.recover`` event
        (:class:`SessionRecoverFailed`, see :meth:`add_listener`), logged, and leaves
        that turn open; the other turns are still considered.

        Raises:
            InvalidArgument: the session is not durable (no ``durable=``, nor
                ``engine=`` / ``checkpoint_store=``).
            MissingRunOptionsError: a run needs resuming but the handle has no
                ``agent=`` or ``run_options=`` to run it with.
            LeaseHeldError: nothing was recovered because the turns left to resume are
                another worker's: its lease has not expired. The error names the turn
                (``run_id``), the worker (``holder``) and when the lease runs out
                (``expires_at``); a ``recover()`` after that resumes the turn if the
                holder stopped.
        """
        from ._durable import recover

        return await recover(self)

    async def closed(self) -> None:
        """Wait for the terminal session commit of every run :meth:`recover` resumed.

        The cleanup acknowledgement for recovered runs (a turn of :meth:`run` already
        stores its outcome before ``run`` returns): returns once each one's outcome and
        transcript are stored on the session. Bound the wait with ``trio.fail_after``.

        Raises:
            CleanupError: a recovered run's outcome could not be stored (its turn stays
                open; ``recover()`` settles it later). The first such failure is raised.
        """
        for recovered in tuple(self._recovered):
            await recovered.closed()

    async def _settle(
        self,
        run_id: str,
        base: ConversationHistory,
        result: RunResult | None,
        failure: BaseException | None,
    ) -> BaseException | None:
        """Store the run's transcript and outcome in one write (called shielded).

        Returns what stopped the write when the run's own ``failure`` propagates
        instead (None once stored); raises :class:`SessionPersistenceError` otherwise.
        """
        return await settle_run(self, run_id, base, result, failure)

    async def _store_outcome(
        self,
        run_id: str,
        base: ConversationHistory | None,
        transcript: ConversationHistory | None,
        outcome: RunOutcome,
    ) -> None:
        """Write a run's transcript and outcome in one update, and announce it.

        With no ``transcript`` (a run that never ran) the session's messages and
        metadata stay as they are.
        """
        await store_outcome(self, run_id, base, transcript, outcome)

    # -- timing ----------------------------------------------------------------------

    async def sleep(self, duration: Duration) -> bool:
        """Wait ``duration`` (seconds, ``"PT30M"``, a ``timedelta``) on trio's clock.

        Process-local: the wait is lost if the process exits. Returns True when the
        whole duration passed, False when :meth:`cancel` cut it short.
        """
        seconds = parse_duration(duration)
        with self._cancellable() as scope:
            await trio.sleep(seconds)
        return not scope.cancelled_caught

    async def monitor(
        self,
        *,
        every: Duration = "PT30S",
        input: SessionInput,
        until: Callable[[RunResult], bool] | None = None,
        max_ticks: int | None = None,
        stall_policy: StallPolicy | None = None,
    ) -> MonitorResult:
        """Run ``input`` as a turn now and then every ``every``, until ``until(result)``.

        Ticks are spaced from the start of one to the start of the next (a tick that
        overruns is followed at once by the next). Each tick is a
        ``host-reachability`` pulse on the session's liveness. Stops when ``until``
        returns true, after ``max_ticks`` runs, or when :meth:`cancel` is called; the
        caller's own cancellation propagates as usual. Process-local, like :meth:`sleep`.

        While the loop runs (only then), a stall watchdog on trio's clock, the clock
        the ticks use, watches the session's liveness: with the default
        ``stall_policy`` (``StallPolicy(stall_after=2 * every, unreachable_after=4 *
        every)``) a loop that has not ticked for two intervals reads ``stalled``, for
        four ``unreachable``. A human wait a run of the session parks
        (:func:`wait_for_signal`) pauses it; :meth:`signal` resumes it with fresh
        clocks. A policy with ``abort_when_stalled`` calls :meth:`cancel` when the loop
        stalls. The watchdog ends when the loop returns or raises.
        """
        interval, policy = check_monitor(every, until, max_ticks, stall_policy)
        checked_input(input)
        return await run_monitor(self, interval, policy, input, until, max_ticks)

    def start_monitor(
        self,
        *,
        every: Duration = "PT30S",
        input: SessionInput,
        until: Callable[[RunResult], bool] | None = None,
        max_ticks: int | None = None,
        stall_policy: StallPolicy | None = None,
        on_done: Callable[[MonitorResult], object] | None = None,
    ) -> None:
        """Run :meth:`monitor` as a task of the ``open_session`` block's nursery.

        It ends like :meth:`monitor`, or when the block ends; ``on_done`` receives its
        :class:`MonitorResult`. An error in it (e.g. a persistence failure) propagates
        out of the ``open_session`` block.
        """
        interval, policy = check_monitor(every, until, max_ticks, stall_policy)
        checked_input(input)
        self._nursery.start_soon(
            start_monitor,
            self,
            interval,
            policy,
            input,
            until,
            max_ticks,
            on_done,
            name=f"operative session monitor {self.id}",
        )

    def cancel(self, reason: str = "the session was cancelled") -> None:
        """Stop what the handle is doing now: in-flight runs abort, sleeps and monitors end.

        Synchronous: the request is made at once. A run of this handle owns its terminal
        write (it stores its aborted outcome before its ``run`` call, or a recovered
        run's ``result()``, returns). A turn the session records as open that no run of
        this handle holds (its process stopped) is settled by a task of the
        ``open_session`` block: on a durable session the engine is asked to cancel it,
        and once the engine reports it finished its actual outcome and journaled
        transcript are stored (a live worker still holding it stops at its next step and
        stores the outcome itself); without a durable engine it is recorded as aborted
        and the session's history is kept. Only the turns open when ``cancel`` was
        called are touched, and an outcome already stored is never replaced. Later calls
        to ``run``/``sleep``/``monitor`` work as usual.
        """
        self._cancels += 1
        self._cancel_reason = reason
        for run in tuple(self._runs):
            run.abort(reason)
        for scope in tuple(self._scopes):
            scope.cancel()
        detached = tuple(
            ref.run_id
            for ref in self._session.runs
            if ref.outcome is None and ref.run_id not in self._turns
        )
        if detached:
            from ._durable import cancel_detached

            self._nursery.start_soon(
                cancel_detached, self, detached, reason, name=f"operative session cancel {self.id}"
            )

    def _cancellable(self) -> CancellableScope:
        return CancellableScope(self._scopes)

    # -- human waits -----------------------------------------------------------------

    async def wait_for_signal(self, name: str, *, prompt: str | None = None) -> Any:
        """Park until :meth:`signal` delivers ``name``; returns its payload.

        While parked the session's liveness is ``waiting`` with a declared wait
        (reason ``"review"`` with a prompt, ``"signal"`` without; no deadline).
        Tools of the session's runs reach this through :func:`wait_for_signal`.
        """
        return await self._signals.wait(name, prompt=prompt)

    def signal(self, name: str, payload: Any = None) -> bool:
        """Deliver ``payload`` to every wait parked on ``name``; False when none was.

        Signals are not queued: only waits parked now receive one (watch
        :meth:`snapshot` for ``waiting`` before signalling).
        """
        return self._signals.deliver(name, payload)

    # -- liveness --------------------------------------------------------------------

    def snapshot(self) -> LivenessSnapshot:
        """The session's liveness (``kind="session"``, never terminal)."""
        return self._tracker.snapshot()

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now and on every revision change until unsubscribed."""
        return self._tracker.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate the session's snapshots as they change (until you stop)."""
        return self._tracker.snapshots(capacity=capacity)
