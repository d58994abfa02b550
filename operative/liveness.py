"""Liveness: a synchronous, side-effect-free view of how a run is doing.

``ActiveRun.snapshot()`` returns a :class:`LivenessSnapshot`: reading it never starts
work, never blocks and never changes the run. ``revision`` grows whenever the status or
the step changes, so an observer can tell two snapshots apart cheaply.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from ._types import FinishReason, Usage

__all__ = ["LivenessSnapshot", "LivenessStatus"]

LivenessStatus: TypeAlias = Literal[
    "starting",
    "running",
    "waiting",
    "stalled",
    "unreachable",
    "completed",
    "failed",
    "aborted",
]

TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "aborted"})


class LivenessSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """How a run is doing, as of ``observed_at`` (trio's clock)."""

    kind: Literal["run", "session"] = "run"
    id: str
    status: LivenessStatus
    revision: int
    step: int = 0
    """The step in progress, or the last one once the run is over."""
    usage: Usage = Usage()
    started_at: float | None = None
    observed_at: float = 0.0
    last_activity_at: float | None = None
    """When the run last made progress (a step began, a model answered, tools settled)."""
    finish_reason: FinishReason | None = None
    durability: Literal["process-local", "durable"] = "process-local"

    @property
    def terminal(self) -> bool:
        """True once the run is over; a terminal snapshot never changes again."""
        return self.status in TERMINAL_STATUSES
