"""The sessions' own errors (operative's other errors are importable from ``operative``)."""

from __future__ import annotations

from .._core._errors import OperativeError

__all__ = ["LeaseHeldError"]


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
