"""Mapping HTTP failures to the :class:`~operative.ProviderError` tree (no SDK imports).

Every adapter funnels its SDK's exceptions through :func:`status_error`,
:func:`timeout_error` and :func:`connection_error`, so all providers agree on which
status is retryable and how ``retry-after`` is read.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

from .._errors import (
    ProviderAuthenticationError,
    ProviderConnectionError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)

__all__ = [
    "connection_error",
    "is_retryable_status",
    "parse_retry_after",
    "status_error",
    "timeout_error",
]


def is_retryable_status(status: int) -> bool:
    """408, 409, 429 and every 5xx (including Anthropic's 529 "overloaded")."""
    return status in (408, 409, 429) or status >= 500


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
) -> ProviderError:
    """The typed error for an HTTP error response (or an in-stream error event)."""
    retry_after = parse_retry_after(headers)
    where = f"{provider} ({model or 'no model'}) answered {status}: {message}"
    if request_id:
        where += f" [request id {request_id}]"
    cls: type[ProviderError]
    if status in (401, 403):
        cls = ProviderAuthenticationError
        what = "rejected the API key" if status == 401 else "denied access with this API key"
        where = (
            f"{provider} {what} ({status}: {message}); set the {key_variable} environment "
            "variable to a valid key, or pass a configured client="
        )
        if request_id:
            where += f" [request id {request_id}]"
    elif status == 429:
        cls = ProviderRateLimitError
        if retry_after is not None:
            where += f"; retry after {retry_after:g} s"
    elif status == 408:
        cls = ProviderTimeoutError
    elif status == 409 or status >= 500:
        cls = ProviderUnavailableError
    else:
        cls = ProviderRequestError
    return cls(
        where,
        provider=provider,
        model=model,
        status=status,
        request_id=request_id,
        retryable=is_retryable_status(status),
        retry_after=retry_after,
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
