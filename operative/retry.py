"""Retrying transient generate failures: the policy, the backoff, and retry mutators.

A failed generate attempt is retried when the policy says the failure is transient: a
``ProviderError`` marked ``retryable`` (or with status 408, 409, 429 or 5xx, unless it
is a ``ProviderRequestError``: a server that names a field it refused), a
``ConnectionError``, a ``TimeoutError`` or a ``trio.TooSlowError`` (an attempt that ran
past ``attempt_timeout``). A 4xx that is the caller's fault is never retried. Each
retry waits on trio's clock (a cancellable sleep: an abort during back-off ends the run
at once) and emits ``generate.retry``. Mutators may change the next attempt's request.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import attrs
import msgspec
import trio

from ._core._errors import InvalidArgument, ProviderError, ProviderRequestError
from ._core._model import GenerateRequest

__all__ = [
    "RetryMutator",
    "RetryOptions",
    "fallback_model",
    "is_transient",
    "reduce_max_tokens",
]

RetryMutator: TypeAlias = Callable[[GenerateRequest, BaseException, int], GenerateRequest | None]
"""``(request, error, attempt) -> request | None``: the request for attempt ``attempt``."""

_TRANSIENT_STATUS = frozenset({408, 409, 429})


def is_transient(error: BaseException) -> bool:
    """True for failures that trying again may fix (the default ``retry_on``)."""
    if isinstance(error, ProviderError):
        if isinstance(error, ProviderRequestError) and not error.retryable:
            return False  # the request itself was refused (even with a 5xx): it would again
        status = error.status
        return error.retryable or status in _TRANSIENT_STATUS or (status or 0) >= 500
    return isinstance(error, ConnectionError | TimeoutError | trio.TooSlowError)


def _retry_after(error: BaseException | None) -> float | None:
    """The wait a provider asked for with ``error`` (seconds), or ``None``."""
    value = getattr(error, "retry_after", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)  # NaN fails ``>= 0``; infinity is capped by the caller
    return None


def _positive(name: str) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise InvalidArgument(f"RetryOptions.{name} must be a number >= 0, got {value!r}")

    return check


def _check_attempts(instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"RetryOptions.max_attempts must be an int >= 1, got {value!r}")


def _check_retry_on(instance: Any, attribute: Any, value: Any) -> None:
    if value is None or callable(value):
        return
    if isinstance(value, tuple) and all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        return
    raise InvalidArgument(
        "RetryOptions.retry_on takes a predicate (error -> bool) or a tuple of exception "
        f"types, got {value!r}"
    )


def _mutators(value: Sequence[RetryMutator] | RetryMutator) -> tuple[RetryMutator, ...]:
    items = tuple(value) if isinstance(value, list | tuple) else (value,)
    for item in items:
        if not callable(item):
            raise InvalidArgument(f"RetryOptions.mutators takes callables, got {item!r}")
    return items


@attrs.frozen(kw_only=True)
class RetryOptions:
    """How a run retries failed generate attempts.

    ``max_attempts`` counts the first attempt. Between attempts the delay grows from
    ``initial_delay`` by ``multiplier`` up to ``max_delay``; with ``jitter`` it is drawn
    between half and all of that (so many runs hit by one outage do not retry in
    lockstep). A provider's ``retry_after`` replaces that delay, capped at
    ``max_delay`` too: no wait is ever longer than ``max_delay`` (a fallover moves on
    to its next provider at once instead, see :meth:`exceeds_max_delay`).
    ``attempt_timeout`` bounds each attempt (a cancel scope); an attempt that runs past
    it fails with ``trio.TooSlowError``, which is transient.
    """

    max_attempts: int = attrs.field(default=3, validator=_check_attempts)
    initial_delay: float = attrs.field(default=1.0, validator=_positive("initial_delay"))
    max_delay: float = attrs.field(default=30.0, validator=_positive("max_delay"))
    multiplier: float = attrs.field(default=2.0, validator=_positive("multiplier"))
    jitter: bool = True
    retry_on: Callable[[BaseException], bool] | tuple[type[BaseException], ...] | None = (
        attrs.field(default=None, validator=_check_retry_on)
    )
    """Which failures to retry: a predicate, exception types, or None for
    :func:`is_transient`."""
    attempt_timeout: float | None = None
    mutators: tuple[RetryMutator, ...] = attrs.field(default=(), converter=_mutators)
    """Applied in order before each retry; see :func:`fallback_model`."""
    random: Callable[[], float] = _random.random
    """The source of jitter in [0, 1); pass a seeded one for reproducible delays."""

    def __attrs_post_init__(self) -> None:
        timeout = self.attempt_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise InvalidArgument(
                f"RetryOptions.attempt_timeout must be seconds > 0 or None, got {timeout!r}"
            )

    def should_retry(self, error: BaseException, attempt: int) -> bool:
        """Whether attempt ``attempt`` (1-based), which failed with ``error``, is retried."""
        if attempt >= self.max_attempts:
            return False
        retry_on = self.retry_on
        if retry_on is None:
            return is_transient(error)
        if isinstance(retry_on, tuple):
            return isinstance(error, retry_on)
        return bool(retry_on(error))

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based), at most
        ``max_delay``: the provider's ``retry_after`` when ``error`` carries one, else
        the backoff."""
        asked = _retry_after(error)
        if asked is not None:
            return min(asked, self.max_delay)
        backoff = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        if self.jitter:
            backoff = backoff / 2 + self.random() * backoff / 2
        return backoff

    def exceeds_max_delay(self, error: BaseException | None) -> bool:
        """Whether the provider asked (``retry_after``) for a longer wait than
        ``max_delay``: :meth:`delay` then waits ``max_delay``, and a fallover moves on to
        its next provider instead of waiting at all."""
        asked = _retry_after(error)
        return asked is not None and asked > self.max_delay

    def next_request(
        self, request: GenerateRequest, error: BaseException, attempt: int
    ) -> GenerateRequest:
        """The request for attempt ``attempt`` after the mutators had their say."""
        request = msgspec.structs.replace(request, attempt=attempt)
        for mutator in self.mutators:
            changed = mutator(request, error, attempt)
            if changed is not None:
                if not isinstance(changed, GenerateRequest):
                    raise InvalidArgument(
                        f"retry mutator {mutator!r} returned {type(changed).__name__}; "
                        "return a GenerateRequest or None"
                    )
                request = changed
        return request


def fallback_model(model: str, *, after: int = 1, key: str = "model") -> RetryMutator:
    """Switch ``settings[key]`` to ``model`` once ``after`` attempts have failed.

    Useful when one model is overloaded: ``mutators=[fallback_model("claude-haiku-4-5")]``.
    """
    if not isinstance(model, str) or not model:
        raise InvalidArgument(f"fallback_model() takes a model name, got {model!r}")

    def mutate(request: GenerateRequest, error: BaseException, attempt: int) -> GenerateRequest:
        if attempt - 1 < after:
            return request
        return msgspec.structs.replace(request, settings={**request.settings, key: model})

    mutate.__qualname__ = f"fallback_model({model!r})"
    return mutate


def reduce_max_tokens(
    factor: float = 0.5, *, minimum: int = 256, default: int = 4096, key: str = "max_tokens"
) -> RetryMutator:
    """Lower ``settings[key]`` by ``factor`` on each retry (not below ``minimum``).

    Helps when the provider times out or rejects long generations; ``default`` is the
    starting point when the request sets no limit.
    """
    if not 0 < factor < 1:
        raise InvalidArgument(f"reduce_max_tokens() takes a factor in (0, 1), got {factor!r}")

    def mutate(request: GenerateRequest, error: BaseException, attempt: int) -> GenerateRequest:
        current = request.settings.get(key, default)
        lowered = max(minimum, int(current * factor))
        return msgspec.structs.replace(request, settings={**request.settings, key: lowered})

    mutate.__qualname__ = f"reduce_max_tokens({factor!r})"
    return mutate
