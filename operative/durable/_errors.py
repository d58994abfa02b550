"""The durable runs' own errors: a lease that was lost, a run that is not stored."""

from __future__ import annotations

from .._core._errors import OperativeError

__all__ = ["LeaseLostError", "RunNotFoundError"]


class LeaseLostError(OperativeError):
    """This worker's lease on a durable run is gone: another worker claimed the run.

    The run stops without writing anything more (its fence is stale); the worker that
    holds the run now finishes it. Nothing needs doing, unless leases expire because a
    worker is starved: then raise ``lease_seconds``.
    """

    def __init__(self, message: str, *, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunNotFoundError(OperativeError, LookupError):
    """No durable run is stored under this id (check the id and the database)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no durable run {run_id!r} is stored here; check the id and database")
        self.run_id = run_id
