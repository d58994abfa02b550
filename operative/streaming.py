"""What a host needs to show runs live: text as it streams, many runs as one stream,
server-sent events, and a backpressure policy per consumer.

Every helper reads a run through ``run.events(...)``, a bounded buffer per consumer,
so what happens when a consumer falls behind is that consumer's :class:`ConsumerPolicy`:
``"block"`` holds the run back until the consumer catches up (nothing is lost);
``"drop-oldest"`` never holds the run and counts what the consumer missed.

::

    async with open_run(...) as run:
        async for text in text_deltas(run):
            print(text, end="")

    async with open_merged_events([run_a, run_b]) as events:
        async for chunk in sse_stream(events):
            await response.send(chunk)

Streams are iterators with ``aclose()`` (and ``async with``); none hides a task: the
merged stream's pumps run in a nursery its caller owns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import attrs
import trio

from ._core._errors import InvalidArgument
from ._core._event_hub import EventStream, Overflow
from ._core._event_json import event_json
from ._core._events import EVENT_TYPES, Event

__all__ = [
    "SSE_CONTENT_TYPE",
    "ConsumerPolicy",
    "MergedEvents",
    "SseStream",
    "TextDeltas",
    "encode_sse",
    "merge_events",
    "open_merged_events",
    "sse_comment",
    "sse_stream",
    "text_deltas",
]

SSE_CONTENT_TYPE = "text/event-stream"
"""The ``Content-Type`` of a server-sent events response."""


def _check_capacity(instance: Any, attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"capacity must be an int >= 1, got {value!r}")


def _check_overflow(instance: Any, attribute: Any, value: str) -> None:
    if value not in ("block", "drop-oldest"):
        raise InvalidArgument(f"overflow must be 'block' or 'drop-oldest', got {value!r}")


@attrs.frozen(kw_only=True)
class ConsumerPolicy:
    """How much one consumer may fall behind a run, and what happens past that.

    ``capacity`` events are buffered for the consumer. When the buffer is full,
    ``"block"`` makes the run wait for the consumer (backpressure: nothing is lost, a
    stalled consumer stalls the run); ``"drop-oldest"`` discards the oldest buffered
    event and never makes the run wait (a live view that may skip; ``dropped`` counts
    what it missed).
    """

    capacity: int = attrs.field(default=256, validator=_check_capacity)
    overflow: Overflow = attrs.field(default="block", validator=_check_overflow)

    @classmethod
    def lossless(cls, capacity: int = 256) -> ConsumerPolicy:
        """Every event, holding the run back when the consumer is slow."""
        return cls(capacity=capacity, overflow="block")

    @classmethod
    def live(cls, capacity: int = 256) -> ConsumerPolicy:
        """Never hold the run back; a slow consumer misses the oldest events."""
        return cls(capacity=capacity, overflow="drop-oldest")


def _policy(policy: ConsumerPolicy | None) -> ConsumerPolicy:
    if policy is None:
        return ConsumerPolicy()
    if not isinstance(policy, ConsumerPolicy):
        raise InvalidArgument(f"policy= takes a ConsumerPolicy, got {type(policy).__name__}")
    return policy


def _types(types: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(types)
    unknown = sorted(set(chosen) - EVENT_TYPES)
    if unknown:
        raise InvalidArgument(
            f"unknown event type(s) {unknown}; known types: {', '.join(sorted(EVENT_TYPES))}"
        )
    return chosen


class _Run(Protocol):
    @property
    def run_id(self) -> str: ...

    def events(
        self, *types: str, capacity: int = 256, overflow: Overflow = "block"
    ) -> EventStream: ...


# -- text deltas ------------------------------------------------------------------------


class TextDeltas:
    """The text a run's model streams, piece by piece (from ``generate.delta`` events).

    Only streaming providers send deltas; a model that answers in one piece sends
    none (read ``step.generated`` for whole answers). A retried attempt streams again
    from the start: ``attempt`` says which attempt the last piece came from.
    """

    __slots__ = ("_kinds", "_stream", "attempt", "step")

    def __init__(self, stream: EventStream, kinds: frozenset[str]) -> None:
        self._stream = stream
        self._kinds = kinds
        self.step = 0
        """The step of the last piece returned."""
        self.attempt = 0
        """The generate attempt of the last piece returned."""

    @property
    def dropped(self) -> int:
        """Deltas a ``drop-oldest`` policy discarded."""
        return self._stream.dropped

    def __aiter__(self) -> TextDeltas:
        return self

    async def __anext__(self) -> str:
        while True:
            event = await self._stream.__anext__()
            if event.kind in self._kinds:
                self.step = event.step
                self.attempt = event.attempt
                text: str = event.text
                return text

    async def aclose(self) -> None:
        """Stop reading; the run no longer waits for this consumer."""
        await self._stream.aclose()

    async def __aenter__(self) -> TextDeltas:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def text_deltas(
    run: _Run, *, kinds: Iterable[str] = ("text",), policy: ConsumerPolicy | None = None
) -> TextDeltas:
    """Iterate the streamed text of ``run``'s answers, as ``str`` pieces.

    Subscribes at once, so create it right after entering the run's block to miss
    nothing. ``kinds`` may add ``"thinking"`` or ``"tool_arguments"`` pieces.
    """
    chosen = frozenset(kinds)
    unknown = chosen - {"text", "thinking", "tool_arguments"}
    if unknown:
        raise InvalidArgument(
            f"unknown delta kind(s) {sorted(unknown)}: kinds are 'text', 'thinking', "
            "'tool_arguments'"
        )
    policy = _policy(policy)
    stream = run.events("generate.delta", capacity=policy.capacity, overflow=policy.overflow)
    stream.__aiter__()  # subscribe now
    return TextDeltas(stream, chosen)


# -- many runs as one stream ----------------------------------------------------------


class MergedEvents:
    """The events of many runs, in the order they arrive, as one async iterator.

    Each run is read by a pump task in the caller's nursery through its own bounded
    stream (the :class:`ConsumerPolicy`). Iteration ends once every run added has
    ended and no more runs can be added (:meth:`close`, called for you unless
    ``keep_open=True``).
    """

    __slots__ = (
        "_closed",
        "_live",
        "_nursery",
        "_policy",
        "_receive",
        "_send",
        "_streams",
        "_types",
    )

    def __init__(
        self, nursery: trio.Nursery, types: tuple[str, ...], policy: ConsumerPolicy
    ) -> None:
        self._nursery = nursery
        self._types = types
        self._policy = policy
        self._send, self._receive = trio.open_memory_channel[Event](0)
        self._live = 0
        self._closed = False
        self._streams: list[EventStream] = []

    @property
    def dropped(self) -> int:
        """Events the runs' ``drop-oldest`` streams discarded, in total."""
        return sum(stream.dropped for stream in self._streams)

    def add(self, run: _Run) -> None:
        """Merge ``run``'s events in from now on (subscribes at once).

        Raises:
            InvalidArgument: the stream was closed to new runs.
        """
        if self._closed:
            raise InvalidArgument(
                "this merged stream is closed to new runs: pass keep_open=True to add "
                "runs after it was created"
            )
        stream = run.events(
            *self._types, capacity=self._policy.capacity, overflow=self._policy.overflow
        )
        stream.__aiter__()  # subscribe now: nothing emitted from here on is missed
        self._streams.append(stream)
        self._live += 1
        self._nursery.start_soon(self._pump, stream, name=f"merge events of {run.run_id}")

    def close(self) -> None:
        """Take no more runs; iteration ends once the runs added have ended."""
        self._closed = True
        if self._live == 0:
            self._send.close()

    async def _pump(self, stream: EventStream) -> None:
        try:
            async with stream:
                async for event in stream:
                    await self._send.send(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the consumer left; the run no longer waits for it
        finally:
            self._live -= 1
            if self._closed and self._live == 0:
                self._send.close()

    def __aiter__(self) -> MergedEvents:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop reading: every pump lets go of its run at its next event."""
        self._closed = True
        await self._receive.aclose()
        for stream in self._streams:
            await stream.aclose()


def merge_events(
    nursery: trio.Nursery,
    runs: Iterable[_Run] = (),
    *,
    types: Iterable[str] = (),
    policy: ConsumerPolicy | None = None,
    keep_open: bool = False,
) -> MergedEvents:
    """Merge the events of ``runs`` (all types, or only ``types``) into one stream whose
    pump tasks run in ``nursery``.

    With ``keep_open=True`` more runs may be added with ``add()``; call ``close()`` once
    no more will come, or iteration never ends.
    """
    merged = MergedEvents(nursery, _types(types), _policy(policy))
    for run in runs:
        merged.add(run)
    if not keep_open:
        merged.close()
    return merged


@asynccontextmanager
async def open_merged_events(
    runs: Iterable[_Run] = (),
    *,
    types: Iterable[str] = (),
    policy: ConsumerPolicy | None = None,
    keep_open: bool = False,
) -> AsyncIterator[MergedEvents]:
    """:func:`merge_events` in a nursery of its own; leaving the block stops the pumps."""
    async with trio.open_nursery() as nursery:
        merged = merge_events(nursery, runs, types=types, policy=policy, keep_open=keep_open)
        try:
            yield merged
        finally:
            nursery.cancel_scope.cancel()
            merged._closed = True
            merged._receive.close()
            for stream in merged._streams:
                stream._detach()


# -- server-sent events -----------------------------------------------------------------


def encode_sse(event: Event, *, id: str | None = None) -> bytes:
    """One run event as a server-sent event: ``event:`` its type, ``data:`` its JSON."""
    head = b"event: " + event.type.encode() + b"\n"
    if id is not None:
        if "\n" in id or "\r" in id:
            raise InvalidArgument(f"an SSE id cannot hold a line break, got {id!r}")
        head += b"id: " + id.encode() + b"\n"
    return head + b"data: " + event_json(event) + b"\n\n"


def sse_comment(text: str = "keep-alive") -> bytes:
    """A comment line clients ignore (send one now and then to keep proxies open)."""
    return b"".join(b": " + line.encode() + b"\n" for line in text.splitlines() or [""]) + b"\n"


class SseStream:
    """Server-sent-event chunks (``bytes``) for each event of an event stream.

    Each chunk carries an ``id`` that counts up from 1 within this stream.
    """

    __slots__ = ("_events", "_sent")

    def __init__(self, events: Any) -> None:
        self._events = events
        self._sent = 0

    def __aiter__(self) -> SseStream:
        return self

    async def __anext__(self) -> bytes:
        event = await self._events.__anext__()
        self._sent += 1
        return encode_sse(event, id=str(self._sent))

    async def aclose(self) -> None:
        """Close the event stream this one reads."""
        close = getattr(self._events, "aclose", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> SseStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def sse_stream(events: Any) -> SseStream:
    """Encode a run's events (``run.events()``), a :class:`MergedEvents`, or any async
    iterator of events as server-sent events."""
    aiter = getattr(events, "__aiter__", None)
    if aiter is None:
        raise InvalidArgument(
            f"sse_stream takes an async iterator of run events, got {type(events).__name__}"
        )
    events = aiter()  # an EventStream subscribes here
    return SseStream(events)
