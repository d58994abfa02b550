"""What the run store returns: run summaries, run details, tool calls, usage totals.

Every record is read from the durable tables and never written back; all of them are
frozen, keyword-only msgspec Structs, so they encode to JSON for a dashboard as they are.
Times are epoch seconds on the durable engine's clock (default :func:`time.time`) and say
when the thing happened: a journal record that waited for a later commit carries its own
time, which is read instead of the commit's. Durations are seconds on the run's own clock
(trio's).
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeAlias, TypeVar

import msgspec

from .._core._types import ToolCall, ToolResult, Usage
from ..conversation import ConversationHistory, Message
from ..durable._records import RunOutcome, RunStatus

__all__ = [
    "ModelUsage",
    "Page",
    "RunDetail",
    "RunSummary",
    "StepRecord",
    "StepState",
    "ToolCallOutcome",
    "ToolCallRecord",
    "UsageTotals",
]

T = TypeVar("T")

ToolCallOutcome: TypeAlias = Literal[
    "success", "error", "denied", "action-required", "cancelled", "in-flight"
]
"""A :data:`~operative.tools.ToolOutcome`, or ``"in-flight"``: started, not settled, and the
run has not ended (a worker is running the call, or will settle it on recovery)."""

StepState: TypeAlias = Literal["completed", "in-progress", "aborted"]
"""``completed`` once its final results are journaled; ``aborted`` when the run ended
before that; ``in-progress`` otherwise (running, or waiting for recovery)."""


class ModelUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What the steps answered by one model spent."""

    model: str | None
    """The model the generate function reported (``None``: it did not say)."""
    steps: int
    usage: Usage
    cost_usd: float | None
    """At the store's price table; ``None`` when the table does not know the model."""


class RunSummary(msgspec.Struct, frozen=True, kw_only=True):
    """One durable run: its record, plus what its journal says it spent."""

    run_id: str
    agent_name: str
    session_id: str | None
    status: RunStatus
    finish_reason: str | None
    """How it ended (``"stop-condition"``, ``"aborted"``, ...); ``None`` while running."""
    created_at: float
    updated_at: float
    steps: int
    """Steps whose assistant message is journaled (a step cut during generate is not)."""
    usage: Usage
    """The outcome's usage once the run ended (every generate attempt); before that, the
    sum over its journaled steps."""
    cost_usd: float | None
    """USD at the store's price table, when all of ``usage`` can be priced; else ``None``
    (never a partial sum passed off as the total: see ``by_model``)."""
    unpriced: bool
    """Some usage has no price: a step's model is not in the table or was not reported,
    or the run spent tokens no journaled step accounts for (a generate attempt cut short)."""
    unpriced_models: tuple[str, ...]
    """Reported model names the price table does not know."""
    by_model: tuple[ModelUsage, ...]
    """The journaled steps' usage per model, priced one by one."""
    lease_owner: str | None
    """The worker holding the run (``None``: nobody; a running run is then claimable)."""
    lease_expires_at: float
    cancel_requested: bool
    """Someone asked the engine to cancel the run (``cancel_reason`` says why)."""
    cancel_reason: str | None
    outcome: RunOutcome | None
    """The committed outcome (content, error, abort reason, usage); ``None`` while running."""


class ToolCallRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call a run executed: when it started, how and when it settled.

    ``started_at`` and ``settled_at`` are when the call started and settled: a journal
    entry's commit time, or the time its record carries when it waited for a later
    commit (a step whose calls are idempotent commits once, at its end). Listings filter,
    order and page by ``started_at``. ``duration`` is measured around the call itself on
    the run's clock.
    """

    run_id: str
    step: int
    call_id: str
    tool_name: str
    arguments: dict[str, Any] | str
    """As the model sent them (a mapping, or the provider's raw JSON string)."""
    outcome: ToolCallOutcome
    result: ToolResult | None
    """The result as the tool returned it; ``None`` unless the call settled (result
    hooks may have changed what the transcript holds: see the step's ``results``)."""
    error: str | None
    """What the model was told when the call did not succeed."""
    started_at: float
    settled_at: float | None
    """When the call settled: it returned, or recovery settled a call a crash cut; when
    the run finished, for a call the run's end cut. ``None`` while in flight."""
    duration: float | None
    """Seconds the call took; ``None`` unless it settled by itself."""
    attempts: int = 1
    """Executions started: more than one when recovery ran an idempotent call again."""
    unknown_outcome: bool = False
    """Whether the call's effect is unknown: it was running when its worker stopped,
    and it was neither run again (not idempotent) nor finished. Check before relying
    on it."""

    @property
    def in_flight(self) -> bool:
        """Started, not settled, and the run has not ended."""
        return self.outcome == "in-flight"


class StepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One step of a run: the assistant's answer, its calls and their final results."""

    step: int
    state: StepState
    message: Message
    """The assistant message (content and tool calls) as the transcript holds it."""
    content: str
    """The message's text."""
    tool_calls: tuple[ToolCall, ...]
    results: tuple[ToolResult, ...]
    """The final results (after result hooks); ``()`` until the step completes."""
    usage: Usage
    model: str | None
    cost_usd: float | None
    """The step's usage at the store's price table; ``None`` when it cannot be priced."""
    committed_at: float
    """When the assistant message arrived: its commit time, or the time its record
    carries when it waited for the step's later commit."""
    completed_at: float | None
    """When the final results were committed: the step's end, except that the end of a
    step that made no call and that nobody observed waits for the next commit (the run's
    finish, for the final answer) and records no time of its own."""


class RunDetail(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the store knows about one run."""

    summary: RunSummary
    steps: tuple[StepRecord, ...]
    tool_calls: tuple[ToolCallRecord, ...]
    """In the order they started."""
    transcript: ConversationHistory
    """The conversation as the journal knows it (see :func:`operative.durable.transcript`)."""


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a listing; pass ``next_cursor`` as ``after=`` for the next one."""

    items: tuple[T, ...]
    next_cursor: str | None
    """``None`` on the last page."""


class UsageTotals(msgspec.Struct, frozen=True, kw_only=True):
    """What a set of runs spent (runs selected by agent, session and creation time)."""

    runs: int
    runs_by_status: dict[str, int]
    """Every status, zero included."""
    steps: int
    usage: Usage
    """Tokens by kind: ended runs count their outcome's usage, running ones their steps'."""
    cost_usd: float | None
    """USD when every token can be priced; else ``None`` (see ``by_model``)."""
    unpriced: bool
    unpriced_models: tuple[str, ...]
    by_model: tuple[ModelUsage, ...]
