"""Stop conditions: predicates over the step that just completed.

A run stops after a step when any of its conditions holds. A condition is any callable
taking the :class:`~operative.StepResult` (sync or async) and returning a truth value.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from ._core._errors import InvalidArgument
from ._core._results import StepResult

__all__ = [
    "StopCondition",
    "no_tool_calls",
    "pending_approval",
    "step_count_is",
    "tool_called",
    "truncated",
    "usage_exceeds",
]

StopCondition: TypeAlias = Callable[[StepResult], bool | Awaitable[bool]]


def no_tool_calls() -> StopCondition:
    """Stop after a step in which the model called no tool (a plain answer)."""

    def condition(step: StepResult) -> bool:
        return not step.tool_calls

    condition.__qualname__ = "no_tool_calls()"
    return condition


def tool_called(*names: str) -> StopCondition:
    """Stop after a step that called any of ``names`` (e.g. a ``submit`` or handoff tool)."""
    if not names or not all(isinstance(n, str) and n for n in names):
        raise InvalidArgument("tool_called() takes one or more tool names")
    wanted = frozenset(names)

    def condition(step: StepResult) -> bool:
        return any(call.name in wanted for call in step.tool_calls)

    condition.__qualname__ = f"tool_called{tuple(names)!r}"
    return condition


def pending_approval() -> StopCondition:
    """Stop after a step with a result waiting for approval (park-on-approval).

    Combine with :func:`no_tool_calls`: on a plain reply this one never fires.
    """

    def condition(step: StepResult) -> bool:
        return any(result.outcome == "action-required" for result in step.results)

    condition.__qualname__ = "pending_approval()"
    return condition


def step_count_is(count: int) -> StopCondition:
    """Stop once ``count`` steps have completed."""
    if not isinstance(count, int) or count < 1:
        raise InvalidArgument(f"step_count_is() takes a positive step count, got {count!r}")

    def condition(step: StepResult) -> bool:
        return step.step >= count

    condition.__qualname__ = f"step_count_is({count})"
    return condition


def usage_exceeds(tokens: int) -> StopCondition:
    """Stop after the step that takes the run's total usage past ``tokens``.

    The step that crosses the line completes; for a hard cap that cuts a step short,
    use a budget instead.
    """
    if not isinstance(tokens, int) or tokens < 0:
        raise InvalidArgument(f"usage_exceeds() takes a token count >= 0, got {tokens!r}")

    def condition(step: StepResult) -> bool:
        return step.run_usage.total > tokens

    condition.__qualname__ = f"usage_exceeds({tokens})"
    return condition


def truncated() -> StopCondition:
    """Stop after a step whose answer was cut at the token limit (its provider said
    ``length``, ``max_tokens`` or kin: see :attr:`~operative.StepResult.truncated`).

    The run then ends with ``finish_reason == "stop-condition"`` and
    ``result.truncated`` true, instead of acting on an incomplete answer.
    """

    def condition(step: StepResult) -> bool:
        return step.truncated

    condition.__qualname__ = "truncated()"
    return condition
