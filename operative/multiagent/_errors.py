"""Errors of the multi-agent patterns (each one an :class:`~operative.OperativeError`)."""

from __future__ import annotations

from .._core._errors import OperativeError

__all__ = ["HandoffError", "SubagentError", "WorkerFailedError"]


class SubagentError(OperativeError):
    """A subagent's run did not end with an answer (it errored, was aborted, or ran out
    of budget). Raised inside the subagent tool, so the parent's model reads it as the
    tool's error result; ``result`` is the child's :class:`~operative.RunResult`."""

    def __init__(self, message: str, *, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class HandoffError(OperativeError):
    """A handoff could not take place (no run to switch, a durable run, or a second
    handoff in one step). The model reads it as the handoff tool's error result."""


class WorkerFailedError(OperativeError):
    """A supervisor's worker failed under ``on_worker_error="cancel_siblings"``: the
    other workers were cancelled, and the dispatch call's result is this error.
    ``reports`` holds every worker's report (cancelled ones included)."""

    def __init__(self, message: str, *, reports: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.reports = reports
