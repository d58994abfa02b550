"""``check_run_invariants``: the loop's promises (DESIGN section 2) as one assertion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._results import RunResult
from .._types import FinishReason, Usage

__all__ = ["check_run_invariants"]

_STEP_ORDER = (
    "step.started",
    "generate.started",
    "generate.completed",
    "tools.executing",
    "tools.executed",
    "step.completed",
)
_TERMINAL = {"run.completed", "run.error", "run.aborted"}


def _fail(invariant: str, detail: str) -> None:
    raise AssertionError(f"invariant {invariant} broken: {detail}")


def check_run_invariants(
    result: RunResult,
    events: Sequence[Any],
    *,
    maximum_steps: int | None = None,
    executions: Mapping[str, int] | None = None,
) -> None:
    """Raise ``AssertionError`` naming the first broken invariant of a finished run.

    Args:
        result: the run's result.
        events: every event of the run, in order (a ``"*"`` listener attached at the
            top of the ``open_run`` block sees them all).
        maximum_steps: the run's step cap, to check ``len(result.steps)`` against.
        executions: how many times each call id actually executed, when the test
            counts them (invariant 4).
    """
    _check_transcript(result)
    _check_events(result, events)
    _check_accounting(result, events, maximum_steps)
    if executions is not None:
        for call_id, count in executions.items():
            if count > 1:
                _fail("4 (at most one execution per call id)", f"{call_id!r} ran {count} times")


def _check_transcript(result: RunResult) -> None:
    messages = result.conversation.messages
    calls: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            if call.id in calls:
                _fail("1 (one result per call)", f"call id {call.id!r} is used twice")
            calls[call.id] = index
    answered: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.role != "tool":
            continue
        call_id = message.tool_call_id
        if call_id is None or call_id not in calls:
            _fail("1 (one result per call)", f"tool message {index} answers no call ({call_id!r})")
            continue
        if call_id in answered:
            _fail("1 (one result per call)", f"call {call_id!r} has more than one result")
        if index < calls[call_id]:
            _fail("1 (one result per call)", f"the result of {call_id!r} precedes its call")
        answered[call_id] = index
    missing = [call_id for call_id in calls if call_id not in answered]
    if missing:
        _fail("1 (one result per call)", f"calls without a result: {missing}")
    for step in result.steps:
        if len(step.results) != len(step.tool_calls) or any(
            r.call_id != c.id for r, c in zip(step.results, step.tool_calls, strict=False)
        ):
            _fail("1 (one result per call)", f"step {step.step} results do not match its calls")


def _check_events(result: RunResult, events: Sequence[Any]) -> None:
    types = [event.type for event in events]
    if not types or types[0] != "run.started":
        _fail("2 (events)", f"the first event is {types[:1]}, not run.started")
    if types.count("run.started") != 1:
        _fail("2 (events)", "run.started is emitted more than once")
    terminals = [t for t in types if t in _TERMINAL]
    if len(terminals) != 1:
        _fail("2 (events)", f"expected exactly one terminal event, saw {terminals}")
    if types[-1] not in _TERMINAL:
        _fail("2 (events)", f"the last event is {types[-1]!r}, not a terminal event")
    per_step: dict[int, list[str]] = {}
    order: list[int] = []
    for event in events:
        step = event.step
        if event.type in _STEP_ORDER or event.type == "step.aborted":
            if step not in per_step:
                per_step[step] = []
                order.append(step)
            per_step[step].append(event.type)
    if order != list(range(1, len(order) + 1)):
        _fail("2 (events)", f"step numbers are {order}, not 1..n without gaps")
    for step, seen in per_step.items():
        ends = [t for t in seen if t in ("step.completed", "step.aborted")]
        if len(ends) != 1:
            _fail("2 (events)", f"step {step} ends {len(ends)} times ({ends})")
        ranks = [_STEP_ORDER.index(t) for t in seen if t in _STEP_ORDER]
        if ranks != sorted(ranks) or len(set(ranks)) != len(ranks):
            _fail("2 (events)", f"step {step} events out of order: {seen}")
        if seen[0] != "step.started":
            _fail("2 (events)", f"step {step} does not begin with step.started: {seen}")
    terminal = events[-1]
    reason = result.finish_reason
    expected = (
        "run.error"
        if reason is FinishReason.ERROR
        else "run.aborted"
        if reason is FinishReason.ABORTED
        else "run.completed"
    )
    if terminal.type != expected:
        _fail("3 (finish reason)", f"finish_reason {reason!r} but terminal event {terminal.type}")
    if expected == "run.completed" and terminal.finish_reason != reason:
        _fail("3 (finish reason)", f"{terminal.finish_reason!r} in the event, {reason!r} in result")


def _check_accounting(result: RunResult, events: Sequence[Any], maximum_steps: int | None) -> None:
    total = Usage()
    for event in events:
        if event.type == "generate.completed":
            total = total + event.usage
    if total != result.usage:
        _fail("3 (usage)", f"result.usage {result.usage} != sum of generate usage {total}")
    if maximum_steps is not None and len(result.steps) > maximum_steps:
        _fail("3 (steps)", f"{len(result.steps)} steps exceed maximum_steps={maximum_steps}")
