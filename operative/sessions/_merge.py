"""How two versions of one session become one: the merge rules ``save`` and runs use.

``merge_sessions(stored, candidate)`` is applied when ``SessionStore.save`` finds that the
stored session moved on since the candidate was read (their ``revision`` differ):

- messages merge by id: every stored message stays, in stored order; the candidate's
  messages whose id the store does not hold are appended, in the candidate's order;
- session metadata and conversation metadata merge by key: the candidate's value wins
  for a key both hold; keys only one side holds are kept (so a key the candidate removed
  survives a concurrent edit: remove keys through ``update``);
- runs merge by run id: a settled run (one with an outcome) is never replaced by an
  unsettled one, and a stored outcome is never overwritten by another;
- ``id``, ``agent_name`` and ``created_at`` are the stored ones.

``apply_run(current, transcript, ...)`` settles a session run: the run's transcript
replaces the messages it started from, and messages appended concurrently by others are
kept after it. Conversation metadata is a three-way merge, the rule the specification
gives for a recovered run whose session was edited meanwhile:

- the run's ``RunRef`` holds ``base_conversation_metadata`` (captured when the turn was
  reserved): only the keys the run changed from that base are applied over the current
  metadata (the run's value wins a key both changed); concurrent edits to other keys,
  removals included, are kept. This base, not the journal's, is used on recovery too: a
  run that changed metadata before its journal began would otherwise lose the change;
- an older ``RunRef`` without that snapshot: the current metadata wins every conflict,
  and only keys the current metadata lacks are added from the run;
- a ``RunRef`` already settled (a repeated reconciliation): the current metadata is kept
  as it is;
- no ``RunRef`` at all: the keys changed from ``base`` are applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..conversation import ConversationHistory
from ._records import AgentSession, RunOutcome, RunRef

__all__ = ["apply_run", "merge_sessions"]


def merge_sessions(stored: AgentSession, candidate: AgentSession) -> AgentSession:
    """``stored`` with ``candidate``'s concurrent edits merged in (see the module doc)."""
    history = stored.conversation_history
    known = {message.id for message in history.messages}
    messages = history.messages + tuple(
        m for m in candidate.conversation_history.messages if m.id not in known
    )
    merged_history = ConversationHistory(
        messages=messages,
        metadata={**history.metadata, **candidate.conversation_history.metadata},
    )
    return msgspec.structs.replace(
        stored,
        conversation_history=merged_history,
        metadata={**stored.metadata, **candidate.metadata},
        runs=_merge_runs(stored.runs, candidate.runs),
        updated_at=max(stored.updated_at, candidate.updated_at),
    )


def _merge_runs(stored: tuple[RunRef, ...], candidate: tuple[RunRef, ...]) -> tuple[RunRef, ...]:
    theirs = {ref.run_id: ref for ref in candidate}
    out: list[RunRef] = []
    for ref in stored:
        other = theirs.pop(ref.run_id, None)
        if other is not None and ref.outcome is None and other.outcome is not None:
            ref = other
        out.append(ref)
    out.extend(theirs.values())
    return tuple(out)


def apply_run(
    current: AgentSession,
    *,
    run_id: str,
    transcript: ConversationHistory,
    base: ConversationHistory,
    outcome: RunOutcome,
    ended_at: float,
) -> AgentSession:
    """``current`` with the run's transcript and outcome (see the module doc)."""
    in_run = {message.id for message in transcript.messages}
    in_base = {message.id for message in base.messages}
    # Messages someone else added while the run was going on stay, after the run's.
    extra = tuple(
        m
        for m in current.conversation_history.messages
        if m.id not in in_run and m.id not in in_base
    )
    metadata = _run_metadata(
        current.conversation_history.metadata, current.run(run_id), base, transcript.metadata
    )
    history = ConversationHistory(messages=transcript.messages + extra, metadata=metadata)
    runs: list[RunRef] = []
    found = False
    for ref in current.runs:
        if ref.run_id == run_id:
            found = True
            if ref.outcome is None:  # never overwrite another writer's classification
                ref = msgspec.structs.replace(ref, outcome=outcome, ended_at=ended_at)
        runs.append(ref)
    if not found:
        runs.append(
            RunRef(
                run_id=run_id,
                outcome=outcome,
                base_conversation_metadata=dict(base.metadata),
                ended_at=ended_at,
            )
        )
    return msgspec.structs.replace(current, conversation_history=history, runs=tuple(runs))


def _run_metadata(
    current: Mapping[str, Any],
    ref: RunRef | None,
    base: ConversationHistory,
    changed: Mapping[str, Any],
) -> dict[str, Any]:
    """The conversation metadata once the run's ``changed`` metadata is settled."""
    if ref is None:
        return _apply_changes(current, base.metadata, changed)
    if ref.outcome is not None:
        return dict(current)  # settled already: a repeated reconciliation changes nothing
    if ref.base_conversation_metadata is None:
        return {**changed, **current}  # an older record: the session's values win
    return _apply_changes(current, ref.base_conversation_metadata, changed)


def _apply_changes(
    current: Mapping[str, Any], base: Mapping[str, Any], changed: Mapping[str, Any]
) -> dict[str, Any]:
    out = dict(current)
    missing = object()
    for key in base.keys() | changed.keys():
        before = base.get(key, missing)
        after = changed.get(key, missing)
        if before == after:
            continue
        if after is missing:
            out.pop(key, None)
        else:
            out[key] = after
    return out
