"""The run handle of a lazy agent: answers by itself until the definition loads.

Before the definition loads, :class:`LazyRun` holds listeners, event streams and
snapshot subscriptions and reports ``starting``; once the real run exists, everything is
handed over to it.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import trio

from .._agent import AgentInput, AgentRunContext, RunnableAgent
from .._core._errors import (
    AgentContractError,
    AsyncDefinitionLoadError,
    CleanupError,
    InvalidArgument,
    OutputValidationError,
)
from .._core._event_hub import EventStream, Listener, Overflow, check_listener
from .._core._events import EVENT_TYPES, RunAborted, RunError
from .._core._results import RunResult
from .._core._run import ActiveRun
from .._core._types import FinishReason, Usage
from ..conversation import Conversation, ConversationHistory
from ..liveness import LivenessSnapshot, SnapshotObserver, SnapshotStream, SnapshotSubscription
from ._liveness import LazyLiveness

if TYPE_CHECKING:
    from ._agent import _SingleFlight

__all__ = ["LazyEventStream", "LazyRun", "check_durable"]

logger = logging.getLogger("operative.lazy")

_HANDLE_MEMBERS = ("run_id", "abort", "result", "events", "add_listener", "snapshot")


def _input_conversation(input: AgentInput) -> Conversation:
    if isinstance(input, ConversationHistory):
        return Conversation.from_history(input)
    conversation = Conversation()
    conversation.append_user_message(input)
    return conversation


def check_durable(agent: RunnableAgent) -> RunnableAgent:
    """``agent`` if its ``open_run`` takes ``durable=``; AgentContractError otherwise."""
    try:
        parameters = inspect.signature(agent.open_run).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin: let the call tell
        return agent
    if "durable" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    ):
        return agent
    raise AgentContractError(
        f"the lazy agent loaded {type(agent).__name__}, whose open_run() takes no "
        "durable=: a durable run needs an agent that can run durably (create_agent)"
    )


# -- the run handle -------------------------------------------------------------------


class _PendingListener:
    """A listener added before the agent loaded; attached to the real run later."""

    __slots__ = ("listener", "once", "removed", "remover", "type")

    def __init__(self, type: str, listener: Listener, *, once: bool = False) -> None:
        self.type = type
        self.listener = listener
        self.once = once
        """Attached with ``once``: called for the first event of ``type`` only."""
        self.remover: Callable[[], None] | None = None
        self.removed = False

    def remove(self) -> None:
        self.removed = True
        if self.remover is not None:
            self.remover()


class LazyRun:
    """A run of a :class:`LazyAgent`: a subset of :class:`~operative.ActiveRun`.

    Before the definition loads, the handle answers by itself (``snapshot()`` says
    ``starting``; listeners, event streams and snapshot subscriptions are held); once
    the real run exists, everything delegates to it. A run that ends before the agent
    loaded (an abort, a load failure) has a real :class:`~operative.RunResult` with no
    steps and the input conversation, one terminal event (``run.aborted`` or
    ``run.error``) and one terminal snapshot.
    """

    __slots__ = (
        "_abort_reason",
        "_clock",
        "_context",
        "_done",
        "_durable",
        "_failure",
        "_flight",
        "_forwarded_abort",
        "_input",
        "_listeners",
        "_liveness",
        "_load_scope",
        "_opened_at",
        "_provisional_id",
        "_real",
        "_recovering",
        "_resolved",
        "_result",
        "_streams",
        "_synthetic",
    )

    def __init__(
        self,
        flight: _SingleFlight[RunnableAgent],
        input: AgentInput,
        context: AgentRunContext | None,
        *,
        durable: Any = None,
        run_id: str | None = None,
        recovering: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._flight = flight
        self._clock: Callable[[], float] = clock if clock is not None else trio.current_time
        """The clock of the snapshots before the agent loaded (``runtime=``)."""
        self._input = input
        self._context = context
        self._durable = durable
        """The ``durable=`` routing passed on to the loaded agent's ``open_run``."""
        self._recovering = recovering
        """A recovered durable run: its record is running, so it is never ended here."""
        self._provisional_id = run_id or os.urandom(12).hex()
        self._real: ActiveRun | None = None
        self._abort_reason: str | None = None
        self._forwarded_abort = False
        self._load_scope = trio.CancelScope()
        self._resolved = trio.Event()
        """Set once the real run exists, or the run ended before it could."""
        self._done = trio.Event()
        self._result: RunResult | None = None
        self._failure: BaseException | None = None
        self._synthetic: RunAborted | RunError | None = None
        self._listeners: list[_PendingListener] = []
        self._streams: list[LazyEventStream] = []
        self._opened_at = self._clock()
        self._liveness = LazyLiveness(self._provisional_id, self.snapshot, clock=self._clock)

    def __repr__(self) -> str:
        return f"<LazyRun {self.run_id} {self.snapshot().status}>"

    @property
    def run_id(self) -> str:
        """The real run's id once it exists; a provisional id before."""
        return self._real.run_id if self._real is not None else self._provisional_id

    @property
    def resolved(self) -> bool:
        """True once the real run exists."""
        return self._real is not None

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Stop the run. Before the agent loaded, the agent is never run at all."""
        reason = reason or "aborted"
        real = self._real
        if real is not None:
            if not self._forwarded_abort:
                self._forwarded_abort = True
                real.abort(reason)
            return
        if self._abort_reason is None and not self._done.is_set():
            self._abort_reason = reason
            if not self._recovering:
                self._load_scope.cancel()
            # else: the definition is loaded already; the real run opens and is aborted
            # at once, so that its journal records the abort.

    # -- observing -------------------------------------------------------------------

    def add_listener(self, type: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every event of ``type``; returns the remover."""
        return self._listen(type, listener, once=False)

    def once(self, type: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for the first event of ``type`` only; returns the
        remover. Held until the agent loaded, like :meth:`add_listener`."""
        return self._listen(type, listener, once=True)

    def remove_listener(self, type: str, listener: Listener) -> None:
        """Remove one registration of ``listener`` for ``type`` (by :meth:`add_listener`
        or :meth:`once`), before or after the agent loaded; unknown ones are ignored."""
        check_listener(type, listener)
        real = self._real
        if real is not None:
            real.remove_listener(type, listener)
            return
        for pending in self._listeners:
            if not pending.removed and pending.type == type and pending.listener == listener:
                pending.remove()
                self._listeners.remove(pending)
                return

    def _listen(self, type: str, listener: Listener, *, once: bool) -> Callable[[], None]:
        real = self._real
        if real is not None:
            remover: Callable[[], None] = (
                real.once(type, listener) if once else real.add_listener(type, listener)
            )
            return remover
        check_listener(type, listener)
        pending = _PendingListener(type, listener, once=once)
        if not self._done.is_set():
            self._listeners.append(pending)
        return pending.remove

    def events(
        self, *types: str, capacity: int = 256, overflow: Overflow = "block"
    ) -> LazyEventStream:
        """Iterate the run's events (all, or only ``types``) until the terminal one.

        Events are held for a stream only once iteration starts, as for ``ActiveRun``;
        a stream that iterates before the agent loaded sees every event of the run.
        """
        selected = frozenset(types)
        unknown = selected - EVENT_TYPES
        if unknown:
            raise InvalidArgument(
                f"unknown event type(s) {sorted(unknown)}; known types: "
                f"{', '.join(sorted(EVENT_TYPES))}"
            )
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgument(f"capacity must be at least 1, got {capacity!r}")
        if overflow not in ("block", "drop-oldest"):
            raise InvalidArgument(f"overflow must be 'block' or 'drop-oldest', got {overflow!r}")
        return LazyEventStream(self, types, capacity, overflow)

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing; ``starting`` while the definition loads."""
        real = self._real
        if real is not None:
            return real.snapshot()
        result = self._result
        durability: Literal["process-local", "durable"] = (
            "process-local" if self._durable is None else "durable"
        )
        if result is None and self._failure is None:
            return LivenessSnapshot(
                id=self._provisional_id,
                status="starting",
                revision=0,
                started_at=self._opened_at,
                observed_at=self._clock(),
                durability=durability,
            )
        finish = FinishReason.ERROR if result is None else result.finish_reason
        return LivenessSnapshot(
            id=self._provisional_id,
            status="failed" if finish is FinishReason.ERROR else "aborted",
            revision=1,
            started_at=self._opened_at,
            observed_at=self._clock(),
            finish_reason=finish,
            durability=durability,
        )

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change.

        Before the agent loaded the observer gets ``starting`` at once; when the real
        run exists it goes on receiving the real run's snapshots with no new
        subscription. The terminal snapshot is delivered exactly once (also for a run
        that already ended, or that ended before its agent loaded), then the
        subscription ends. An observer that raises is logged and counted, never allowed
        to break the run. Returns a handle with ``unsubscribe()`` (also usable as a
        ``with`` block), which works before and after the switch.
        """
        return self._liveness.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one.

        ``starting`` first while the agent loads, then the real run's. ``capacity``
        bounds the buffer: a consumer that falls behind misses the oldest snapshots,
        never the newest or the terminal one.
        """
        return self._liveness.snapshots(capacity=capacity)

    # -- outcome ---------------------------------------------------------------------

    @property
    def ended_result(self) -> RunResult | None:
        """The run's result once it has ended (synchronous; ``None`` before)."""
        return self._result

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result."""
        await self._done.wait()
        if self._failure is not None:
            raise self._failure
        assert self._result is not None
        return self._result

    async def closed(self) -> None:
        """Wait for the run's clean-up to finish (see ``ActiveRun.closed``).

        Raises:
            CleanupError: the clean-up did not finish.
        """
        await self._done.wait()
        real = self._real
        if real is not None:
            await real.closed()
        elif isinstance(self._failure, CleanupError):
            raise self._failure

    async def aclose(self) -> None:
        """Abort the run and wait until it has ended (see ``ActiveRun.aclose``)."""
        self.abort("the run was closed")
        await self._done.wait()

    async def unwrap(self) -> RunResult:
        """The result, or the run's error raised when it ended with one."""
        result = await self.result()
        if result.finish_reason is FinishReason.ERROR and result.error is not None:
            raise result.error
        return result

    async def output(self) -> Any:
        """The validated structured output (see ``ActiveRun.output``)."""
        await self._done.wait()
        real = self._real
        if real is not None:
            return await real.output()
        await self.unwrap()
        raise OutputValidationError(
            "the run ended before its agent loaded, so it has no output "
            f"({self._abort_reason or 'aborted'})"
        )

    # -- driving ---------------------------------------------------------------------

    async def _drive(self) -> None:
        try:
            await self._drive_inner()
        except BaseException as exc:
            if self._result is None and self._failure is None:
                real = self._real
                if real is not None:
                    # The real run recorded its own end (its block has exited): take it.
                    with trio.CancelScope(shield=True):
                        try:
                            self._result = await real.result()
                        except Exception as failure:
                            self._failure = failure
                elif isinstance(exc, Exception):
                    self._failure = exc
                else:
                    self._end_unresolved(None, "the run's caller was cancelled")
            raise
        finally:
            self._resolved.set()
            self._done.set()
            result = self._result
            self._liveness.close(FinishReason.ERROR if result is None else result.finish_reason)

    async def _drive_inner(self) -> None:
        agent: RunnableAgent | None = None
        try:
            with self._load_scope:
                agent = await self._flight.get()
        except (AsyncDefinitionLoadError, AgentContractError) as exc:
            self._end_unresolved(exc, None)
            return
        if agent is None or (self._abort_reason is not None and not self._recovering):
            self._end_unresolved(None, self._abort_reason or "aborted")
            return
        try:
            if self._durable is None:
                manager: Any = agent.open_run(self._input, context=self._context)
            else:
                manager = check_durable(agent).open_run(  # type: ignore[call-arg]
                    self._input, context=self._context, durable=self._durable
                )
        except Exception as exc:
            self._end_unresolved(exc, None)
            return
        if not (hasattr(manager, "__aenter__") and hasattr(manager, "__aexit__")):
            self._end_unresolved(
                AgentContractError(
                    f"{type(agent).__name__}.open_run() returned {type(manager).__name__}, "
                    "not an async context manager yielding a run handle"
                ),
                None,
            )
            return
        contract: AgentContractError | None = None
        async with manager as real:
            missing = [name for name in _HANDLE_MEMBERS if not hasattr(real, name)]
            if missing:
                abort = getattr(real, "abort", None)
                if callable(abort):
                    abort("the run handle broke the agent contract")
                contract = AgentContractError(
                    f"{type(agent).__name__}.open_run() yielded {type(real).__name__}, which "
                    f"lacks {', '.join(missing)}: it is not a run handle"
                )
            else:
                self._bind(real)
                raced = self._pending_abort()
                if raced is not None:  # an abort raced with the load finishing
                    self.abort(raced)
                try:
                    self._result = await real.result()
                except CleanupError as unfinished:  # result() raises it here too
                    self._failure = unfinished
        if contract is not None:
            self._end_unresolved(contract, None)

    def _pending_abort(self) -> str | None:
        return self._abort_reason

    def _bind(self, real: ActiveRun) -> None:
        """The real run exists and its loop has not started: hand everything over."""
        self._real = real
        listeners, self._listeners = self._listeners, []
        for pending in listeners:
            if not pending.removed:
                attach = real.once if pending.once else real.add_listener
                pending.remover = attach(pending.type, pending.listener)
        streams, self._streams = self._streams, []
        for stream in streams:
            stream._bind(real)
        self._liveness.bind(real)
        self._resolved.set()

    def _end_unresolved(self, error: BaseException | None, reason: str | None) -> None:
        """End without a real run: a real result with no steps, and one terminal event."""
        now = trio.current_time()
        event: RunAborted | RunError
        if error is not None:
            finish = FinishReason.ERROR
            event = RunError(
                run_id=self._provisional_id,
                time=now,
                error=str(error),
                error_type=type(error).__name__,
            )
        else:
            finish = FinishReason.ABORTED
            event = RunAborted(run_id=self._provisional_id, time=now, reason=reason or "")
        self._result = RunResult(
            conversation=_input_conversation(self._input),
            steps=(),
            content="",
            usage=Usage(),
            finish_reason=finish,
            error=error,
            run_id=self._provisional_id,
            abort_reason=reason,
        )
        self._synthetic = event
        listeners, self._listeners = self._listeners, []
        for pending in listeners:
            if not pending.removed and pending.type in ("*", event.type):
                try:
                    pending.listener(event)
                except Exception:
                    logger.exception("listener %r for %r raised", pending.listener, event.type)
        streams, self._streams = self._streams, []
        for stream in streams:
            stream._end(event)
        self._liveness.close(finish)
        self._resolved.set()


class LazyEventStream:
    """Events of a :class:`LazyRun`: the real run's stream once it exists.

    It subscribes when iteration starts; before the agent loaded it waits (holding
    nothing), and a run that ended before loading yields its one terminal event.
    """

    __slots__ = (
        "_capacity",
        "_closed",
        "_ended",
        "_inner",
        "_overflow",
        "_run",
        "_subscribed",
        "_terminal",
        "types",
    )

    def __init__(
        self, run: LazyRun, types: tuple[str, ...], capacity: int, overflow: Overflow
    ) -> None:
        self._run = run
        self.types = types
        self._capacity = capacity
        self._overflow: Overflow = overflow
        self._inner: EventStream | None = None
        self._subscribed = False
        self._closed = False
        self._ended = False
        self._terminal: RunAborted | RunError | None = None

    def __aiter__(self) -> LazyEventStream:
        self._subscribe()
        return self

    async def __aenter__(self) -> LazyEventStream:
        self._subscribe()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def dropped(self) -> int:
        """How many events a ``drop-oldest`` stream discarded."""
        return self._inner.dropped if self._inner is not None else 0

    def _subscribe(self) -> None:
        if self._subscribed or self._closed:
            return
        self._subscribed = True
        run = self._run
        if run._real is not None:
            self._bind(run._real)
        elif run._synthetic is not None:
            self._end(run._synthetic)
        else:
            run._streams.append(self)

    def _bind(self, real: ActiveRun) -> None:
        inner = real.events(*self.types, capacity=self._capacity, overflow=self._overflow)
        self._inner = inner.__aiter__()  # subscribes now, before the real loop starts

    def _end(self, event: RunAborted | RunError) -> None:
        self._ended = True
        if not self.types or event.type in self.types:
            self._terminal = event

    async def __anext__(self) -> Any:
        self._subscribe()
        while True:
            if self._closed:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            if self._inner is not None:
                return await self._inner.__anext__()
            if self._ended:
                await trio.lowlevel.checkpoint()
                terminal, self._terminal = self._terminal, None
                if terminal is None:
                    raise StopAsyncIteration
                return terminal
            await self._run._resolved.wait()

    async def aclose(self) -> None:
        """Stop receiving; the run no longer holds events for this consumer."""
        self._closed = True
        if self in self._run._streams:
            self._run._streams.remove(self)
        if self._inner is not None:
            await self._inner.aclose()
        else:
            await trio.lowlevel.checkpoint()
