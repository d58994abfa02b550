"""Fan-out of a run's events: sync listeners first, then bounded streams.

Streams are held weakly by the hub, so a consumer that walks away from ``async for``
never keeps a run waiting; emission is all or nothing under cancellation.

Streamed ``generate.delta`` events come from a provider adapter's sync callback, in the
middle of a generate call, so they cannot wait for a full ``block`` stream there.
:class:`DeltaDelivery` keeps the stream's bound anyway: what does not fit is held back,
merged per part (consecutive pieces of the same text, thinking or call arguments become
one delta), and the run waits for the consumer when the call returns, before it goes
on. A ``block`` stream never holds more than ``capacity`` events; nothing is lost.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import deque
from collections.abc import Callable, Container, Iterable
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, cast

import msgspec
import trio

from ._events import EVENT_TYPES

__all__ = [
    "DeltaDelivery",
    "EventHub",
    "EventStream",
    "Listener",
    "Overflow",
]

logger = logging.getLogger("operative.events")

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

    def statistics(self) -> dict[str, int]:
        """``buffered`` events waiting for the consumer, the stream's ``capacity``, and
        how many events a ``drop-oldest`` stream ``dropped``."""
        return {"buffered": len(self._buffer), "capacity": self._capacity, "dropped": self.dropped}

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


_DeltaKey: TypeAlias = tuple[Any, ...]
_DELTA = "generate.delta"


class _HeldBack:
    """Deltas of one part a full ``block`` stream could not take yet, merged."""

    __slots__ = ("first", "last", "pieces")

    def __init__(self, event: Any) -> None:
        self.first = event
        self.last = event
        self.pieces: list[str] = [event.text]

    def add(self, event: Any) -> None:
        self.pieces.append(event.text)
        self.last = event

    def event(self) -> Any:
        if len(self.pieces) == 1:
            return self.first
        return msgspec.structs.replace(self.first, text="".join(self.pieces), time=self.last.time)


def _part(event: Any) -> _DeltaKey:
    return (event.kind, event.index, event.call_id, event.tool_name)


class DeltaDelivery:
    """The ``generate.delta`` events of one generate attempt, under each stream's policy.

    :meth:`offer` is sync (a provider adapter calls it mid-stream): listeners see every
    delta at once, a ``drop-oldest`` stream drops as it always does, and a ``block``
    stream takes deltas while it has room. Once it is full, later deltas are held back
    for it, merged with the held-back delta of the same part, never in its buffer.
    :meth:`flush` (awaited when the call returns) hands them over, waiting for the
    consumer: that is where a slow consumer holds the run back.
    """

    __slots__ = ("_flushed", "_held", "_hub")

    def __init__(self, hub: EventHub) -> None:
        self._hub = hub
        self._held: dict[weakref.ref[EventStream], list[_HeldBack]] = {}
        self._flushed = False

    def offer(self, event: Any) -> None:
        hub = self._hub
        if hub._listeners:
            hub._call_listeners(event, _DELTA)
        for ref in hub._streams:
            stream = ref()
            if (
                stream is None
                or stream._closed
                or (stream.types is not None and _DELTA not in stream.types)
            ):
                continue
            if stream._overflow != "block" or self._flushed:
                stream._push_nowait(event)
                continue
            buffer = stream._buffer
            held = self._held.get(ref)
            if held:
                while held and len(buffer) < stream._capacity:  # the consumer made room
                    buffer.append(held.pop(0).event())
            if not held and len(buffer) < stream._capacity:
                buffer.append(event)
            else:
                self._hold(ref, event, stream._capacity)
            if stream._consumers:
                stream._consumers.unpark()

    def _hold(self, ref: weakref.ref[EventStream], event: Any, capacity: int) -> None:
        held = self._held.setdefault(ref, [])
        part = _part(event)
        if held and _part(held[-1].first) == part:
            held[-1].add(event)
            return
        if len(held) >= capacity:
            # Parts interleaving faster than a full stream drains: merge into the part's
            # earlier entry rather than hold more entries than the stream's capacity.
            for entry in held:
                if _part(entry.first) == part:
                    entry.add(event)
                    return
        held.append(_HeldBack(event))

    async def flush(self) -> None:
        """Hand the held-back deltas over, waiting while a ``block`` stream is full.

        All or nothing under cancellation, like :meth:`EventHub.emit`: what is left is
        handed over past capacity, so no stream misses a delta another one saw.
        """
        self._flushed = True
        held = self._held
        if not held:
            return
        try:
            while held:
                ref, entries = next(iter(held.items()))
                while entries:
                    await _push(ref, entries[0].event())
                    entries.pop(0)
                del held[ref]
        except BaseException:
            self.flush_nowait()
            raise

    def flush_nowait(self) -> None:
        """Hand the held-back deltas over at once (the call failed or was cancelled)."""
        self._flushed = True
        for ref, entries in self._held.items():
            stream = ref()
            if stream is not None:
                for entry in entries:
                    stream._push_nowait(entry.event())
        self._held.clear()


class _Everything:
    """The event types a ``"*"`` listener wants: all of them."""

    __slots__ = ()

    def __contains__(self, type: object) -> bool:
        return True

    def __bool__(self) -> bool:
        return True  # someone listens: ``not hub.wanted`` means nobody does


_EVERYTHING = _Everything()
_NOTHING: frozenset[str] = frozenset()
_NO_LISTENERS: dict[str, list[Listener]] = cast("dict[str, list[Listener]]", MappingProxyType({}))
"""Every hub's listeners until its first (read-only: adding one makes the hub a dict)."""


def check_listener(type: str, listener: Listener) -> None:
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


class _Once:
    """A listener registration that removes itself before its first call."""

    __slots__ = ("hub", "listener", "type")

    def __init__(self, hub: EventHub, type: str, listener: Listener) -> None:
        self.hub = hub
        self.type = type
        self.listener = listener

    def __call__(self, event: Any) -> None:
        self.hub._remove(self.type, self)
        self.listener(event)


class EventHub:
    """Fan-out of one run's events: sync listeners first, then streams.

    ``type in hub.wanted`` (or ``wants(type)``) is a set lookup, so the loop builds an
    event only when someone listens; emitting with no listener costs next to nothing.
    """

    __slots__ = ("_closed", "_listeners", "_streams", "listener_errors", "wanted")

    def __init__(self) -> None:
        # Both start as shared empty containers (most runs have no listener and no
        # stream) and become the hub's own on the first one.
        self._listeners: dict[str, list[Listener]] = _NO_LISTENERS
        self._streams: list[weakref.ref[EventStream]] | tuple[()] = ()
        """Weak: a stream its consumer dropped must not be kept alive by the run."""
        self.wanted: Container[str] = _NOTHING
        """The event types someone listens to; the loop's hot path tests ``in`` it."""
        self._closed = False
        self.listener_errors = 0
        """Listener calls that raised (each is logged to ``operative.events``)."""

    def wants(self, type: str) -> bool:
        return type in self.wanted

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
        self.wanted = _EVERYTHING if everything else frozenset(wanted)

    def add_listener(self, type: str, listener: Listener) -> Callable[[], None]:
        check_listener(type, listener)
        if self._listeners is _NO_LISTENERS:
            self._listeners = {}
        self._listeners.setdefault(type, []).append(listener)
        self._recompute()

        def remove() -> None:
            self._remove(type, listener)

        return remove

    def once(self, type: str, listener: Listener) -> Callable[[], None]:
        """``listener`` for the first event of ``type`` only; returns a remover."""
        check_listener(type, listener)
        wrapper = _Once(self, type, listener)
        if self._listeners is _NO_LISTENERS:
            self._listeners = {}
        self._listeners.setdefault(type, []).append(wrapper)
        self._recompute()

        def remove() -> None:
            self._remove(type, wrapper)

        return remove

    def remove_listener(self, type: str, listener: Listener) -> None:
        """Remove one registration of ``listener`` for ``type`` (an ``add_listener`` or a
        ``once`` one); a listener not registered is ignored."""
        check_listener(type, listener)
        listeners = self._listeners.get(type)
        if listeners is None:
            return
        for registered in listeners:
            if registered == listener or (
                registered.__class__ is _Once and registered.listener == listener
            ):
                self._remove(type, registered)
                return

    def _remove(self, type: str, listener: Listener) -> None:
        listeners = self._listeners.get(type)
        if listeners is not None and listener in listeners:
            listeners.remove(listener)
            if not listeners:
                del self._listeners[type]
            self._recompute()

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
        self._streams = [*self._streams, weakref.ref(stream)]
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
        if not self._streams:
            return
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

    @property
    def has_streams(self) -> bool:
        """Whether any event stream is attached (listeners aside)."""
        return bool(self._streams)

    def deltas(self) -> DeltaDelivery:
        """A delivery for the ``generate.delta`` events of one generate attempt."""
        return DeltaDelivery(self)

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
        if self._streams:
            for ref in self._streams:
                stream = ref()
                if stream is not None:
                    stream._finish()
            self._streams = ()
            self._recompute()
