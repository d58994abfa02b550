"""What every run store offers: the protocol code that only reads runs can depend on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._pricing import PriceTable
from ..durable._records import RunStatus
from ._records import Page, RunDetail, RunSummary, ToolCallOutcome, ToolCallRecord, UsageTotals

__all__ = ["RunStore"]


@runtime_checkable
class RunStore(Protocol):
    """Read-only queries over durable runs (:class:`SqliteRunStore`, :class:`PostgresRunStore`).

    Listings are newest first and paged: each returns a :class:`Page` whose
    ``next_cursor`` is passed back as ``after=``. Times are epoch seconds; ``since`` is
    inclusive and ``until`` exclusive.
    """

    @property
    def database(self) -> str:
        """Where the runs are read from (a file path, or a DSN without its password)."""
        ...

    @property
    def prices(self) -> PriceTable:
        """The price table costs are computed at."""
        ...

    async def runs(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page[RunSummary]:
        """Run summaries matching every filter given, newest first (by creation time)."""
        ...

    async def run(self, run_id: str) -> RunDetail | None:
        """One run in full, or ``None`` when no run has this id."""
        ...

    async def tool_calls(
        self,
        *,
        run_id: str | None = None,
        tool_name: str | None = None,
        outcome: ToolCallOutcome | Sequence[ToolCallOutcome] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page[ToolCallRecord]:
        """Executed tool calls matching every filter given, newest first (by start time)."""
        ...

    async def usage(
        self,
        *,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> UsageTotals:
        """What the matching runs spent: tokens by kind, cost, runs by status."""
        ...

    async def aclose(self) -> None: ...
