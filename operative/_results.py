"""What a run produces: one ``StepResult`` per step and the final ``RunResult``."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from ._types import FinishReason, ToolCall, ToolResult, Usage
from .conversation import Conversation

__all__ = ["RunResult", "SchemaValidation", "StepResult"]


class StepResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One step: what the model said, the calls it made and how each settled."""

    step: int
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    """One result per call, in call order."""
    usage: Usage = Usage()
    """Usage of this step's generate call (every attempt)."""
    run_usage: Usage = Usage()
    """The run's usage so far, this step included."""
    aborted: bool = False
    """True when the step was cut during its tools (unfinished calls are ``cancelled``)."""

    @property
    def pending_approvals(self) -> tuple[ToolResult, ...]:
        """The results of this step that wait for a human's approval."""
        return tuple(r for r in self.results if r.outcome == "action-required")


class SchemaValidation(msgspec.Struct, frozen=True, kw_only=True):
    """How the final answer fared against the run's ``output`` type."""

    success: bool
    error: str | None = None
    attempts: int = 1
    """How many final answers were validated (1 + the retries used)."""


@attrs.frozen(kw_only=True)
class RunResult:
    """The outcome of a run. ``finish_reason`` agrees with the terminal event."""

    conversation: Conversation
    """The run's live conversation; ``.current`` gives an immutable snapshot."""
    steps: tuple[StepResult, ...]
    content: str
    """The final answer's text (the last step's content, unless a hook replaced it)."""
    usage: Usage
    """The sum of every generate attempt's usage."""
    finish_reason: FinishReason
    error: BaseException | None = None
    """What ended the run when ``finish_reason == "error"``."""
    output: Any = None
    """The validated structured output, when the run has an ``output`` type."""
    schema_validation: SchemaValidation | None = None
    run_id: str = ""
    abort_reason: str | None = None
    """Why the run was aborted or cut short (abort reason, budget that ran out)."""
