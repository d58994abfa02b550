"""What a run produces: one ``StepResult`` per step and the final ``RunResult``."""

from __future__ import annotations

from typing import Any

import msgspec

from ..conversation import Conversation
from ._types import FinishReason, ToolCall, ToolResult, Usage

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
    stop_reason: str | None = None
    """Why the model's answer ended, as its provider says (``"stop"``, ``"tool_calls"``,
    ``"end_turn"``, ``"length"``, ``"max_tokens"``, ...); ``None`` when it did not say."""

    @property
    def pending_approvals(self) -> tuple[ToolResult, ...]:
        """The results of this step that wait for a human's approval."""
        return tuple(r for r in self.results if r.outcome == "action-required")

    @property
    def truncated(self) -> bool:
        """True when the answer was cut at the token limit (``max_tokens`` and kin):
        its text is incomplete and its tool calls may be too."""
        return self.stop_reason is not None and self.stop_reason.lower() in TRUNCATED


TRUNCATED = frozenset({"length", "max_tokens", "max_output_tokens", "model_length"})
"""Stop reasons (lower-cased) by which providers say an answer hit the token limit."""


class SchemaValidation(msgspec.Struct, frozen=True, kw_only=True):
    """How the final answer fared against the run's ``output`` type."""

    success: bool
    error: str | None = None
    attempts: int = 1
    """How many final answers were validated (1 + the retries used)."""


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a run. ``finish_reason`` agrees with the terminal event.

    A record (``msgspec.structs.replace`` makes a changed copy); it may sit in a cycle
    (a ``CleanupError`` in ``error`` holds the result), so the collector tracks it.
    """

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

    @property
    def stop_reason(self) -> str | None:
        """Why the last step's answer ended, as the provider says (see
        :attr:`StepResult.stop_reason`); ``None`` without steps."""
        return self.steps[-1].stop_reason if self.steps else None

    @property
    def truncated(self) -> bool:
        """True when the final answer was cut at the token limit."""
        return bool(self.steps) and self.steps[-1].truncated
