"""The kernel's errors: the run, its tools, its model calls and the codec.

Every error operative raises derives from :class:`OperativeError`; a feature's own errors
are defined in its package, and :mod:`operative.errors` gathers them all and draws the
whole tree. These are the kernel's:

::

    OperativeError(Exception)
    ├── InvalidArgument(OperativeError, TypeError)     misuse of the API, caught eagerly
    ├── CorruptRecordError(OperativeError, ValueError) stored or received bytes that do not decode
    │   └── SchemaVersionError(CorruptRecordError)     written by a newer operative: upgrade
    ├── ToolDefinitionError(InvalidArgument)           a tool that cannot be offered to a model
    ├── ApprovalError(OperativeError)                  a signed approval was rejected (``.reason``)
    │   └── ApprovalStateError(ApprovalError)          the approval store failed while it was used
    ├── InvalidResponseError(OperativeError)           ``generate`` returned something unusable
    ├── HookError(OperativeError)                      a hook returned a value the loop cannot use
    ├── OutputValidationError(OperativeError, ValueError)  structured output failed validation
    ├── ElicitationError(OperativeError)               a tool asked for input nobody can give
    ├── ProviderError(OperativeError)                  a model provider failed (``.retryable``)
    │   ├── ProviderRequestError(ProviderError)        the request was rejected (4xx): not retried
    │   │   └── ProviderAuthenticationError            bad or missing credentials (401, 403)
    │   ├── ProviderRateLimitError(ProviderError)      429, with ``retry_after``
    │   ├── ProviderUnavailableError(ProviderError)    5xx, 529 overloaded, 409
    │   ├── ProviderTimeoutError(ProviderError, TimeoutError)      no answer in time
    │   └── ProviderConnectionError(ProviderError, ConnectionError) connection failed or cut
    ├── DataValidationError(OperativeError, ValueError)  decoded data does not fit its type
    ├── CleanupError(OperativeError)               a run ended but its outcome was not committed
    ├── RunFailed(OperativeError)                  ``agent.run`` ended in ``"error"`` (``.result``)
    └── TrioRequiredError(OperativeError, RuntimeError)  called from asyncio, not from Trio

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from ._results import RunResult

__all__ = [
    "ApprovalError",
    "ApprovalErrorReason",
    "ApprovalStateError",
    "CleanupError",
    "CorruptRecordError",
    "DataValidationError",
    "ElicitationError",
    "HookError",
    "InvalidArgument",
    "InvalidResponseError",
    "OperativeError",
    "OutputValidationError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RunFailed",
    "SchemaVersionError",
    "ToolDefinitionError",
    "TrioRequiredError",
]


class OperativeError(Exception):
    """Root of every error operative raises; catch this to catch them all."""


class InvalidArgument(OperativeError, TypeError):
    """An API was called with arguments it cannot accept.

    Raised eagerly, at the call that was wrong, never later from inside a run.
    """


class CorruptRecordError(OperativeError, ValueError):
    """Stored or received bytes did not decode into the record they claim to be.

    The original bytes are never discarded by operative: the error carries ``what`` was
    being decoded and the decoder's explanation (with the JSON path of the problem).
    """

    def __init__(self, message: str, *, what: str = "record", detail: str = "") -> None:
        super().__init__(message)
        self.what = what
        self.detail = detail


class ToolDefinitionError(InvalidArgument):
    """A tool definition cannot be offered to a model (bad name, unschemable input, ...)."""


ApprovalErrorReason = Literal[
    "bad-signature",
    "expired",
    "replayed",
    "authority-mismatch",
    "version-changed",
    "unknown-tool",
    "unversioned-tool",
    "malformed",
    "deadline-passed",
    "state-unavailable",
]


class ApprovalError(OperativeError):
    """A signed approval was rejected; ``reason`` says which check failed.

    A rejected approval is not consumed: once the cause is fixed (e.g. the right request
    authority is supplied) it can be resumed again.
    """

    def __init__(self, message: str, *, reason: ApprovalErrorReason) -> None:
        super().__init__(message)
        self.reason: ApprovalErrorReason = reason


class ApprovalStateError(ApprovalError):
    """The approval-state store failed while an approval was being used up: bookkeeping,
    not the tool's failure and not a rejected approval (``reason`` is
    ``"state-unavailable"``; the store's own error is the ``__cause__``).

    The call did not run and the approval was not used: resume (or deny) the same
    approval again once the store answers. A store that failed after it had recorded the
    use, and could not take it back, makes a later try a ``"replayed"`` refusal: the
    call never runs twice.
    """

    def __init__(self, message: str, *, reason: ApprovalErrorReason = "state-unavailable") -> None:
        super().__init__(message, reason=reason)


class InvalidResponseError(OperativeError):
    """A ``generate`` function returned something the loop cannot use.

    It must return a :class:`operative.GenerateResponse`.
    """


class HookError(OperativeError):
    """A hook returned a value of the wrong shape; the message names the hook."""


class OutputValidationError(OperativeError, ValueError):
    """The run's final answer did not validate against the ``output`` type."""


class ElicitationError(OperativeError):
    """A tool asked the host for input, but the run has no ``on_elicitation`` handler or
    the handler answered with data that does not match the request."""


class ProviderError(OperativeError):
    """A model provider failed.

    ``retryable`` says whether trying again may help (rate limits, overload, 5xx,
    dropped connections); the retry policy reads it.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        model: str = "",
        status: int | None = None,
        request_id: str | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.model = model
        self.status = status
        self.request_id = request_id
        self.retryable = retryable
        self.retry_after = retry_after


class SchemaVersionError(CorruptRecordError):
    """A record was written by a newer operative than this one (its schema version is
    higher than any this code knows). The bytes are fine: upgrade operative to read them.
    """

    def __init__(
        self, message: str, *, what: str = "record", detail: str = "", found: int, supported: int
    ) -> None:
        super().__init__(message, what=what, detail=detail)
        self.found = found
        self.supported = supported


class DataValidationError(OperativeError, ValueError):
    """Decoded data (a tool's arguments, a structured output, ...) does not fit its type.

    ``path`` is the JSON path of the first problem (``$`` for the whole value, otherwise
    e.g. ``$.items[2].name``); ``detail`` says what was wrong there.
    """

    def __init__(
        self, message: str, *, what: str = "value", path: str = "$", detail: str = ""
    ) -> None:
        super().__init__(message)
        self.what = what
        self.path = path
        self.detail = detail


class ProviderRequestError(ProviderError):
    """The provider rejected the request itself (400, 404, 413, 422, ...): not retried.

    Fix the request (model name, message shape, settings) rather than trying again.
    """


class ProviderAuthenticationError(ProviderRequestError):
    """The provider refused the credentials (401) or their permissions (403).

    The message names the environment variable the adapter reads the key from.
    """


class ProviderRateLimitError(ProviderError):
    """The provider is rate limiting (429); ``retry_after`` says how long to wait."""


class ProviderUnavailableError(ProviderError):
    """The provider could not serve the request now (5xx, 529 overloaded, 409): retryable."""


class ProviderTimeoutError(ProviderError, TimeoutError):
    """The provider did not answer in time (a client timeout, or 408): retryable."""


class ProviderConnectionError(ProviderError, ConnectionError):
    """The connection failed or was cut, possibly mid-stream: retryable."""


class CleanupError(OperativeError):
    """A run ended, but its clean-up did not finish: its outcome is not committed.

    Raised by ``run.result()`` (and so by ``agent.run``) when the durable terminal
    commit failed or did not finish within ``cleanup_timeout`` (another connection held
    the write lock, the database was gone), when a journal write's outcome is unknown,
    or when the ``on_run_end`` hooks did not finish in time. ``result`` is the run's
    result as the process saw it; the stored record may still say ``running``, and then
    :func:`operative.durable.recover` (or ``operative recover``) finishes the run from
    its journal. The cause, when there is one, is ``__cause__``.
    """

    def __init__(self, message: str, *, run_id: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.result = result


class RunFailed(OperativeError):
    """``await agent.run(...)`` ended with ``finish_reason == "error"``.

    ``result`` is the run's :class:`~operative.RunResult` (its transcript, steps and
    usage); the error that ended the run is ``__cause__`` (and ``result.error``). To read
    an errored run's result without raising, use ``async with agent.open_run(...) as
    run:`` and ``await run.result()``.
    """

    def __init__(self, message: str, *, result: RunResult) -> None:
        super().__init__(message)
        self.result = result

    @classmethod
    def of(cls, result: RunResult) -> RunFailed:
        """The error for ``result``, a run that ended in ``"error"``."""
        error = result.error
        why = "no error was recorded" if error is None else f"{type(error).__name__}: {error}"
        run = f"run {result.run_id!r}" if result.run_id else "the run"
        return cls(
            f"{run} failed: {why}. The RunResult is this error's .result and the error "
            "its __cause__; fix the cause, or use async with agent.open_run(...) as run "
            "and await run.result() to get the result without raising",
            result=result,
        )


class TrioRequiredError(OperativeError, RuntimeError):
    """operative was called from another async library (asyncio): it runs under Trio.

    Start the program with ``trio.run(main)`` instead of ``asyncio.run(main())``; to
    call operative from an asyncio program, run it through trio-asyncio
    (``trio_asyncio.trio_as_aio``) or in a thread with a Trio loop of its own.
    """
