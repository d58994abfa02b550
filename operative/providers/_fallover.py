"""``fallover``: try generate functions in order, optionally racing a slow one (hedging).

Each provider may have a retry budget (a :class:`~operative.retry.RetryOptions`): a transient
failure is tried again at that provider, after the back-off on trio's clock, before the
request falls over to the next one.

Hedging follows trio's happy-eyeballs ``open_tcp_stream``: attempt *i* starts, and the
next one starts when attempt *i* fails or has not answered after ``hedge_after``
seconds, whichever comes first. The first answer wins and cancels every other attempt
(each in its own cancel scope, with a reason saying who won).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs
import msgspec
import trio

from .._core._errors import InvalidArgument
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from ..retry import RetryOptions, is_transient
from ._errors import AllProvidersFailed

__all__ = ["Fallover", "FalloverEntry", "fallover", "provider_name"]

FalloverEntry: TypeAlias = GenerateFunction | tuple[GenerateFunction, RetryOptions | None]
"""A generate function, or ``(generate, retry)`` to give that one its own retry budget
(``None``: no retries) instead of the fallover's ``retry=``."""

PROVIDER_KEY = "operative.provider"
"""Response metadata key: the name of the provider that answered."""
FALLOVER_KEY = "operative.fallover"
"""Response metadata key: how a fallover got its answer (who failed, who was cancelled)."""


def provider_name(generate: object) -> str:
    """A readable name for a generate function: ``name``, ``provider:model``, or its name."""
    name = getattr(generate, "name", None)
    if isinstance(name, str) and name:
        return name
    provider = getattr(generate, "provider", None)
    model = getattr(generate, "model", None)
    if isinstance(provider, str) and provider:
        return f"{provider}:{model}" if isinstance(model, str) and model else provider
    qualname = getattr(generate, "__qualname__", None)
    if isinstance(qualname, str) and qualname:
        return qualname
    return type(generate).__name__


def named_generates(
    generates: Sequence[GenerateFunction] | Mapping[str, GenerateFunction], *, what: str
) -> tuple[tuple[str, GenerateFunction], ...]:
    """``(name, generate)`` pairs with unique names; mapping keys are taken as given."""
    given: object = generates
    if isinstance(given, Mapping):
        pairs = list(given.items())
        for name, _ in pairs:
            if not isinstance(name, str) or not name:
                raise InvalidArgument(f"{what}() names must be non-empty strings, got {name!r}")
    elif isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise InvalidArgument(
            f"{what}() takes a list of generate functions (or a name-keyed mapping), got {given!r}"
        )
    else:
        pairs = [(provider_name(g), g) for g in given]
        seen: dict[str, int] = {}
        for name, _ in pairs:
            seen[name] = seen.get(name, 0) + 1
        pairs = [
            (f"{name}#{index + 1}" if seen[name] > 1 else name, g)
            for index, (name, g) in enumerate(pairs)
        ]
    for name, g in pairs:
        if not callable(g):
            raise InvalidArgument(f"{what}(): {name!r} is not a generate function: {g!r}")
    return tuple(pairs)


def _entries(
    generates: object, retry: RetryOptions | None
) -> tuple[object, tuple[RetryOptions | None, ...]]:
    """``generates`` without the ``(generate, retry)`` pairs, and each one's retry budget."""

    def split(entry: object) -> tuple[object, RetryOptions | None]:
        if not isinstance(entry, tuple):
            return entry, retry
        if len(entry) == 2 and (entry[1] is None or isinstance(entry[1], RetryOptions)):
            return entry[0], entry[1]
        raise InvalidArgument(
            "fallover() entries are generate functions or (generate, RetryOptions | None) "
            f"pairs, got {entry!r}"
        )

    if isinstance(generates, Mapping):
        split_items = [(name, split(entry)) for name, entry in generates.items()]
        return (
            {name: g for name, (g, _) in split_items},
            tuple(budget for _, (_, budget) in split_items),
        )
    if isinstance(generates, str | bytes) or not isinstance(generates, Sequence):
        return generates, ()  # named_generates() says what is wrong
    split_entries = [split(entry) for entry in generates]
    return [g for g, _ in split_entries], tuple(budget for _, budget in split_entries)


@attrs.define(eq=False)
class _Attempt:
    index: int
    name: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    failed: trio.Event = attrs.field(factory=trio.Event)
    started_at: float = 0.0


class Fallover:
    """A ``GenerateFunction`` that falls over to the next provider; see :func:`fallover`."""

    def __init__(
        self,
        generates: tuple[tuple[str, GenerateFunction], ...],
        *,
        hedge_after: float | None,
        retry_on: Callable[[BaseException], bool],
        retries: tuple[RetryOptions | None, ...] = (),
    ) -> None:
        self.generates = generates
        self.hedge_after = hedge_after
        self.retry_on = retry_on
        self.retries = retries or (None,) * len(generates)
        """Each provider's retry budget (``None``: one attempt), in provider order."""
        self.name = f"fallover({', '.join(self.names)})"
        """How routes and outer fallovers name this one."""

    @property
    def names(self) -> tuple[str, ...]:
        """The providers' names, in the order they are tried."""
        return tuple(name for name, _ in self.generates)

    def __repr__(self) -> str:
        retries = "" if all(b is None for b in self.retries) else f", retries={self.retries!r}"
        return f"fallover({list(self.names)!r}, hedge_after={self.hedge_after!r}{retries})"

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        if self.hedge_after is None:
            return await self._in_turn(request)
        return await self._hedged(request, self.hedge_after)

    async def _call(
        self, index: int, request: GenerateRequest, retried: list[dict[str, Any]]
    ) -> GenerateResponse:
        """Provider ``index`` answers ``request``, within its retry budget.

        A failure the budget's policy retries waits ``RetryOptions.delay`` on trio's
        clock (the provider's ``retry_after`` when it gave one) and tries again; a
        ``retry_after`` longer than ``max_delay`` is not waited out, the failure is
        raised at once (the next provider may answer sooner). ``request.attempt`` stays
        the run's; the budget's mutators see this provider's attempt number.
        """
        name, generate = self.generates[index]
        budget = self.retries[index]
        if budget is None:
            return await generate(request)
        attempt = 1
        current = request
        while True:
            try:
                if budget.attempt_timeout is not None:
                    with trio.fail_after(budget.attempt_timeout):
                        return await generate(current)
                return await generate(current)
            except Exception as error:
                if not budget.should_retry(error, attempt) or budget.exceeds_max_delay(error):
                    raise
                delay = budget.delay(attempt, error)
                failed = error
            retried.append(
                {
                    "provider": name,
                    "attempt": attempt,
                    "delay": delay,
                    "error": f"{type(failed).__name__}: {failed}",
                }
            )
            await trio.sleep(delay)
            attempt += 1
            current = budget.next_request(current, failed, attempt)
            if current.attempt != request.attempt:
                current = msgspec.structs.replace(current, attempt=request.attempt)

    async def _in_turn(self, request: GenerateRequest) -> GenerateResponse:
        failures: list[tuple[str, Exception]] = []
        retried: list[dict[str, Any]] = []
        for index, (name, _) in enumerate(self.generates):
            try:
                response = await self._call(index, request, retried)
            except Exception as error:
                if not self.retry_on(error):
                    raise
                failures.append((name, error))
                continue
            return self._stamp(response, name, index, failures, cancelled=[], retried=retried)
        raise self._all_failed(failures)

    async def _hedged(self, request: GenerateRequest, hedge_after: float) -> GenerateResponse:
        attempts: list[_Attempt] = []
        failures: list[tuple[int, str, Exception]] = []
        won: list[tuple[_Attempt, GenerateResponse]] = []
        fatal: list[BaseException] = []
        retried: list[dict[str, Any]] = []

        launcher = trio.CancelScope()

        def cancel_others(winner: _Attempt, reason: str) -> None:
            # Each loser's own scope (not the nursery's) is cancelled, so each one records
            # that it was cut short, and why; the launcher starts no one else.
            launcher.cancel(reason)
            for other in attempts:
                if other is not winner:
                    other.scope.cancel(reason)

        async def run_attempt(attempt: _Attempt) -> None:
            with attempt.scope:
                try:
                    response = await self._call(attempt.index, request, retried)
                except Exception as error:
                    if not self.retry_on(error):
                        fatal.append(error)
                        cancel_others(attempt, f"fallover: {attempt.name} failed for good")
                    else:
                        failures.append((attempt.index, attempt.name, error))
                        attempt.failed.set()
                    return
                if won:  # two answers in the same tick: the first one stays the winner
                    return
                won.append((attempt, response))
                cancel_others(attempt, f"fallover: {attempt.name} answered first")

        async with trio.open_nursery() as nursery:
            last = len(self.generates) - 1
            with launcher:
                for index, (name, _) in enumerate(self.generates):
                    attempt = _Attempt(index=index, name=name, started_at=trio.current_time())
                    attempts.append(attempt)
                    nursery.start_soon(run_attempt, attempt, name=f"fallover {name}")
                    if index < last:
                        with trio.move_on_after(hedge_after):
                            await attempt.failed.wait()
        if fatal:
            raise fatal[0]
        if won:
            attempt, response = won[0]
            cancelled = [
                other.name
                for other in attempts
                if other is not attempt and other.scope.cancelled_caught
            ]
            failed = [(name, error) for _, name, error in sorted(failures, key=lambda f: f[0])]
            return self._stamp(response, attempt.name, attempt.index, failed, cancelled, retried)
        failures.sort(key=lambda f: f[0])
        raise self._all_failed([(name, error) for _, name, error in failures])

    def _stamp(
        self,
        response: GenerateResponse,
        name: str,
        index: int,
        failures: list[tuple[str, Exception]],
        cancelled: list[str],
        retried: list[dict[str, Any]],
    ) -> GenerateResponse:
        answer: object = response
        if not isinstance(answer, GenerateResponse):
            return response  # the loop reports the bad value as an InvalidResponseError
        record: dict[str, Any] = {
            "provider": name,
            "index": index,
            "failed": [{"provider": n, "error": f"{type(e).__name__}: {e}"} for n, e in failures],
        }
        if self.hedge_after is not None:
            record["cancelled"] = cancelled
        if any(budget is not None for budget in self.retries):
            record["retried"] = retried
        metadata = {**response.metadata, PROVIDER_KEY: name, FALLOVER_KEY: record}
        return msgspec.structs.replace(response, metadata=metadata)

    def _all_failed(self, failures: list[tuple[str, Exception]]) -> AllProvidersFailed:
        summary = "; ".join(f"{name}: {type(error).__name__}: {error}" for name, error in failures)
        return AllProvidersFailed(
            f"all {len(failures)} providers failed ({summary})",
            [error for _, error in failures],
            providers=[name for name, _ in failures],
        )


def fallover(
    generates: Sequence[FalloverEntry] | Mapping[str, FalloverEntry],
    *,
    hedge_after: float | None = None,
    retry_on: Callable[[BaseException], bool] = is_transient,
    retry: RetryOptions | None = None,
) -> Fallover:
    """A generate function that tries each of ``generates`` until one answers.

    A provider that fails with an error ``retry_on`` accepts (by default
    :func:`operative.retry.is_transient`: rate limits, overload, 5xx, timeouts, dropped
    connections) hands the request to the next one; any other error propagates at once.
    When every provider failed, :class:`~operative.providers.AllProvidersFailed` (an
    ``ExceptionGroup`` and an ``OperativeError``) holds each failure, in order.

    With ``retry=RetryOptions(...)`` each provider has a retry budget: a failure the
    options retry (by default :func:`~operative.retry.is_transient`) is tried again at
    the same provider, up to ``max_attempts`` calls in all, after the options' back-off
    (or the provider's ``retry_after``) on trio's clock, before the request moves on. A
    ``retry_after`` longer than ``max_delay`` moves it on at once. ``attempt_timeout``
    bounds each call, and the options' mutators change the request between calls. A
    ``(generate, RetryOptions(...))`` entry gives one provider its own budget,
    ``(generate, None)`` none.

    The answer's ``metadata["operative.provider"]`` names the provider that gave it, and
    ``metadata["operative.fallover"]`` records who failed (and, when hedging, who was
    cancelled; with retry budgets, which calls were retried) before it.

    Args:
        generates: the generate functions, in order of preference, each possibly paired
            with its retry budget; a mapping names them (otherwise a name is made from
            each one's ``name``, ``provider`` and ``model``, or its function name).
        hedge_after: seconds (trio's clock). When given, a provider that has not answered
            after this long is raced by the next one (which also starts at once when the
            current one fails); the first answer wins and cancels the others. ``0``
            starts them all together.
        retry_on: which failures move on to the next provider.
        retry: each provider's retry budget, unless its entry gives its own.
    """
    if retry is not None and not isinstance(retry, RetryOptions):
        raise InvalidArgument(f"retry= takes RetryOptions or None, got {retry!r}")
    plain, retries = _entries(generates, retry)
    pairs = named_generates(plain, what="fallover")  # type: ignore[arg-type]
    if not pairs:
        raise InvalidArgument("fallover() needs at least one generate function")
    if hedge_after is not None and (
        isinstance(hedge_after, bool)
        or not isinstance(hedge_after, int | float)
        or not math.isfinite(hedge_after)
        or hedge_after < 0
    ):
        raise InvalidArgument(f"hedge_after must be seconds >= 0 or None, got {hedge_after!r}")
    if not callable(retry_on):
        raise InvalidArgument(f"retry_on must be a predicate (error -> bool), got {retry_on!r}")
    return Fallover(
        pairs,
        hedge_after=None if hedge_after is None else float(hedge_after),
        retry_on=retry_on,
        retries=retries,
    )
