"""The run's final answer: the text it ends with, and its structured output.

The answer is the last step's content unless something replaced it: an ``on_error``
hook that turned a failure into an answer, an ``on_maximum_steps`` hook, an output
guardrail. A run with an ``output`` type validates the answer at a stop; an answer
that does not validate gives the model another attempt (``schema_retries``).
"""

from __future__ import annotations

from typing import Any

from ._output import validate_output
from ._results import SchemaValidation, StepResult
from ._run_state import RunState

__all__ = ["FinalAnswer", "answer_of"]


def answer_of(state: RunState) -> FinalAnswer:
    """The run's final answer record, made when something first replaces or validates
    the answer (most runs answer with their last step's content and never make one)."""
    answer = state.answer
    if answer is None:
        answer = state.answer = FinalAnswer()
    return answer


class FinalAnswer:
    """What the run answers, as far as the last step's content does not say it. Kept in
    ``RunState.answer``; it holds no reference back to the run."""

    __slots__ = (
        "attempts",
        "content_override",
        "output",
        "recovered_error",
        "validation",
    )

    def __init__(self) -> None:
        self.content_override: str | None = None
        """The answer in place of the last step's content (written by the hooks and
        guardrails that replace it)."""
        self.recovered_error: str | None = None
        """The error an ``on_error`` hook turned into :attr:`content_override`."""
        self.attempts = 0
        """How many answers were validated against the output type."""
        self.validation: SchemaValidation | None = None
        self.output: Any = None
        """The validated structured output (``None`` until an answer validates)."""

    def validate(self, state: RunState, content: str) -> tuple[bool, str | None]:
        """Validate ``content`` against the run's output type: ``(ok, error message)``."""
        self.attempts += 1
        ok, value, error = validate_output(content, state.config.output)
        if ok:
            self.output = value
        self.validation = SchemaValidation(success=ok, error=error, attempts=self.attempts)
        return ok, error

    def accept(self, state: RunState, step: StepResult) -> bool:
        """Validate a final answer; False means the model gets another attempt."""
        ok, error = self.validate(state, step.content)
        if ok or self.attempts > state.config.schema_retries:
            return True
        state.conversation.append_user_message(
            "Your answer did not match the required output format: "
            f"{error}. Reply again with only the corrected JSON."
        )
        return False
