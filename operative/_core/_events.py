"""Typed run events and their fan-out to listeners and bounded streams.

Every event is a frozen ``msgspec.Struct`` in one tagged union whose tag, ``type``, is
the specification's string (``"run.started"``, ``"step.completed"``, ...). Each carries
``run_id``, ``step`` (0 outside a step) and ``time`` (trio's clock, monotonic).
"""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

import msgspec

from ._types import FinishReason, ToolCall, ToolResult, Usage

__all__ = [
    "BackpressureApplied",
    "BackpressureReleased",
    "BudgetLimitExceeded",
    "BudgetThresholdCrossed",
    "ContextBudgetWarning",
    "ContextCompacted",
    "ElicitationRequested",
    "ElicitationResolved",
    "Event",
    "GenerateCompleted",
    "GenerateDelta",
    "GenerateError",
    "GenerateRetry",
    "GenerateRouted",
    "GenerateStarted",
    "GuardrailPassed",
    "GuardrailRewrote",
    "GuardrailTrip",
    "Handoff",
    "ResponseValidated",
    "RunAborted",
    "RunCompleted",
    "RunError",
    "RunEvent",
    "RunStarted",
    "SessionLoaded",
    "SessionSaved",
    "SteeringAccepted",
    "SteeringApplied",
    "SteeringFailed",
    "SteeringRejected",
    "SteeringSuperseded",
    "StepAborted",
    "StepCompleted",
    "StepGenerated",
    "StepStarted",
    "SubagentCompleted",
    "SubagentEvent",
    "ToolProgress",
    "ToolResultValidated",
    "ToolsExecuted",
    "ToolsExecuting",
    "UsageAccumulated",
]

logger = logging.getLogger("operative.events")


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag_field="type"):
    """Base of every run event (untracked by the garbage collector: events hold no cycles)."""

    run_id: str
    step: int = 0
    time: float = 0.0
    """``trio.current_time()`` when the event was emitted (monotonic seconds)."""

    @property
    def type(self) -> str:
        """The event's type string, e.g. ``"step.completed"``."""
        return self.__struct_config__.tag  # type: ignore[return-value]


class RunStarted(Event, frozen=True, kw_only=True, tag="run.started"):
    """The loop started; always the first event of a run."""

    agent_name: str = ""


class RunCompleted(Event, frozen=True, kw_only=True, tag="run.completed"):
    """The run ended normally (stop condition, maximum steps or budget)."""

    finish_reason: FinishReason
    content: str = ""
    usage: Usage = Usage()
    steps: int = 0
    recovered_error: str | None = None
    """Set when an ``on_error`` hook turned a failure into this final answer."""


class RunError(Event, frozen=True, kw_only=True, tag="run.error"):
    """The run ended because something failed; the exception is on the result."""

    error: str
    error_type: str
    usage: Usage = Usage()
    steps: int = 0


class RunAborted(Event, frozen=True, kw_only=True, tag="run.aborted"):
    """The run was aborted (``run.abort()``, or its caller was cancelled)."""

    reason: str = ""
    usage: Usage = Usage()
    steps: int = 0


class StepStarted(Event, frozen=True, kw_only=True, tag="step.started"):
    """A step began."""


class StepGenerated(Event, frozen=True, kw_only=True, tag="step.generated"):
    """The step's assistant message was appended to the conversation."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    """Why the answer ended, as the provider says (``"length"``: cut at the token limit)."""


class StepCompleted(Event, frozen=True, kw_only=True, tag="step.completed"):
    """A step finished, its tool results appended."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    usage: Usage = Usage()
    stop_reason: str | None = None
    """Why the step's answer ended, as the provider says."""


class StepAborted(Event, frozen=True, kw_only=True, tag="step.aborted"):
    """A step was cut short; its unfinished tool calls got ``cancelled`` results."""

    reason: str = ""


class GenerateStarted(Event, frozen=True, kw_only=True, tag="generate.started"):
    """A generate attempt began."""

    attempt: int = 1


class GenerateCompleted(Event, frozen=True, kw_only=True, tag="generate.completed"):
    """A generate attempt returned."""

    attempt: int = 1
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    model: str | None = None


class GenerateDelta(Event, frozen=True, kw_only=True, tag="generate.delta"):
    """A piece of a streamed answer, as the provider sent it (only when listened for)."""

    attempt: int = 1
    kind: str = "text"
    """``"text"``, ``"tool_arguments"`` or ``"thinking"``."""
    text: str = ""
    index: int = 0
    call_id: str | None = None
    tool_name: str | None = None


class GenerateRouted(Event, frozen=True, kw_only=True, tag="generate.routed"):
    """Which provider answered, when a fallover or a router chose one."""

    attempt: int = 1
    route: str | None = None
    """The routing rule that matched (``"default"`` for a router's default)."""
    provider: str | None = None
    """The provider that answered."""
    failed: tuple[str, ...] = ()
    """Providers a fallover tried first, which failed."""
    cancelled: tuple[str, ...] = ()
    """Providers a hedged fallover raced and cancelled once another answered."""


class GenerateError(Event, frozen=True, kw_only=True, tag="generate.error"):
    """A generate attempt failed."""

    attempt: int = 1
    error: str = ""
    error_type: str = ""
    retryable: bool = False
    """True when the run will retry this attempt."""
    usage: Usage = Usage()
    """What the failed attempt reported spending (counted in the run's usage)."""


class GenerateRetry(Event, frozen=True, kw_only=True, tag="generate.retry"):
    """A failed generate attempt will be retried after ``delay`` seconds."""

    attempt: int = 1
    """The attempt that is about to run."""
    delay: float = 0.0
    error: str = ""
    error_type: str = ""


class ResponseValidated(Event, frozen=True, kw_only=True, tag="response.validated"):
    """The response passed every ``validate_response`` hook."""


class ToolsExecuting(Event, frozen=True, kw_only=True, tag="tools.executing"):
    """The step's tool calls are about to run (concurrently)."""

    calls: tuple[ToolCall, ...] = ()


class ToolsExecuted(Event, frozen=True, kw_only=True, tag="tools.executed"):
    """Every tool call of the step settled; results are in call order."""

    results: tuple[ToolResult, ...] = ()


class ToolResultValidated(Event, frozen=True, kw_only=True, tag="tool-result.validated"):
    """One tool result is final (after ``validate_tool_result`` hooks)."""

    result: ToolResult


class ToolProgress(Event, frozen=True, kw_only=True, tag="tool.progress"):
    """A running tool reported progress."""

    call_id: str
    tool_name: str
    progress: float | None = None
    total: float | None = None
    message: str | None = None


class ElicitationRequested(Event, frozen=True, kw_only=True, tag="elicitation.requested"):
    """A tool asked the host for structured input."""

    request_id: str
    tool_call_id: str | None = None
    message: str = ""
    schema: dict[str, Any] = msgspec.field(default_factory=dict)


class ElicitationResolved(Event, frozen=True, kw_only=True, tag="elicitation.resolved"):
    """The host answered (or declined) an elicitation."""

    request_id: str
    tool_call_id: str | None = None
    declined: bool = False


class UsageAccumulated(Event, frozen=True, kw_only=True, tag="usage.accumulated"):
    """A generate call reported usage; ``total`` is the run's running sum."""

    usage: Usage
    total: Usage


class BackpressureApplied(Event, frozen=True, kw_only=True, tag="backpressure.applied"):
    """The run waits before its next step."""

    delay: float | None = None
    reason: str = ""


class BackpressureReleased(Event, frozen=True, kw_only=True, tag="backpressure.released"):
    """The wait before the step is over."""

    waited: float = 0.0


class BudgetThresholdCrossed(Event, frozen=True, kw_only=True, tag="budget.threshold"):
    """The run spent ``fraction`` of one of its budget's limits (reported once each)."""

    limit: str
    fraction: float
    maximum: float
    spent: float


class BudgetLimitExceeded(Event, frozen=True, kw_only=True, tag="budget.exceeded"):
    """A budget limit was crossed; the run ends with ``finish_reason "budget-exceeded"``."""

    limit: str
    maximum: float
    spent: float
    message: str = ""


class ContextBudgetWarning(Event, frozen=True, kw_only=True, tag="context.budget-warning"):
    """The transcript sent this step is close to the context budget."""

    tokens: int
    budget: int
    warn_at: float


class ContextCompacted(Event, frozen=True, kw_only=True, tag="context.compacted"):
    """Older messages were left out of (or summarized in) what this step sends.

    The run's stored transcript is unchanged: compaction only shapes the request.
    """

    removed: int
    tokens_before: int
    tokens_after: int
    summarized: bool = False
    usage: Usage = Usage()
    """What a summarizing generate call cost (counted in the run's usage)."""


class SteeringApplied(Event, frozen=True, kw_only=True, tag="steering.applied"):
    """A run took up a new configuration version at a step's entry (once per version)."""

    session_id: str
    config_version: int
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    previous_version: int = 0
    """The version the run had applied (or the session's floor) before this one."""


class _SteeringCommandEvent(Event, frozen=True, kw_only=True):
    session_id: str
    command_id: str
    command: str
    """``"pause"``, ``"resume"`` or ``"configure"``."""
    config_version: int = 0
    reason: str = ""


class SteeringAccepted(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.accepted"):
    """A host's steering command changed the session's desired state."""


class SteeringRejected(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.rejected"):
    """A steering command was refused (a stale version, a redundant pause, ...)."""


class SteeringSuperseded(
    _SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.superseded"
):
    """An accepted command was replaced by a newer one before any run took it up."""


class SteeringFailed(_SteeringCommandEvent, frozen=True, kw_only=True, tag="steering.failed"):
    """Processing a steering command raised."""


class _GuardrailEvent(Event, frozen=True, kw_only=True):
    guardrail: str
    """The guardrail's name."""
    kind: str
    """What it checked: ``"input"``, ``"output"``, ``"tool-call"`` or ``"tool-result"``."""
    call_id: str | None = None
    """The tool call it checked (tool guardrails)."""


class GuardrailPassed(_GuardrailEvent, frozen=True, kw_only=True, tag="guardrail.passed"):
    """A guardrail let its input, answer, call or result through unchanged."""


class GuardrailRewrote(_GuardrailEvent, frozen=True, kw_only=True, tag="guardrail.rewrote"):
    """A guardrail let it through, replaced; ``reason`` is what it gave, if anything."""

    reason: str = ""


class GuardrailTrip(_GuardrailEvent, frozen=True, kw_only=True, tag="guardrail.tripped"):
    """A guardrail tripped: the run ends with a ``GuardrailTripped`` error."""

    reason: str = ""


class SessionLoaded(Event, frozen=True, kw_only=True, tag="session.loaded"):
    """A session handle opened its session (``run_id`` is empty: no run yet)."""

    session_id: str
    agent_name: str
    revision: int
    is_new: bool = False
    """True when no session was stored under this id, so a new one was created."""
    message_count: int = 0


class SessionSaved(Event, frozen=True, kw_only=True, tag="session.saved"):
    """A session handle stored its session (a turn reserved, or a turn's outcome)."""

    session_id: str
    agent_name: str
    revision: int
    message_count: int = 0
    outcome: str | None = None
    """The run's finish reason when this write stored a turn's outcome."""


class SubagentEvent(Event, frozen=True, kw_only=True, tag="subagent.event"):
    """An event of a child run (a subagent), forwarded to its parent's listeners.

    ``run_id`` and ``step`` are the parent's; the child's own event is ``event``, its run
    id ``child_run_id``. A grandchild's events arrive wrapped twice (one level per run).
    """

    call_id: str
    """The parent's tool call that runs the child."""
    tool_name: str
    agent_name: str
    child_run_id: str
    event: RunEvent


class SubagentCompleted(Event, frozen=True, kw_only=True, tag="subagent.completed"):
    """A child run ended; its usage is now part of the parent's (and of this step's)."""

    call_id: str
    tool_name: str
    agent_name: str
    child_run_id: str
    finish_reason: FinishReason
    usage: Usage = Usage()
    """What the child spent: added to the parent's usage when this event is emitted."""
    steps: int = 0


class Handoff(Event, frozen=True, kw_only=True, tag="handoff"):
    """Control passed to another agent; the run goes on under it from the next step."""

    call_id: str
    """The handoff tool call, whose result in the transcript names the new agent."""
    from_agent: str
    to_agent: str


RunEvent: TypeAlias = (
    RunStarted
    | RunCompleted
    | RunError
    | RunAborted
    | StepStarted
    | StepGenerated
    | StepCompleted
    | StepAborted
    | GenerateStarted
    | GenerateCompleted
    | GenerateDelta
    | GenerateRouted
    | GenerateError
    | GenerateRetry
    | ResponseValidated
    | ToolsExecuting
    | ToolsExecuted
    | ToolResultValidated
    | ToolProgress
    | ElicitationRequested
    | ElicitationResolved
    | UsageAccumulated
    | BackpressureApplied
    | BackpressureReleased
    | BudgetThresholdCrossed
    | BudgetLimitExceeded
    | ContextBudgetWarning
    | ContextCompacted
    | SteeringApplied
    | SteeringAccepted
    | SteeringRejected
    | SteeringSuperseded
    | SteeringFailed
    | GuardrailPassed
    | GuardrailRewrote
    | GuardrailTrip
    | SessionLoaded
    | SessionSaved
    | SubagentEvent
    | SubagentCompleted
    | Handoff
)
"""Every event a run emits, one tagged union (decodes in one pass)."""

TERMINAL_TYPES = frozenset({"run.completed", "run.error", "run.aborted"})
EVENT_TYPES = frozenset(cls.__struct_config__.tag for cls in RunEvent.__args__)
