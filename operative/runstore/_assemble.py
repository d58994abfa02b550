"""Turning decoded rows into the store's records; the same rules for every backend.

The SQL backends aggregate and filter in the database and hand over rows; these
functions give the rows their meaning (what a call's outcome is, what a run cost), and
the detail of one run is built here from its whole journal by the same rules, so a run's
detail and the listings always agree.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from .._core._errors import CorruptRecordError, InvalidArgument
from .._core._types import ToolCall, Usage
from .._pricing import PriceTable
from ..conversation import Message
from ..durable._driver import UNKNOWN_OUTCOME
from ..durable._records import (
    Finished,
    Generated,
    JournalEntry,
    RunRecord,
    StepDone,
    ToolSettled,
    ToolStarted,
)
from ..durable._replay import replay_journal, transcript
from ..durable._rows import decode_entry
from ._records import (
    ModelUsage,
    RunDetail,
    RunSummary,
    StepRecord,
    StepState,
    ToolCallOutcome,
    ToolCallRecord,
)

__all__ = [
    "ModelTally",
    "build_detail",
    "check_filters",
    "corrupt",
    "decode_cursor",
    "decode_journal",
    "encode_cursor",
    "price_models",
    "summarize",
    "tool_call",
    "usage_of",
]

ModelTally = dict[str | None, tuple[int, Usage]]
"""Per model: how many journaled steps it answered, and their usage."""

_FIELDS = ("prompt", "completion", "total", "cache_read", "cache_write", "reasoning")
_cursor_decoder = msgspec.json.Decoder(list[Any])


def corrupt(what: str, problem: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"{what} cannot be read: {problem}. The row is left as it is", what=what, detail=problem
    )


# -- cost ------------------------------------------------------------------------------


def price_models(
    tally: ModelTally, prices: PriceTable
) -> tuple[tuple[ModelUsage, ...], float | None, tuple[str, ...]]:
    """Each model's usage priced; the priced sum (``None`` if any is unpriced); unknown names."""
    by_model: list[ModelUsage] = []
    cost: float | None = 0.0
    unknown: list[str] = []
    for model in sorted(tally, key=lambda name: (name is None, name or "")):
        steps, usage = tally[model]
        price = None if model is None else prices.cost_of(usage, model)
        if price is None and usage != Usage():
            cost = None
            if model is not None:
                unknown.append(model)
        elif cost is not None and price is not None:
            cost += price
        by_model.append(ModelUsage(model=model, steps=steps, usage=usage, cost_usd=price))
    return tuple(by_model), cost, tuple(unknown)


def summarize(record: RunRecord, tally: ModelTally, prices: PriceTable) -> RunSummary:
    """A run's summary from its record and its journaled steps per model."""
    outcome = record.outcome
    journaled = sum((usage for _, usage in tally.values()), Usage())
    usage = outcome.usage if outcome is not None else journaled
    by_model, cost, unknown = price_models(tally, prices)
    unpriced = cost is None or usage != journaled
    return RunSummary(
        run_id=record.run_id,
        agent_name=record.agent_name,
        session_id=record.session_id,
        status=record.status,
        finish_reason=None if outcome is None else outcome.finish_reason,
        created_at=record.created_at,
        updated_at=record.updated_at,
        steps=sum(steps for steps, _ in tally.values()),
        usage=usage,
        cost_usd=None if unpriced else cost,
        unpriced=unpriced,
        unpriced_models=unknown,
        by_model=by_model,
        lease_owner=record.lease_owner,
        lease_expires_at=record.lease_expires_at,
        cancel_requested=record.cancel_reason is not None,
        cancel_reason=record.cancel_reason,
        outcome=outcome,
    )


def usage_of(values: Sequence[Any]) -> Usage:
    """A ``Usage`` from six summed columns (``None`` for zero; numeric types vary)."""
    counts = {name: int(value or 0) for name, value in zip(_FIELDS, values, strict=True)}
    return Usage(
        prompt=counts["prompt"],
        completion=counts["completion"],
        total=counts["total"],
        cache_read=counts["cache_read"],
        cache_write=counts["cache_write"],
        reasoning=counts["reasoning"],
    )


# -- tool calls ------------------------------------------------------------------------


def tool_call(
    run_id: str,
    start: ToolStarted,
    started_at: float,
    *,
    call: ToolCall,
    attempts: int,
    settled: ToolSettled | None,
    settled_at: float | None,
    finished_at: float | None,
    answer: Message | None,
) -> ToolCallRecord:
    """One executed call, by the rule every backend follows.

    Settled: the recorded result. Not settled, run ended: what the clean-up answered (a
    ``cancelled`` result), or, with no answer at all (the run was cancelled while nobody
    ran it), ``cancelled`` with an unknown outcome. Otherwise the call is in flight.
    """
    if start.at is not None:  # the start waited for a later commit: its own time
        started_at = start.at
    if settled is not None and settled.at is not None:
        settled_at = settled.at
    outcome: ToolCallOutcome
    error: str | None = None
    duration: float | None = None
    unknown = False
    result = None
    if settled is not None:
        result = settled.result
        outcome, error = result.outcome, result.error
        unknown = result.outcome == "error" and result.error == UNKNOWN_OUTCOME
        duration = None if unknown else settled.duration
    elif finished_at is not None:
        settled_at = finished_at
        if answer is not None:
            outcome, error = answer.outcome or "cancelled", answer.text
        else:
            outcome, unknown = "cancelled", True
    else:
        outcome, settled_at = "in-flight", None
    return ToolCallRecord(
        run_id=run_id,
        step=start.step,
        call_id=start.call_id,
        tool_name=start.tool_name,
        arguments=call.arguments,
        outcome=outcome,
        result=result,
        error=error,
        started_at=started_at,
        settled_at=settled_at,
        duration=duration,
        attempts=attempts,
        unknown_outcome=unknown,
    )


# -- one run's detail ------------------------------------------------------------------


def decode_journal(where: str, run_id: str, rows: Iterable[Sequence[Any]]) -> list[JournalEntry]:
    """``(seq, kind, record, at)`` rows, decoded; a kind that is not the record's is corrupt."""
    entries = []
    for seq, kind, raw, at in rows:
        entry = decode_entry(where, run_id, seq, raw, at)
        tag = type(entry.record).__struct_config__.tag
        if _text(kind) != tag:
            raise corrupt(
                f"journal entry {seq!r} of run {run_id!r} in {where}",
                f"its kind column says {_text(kind)!r} but it holds a {tag!r} record",
            )
        entries.append(entry)
    return entries


def _text(raw: object) -> object:
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def build_detail(record: RunRecord, entries: list[JournalEntry], prices: PriceTable) -> RunDetail:
    """The detail of one run from its record and its whole journal (in ``seq`` order)."""
    run_id = record.run_id
    replay = replay_journal(run_id, entries)  # raises CorruptRecordError on a bad journal
    tally: ModelTally = {}
    steps: dict[int, dict[str, Any]] = {}
    starts: dict[str, tuple[ToolStarted, float, int]] = {}
    calls: dict[str, ToolCall] = {}
    settles: dict[str, tuple[ToolSettled, float]] = {}
    finished: tuple[Finished, float] | None = None
    for entry in entries:
        item = entry.record
        if isinstance(item, Generated):
            count, usage = tally.get(item.model, (0, Usage()))
            tally[item.model] = (count + 1, usage + item.usage)
            at = entry.at if item.at is None else item.at  # its own time, if it waited
            steps[item.step] = {"generated": item, "at": at, "done": None}
            calls.update((call.id, call) for call in item.message.tool_calls)
        elif isinstance(item, ToolStarted):
            first = starts.get(item.call_id)
            starts[item.call_id] = (
                (item, entry.at, 1) if first is None else (first[0], first[1], first[2] + 1)
            )
        elif isinstance(item, ToolSettled):
            settles[item.result.call_id] = (item, entry.at)
        elif isinstance(item, StepDone):
            steps[item.step]["done"] = (item, entry.at)
        elif isinstance(item, Finished):
            finished = (item, entry.at)
    answers = {
        message.tool_call_id: message
        for message in (finished[0].messages if finished is not None else ())
        if message.role == "tool"
    }
    tool_calls = []
    for call_id, (start, started_at, attempts) in starts.items():
        settle = settles.get(call_id)
        tool_calls.append(
            tool_call(
                run_id,
                start,
                started_at,
                call=calls[call_id],
                attempts=attempts,
                settled=None if settle is None else settle[0],
                settled_at=None if settle is None else settle[1],
                finished_at=None if finished is None else finished[1],
                answer=answers.get(call_id),
            )
        )
    step_records = []
    for number, step in steps.items():
        generated: Generated = step["generated"]
        done = step["done"]
        state: StepState = (
            "completed" if done is not None else "aborted" if finished else "in-progress"
        )
        model = generated.model
        step_records.append(
            StepRecord(
                step=number,
                state=state,
                message=generated.message,
                content=generated.message.text,
                tool_calls=generated.message.tool_calls,
                results=done[0].results if done is not None else (),
                usage=generated.usage,
                model=model,
                cost_usd=None if model is None else prices.cost_of(generated.usage, model),
                committed_at=step["at"],
                completed_at=done[1] if done is not None else None,
            )
        )
    return RunDetail(
        summary=summarize(record, tally, prices),
        steps=tuple(step_records),
        tool_calls=tuple(tool_calls),
        transcript=transcript(replay),
    )


# -- cursors ---------------------------------------------------------------------------


def encode_cursor(kind: str, *values: object) -> str:
    raw = msgspec.json.encode([kind, *values])
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: object, types: Sequence[Any]) -> list[Any]:
    """The values of a cursor made by :func:`encode_cursor` for ``kind``."""
    if not isinstance(cursor, str):
        raise InvalidArgument(f"after= takes a cursor (a str from next_cursor), not {cursor!r}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = _cursor_decoder.decode(raw)
    except (binascii.Error, ValueError, msgspec.DecodeError):
        values = []
    if (
        len(values) != len(types) + 1
        or values[0] != kind
        or not all(
            isinstance(value, wanted) and not isinstance(value, bool)
            for value, wanted in zip(values[1:], types, strict=True)
        )
    ):
        raise InvalidArgument(f"after={cursor!r} is not a cursor of this listing ({kind})")
    return values[1:]


def check_filters(
    *, limit: object, since: object, until: object, texts: Mapping[str, object]
) -> None:
    """Eager checks of the arguments every listing shares."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be an int >= 1, not {limit!r}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value)
        ):
            raise InvalidArgument(f"{name} must be epoch seconds (a number) or None, not {value!r}")
    for name, value in texts.items():
        if value is not None and (not isinstance(value, str) or "\x00" in value):
            raise InvalidArgument(f"{name} must be a str without NUL or None, not {value!r}")
