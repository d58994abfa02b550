"""The error tree: every error operative raises derives from :class:`OperativeError`.

::

    OperativeError(Exception)
    ├── InvalidArgument(OperativeError, TypeError)     misuse of the API, caught eagerly
    ├── CorruptRecordError(OperativeError, ValueError) stored or received bytes that do not decode
    │   └── SchemaVersionError(CorruptRecordError)     written by a newer operative: upgrade
    ├── ConversationError(OperativeError, ValueError)  a transcript operation that cannot apply
    ├── ToolDefinitionError(InvalidArgument)           a tool that cannot be offered to a model
    ├── ApprovalError(OperativeError)                  a signed approval was rejected (``.reason``)
    ├── InvalidResponseError(OperativeError)           ``generate`` returned something unusable
    ├── HookError(OperativeError)                      a hook returned a value the loop cannot use
    ├── GuardrailTripped(OperativeError)               a guardrail stopped the run (``.guardrail``)
    ├── OutputValidationError(OperativeError, ValueError)  structured output failed validation
    ├── ElicitationError(OperativeError)               a tool asked for input nobody can give
    ├── ProviderError(OperativeError)                  a model provider failed (``.retryable``)
    │   ├── ProviderRequestError(ProviderError)        the request was rejected (4xx): not retried
    │   │   └── ProviderAuthenticationError            bad or missing credentials (401, 403)
    │   ├── ProviderRateLimitError(ProviderError)      429, with ``retry_after``
    │   ├── ProviderUnavailableError(ProviderError)    5xx, 529 overloaded, 409
    │   ├── ProviderTimeoutError(ProviderError, TimeoutError)      no answer in time
    │   └── ProviderConnectionError(ProviderError, ConnectionError) connection failed or cut
    ├── ConflictError(OperativeError)                  a conditional store write lost a race
    ├── DatabaseFileError(OperativeError)              a database file is not one, or is damaged
    ├── DataValidationError(OperativeError, ValueError)  decoded data does not fit its type
    ├── BudgetExceededError(OperativeError)            a run's budget ran out (``.limit``)
    ├── SelectionRevalidationError(OperativeError)     a step's selected plan no longer holds
    ├── AsyncDefinitionLoadError(OperativeError)       a lazy agent's loader failed (retried)
    ├── AgentContractError(OperativeError, TypeError)  a loaded agent is not a RunnableAgent
    ├── MissingRunOptionsError(InvalidArgument)    a session handle has no agent or run options
    ├── SessionNotFoundError(OperativeError, LookupError)  no session is stored under an id
    ├── SessionPersistenceError(OperativeError)    a session run's outcome could not be stored
    ├── AllProvidersFailed(OperativeError, ExceptionGroup)  every provider a fallover tried failed
    ├── NoRouteError(OperativeError, LookupError)  a routing generate matched no route
    ├── LeaseLostError(OperativeError)             another worker took over a durable run
    ├── CleanupError(OperativeError)               a run ended but its outcome was not committed
    └── RunNotFoundError(OperativeError, LookupError)  no durable run is stored under an id

Messages say what went wrong and what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

__all__ = [
    "AgentContractError",
    "AllProvidersFailed",
    "ApprovalError",
    "ApprovalErrorReason",
    "ApprovalStateError",
    "AsyncDefinitionLoadError",
    "BudgetExceededError",
    "CleanupError",
    "ConflictError",
    "ConversationError",
    "CorruptRecordError",
    "DataValidationError",
    "DatabaseFileError",
    "ElicitationError",
    "GuardrailTripped",
    "HookError",
    "InvalidArgument",
    "InvalidResponseError",
    "LeaseLostError",
    "MissingRunOptionsError",
    "NoRouteError",
    "OperativeError",
    "OutputValidationError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RunNotFoundError",
    "SchemaVersionError",
    "SelectionRevalidationError",
    "SessionNotFoundError",
    "SessionPersistenceError",
    "ToolDefinitionError",
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


class ConversationError(OperativeError, ValueError):
    """A transcript operation does not apply to this conversation (e.g. unknown call id)."""


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


class GuardrailTripped(OperativeError):
    """A guardrail tripped: the run ended with ``finish_reason == "error"`` and this error.

    ``guardrail`` names it, ``kind`` says what it checked (``"input"``, ``"output"``,
    ``"tool-call"`` or ``"tool-result"``), ``reason`` is what it said and ``call_id`` the
    tool call it stopped (tool guardrails). Nothing is retried: change the input, or the
    guardrail if it tripped wrongly.
    """

    def __init__(
        self, guardrail: str, kind: str, reason: str, *, call_id: str | None = None
    ) -> None:
        where = f" on call {call_id!r}" if call_id is not None else ""
        super().__init__(f"guardrail {guardrail!r} ({kind}{where}) tripped: {reason}")
        self.guardrail = guardrail
        self.kind = kind
        self.reason = reason
        self.call_id = call_id

    def __reduce__(self) -> Any:
        return (_rebuild_guardrail_tripped, (self.guardrail, self.kind, self.reason, self.call_id))


def _rebuild_guardrail_tripped(
    guardrail: str, kind: str, reason: str, call_id: str | None
) -> GuardrailTripped:
    return GuardrailTripped(guardrail, kind, reason, call_id=call_id)


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


class ConflictError(OperativeError):
    """A conditional store write found a different version than it expected.

    Nothing in the batch was written. Read the key again and retry with its current
    version, or give up if the other writer's value wins (e.g. an approval already used).
    """

    def __init__(self, key: str, *, expected: object, actual: int | None) -> None:
        if expected is None:
            wanted = "the key to be absent"
        elif isinstance(expected, int):
            wanted = f"version {expected}"
        else:
            wanted = str(expected)
        found = "no value" if actual is None else f"version {actual}"
        super().__init__(
            f"conflict on key {key!r}: expected {wanted}, found {found}; "
            "read the key again and retry with its current version"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class DatabaseFileError(OperativeError):
    """A database file is not an SQLite database, or is damaged (truncated, malformed).

    Raised by every SQLite-backed store, engine and run store on the first use that meets
    the file. ``path`` names the file, ``detail`` what SQLite reported. The file is left
    exactly as it was: operative never converts, repairs or truncates a file it cannot
    read. Check the path; restore a damaged file from a backup (or try ``sqlite3 FILE
    .recover``); or move it away to start a new database there.
    """

    def __init__(self, message: str, *, path: str, detail: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.detail = detail


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


class BudgetExceededError(OperativeError):
    """A run's budget ran out; ``limit`` says which one.

    ``limit`` is ``"tokens"``, ``"cost_usd"``, ``"requests"``, ``"tool_calls"`` or
    ``"duration"``; ``maximum`` is the budget's limit and ``spent`` the amount that
    crossed it (in tokens, USD, requests, tool calls or seconds). A run that runs out of
    budget ends with ``finish_reason == "budget-exceeded"`` rather than raising this;
    raise it from a hook or a tool to end the run the same way.
    """

    def __init__(self, message: str, *, limit: str, maximum: float, spent: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.maximum = maximum
        self.spent = spent


class SelectionRevalidationError(OperativeError):
    """The plan a run was selected for no longer reaches ``"selected"`` on revalidation.

    Raised at a step's entry (after any steering pause), so the step never calls the
    model. ``outcome`` is what ``revalidate`` answered (``None`` when it raised or
    answered something unusable), ``plan`` what ``get_plan`` returned.
    """

    def __init__(
        self, message: str, *, outcome: str | None = None, plan: object = None, step: int = 0
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.plan = plan
        self.step = step


class AsyncDefinitionLoadError(OperativeError):
    """A lazy definition's loader raised; the loader's error is ``__cause__``.

    A failed load is not cached: the next run (or generate call) calls the loader again.
    """

    kind: Literal["load"] = "load"


class AgentContractError(OperativeError, TypeError):
    """A lazy loader produced something that is not what it promised.

    A lazy agent's loader must produce a :class:`operative.RunnableAgent` (or a module
    whose ``default`` is one), whose ``open_run`` yields a run handle; a lazy generate's
    loader must produce a ``GenerateFunction``. The load itself succeeded, so it is not
    retried: fix the loader.
    """

    kind: Literal["contract"] = "contract"
    code: str = "INVALID_AGENT_HANDLE"


class MissingRunOptionsError(InvalidArgument):
    """A session handle was asked to ``run`` but was opened without ``agent=`` or
    ``run_options=``. Raised before anything is reserved or written."""


class SessionNotFoundError(OperativeError, LookupError):
    """No session is stored under ``session_id`` (it was never saved, or was deleted)."""

    def __init__(self, message: str, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id


class SessionPersistenceError(OperativeError):
    """A session run ended but its transcript and outcome could not be stored.

    The run's own result is ``result`` and the storage failure is ``__cause__``. The
    session still records the run without an outcome, which never reads as a success.
    """

    def __init__(
        self, message: str, *, session_id: str, run_id: str, result: object = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.run_id = run_id
        self.result = result


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


class LeaseLostError(OperativeError):
    """This worker's lease on a durable run is gone: another worker claimed the run.

    The run stops without writing anything more (its fence is stale); the worker that
    holds the run now finishes it. Nothing needs doing, unless leases expire because a
    worker is starved: then raise ``lease_seconds``.
    """

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


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

    def __init__(self, message: str, *, run_id: str, result: object = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.result = result


class RunNotFoundError(OperativeError, LookupError):
    """No durable run is stored under this id (check the id and the database)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no durable run {run_id!r} is stored here; check the id and database")
        self.run_id = run_id
