"""The crash kit's invariants: what a stored run and the tools' effect log must satisfy."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from operative._core._errors import CorruptRecordError
from operative.durable import (
    Finished,
    JournalEntry,
    ToolSettled,
    ToolStarted,
    replay_journal,
    transcript,
)
from operative.durable._driver import UNKNOWN_OUTCOME

Effects = list[dict[str, Any]]


async def check_stored_run(
    run_id: str,
    engine: Any,
    store: Any,
    *,
    acked: bool,
    snapshots: Sequence[Sequence[JournalEntry]],
    effects: Effects,
    idempotent: Callable[[str], bool],
    stats: Counter[str],
) -> list[str]:
    """Everything wrong with run ``run_id`` once every recovery ended (empty: nothing).

    ``snapshots`` are its journal after each kill (each must be a prefix of the next),
    ``effects`` the effect-log lines of its calls.
    """
    record = await engine.get(run_id)
    if record is None:
        if acked:
            return [f"run {run_id} was acknowledged as durably started, then lost"]
        stats["runs never started"] += 1
        ran = sorted({line["call"] for line in effects})
        return [f"run {run_id} has no record, yet its calls {ran} had effects"] if ran else []
    entries = await store.read(run_id)
    problems: list[str] = []
    for earlier, later in itertools.pairwise([*snapshots, entries]):
        if list(later[: len(earlier)]) != list(earlier):
            problems.append(f"run {run_id}: recovery rewrote journal entries written before a kill")
            break
    if record.status == "running":
        return [*problems, f"run {run_id} is still running after recovery: {record}"]
    try:
        replay = replay_journal(run_id, entries)
    except CorruptRecordError as error:
        return [*problems, f"run {run_id}: {error}"]
    if replay.finished is None or not entries or not isinstance(entries[-1].record, Finished):
        return [*problems, f"run {run_id} ended {record.status} but its journal has no end"]
    if record.outcome != replay.finished.outcome:
        problems.append(
            f"run {run_id}: the stored record ({record.outcome}) disagrees with its journal "
            f"({replay.finished.outcome})"
        )
    stats[f"runs {record.status}"] += 1
    problems += check_journal(run_id, entries, effects, idempotent, stats)
    return problems


def check_journal(
    run_id: str,
    entries: Sequence[JournalEntry],
    effects: Effects,
    idempotent: Callable[[str], bool],
    stats: Counter[str],
) -> list[str]:
    """Sequence numbers and steps contiguous, one result per call, settled calls never
    re-run, a cut call of a tool that is not idempotent reported and not repeated."""
    problems: list[str] = []
    if not entries:
        return [f"run {run_id} has an empty journal"]
    seqs = [entry.seq for entry in entries]
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))):
        problems.append(f"run {run_id}: journal sequence numbers not contiguous: {seqs}")
    try:
        replay = replay_journal(run_id, entries)
    except CorruptRecordError as error:
        return [*problems, f"run {run_id}: {error}"]
    numbers = [step.step for step in replay.steps]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"run {run_id}: steps not contiguous: {numbers}")
    started: Counter[str] = Counter()
    settled: Counter[str] = Counter()
    settled_at: dict[str, float] = {}
    for entry in entries:
        if isinstance(entry.record, ToolStarted) and not entry.record.parked:
            started[entry.record.call_id] += 1
        elif isinstance(entry.record, ToolSettled):
            settled[entry.record.result.call_id] += 1
            settled_at.setdefault(entry.record.result.call_id, entry.at)
    for call, count in settled.items():
        if count > 1:
            problems.append(f"run {run_id} call {call} has {count} results in the journal")
    for step in replay.steps:
        answered = Counter(result.call_id for result in step.results)
        problems.extend(
            f"run {run_id} step {step.step} call {asked.id} ({asked.name}) has "
            f"{answered[asked.id]} results"
            for asked in step.tool_calls
            if answered[asked.id] != 1
        )
    if replay.finished is not None and replay.finished.outcome.finish_reason != "error":
        messages = transcript(replay).messages
        calls = [asked.id for m in messages if m.role == "assistant" for asked in m.tool_calls]
        answers = Counter(m.tool_call_id for m in messages if m.role == "tool")
        problems.extend(
            f"run {run_id}: call {call_id} has {answers[call_id]} answers in its transcript"
            for call_id in calls
            if answers[call_id] != 1
        )
    results = [result for step in replay.steps for result in step.results]
    if replay.partial is not None:
        results += replay.partial.settled.values()
    for result in results:
        call = result.call_id
        where = f"run {run_id} call {call} ({result.tool_name})"
        mine = [line for line in effects if line["call"] == call]
        late = [line for line in mine if call in settled_at and line["at"] > settled_at[call]]
        if late:
            problems.append(
                f"{where} ran again after its result was committed "
                f"(effects {[line['key'] for line in late]} by {late[0]['worker']})"
            )
        if idempotent(result.tool_name):
            stats["idempotent calls run again" if started[call] > 1 else "calls run once"] += 1
            continue
        if result.error == UNKNOWN_OUTCOME:
            stats["calls cut short, outcome unknown"] += 1
            if started[call] > 1:
                problems.append(f"{where} was cut short, then started again")
        elif started[call] > 1:
            problems.append(
                f"{where} is not idempotent, was cut short and ran again "
                f"(started {started[call]} times) instead of being reported unknown"
            )
        else:
            stats["calls run once"] += 1
    return problems


def check_effects(effects: Effects) -> list[str]:
    """An effect that is not repeatable happened at most once."""
    counts = Counter(line["key"] for line in effects if not line["repeatable"])
    problems = []
    for key, count in counts.items():
        if count > 1:
            where = sorted(
                {
                    f"{line['run']} {line['call']} by {line['worker']}"
                    for line in effects
                    if line["key"] == key
                }
            )
            problems.append(f"effect {key!r} happened {count} times ({'; '.join(where)})")
    return problems
