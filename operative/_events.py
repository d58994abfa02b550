"""Typed run events and their fan-out to listeners and bounded streams.

Every event is a frozen ``msgspec.Struct`` in one tagged union whose tag, ``type``, is
the specification's string (``"run.started"``, ``"step.completed"``, ...). Each carries
``run_id``, ``step`` (0 outside a step) and ``time`` (trio's clock, monotonic).
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeAlias

import msgspec
import trio

from ._types import FinishReason, ToolCall, ToolResult, Usage

__all__ = [
    "BackpressureApplied",
    "BackpressureReleased",
    "BudgetLimitExceeded",
    "BudgetThresholdCrossed",
    "ContextBudgetWarning",
    "ContextCompacted",
    "ElicitationRequested",
    "ElicitationResolved",
    "Event",
    "EventStream",
    "GenerateCompleted",
    "GenerateError",
    "GenerateRetry",
    "GenerateStarted",
    "ResponseValidated",
    "RunAborted",
    "RunCompleted",
    "RunError",
    "RunEvent",
    "RunStarted",
    "SessionLoaded",
    "SessionSaved",
    "SteeringAccepted",
    "SteeringApplied",
    "SteeringFailed",
    "SteeringRejected",
    "SteeringSuperseded",
    "StepAborted",
    "StepCompleted",
    "StepGenerated",
    "StepStarted",
    "ToolProgress",
    "ToolResultValidated",
    "ToolsExecuted",
    "ToolsExecuting",
    "UsageAccumulated",
]

logger = logging.getLogger("operative.events")


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag_field="type"):
    """Base of every run event (untracked by the garbage collector: events hold no cycles)."""

    run_id: str
    step: int = 0
    time: float = 0.0
    """``trio.current_time()`` when the event was emitted (monotonic seconds)."""

    @property
    def type(self) -> str:
        """The event's type string, e.g. ``"step.completed"``."""
        return self.__struct_config__.tag  # type: ignore[return-value]


class RunStarted(Event, frozen=True, kw_only=True, tag="run.started"):
    """The loop started; always the first event of a run."""

    agent_name: str = ""


class RunCompleted(Event, frozen=True, kw_only=True, tag="run.completed"):
    """The run ended normally (stop condition, maximum steps or budget)."""

    finish_reason: FinishReason
    content: str = ""
    usage: Usage = Usage()
    steps: int = 0
    recovered_error: str | None = None
    """Set when an ``on_error`` hook turned a failure into this final answer."""


class RunError(Event, frozen=True, kw_only=True, tag="run.error"):
    """The run ended because something failed; the exception is on the result."""

    error: str
    error_type: str
    usage: Usage = Usage()
    steps: int = 0


class RunAborted(Event, frozen=True, kw_only=True, tag="run.aborted"):
    """The run was aborted (``run.abort()``, or its caller was cancelled)."""

    reason: str = ""
    usage: Usage = Usage()
    steps: int = 0


class StepStarted(Event, frozen=True, kw_only=True, tag="step.started"):
    """A step began."""


class StepGenerated(Event, frozen=True, kw_only=True, tag="step.generated"):
    """The step's assistant message was appended to the conversation."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class StepCompleted(Event, frozen=True, kw_only=True, tag="step.completed"):
    """A step finished, its tool results appended."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    usage: Usage = Usage()


class StepAborted(Event, frozen=True, kw_only=True, tag="step.aborted"):
    """A step was cut short; its unfinished tool calls got ``cancelled`` results."""

    reason: str = ""


class GenerateStarted(Event, frozen=True, kw_only=True, tag="generate.started"):
    """A generate attempt began."""

    attempt: int = 1


class GenerateCompleted(Event, frozen=True, kw_only=True, tag="generate.completed"):
    """A generate attempt returned."""

    attempt: int = 1
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str | None = None


class GenerateError(Event, frozen=True, kw_only=True, tag="generate.error"):
    """A generate attempt failed."""

    attempt: int = 1
    error: str = ""
    error_type: str = ""
    retryable: bool = False
    """True when the run will retry this attempt."""
    usage: Usage = Usage()
    """What the failed attempt reported spending (counted in the run's usage)."""


class GenerateRetry(Event, frozen=True, kw_only=True, tag="generate.retry"):
    """A failed generate attempt will be retried after ``delay`` seconds."""

    attempt: int = 1
    """The attempt that is about to run."""
    delay: float = 0.0
    error: str = ""
    error_type: str = ""


class ResponseValidated(Event, frozen=True, kw_only=True, tag="response.validated"):
    """The response passed every ``validate_response`` hook."""


class ToolsExecuting(Event, frozen=True, kw_only=True, tag="tools.executing"):
    """The step's tool calls are about to run (concurrently)."""

    calls: tuple[ToolCall, ...] = ()


class ToolsExecuted(Event, frozen=True, kw_only=True, tag="tools.executed"):
    """Every tool call of the step settled; results are in call order."""

    results: tuple[ToolResult, ...] = ()


class ToolResultValidated(Event, frozen=True, kw_only=True, tag="tool-result.validated"):
    """One tool result is final (after ``validate_tool_result`` hooks)."""

    result: ToolResult


class ToolProgress(Event, frozen=True, kw_only=True, tag="tool.progress"):
    """A running tool reported progress."""

    call_id: str
    tool_name: str
    progress: float | None = None
    total: float | None = None
    message: str | None = None


class ElicitationRequested(Event, frozen=True, kw_only=True, tag="elicitation.requested"):
    """A tool asked the host for structured input."""

    request_id: str
    tool_call_id: str | None = None
    message: str = ""
    schema: dict[str, Any] = msgspec.field(default_factory=dict)


class ElicitationResolved(Event, frozen=True, kw_only=True, tag="elicitation.resolved"):
    """The host answered (or declined) an elicitation."""

    request_id: str
    tool_call_id: str | None = None
    declined: bool = False


class UsageAccumulated(Event, frozen=True, kw_only=True, tag="usage.accumulated"):
    """A generate call reported usage; ``total`` is the run's running sum."""

    usage: Usage
    total: Usage


class BackpressureApplied(Event, frozen=True, kw_only=True, tag="backpressure.applied"):
    """The run waits before its next step."""

    delay: float | None = None
    reason: str = ""


class BackpressureReleased(Event, frozen=True, kw_only=True, tag="backpressure.released"):
    """The wait before the step is over."""

    waited: float = 0.0


class BudgetThresholdCrossed(Event, frozen=True, kw_only=True, tag="budget.threshold"):
    """The run spent ``fraction`` of one of its budget's limits (reported once each)."""

    limit: str
    fraction: float
    maximum: float
    spent: float


class BudgetLimitExceeded(Event, frozen=True, kw_only=True, tag="budget.exceeded"):
    """A budget limit was crossed; the run ends with ``finish_reason "budget-exceeded"``."""

    limit: str
    maximum: float
    spent: float
    message: str = ""


class ContextBudgetWarning(Event, frozen=True, kw_only=True, tag="context.budget-warning"):
    """The transcript sent this step is close to the context budget."""

    tokens: int
    budget: int
    warn_at: float


class ContextCompacted(Event, frozen=True, kw_only=True, tag="context.compacted"):
    """Older messages were left out of (or summarized in) what this step sends.

    The run's stored transcript is unchanged: compaction only shapes the request.
    """

    removed: int
    tokens_before: int
    tokens_after: int
    summarized: bool = False
    usage: Usage = Usage()
    """What a summarizing generate call cost (counted in the run's usage)."""


class SteeringApplied(Event, frozen=True, kw_only=True, tag="steering.applied"):
    """A run took up a new configuration version at a step's entry (once per version)."""

    session_id: str
    config_version: int
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    previous_version: int = 0
    """The version the run had applied (or the session's floor) before this one."""


class _SteeringCommandEvent(Event, frozen=True, kw_only=True):
    session_id: str
    command_id: str
    command: str
    """``"pause"``, ``"resume"`` or ``"configure"``."""
    config_version: int = 0
    reason: str = ""


class SteeringAccepted(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.accepted"):
    """A host's steering command changed the session's desired state."""


class SteeringRejected(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.rejected"):
    """A steering command was refused (a stale version, a redundant pause, ...)."""


class SteeringSuperseded(
    _SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.superseded"
):
    """An accepted command was replaced by a newer one before any run took it up."""


class SteeringFailed(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.failed"):
    """Processing a steering command raised."""


class SessionLoaded(Event, frozen=True, kw_only=True, tag="session.loaded"):
    """A session handle opened its session (``run_id`` is empty: no run yet)."""

    session_id: str
    agent_name: str
    revision: int
    is_new: bool = False
    """True when no session was stored under this id, so a new one was created."""
    message_count: int = 0


class SessionSaved(Event, frozen=True, kw_only=True, tag="session.saved"):
    """A session handle stored its session (a turn reserved, or a turn's outcome)."""

    session_id: str
    agent_name: str
    revision: int
    message_count: int = 0
    outcome: str | None = None
    """The run's finish reason when this write stored a turn's outcome."""


RunEvent: TypeAlias = (
    RunStarted
    | RunCompleted
    | RunError
    | RunAborted
    | StepStarted
    | StepGenerated
    | StepCompleted
    | StepAborted
    | GenerateStarted
    | GenerateCompleted
    | GenerateError
    | GenerateRetry
    | ResponseValidated
    | ToolsExecuting
    | ToolsExecuted
    | ToolResultValidated
    | ToolProgress
    | ElicitationRequested
    | ElicitationResolved
    | UsageAccumulated
    | BackpressureApplied
    | BackpressureReleased
    | BudgetThresholdCrossed
    | BudgetLimitExceeded
    | ContextBudgetWarning
    | ContextCompacted
    | SteeringApplied
    | SteeringAccepted
    | SteeringRejected
    | SteeringSuperseded
    | SteeringFailed
    | SessionLoaded
    | SessionSaved
)
"""Every event a run emits, one tagged union (decodes in one pass)."""

TERMINAL_TYPES = frozenset({"run.completed", "run.error", "run.aborted"})
EVENT_TYPES = frozenset(cls.__struct_config__.tag for cls in RunEvent.__args__)

Listener: TypeAlias = Callable[[Any], object]
Overflow: TypeAlias = Literal["block", "drop-oldest"]


class EventStream:
    """Async iteration over a run's events, through a bounded buffer.

    With ``overflow="block"`` (the default) a slow consumer holds the run back when the
    buffer is full (backpressure); with ``"drop-oldest"`` the run never waits and
    ``dropped`` counts what the consumer missed. The stream ends after the run's
    terminal event. It subscribes when iteration starts; leave early with ``aclose()``
    or ``async with`` (a stream dropped mid-iteration also lets go of the run).
    """

    __slots__ = (
        "__weakref__",
        "_buffer",
        "_capacity",
        "_closed",
        "_consumers",
        "_hub",
        "_overflow",
        "_producers",
        "_subscribed",
        "dropped",
        "types",
    )

    def __init__(
        self, hub: EventHub, types: frozenset[str] | None, capacity: int, overflow: Overflow
    ) -> None:
        self._hub = hub
        self.types = types
        self._capacity = capacity
        self._overflow = overflow
        self._buffer: deque[Any] = deque()
        self._closed = False
        self._subscribed = False
        self._consumers = trio.lowlevel.ParkingLot()
        self._producers = trio.lowlevel.ParkingLot()
        self.dropped = 0
        """How many events a ``drop-oldest`` stream discarded."""

    def __aiter__(self) -> EventStream:
        self._subscribe()
        return self

    async def __aenter__(self) -> EventStream:
        self._subscribe()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _subscribe(self) -> None:
        if not self._subscribed:
            self._subscribed = True
            self._hub._attach(self)

    async def __anext__(self) -> Any:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            await self._consumers.park()
        event = self._buffer.popleft()
        if self._producers:
            self._producers.unpark()
        return event

    async def aclose(self) -> None:
        """Stop receiving; the run no longer waits for this consumer."""
        self._detach()
        await trio.lowlevel.checkpoint()

    def _detach(self) -> None:
        self._closed = True
        self._buffer.clear()
        self._hub._detach(self)
        self._producers.unpark_all()
        self._consumers.unpark_all()

    def __del__(self) -> None:
        if self._subscribed and not self._closed:
            with contextlib.suppress(Exception):  # interpreter shutdown
                self._detach()

    def _finish(self) -> None:
        """The run is over: the consumer drains what is buffered, then iteration ends."""
        self._closed = True
        self._consumers.unpark_all()
        self._producers.unpark_all()

    def _push_nowait(self, event: Any) -> None:
        """Push without waiting (the terminal event, clean-up): never blocks, never lost.

        A full ``block`` stream grows past its capacity for this one event.
        """
        if self._closed:
            return
        if self._overflow == "drop-oldest" and len(self._buffer) >= self._capacity:
            self._buffer.popleft()
            self.dropped += 1
        self._buffer.append(event)
        self._consumers.unpark()


async def _push(ref: weakref.ref[EventStream], event: Any) -> None:
    """Deliver ``event`` to the stream behind ``ref``, waiting while it is full.

    While waiting it holds only the weak reference, so a consumer that walks away from
    a full stream (``break`` out of ``async for``) lets the stream be collected, which
    wakes this producer instead of leaving the run stuck.
    """
    stream = ref()
    if stream is None or stream._closed:
        return
    buffer = stream._buffer
    if len(buffer) >= stream._capacity:
        if stream._overflow == "drop-oldest":
            buffer.popleft()
            stream.dropped += 1
        else:
            lot = stream._producers
            del stream, buffer
            while True:
                await lot.park()
                stream = ref()
                if stream is None or stream._closed:
                    return
                buffer = stream._buffer
                if len(buffer) < stream._capacity:
                    break
                del stream, buffer
    buffer.append(event)
    if stream._consumers:
        stream._consumers.unpark()


class EventHub:
    """Fan-out of one run's events: sync listeners first, then streams.

    ``wants(type)`` is a set lookup, so the loop builds an event only when someone
    listens; emitting with no listener costs next to nothing.
    """

    __slots__ = ("_all", "_closed", "_listeners", "_streams", "_wanted", "listener_errors")

    def __init__(self) -> None:
        self._listeners: dict[str, list[Listener]] = {}
        self._streams: list[weakref.ref[EventStream]] = []
        """Weak: a stream its consumer dropped must not be kept alive by the run."""
        self._wanted: frozenset[str] = frozenset()
        self._all = False
        self._closed = False
        self.listener_errors = 0
        """Listener calls that raised (each is logged to ``operative.events``)."""

    def wants(self, type: str) -> bool:
        return self._all or type in self._wanted

    def _recompute(self) -> None:
        wanted: set[str] = set()
        everything = "*" in self._listeners
        for key in self._listeners:
            wanted.add(key)
        for ref in self._streams:
            stream = ref()
            if stream is None:
                continue
            if stream.types is None:
                everything = True
            else:
                wanted |= stream.types
        self._all = everything
        self._wanted = frozenset(wanted)

    def add_listener(self, type: str, listener: Listener) -> Callable[[], None]:
        if type != "*" and type not in EVENT_TYPES:
            from ._errors import InvalidArgument

            raise InvalidArgument(
                f"unknown event type {type!r}; known types: {', '.join(sorted(EVENT_TYPES))}"
                " (or '*' for every event)"
            )
        checked: object = listener  # callers without type checking pass anything
        if not callable(checked):
            from ._errors import InvalidArgument

            raise InvalidArgument(f"listener must be callable, got {listener!r}")
        self._listeners.setdefault(type, []).append(listener)
        self._recompute()

        def remove() -> None:
            listeners = self._listeners.get(type)
            if listeners is not None and listener in listeners:
                listeners.remove(listener)
                if not listeners:
                    del self._listeners[type]
                self._recompute()

        return remove

    def stream(
        self, types: Iterable[str], *, capacity: int = 256, overflow: Overflow = "block"
    ) -> EventStream:
        from ._errors import InvalidArgument

        selected = frozenset(types)
        unknown = selected - EVENT_TYPES
        if unknown:
            raise InvalidArgument(
                f"unknown event type(s) {sorted(unknown)}; known types: "
                f"{', '.join(sorted(EVENT_TYPES))}"
            )
        if capacity < 1:
            raise InvalidArgument(f"capacity must be at least 1, got {capacity}")
        if overflow not in ("block", "drop-oldest"):
            raise InvalidArgument(f"overflow must be 'block' or 'drop-oldest', got {overflow!r}")
        stream = EventStream(self, selected or None, capacity, overflow)
        if self._closed:
            stream._closed = True
            stream._subscribed = True
        return stream

    def _attach(self, stream: EventStream) -> None:
        if self._closed:
            stream._closed = True
            return
        self._streams.append(weakref.ref(stream))
        self._recompute()

    def _detach(self, stream: EventStream) -> None:
        self._streams = [ref for ref in self._streams if ref() not in (None, stream)]
        self._recompute()

    def _call_listeners(self, event: Any, type: str) -> None:
        for key in (type, "*"):
            listeners = self._listeners.get(key)
            if listeners:
                for listener in tuple(listeners):
                    try:
                        listener(event)
                    except Exception:
                        self.listener_errors += 1
                        logger.exception("listener %r for %r raised", listener, type)

    async def emit(self, event: Any) -> None:
        """Deliver ``event``; waits only for a full ``block`` stream (backpressure).

        Delivery is all or nothing: if the run is cancelled while a slow consumer holds
        it back, the event is still handed to every stream (past capacity), so no
        event is ever seen by some observers and not by others.
        """
        type = event.__struct_config__.tag
        if self._listeners:
            self._call_listeners(event, type)
        refs = tuple(self._streams)
        for index, ref in enumerate(refs):
            stream = ref()
            if stream is not None and (stream.types is None or type in stream.types):
                del stream
                try:
                    await _push(ref, event)
                except BaseException:
                    for rest in refs[index:]:
                        late = rest()
                        if late is not None and (late.types is None or type in late.types):
                            late._push_nowait(event)
                    raise

    def emit_nowait(self, event: Any) -> None:
        """Deliver ``event`` without ever waiting (used in shielded clean-up)."""
        type = event.__struct_config__.tag
        if self._listeners:
            self._call_listeners(event, type)
        for ref in tuple(self._streams):
            stream = ref()
            if stream is not None and (stream.types is None or type in stream.types):
                stream._push_nowait(event)

    def close(self) -> None:
        """End every stream after what it has buffered; later streams end at once."""
        self._closed = True
        for ref in self._streams:
            stream = ref()
            if stream is not None:
                stream._finish()
        self._streams.clear()
        self._recompute()
