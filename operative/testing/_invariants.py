"""``check_run_invariants``: the loop's promises (DESIGN section 2) as one assertion.

Each broken promise raises ``AssertionError("invariant N (what it promises) broken:
detail")``. Invariants 5 (the caller's history is never mutated) and 6 (no task
outlives ``open_run``) are about the caller's objects and tasks, not the result, so a
test checks them itself (``tests/test_invariants.py`` shows how).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .._core._results import RunResult
from .._core._types import FinishReason, Usage

__all__ = ["check_run_invariants"]

ONE_RESULT_PER_CALL = "1 (every tool call has exactly one result)"
EVENT_ORDER = "2 (run and step events come once each, in order)"
ACCOUNTING = "3 (usage, step count and finish reason agree)"
AT_MOST_ONCE = "4 (a tool call executes at most once)"

_TERMINAL = frozenset({"run.completed", "run.error", "run.aborted"})
_STEP_EVENTS = frozenset(
    {
        "step.started",
        "generate.started",
        "generate.error",
        "generate.retry",
        "generate.completed",
        "step.generated",
        "tools.executing",
        "tools.executed",
        "step.completed",
        "step.aborted",
    }
)
# Within a step: which event may follow which state, and the state it leads to.
_NEXT: dict[str, dict[str, str]] = {
    "started": {"generate.started": "generating"},
    "generating": {"generate.completed": "answered", "generate.error": "failed"},
    "failed": {"generate.retry": "retrying", "generate.started": "generating"},
    "retrying": {"generate.started": "generating"},
    "answered": {"step.generated": "generated"},
    "generated": {"tools.executing": "executing", "step.completed": "ended"},
    "executing": {"tools.executed": "executed"},
    "executed": {"step.completed": "ended"},
}
_PER_STEP_ORDER = (
    "step.started < generate.started (< generate.error < generate.retry < generate.started)* "
    "< generate.completed < step.generated < tools.executing < tools.executed "
    "< step.completed, or step.aborted at any point"
)


def _fail(invariant: str, detail: str) -> NoReturn:
    raise AssertionError(f"invariant {invariant} broken: {detail}")


def check_run_invariants(
    result: RunResult,
    events: Sequence[Any],
    *,
    maximum_steps: int | None = None,
    executions: Mapping[str, int] | None = None,
) -> None:
    """Raise ``AssertionError`` naming the first broken invariant of a finished run.

    Checks invariants 1 to 4 of the design: one tool result per call in the final
    transcript and in every step; ``run.started`` first and one terminal event last;
    every step's events in order (``step.started``, then generate attempts, each
    ``generate.started`` followed by ``generate.error``/``generate.retry`` or, last,
    ``generate.completed``; then ``step.generated``, ``tools.executing``,
    ``tools.executed``, ``step.completed``; ``step.aborted`` may cut a step anywhere),
    steps numbered 1..n, each ending once, and ``result.steps`` agreeing with them;
    usage equal to the sum of every generate attempt; the step count within
    ``maximum_steps``; the finish reason, usage and step count of the terminal event
    equal to the result's; no call id run or offered for execution twice.

    Args:
        result: the run's result.
        events: every event of the run, in order: attach ``run.add_listener("*",
            events.append)`` at the top of the ``open_run`` block (or use the
            ``run_recorder`` fixture). A filtered stream is not enough.
        maximum_steps: the run's step cap, to check ``len(result.steps)`` against.
        executions: how many times each call id's tool body actually ran, when the
            test counts them (invariant 4).
    """
    _check_transcript(result)
    _check_run_events(events)
    _check_steps(result, events)
    _check_accounting(result, events, maximum_steps)
    _check_executions(events, executions)


def _check_transcript(result: RunResult) -> None:
    messages = result.conversation.messages
    calls: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            if call.id in calls:
                _fail(ONE_RESULT_PER_CALL, f"call id {call.id!r} is used by two calls")
            calls[call.id] = index
    answered: dict[str, int] = {}
    for index, message in enumerate(messages):
        if message.role != "tool":
            continue
        call_id = message.tool_call_id
        if call_id is None or call_id not in calls:
            _fail(ONE_RESULT_PER_CALL, f"tool message {index} answers no call ({call_id!r})")
        if call_id in answered:
            _fail(ONE_RESULT_PER_CALL, f"call {call_id!r} has more than one result")
        if index < calls[call_id]:
            _fail(ONE_RESULT_PER_CALL, f"the result of {call_id!r} comes before its call")
        answered[call_id] = index
    missing = [call_id for call_id in calls if call_id not in answered]
    if missing:
        _fail(ONE_RESULT_PER_CALL, f"calls without a result in the transcript: {missing}")
    for step in result.steps:
        if len(step.results) != len(step.tool_calls) or any(
            r.call_id != c.id for r, c in zip(step.results, step.tool_calls, strict=False)
        ):
            _fail(
                ONE_RESULT_PER_CALL,
                f"step {step.step} has calls {[c.id for c in step.tool_calls]} but results "
                f"for {[r.call_id for r in step.results]}",
            )


def _check_run_events(events: Sequence[Any]) -> None:
    types = [event.type for event in events]
    if not types or types[0] != "run.started":
        _fail(EVENT_ORDER, f"the first event is {types[:1]}, not run.started")
    if types.count("run.started") != 1:
        _fail(EVENT_ORDER, f"run.started is emitted {types.count('run.started')} times")
    terminals = [t for t in types if t in _TERMINAL]
    if len(terminals) != 1:
        _fail(EVENT_ORDER, f"expected exactly one terminal event, saw {terminals}")
    if types[-1] not in _TERMINAL:
        _fail(EVENT_ORDER, f"the last event is {types[-1]!r}, not the terminal event")


def _step_states(events: Sequence[Any]) -> dict[int, list[str]]:
    """Walk the step events; returns each step's event types, checking their order."""
    per_step: dict[int, list[str]] = {}
    state: dict[int, str] = {}
    open_step: int | None = None
    for event in events:
        kind = event.type
        if kind not in _STEP_EVENTS:
            continue
        step = event.step
        if kind == "step.started":
            if step in per_step:
                _fail(EVENT_ORDER, f"step {step} starts twice")
            if open_step is not None:
                _fail(EVENT_ORDER, f"step {step} starts before step {open_step} ended")
            expected = len(per_step) + 1
            if step != expected:
                _fail(
                    EVENT_ORDER,
                    f"step numbers must be 1..n without gaps: step {step} "
                    f"started where step {expected} was due",
                )
            per_step[step] = [kind]
            state[step] = "started"
            open_step = step
            continue
        if step not in per_step:
            _fail(EVENT_ORDER, f"{kind} for step {step}, which never started")
        seen = per_step[step]
        seen.append(kind)
        current = state[step]
        if current == "ended" or step != open_step:
            _fail(EVENT_ORDER, f"{kind} for step {step} after the step ended: {seen}")
        if kind == "step.aborted":
            state[step] = "ended"
        else:
            following = _NEXT[current].get(kind)
            if following is None:
                _fail(
                    EVENT_ORDER,
                    f"step {step} has {kind} out of order ({seen}); the order is {_PER_STEP_ORDER}",
                )
            if kind == "step.completed" and current == "generated" and event.tool_calls:
                _fail(EVENT_ORDER, f"step {step} completed with calls but no tools events: {seen}")
            state[step] = following
        if state[step] == "ended":
            open_step = None
    for step, current in state.items():
        if current != "ended":
            _fail(
                EVENT_ORDER,
                f"step {step} never ended (no step.completed or step.aborted): {per_step[step]}",
            )
    return per_step


def _check_steps(result: RunResult, events: Sequence[Any]) -> None:
    per_step = _step_states(events)
    numbers = [step.step for step in result.steps]
    if numbers != list(range(1, len(numbers) + 1)):
        _fail(EVENT_ORDER, f"result.steps are numbered {numbers}, not 1..n")
    last = len(per_step)
    for step in result.steps:
        seen = per_step.get(step.step)
        if seen is None:
            _fail(EVENT_ORDER, f"result.steps holds step {step.step}, which has no events")
        end = seen[-1]
        if step.aborted:
            if end != "step.aborted":
                _fail(
                    EVENT_ORDER, f"step {step.step} is aborted in result.steps but ends with {end}"
                )
            if step.step != last:
                _fail(EVENT_ORDER, f"step {step.step} was aborted but step {last} followed it")
            if "generate.completed" not in seen:
                _fail(
                    EVENT_ORDER,
                    f"step {step.step} is in result.steps but its generate call never completed",
                )
        elif end != "step.completed":
            _fail(EVENT_ORDER, f"step {step.step} is in result.steps but ends with {end}")
    recorded = set(numbers)
    for number, seen in per_step.items():
        if number in recorded:
            continue
        if seen[-1] == "step.completed":
            _fail(EVENT_ORDER, f"step {number} completed but is missing from result.steps")
        if "step.generated" in seen:
            _fail(
                EVENT_ORDER,
                f"step {number} generated its message but is missing from "
                "result.steps (a step cut during its tools is kept, as aborted)",
            )
        if number != last:
            _fail(EVENT_ORDER, f"step {number} was aborted but step {last} followed it")


def _check_accounting(result: RunResult, events: Sequence[Any], maximum_steps: int | None) -> None:
    total = Usage()
    for event in events:
        # Every model call the run paid for: attempts, failed attempts, summaries
        # written by context compaction, and what its subagents spent.
        if event.type in (
            "generate.completed",
            "generate.error",
            "context.compacted",
            "subagent.completed",
        ):
            total = total + event.usage
    if total != result.usage:
        _fail(
            ACCOUNTING,
            f"result.usage is {result.usage}, but the generate attempts reported {total} in all",
        )
    if maximum_steps is not None and len(result.steps) > maximum_steps:
        _fail(ACCOUNTING, f"{len(result.steps)} steps exceed maximum_steps={maximum_steps}")
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
        _fail(
            ACCOUNTING,
            f"finish_reason is {str(reason)!r} but the terminal event is {terminal.type}",
        )
    if expected == "run.completed" and terminal.finish_reason != reason:
        _fail(
            ACCOUNTING,
            f"run.completed says {str(terminal.finish_reason)!r}, the result {str(reason)!r}",
        )
    if terminal.usage != result.usage:
        _fail(
            ACCOUNTING, f"{terminal.type} reports usage {terminal.usage}, the result {result.usage}"
        )
    if terminal.steps != len(result.steps):
        _fail(
            ACCOUNTING,
            f"{terminal.type} reports {terminal.steps} steps, the result has {len(result.steps)}",
        )


def _check_executions(events: Sequence[Any], executions: Mapping[str, int] | None) -> None:
    offered: dict[str, int] = {}
    for event in events:
        if event.type == "tools.executing":
            for call in event.calls:
                if call.id in offered:
                    _fail(
                        AT_MOST_ONCE,
                        f"call {call.id!r} was sent to execution in step "
                        f"{offered[call.id]} and again in step {event.step}",
                    )
                offered[call.id] = event.step
    if executions is not None:
        for call_id, count in executions.items():
            if count > 1:
                _fail(AT_MOST_ONCE, f"call {call_id!r} ran {count} times")
