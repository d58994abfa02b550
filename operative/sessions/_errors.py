"""The sessions' own errors (operative's other errors are importable from ``operative``)."""

from __future__ import annotations

from .._core._errors import InvalidArgument, OperativeError

__all__ = [
    "LeaseHeldError",
    "MissingRunOptionsError",
    "SessionNotFoundError",
    "SessionPersistenceError",
]


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


class LeaseHeldError(OperativeError):
    """:meth:`SessionHandle.recover` found an unfinished turn to resume, but another
    worker's lease on it has not expired, so nothing was recovered.

    The holder may be alive (it is running the turn: leave it be) or dead (its lease runs
    out at ``expires_at``, and a ``recover()`` after that resumes the turn).
    """

    def __init__(self, message: str, *, run_id: str, holder: str, expires_at: float) -> None:
        super().__init__(message)
        self.run_id = run_id
        """The turn's durable run."""
        self.holder = holder
        """The worker id holding the lease (``worker_id=`` of whoever ran it)."""
        self.expires_at = expires_at
        """When the lease runs out unless its holder renews it (seconds since the epoch)."""
