"""Mapping HTTP failures to the :class:`~operative.ProviderError` tree (no SDK imports).

Every adapter funnels its SDK's exceptions through :func:`status_error`,
:func:`timeout_error` and :func:`connection_error`, so all providers agree on which
status is retryable and how ``retry-after`` is read.
"""

from __future__ import annotations

import email.utils
import functools
import os
import re
import time
from collections.abc import Collection, Mapping, Sequence

from .._core._errors import (
    InvalidArgument,
    OperativeError,
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)

__all__ = [
    "AllProvidersFailed",
    "NoRouteError",
    "connection_error",
    "is_retryable_status",
    "names_field",
    "parse_retry_after",
    "status_error",
    "timeout_error",
]


class AllProvidersFailed(OperativeError, ExceptionGroup[Exception]):
    """Every provider a fallover tried failed; ``exceptions`` holds each failure in order.

    Both an ``ExceptionGroup`` (so ``except* ProviderUnavailableError`` picks out the
    failures it handles) and an :class:`OperativeError` (so ``except OperativeError``
    catches it whole). ``providers`` names the provider behind each failure, in the same
    order; ``split`` and ``subgroup`` keep the type and the names.
    """

    providers: tuple[str, ...]

    def __new__(
        cls,
        message: str,
        exceptions: Sequence[Exception],
        *,
        providers: Sequence[str] = (),
    ) -> AllProvidersFailed:
        self = super().__new__(cls, message, exceptions)
        names = tuple(providers)
        if names and len(names) != len(self.exceptions):
            raise InvalidArgument(
                f"AllProvidersFailed got {len(names)} provider names for "
                f"{len(self.exceptions)} failures"
            )
        self.providers = names or tuple("" for _ in self.exceptions)
        return self

    def __init__(
        self,
        message: str,
        exceptions: Sequence[Exception],
        *,
        providers: Sequence[str] = (),
    ) -> None:
        super().__init__(message, exceptions)

    def derive(  # type: ignore[override]
        self, excs: Sequence[Exception]
    ) -> AllProvidersFailed:
        by_identity = {id(e): name for e, name in zip(self.exceptions, self.providers, strict=True)}
        return AllProvidersFailed(
            self.message, excs, providers=[by_identity.get(id(e), "") for e in excs]
        )

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_all_providers_failed, (self.message, self.exceptions, self.providers))


def _rebuild_all_providers_failed(
    message: str, exceptions: Sequence[Exception], providers: Sequence[str]
) -> AllProvidersFailed:
    return AllProvidersFailed(message, exceptions, providers=providers)


class NoRouteError(OperativeError, LookupError):
    """A routing generate function found no route for a request and has no default.

    ``routes`` names the routes that were considered. Add a route that matches the
    request, or give ``routing(..., default=...)``.
    """

    def __init__(self, message: str, *, routes: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.routes = tuple(routes)


def is_retryable_status(status: int) -> bool:
    """408, 409, 429 and every 5xx (including Anthropic's 529 "overloaded")."""
    return status in (408, 409, 429) or status >= 500


def names_field(message: str, fields: Collection[str]) -> bool:
    """Whether a server's error message names one of the request's ``fields``.

    A name with an underscore or a capital (``response_format``, ``responseSchema``)
    counts wherever it stands as a word; a plain word (``messages``, ``format``)
    counts only quoted (``'messages'``, ``"format"``, `` `format` ``) or in a path
    (``response_format.type``, ``messages[1]``, ``body.format``), so that prose such as
    "the model is overloaded" names nothing.
    """
    if not message or not fields:
        return False
    return _field_pattern(tuple(sorted(set(fields)))).search(message) is not None


@functools.lru_cache(maxsize=64)
def _field_pattern(fields: tuple[str, ...]) -> re.Pattern[str]:
    alternatives: list[str] = []
    for field in fields:
        name = re.escape(field)
        if "_" in field or field != field.lower():
            alternatives.append(rf"(?<!\w){name}(?!\w)")
        alternatives.append(rf"['\"`]{name}['\"`]")
        alternatives.append(rf"(?<=\w\.){name}(?!\w)")
        alternatives.append(rf"(?<![\w.]){name}(?=\.\w|\[)")
    return re.compile("|".join(alternatives))


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, or ``retry-after`` (seconds or a date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def status_error(
    *,
    provider: str,
    model: str,
    status: int,
    message: str,
    headers: Mapping[str, str],
    request_id: str | None,
    key_variable: str,
    key_sent: bool | None = None,
    key_source: str | None = None,
    sent_fields: Collection[str] = (),
) -> ProviderError:
    """The typed error for an HTTP error response (or an in-stream error event).

    A 5xx (or 409) is retryable, unless its message names one of ``sent_fields``, the
    fields of the request that was sent (see :func:`names_field`): a server that reports
    a field it cannot take as a server error (llama-cpp-python answers 500 to a
    ``response_format`` it does not know) fails the same way every time, so that is a
    :class:`~operative.ProviderRequestError`, not retried.

    For a 401 or 403 the message says what is true about the key. An adapter that
    knows passes ``key_sent`` (did the request carry a key at all?) and ``key_source``
    (where that key came from and how it went out, e.g. ``"the ANTHROPIC_API_KEY
    environment variable, sent in the x-api-key header"``). Only a request that carried
    no key is told to set ``key_variable``; a rejected key is reported as rejected.
    Without ``key_sent`` the message is worded from whether ``key_variable`` is set.
    """
    retry_after = parse_retry_after(headers)
    where = f"{provider} ({model or 'no model'}) answered {status}: {message}"
    if request_id:
        where += f" [request id {request_id}]"
    cls: type[ProviderError]
    if status in (401, 403):
        cls = ProviderAuthenticationError
        where = _key_advice(
            provider=provider,
            answer=f"{status}: {message}",
            forbidden=status == 403,
            key_variable=key_variable,
            key_sent=key_sent,
            key_source=key_source,
        )
        if request_id:
            where += f" [request id {request_id}]"
    elif status == 429:
        cls = ProviderRateLimitError
        if retry_after is not None:
            where += f"; retry after {retry_after:g} s"
    elif status == 408:
        cls = ProviderTimeoutError
    elif (status == 409 or status >= 500) and not names_field(message, sent_fields):
        cls = ProviderUnavailableError
    else:
        cls = ProviderRequestError
        if is_retryable_status(status):
            where += (
                "; the server refused a field the request sent, so the same request would "
                "fail again: it is not retried"
            )
    return cls(
        where,
        provider=provider,
        model=model,
        status=status,
        request_id=request_id,
        retryable=cls is not ProviderRequestError and is_retryable_status(status),
        retry_after=retry_after,
    )


_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9_]*_[A-Z0-9_]+\b")


def _key_advice(
    *,
    provider: str,
    answer: str,
    forbidden: bool,
    key_variable: str,
    key_sent: bool | None,
    key_source: str | None,
) -> str:
    """What a 401/403 means for the key, worded from what is known about it."""
    set_it = f"set the {key_variable} environment variable to a valid key"
    if key_sent is False:
        return (
            f"{provider} wants an API key and the request carried none ({answer}); {set_it}, "
            "or pass api_key= or a configured client="
        )
    if key_sent:
        source = f" from {key_source}" if key_source else ""
        if forbidden:
            return (
                f"{provider} denied access with the API key{source} ({answer}): the key was "
                "sent; check that it may use this model and endpoint"
            )
        return (
            f"{provider} rejected the API key{source} ({answer}): the key was sent, so it is "
            "not valid for this server, or the server expects it elsewhere"
        )
    # The adapter cannot tell: say what the environment shows, and no more.
    what = "denied access with the API key" if forbidden else "rejected the API key"
    present = [name for name in _VARIABLE.findall(key_variable) if os.environ.get(name)]
    if present:
        return (
            f"{provider} {what} ({answer}); {present[0]} is set, so check that its key is "
            "valid for this server (an api_key= or client= given to the adapter overrides it)"
        )
    return (
        f"{provider} {what} ({answer}); {key_variable} is not set: check the key given as "
        f"api_key= or on the client=, or {set_it}"
    )


def timeout_error(*, provider: str, model: str, detail: str = "") -> ProviderTimeoutError:
    """The provider did not answer (or stopped streaming) within the client's timeout."""
    suffix = f": {detail}" if detail else ""
    return ProviderTimeoutError(
        f"{provider} ({model}) did not answer in time{suffix}",
        provider=provider,
        model=model,
        retryable=True,
    )


def connection_error(
    *, provider: str, model: str, detail: str, request_id: str | None = None
) -> ProviderConnectionError:
    """The connection could not be made, or was cut (possibly mid-stream)."""
    return ProviderConnectionError(
        f"{provider} ({model}): {detail}",
        provider=provider,
        model=model,
        request_id=request_id,
        retryable=True,
    )
