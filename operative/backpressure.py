"""Backpressure: a wait around each generate attempt.

A :class:`BackpressureStrategy` hands the loop a *slot* for every generate attempt::

    async with strategy.slot(request, notify) as slot:
        response = await generate(request)
        slot.record(response.usage)

Entering the slot may wait; the strategy calls ``notify.applied(delay, reason)`` before
it waits and ``notify.released(waited)`` after, and only when it actually waits, so the
run emits ``backpressure.applied`` / ``backpressure.released`` exactly then. Leaving the
slot frees whatever it held; ``slot.record(usage)`` reports what the attempt really used,
so a token-rate limiter can replace its estimate.

Two strategies ship: :class:`FixedDelay` (a pause before every attempt) and
:class:`GenerateLimiter`, one object shared by every run of a process that caps
concurrent generate calls, requests per minute and tokens per minute. Every wait is on
trio's clock (``trio.sleep_until``, cancel-scope deadlines); nothing polls.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Protocol

import attrs
import msgspec
import trio

from ._core._errors import InvalidArgument
from ._core._model import GenerateRequest
from ._core._types import Usage
from .budgets._budget import charged_tokens

__all__ = [
    "BackpressureNotify",
    "BackpressureStrategy",
    "FixedDelay",
    "GenerateLimiter",
    "GenerateLimiterStatistics",
    "Slot",
    "estimate_tokens",
]

_WINDOW = 60.0  # the rate limits' window, in seconds


class BackpressureNotify(Protocol):
    """What a strategy tells the run about its waits (the loop turns them into events)."""

    async def applied(self, delay: float | None, reason: str) -> None:
        """The attempt is about to wait ``delay`` seconds (``None``: until capacity frees)."""

    async def released(self, waited: float) -> None:
        """The wait is over after ``waited`` seconds."""


class Slot(Protocol):
    """A generate attempt's place, held while the attempt runs."""

    def record(self, usage: Usage | None) -> None:
        """Report what the attempt used (call before leaving the slot)."""


class BackpressureStrategy(Protocol):
    """Decides when a generate attempt may start (see the module docs for the protocol)."""

    def slot(
        self, request: GenerateRequest, notify: BackpressureNotify
    ) -> AbstractAsyncContextManager[Slot]:
        """A context manager whose entry waits for the attempt's turn."""
        ...


class _NullSlot:
    __slots__ = ()

    def record(self, usage: Usage | None) -> None:
        pass


_NULL_SLOT = _NullSlot()


# -- FixedDelay ---------------------------------------------------------------------------


@attrs.frozen
class FixedDelay:
    """Wait ``seconds`` before every generate attempt (retries included).

    The crude way to stay under a provider's rate limit from one run; for many runs
    sharing a limit, share a :class:`GenerateLimiter`.
    """

    seconds: float

    def __attrs_post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int | float):
            raise InvalidArgument(f"FixedDelay seconds must be a number, not {self.seconds!r}")
        if not 0 <= self.seconds < math.inf:
            raise InvalidArgument(f"FixedDelay seconds must be finite and >= 0, not {self.seconds}")

    def slot(self, request: GenerateRequest, notify: BackpressureNotify) -> _FixedDelaySlot:
        """Wait, then hold nothing."""
        return _FixedDelaySlot(self.seconds, notify)


class _FixedDelaySlot:
    __slots__ = ("_notify", "_seconds")

    def __init__(self, seconds: float, notify: BackpressureNotify) -> None:
        self._seconds = seconds
        self._notify = notify

    async def __aenter__(self) -> Slot:
        if self._seconds <= 0:
            await trio.lowlevel.checkpoint()
            return _NULL_SLOT
        await self._notify.applied(self._seconds, "fixed-delay")
        started = trio.current_time()
        await trio.sleep(self._seconds)
        await self._notify.released(trio.current_time() - started)
        return _NULL_SLOT

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


# -- GenerateLimiter ----------------------------------------------------------------------


def estimate_tokens(request: GenerateRequest) -> int:
    """A cheap token estimate for a request: its messages' characters divided by 4.

    Counts message text and tool-call arguments, not tool schemas or the output the
    model will write; the limiter corrects the estimate with the usage each attempt
    reports.
    """
    chars = 0
    for message in request.conversation.messages:
        chars += len(message.text)
        for call in message.tool_calls:
            arguments = call.arguments
            chars += len(call.name) + (
                len(arguments)
                if isinstance(arguments, str)
                else len(msgspec.json.encode(arguments))
            )
    return max(1, -(-chars // 4))


class GenerateLimiterStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a :class:`GenerateLimiter`."""

    waiting: int
    """Attempts waiting for their turn."""
    in_flight: int
    """Attempts holding a slot (their generate call is running)."""
    max_concurrent: int | None
    requests_in_window: int
    """Requests started in the last 60 seconds."""
    requests_available: int | None
    """Requests that could start now (``None``: no requests-per-minute limit)."""
    tokens_in_window: int
    """Tokens (estimated, then as reported) of requests started in the last 60 seconds."""
    tokens_available: int | None
    """Tokens that could be spent now (``None``: no tokens-per-minute limit)."""


class _Entry:
    __slots__ = ("live", "time", "tokens")

    def __init__(self, time: float, tokens: int) -> None:
        self.time = time
        self.tokens = tokens
        self.live = True


class GenerateLimiter:
    """Caps generate calls across every run that shares it: concurrency and rates.

    ``max_concurrent`` bounds the calls in flight at once; ``requests_per_minute`` and
    ``tokens_per_minute`` bound what starts within any 60 seconds (a sliding window on
    trio's clock, so no 60-second span ever holds more than the limit, counting the
    estimates of calls still running). A request's tokens are first estimated with
    ``estimate(request)`` (default :func:`estimate_tokens`; clamped to
    ``tokens_per_minute`` so a huge request can still run alone), then replaced by the
    usage the attempt records.

    Waiters are served first come, first served. A waiter that is cancelled leaves
    nothing behind: its place in the queue and any concurrency it held are freed, and it
    consumed no rate. Create one per process (per ``trio.run``) and pass it to every run
    as ``backpressure=``.
    """

    __slots__ = (
        "_estimate",
        "_head_scope",
        "_in_flight",
        "_limiter",
        "_lock",
        "_waiting",
        "_window",
        "_window_tokens",
        "max_concurrent",
        "requests_per_minute",
        "tokens_per_minute",
    )

    def __init__(
        self,
        *,
        max_concurrent: int | None = None,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        estimate: Callable[[GenerateRequest], int] = estimate_tokens,
    ) -> None:
        for name, value in (
            ("max_concurrent", max_concurrent),
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidArgument(f"{name} must be a positive int or None, not {value!r}")
        if not callable(estimate):
            raise InvalidArgument(f"estimate= must be callable, not {estimate!r}")
        self.max_concurrent = max_concurrent
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._estimate = estimate
        self._limiter = None if max_concurrent is None else trio.CapacityLimiter(max_concurrent)
        self._lock = trio.Lock()  # fair: the rate-limit queue is FIFO
        self._window: deque[_Entry] = deque()
        self._window_tokens = 0
        self._head_scope: trio.CancelScope | None = None
        self._waiting = 0
        self._in_flight = 0

    def slot(self, request: GenerateRequest, notify: BackpressureNotify) -> _LimiterSlot:
        """Wait for this attempt's turn; hold a place while it runs."""
        return _LimiterSlot(self, request, notify)

    def statistics(self) -> GenerateLimiterStatistics:
        """Waiting and in-flight attempts, and what the rate windows have left now."""
        self._expire(trio.current_time())
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        return GenerateLimiterStatistics(
            waiting=self._waiting,
            in_flight=self._in_flight,
            max_concurrent=self.max_concurrent,
            requests_in_window=len(self._window),
            requests_available=None if rpm is None else max(0, rpm - len(self._window)),
            tokens_in_window=self._window_tokens,
            tokens_available=None if tpm is None else max(0, tpm - self._window_tokens),
        )

    def __repr__(self) -> str:
        return (
            f"GenerateLimiter(max_concurrent={self.max_concurrent}, "
            f"requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute})"
        )

    # -- the window -----------------------------------------------------------------------

    @property
    def _rate_limited(self) -> bool:
        return self.requests_per_minute is not None or self.tokens_per_minute is not None

    def _expire(self, now: float) -> None:
        window = self._window
        while window and window[0].time + _WINDOW <= now:
            entry = window.popleft()
            entry.live = False
            self._window_tokens -= entry.tokens

    def _turn(self, now: float, tokens: int) -> tuple[float, str]:
        """When a request of ``tokens`` may start (``now`` if it may), and what binds."""
        self._expire(now)
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        count, used = len(self._window), self._window_tokens
        if rpm is not None and count + 1 > rpm:
            reason = "requests-per-minute"
        elif tpm is not None and used + tokens > tpm:
            reason = "tokens-per-minute"
        else:
            return now, ""
        for entry in self._window:  # oldest first: the earliest expiry that makes room
            count -= 1
            used -= entry.tokens
            if (rpm is None or count + 1 <= rpm) and (tpm is None or used + tokens <= tpm):
                return entry.time + _WINDOW, reason
        raise AssertionError("an empty window always has room")  # pragma: no cover

    def _admit(self, now: float, tokens: int) -> _Entry:
        entry = _Entry(now, tokens)
        self._window.append(entry)
        self._window_tokens += tokens
        return entry

    def _correct(self, entry: _Entry, tokens: int) -> None:
        delta = tokens - entry.tokens
        entry.tokens = tokens
        if entry.live:
            self._window_tokens += delta
            if delta < 0 and self._head_scope is not None:
                self._head_scope.cancel()  # the head of the queue may go sooner: recompute

    def _tokens_for(self, request: GenerateRequest) -> int:
        tokens = max(0, int(self._estimate(request)))
        if self.tokens_per_minute is not None:
            tokens = min(tokens, self.tokens_per_minute)
        return tokens


class _LimiterSlot:
    __slots__ = ("_borrower", "_entry", "_notify", "_owner", "_request", "_tokens")

    def __init__(
        self, owner: GenerateLimiter, request: GenerateRequest, notify: BackpressureNotify
    ) -> None:
        self._owner = owner
        self._request = request
        self._notify = notify
        self._borrower: object | None = None
        self._entry: _Entry | None = None
        self._tokens = 0

    def record(self, usage: Usage | None) -> None:
        """Replace the estimate with the tokens the attempt reported. The limiter is
        never credited tokens: usage with a negative count is refused (``InvalidArgument``)."""
        if usage is not None and self._entry is not None:
            self._owner._correct(self._entry, charged_tokens(usage, "GenerateLimiter"))

    async def __aenter__(self) -> _LimiterSlot:
        await trio.lowlevel.checkpoint()
        owner = self._owner
        waited_from: float | None = None
        borrower = object()
        owner._waiting += 1
        try:
            if owner._limiter is not None:
                try:
                    owner._limiter.acquire_on_behalf_of_nowait(borrower)
                except trio.WouldBlock:
                    waited_from = trio.current_time()
                    await self._notify.applied(None, "max-concurrent")
                    await owner._limiter.acquire_on_behalf_of(borrower)
                self._borrower = borrower
            if owner._rate_limited:
                waited_from = await self._wait_for_rate(waited_from)
        except BaseException:
            self._release()
            raise
        finally:
            owner._waiting -= 1
        owner._in_flight += 1
        if waited_from is not None:
            try:
                await self._notify.released(trio.current_time() - waited_from)
            except BaseException:
                owner._in_flight -= 1
                self._release()
                raise
        return self

    async def _wait_for_rate(self, waited_from: float | None) -> float | None:
        owner = self._owner
        tokens = owner._tokens_for(self._request)
        try:
            owner._lock.acquire_nowait()
        except trio.WouldBlock:
            if waited_from is None:
                waited_from = trio.current_time()
                await self._notify.applied(None, "queued")
            await owner._lock.acquire()
        try:
            while True:
                now = trio.current_time()
                turn, reason = owner._turn(now, tokens)
                if turn <= now:
                    break
                if waited_from is None:
                    waited_from = now
                    await self._notify.applied(turn - now, reason)
                    continue  # notifying took time: look again
                with trio.CancelScope(deadline=turn) as scope:
                    owner._head_scope = scope
                    try:
                        await trio.sleep_forever()
                    finally:
                        owner._head_scope = None
            self._entry = owner._admit(now, tokens)
        finally:
            owner._lock.release()
        return waited_from

    def _release(self) -> None:
        if self._borrower is not None and self._owner._limiter is not None:
            self._owner._limiter.release_on_behalf_of(self._borrower)
        self._borrower = None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._owner._in_flight -= 1
        self._release()
