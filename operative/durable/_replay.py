"""Replaying a journal: the state a recovered run continues from.

Completed steps come back whole (assistant message and final results, in the transcript
and as ``StepResult``s). A step cut short comes back as its recorded assistant message
plus what its calls did: settled calls keep their recorded result and are never run
again; a call that started but never settled is run again only if its tool is
idempotent, otherwise it gets an error result that says the outcome is unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._core._errors import CorruptRecordError
from .._core._model import GenerateResponse
from .._core._results import StepResult
from .._core._types import ToolResult, Usage
from ..conversation import ConversationHistory, Message, cancelled_result, tool_result_message
from ._records import Finished, Generated, JournalEntry, Started, StepDone, ToolSettled, ToolStarted

if TYPE_CHECKING:
    from .._core._control import RunControl

__all__ = [
    "PartialStep",
    "Replay",
    "recorded_answer",
    "replay_journal",
    "replay_switches",
    "transcript",
]


@attrs.define(kw_only=True)
class PartialStep:
    """A step whose assistant message is recorded but whose step record is not."""

    step: int
    message: Message
    usage: Usage
    model: str | None
    stop_reason: str | None = None
    settled: dict[str, ToolResult] = attrs.Factory(dict)
    started: set[str] = attrs.Factory(set)


@attrs.define(kw_only=True)
class Replay:
    """What a journal says: enough to continue the run where it stopped."""

    run_id: str
    started: Started
    history: ConversationHistory
    """The transcript up to the last completed step (the partial step not included)."""
    steps: list[StepResult]
    usage: Usage
    partial: PartialStep | None
    next_seq: int
    finished: Finished | None = None

    @property
    def next_step(self) -> int:
        """The step the recovered run starts with (the partial one, if any)."""
        if self.partial is not None:
            return self.partial.step
        return (self.steps[-1].step if self.steps else 0) + 1


def _broken(run_id: str, entry: JournalEntry | None, problem: str) -> CorruptRecordError:
    where = f"journal of run {run_id!r}" + (f" at seq {entry.seq}" if entry is not None else "")
    return CorruptRecordError(
        f"the {where} cannot be replayed: {problem}. The journal is left as it is; cancel "
        "the run or repair the journal",
        what=where,
        detail=problem,
    )


def replay_journal(run_id: str, entries: Sequence[JournalEntry]) -> Replay:
    """Rebuild a run's state from its journal (entries in ``seq`` order).

    Raises:
        CorruptRecordError: the journal is not one a run could have written (no start,
            a gap, a step out of order, a result for a call nobody made).
    """
    if not entries or not isinstance(entries[0].record, Started) or entries[0].seq != 0:
        raise _broken(run_id, entries[0] if entries else None, "it does not begin with 'started'")
    started = entries[0].record
    messages: list[Message] = list(started.messages)
    steps: list[StepResult] = []
    usage = Usage()
    partial: PartialStep | None = None
    finished: Finished | None = None
    for expected, entry in enumerate(entries):
        if entry.seq != expected:
            raise _broken(run_id, entry, f"sequence number {entry.seq} where {expected} belongs")
        if finished is not None:
            raise _broken(run_id, entry, "an entry follows 'finished'")
        record = entry.record
        if expected == 0:
            continue
        if isinstance(record, Generated):
            if partial is not None:
                raise _broken(run_id, entry, f"step {partial.step} has no 'step.done'")
            last = steps[-1].step if steps else 0
            if record.step <= last:
                raise _broken(run_id, entry, f"step {record.step} comes after step {last}")
            messages.extend(record.before)
            partial = PartialStep(
                step=record.step,
                message=record.message,
                usage=record.usage,
                model=record.model,
                stop_reason=record.stop_reason,
            )
            usage = usage + record.usage
        elif isinstance(record, ToolStarted | ToolSettled):
            call_id = record.call_id if isinstance(record, ToolStarted) else record.result.call_id
            if partial is None or record.step != partial.step:
                raise _broken(run_id, entry, f"call {call_id!r} belongs to no open step")
            if call_id not in {call.id for call in partial.message.tool_calls}:
                raise _broken(run_id, entry, f"step {partial.step} made no call {call_id!r}")
            if isinstance(record, ToolStarted):
                if record.parked:  # waiting for an approval: it has not run
                    partial.started.discard(call_id)
                else:
                    partial.started.add(call_id)
            else:
                partial.settled[call_id] = record.result
        elif isinstance(record, StepDone):
            if partial is None or record.step != partial.step:
                raise _broken(run_id, entry, f"'step.done' for step {record.step}, not open")
            calls = partial.message.tool_calls
            if [r.call_id for r in record.results] != [c.id for c in calls]:
                raise _broken(run_id, entry, "its results do not answer the step's calls")
            messages.append(partial.message)
            messages.extend(tool_result_message(result) for result in record.results)
            steps.append(
                StepResult(
                    step=record.step,
                    content=partial.message.text,
                    tool_calls=calls,
                    results=record.results,
                    usage=partial.usage,
                    run_usage=usage,
                    stop_reason=partial.stop_reason,
                )
            )
            partial = None
        elif isinstance(record, Finished):
            finished = record
        else:  # pragma: no cover - the union is exhaustive
            raise _broken(run_id, entry, f"unexpected {type(record).__name__}")
    return Replay(
        run_id=run_id,
        started=started,
        history=ConversationHistory(
            messages=tuple(messages), metadata=dict(started.conversation_metadata)
        ),
        steps=steps,
        usage=usage,
        partial=partial,
        next_seq=len(entries),
        finished=finished,
    )


def transcript(replay: Replay) -> ConversationHistory:
    """The run's transcript as the journal knows it (what a finished run ended with)."""
    messages = list(replay.history.messages)
    partial = replay.partial
    finished = replay.finished
    if partial is not None:
        messages.append(partial.message)
        if finished is None:
            messages.extend(
                tool_result_message(partial.settled[call.id])
                for call in partial.message.tool_calls
                if call.id in partial.settled
            )
        else:
            # Clean-up answers the step's calls in 'finished'; a run ended from outside
            # (cancelled through the engine while nobody held it) had no clean-up: its
            # settled calls keep their results, the others are cancelled.
            answered = {m.tool_call_id for m in finished.messages if m.role == "tool"}
            outcome = finished.outcome
            why = outcome.abort_reason or outcome.error or outcome.finish_reason
            messages.extend(
                tool_result_message(partial.settled.get(call.id) or cancelled_result(call, why))
                for call in partial.message.tool_calls
                if call.id not in answered
            )
    if finished is not None:
        messages.extend(finished.messages)  # the step's results, as clean-up left them
    return ConversationHistory(messages=tuple(messages), metadata=replay.history.metadata)


def replay_switches(run: RunControl, steps: Any, *, complete: bool) -> bool:
    """Switch a rebuilt run to the configuration in charge after its journaled steps.

    Each step whose switching call (a handoff) succeeded switched at its end; those
    switches are applied again, in order and silently (they were announced before the
    crash). ``complete``: the journal ends between steps. Returns whether the last step
    switched, so the rebuilt loop does not check it against the old stop conditions.
    """
    switched = False
    last = steps[-1].step if steps else 0
    for step in steps:
        switched = False
        for result in step.results:
            if result.outcome != "success":
                continue
            # Looked up in the configuration in charge at that step (it changes).
            tool = run.config.toolbox.get(result.tool_name)
            if tool is None or tool.switch is None:
                continue
            tool.switch(result.call_id).replay(run, step, last=complete and step.step == last)
            switched = True
            break  # one switch per step
    return switched


def recorded_answer(replay: Replay | None, step: int) -> GenerateResponse | None:
    """The recorded answer of ``step``, when it is the step a crash cut short."""
    if replay is None or replay.partial is None or replay.partial.step != step:
        return None
    partial = replay.partial
    message = partial.message
    content = message.content if isinstance(message.content, str) else message.text
    return GenerateResponse(
        content=content,
        tool_calls=message.tool_calls,
        usage=partial.usage,
        model=partial.model,
        stop_reason=partial.stop_reason,
        metadata=dict(message.metadata),
    )
