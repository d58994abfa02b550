"""Settling a run merges conversation metadata three ways, against the base its RunRef keeps."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from operative.conversation import ConversationHistory
from operative.sessions import RunOutcome, RunRef, create_agent_session
from operative.sessions._merge import apply_run
from operative.sessions._records import AgentSession

DONE = RunOutcome(finish_reason="stop-condition")


def _session(metadata: dict[str, Any], ref: RunRef | None) -> AgentSession:
    session = create_agent_session(
        agent_name="a", id="s", conversation_history=ConversationHistory(metadata=metadata)
    )
    return msgspec.structs.replace(session, runs=() if ref is None else (ref,))


def _settle(current: AgentSession, *, base: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    settled = apply_run(
        current,
        run_id="r1",
        transcript=ConversationHistory(metadata=run),
        base=ConversationHistory(metadata=base),
        outcome=DONE,
        ended_at=1.0,
    )
    return dict(settled.conversation_history.metadata)


def test_the_runs_changes_from_its_reserved_base_win_and_concurrent_edits_stay() -> None:
    """With the RunRef's base: the run's changed keys apply, every other edit is kept."""
    reserved = {"topic": "billing", "tier": "gold", "status": "new"}
    ref = RunRef(run_id="r1", base_conversation_metadata=reserved)
    # Meanwhile: topic changed, tier removed, owner added (by someone else).
    current = _session({"topic": "refunds", "status": "new", "owner": "bob"}, ref)
    # The run (whose journal began after it set `handled_by`) changed status.
    run = {**reserved, "status": "done", "handled_by": "worker"}
    journal_base = {**reserved, "handled_by": "worker"}
    assert _settle(current, base=journal_base, run=run) == {
        "topic": "refunds",
        "owner": "bob",
        "status": "done",
        "handled_by": "worker",  # a change from the reserved base, though not the journal's
    }


def test_an_older_record_without_a_base_keeps_the_sessions_values() -> None:
    """No snapshot: the session's current values win; only keys it lacks are added."""
    current = _session({"topic": "refunds"}, RunRef(run_id="r1"))
    merged = _settle(
        current, base={"topic": "billing"}, run={"topic": "billing-2", "status": "done"}
    )
    assert merged == {"topic": "refunds", "status": "done"}


def test_a_settled_run_keeps_the_current_metadata_on_repeated_reconciliation() -> None:
    """Reconciling a run whose outcome is stored already changes no metadata."""
    ref = RunRef(run_id="r1", outcome=DONE, base_conversation_metadata={"status": "new"})
    current = _session({"status": "reviewed"}, ref)
    assert _settle(current, base={"status": "new"}, run={"status": "done"}) == {
        "status": "reviewed"
    }


def test_a_run_without_a_ref_merges_against_the_given_base() -> None:
    """A run the session never reserved: its changes from ``base`` apply; its ref keeps it."""
    current = _session({"topic": "refunds", "owner": "bob"}, None)
    settled = apply_run(
        current,
        run_id="r1",
        transcript=ConversationHistory(metadata={"topic": "billing", "status": "done"}),
        base=ConversationHistory(metadata={"topic": "billing"}),
        outcome=DONE,
        ended_at=1.0,
    )
    assert settled.conversation_history.metadata == {
        "topic": "refunds",
        "owner": "bob",
        "status": "done",
    }
    (ref,) = settled.runs
    assert ref.base_conversation_metadata == {"topic": "billing"}


_MISSING = object()
_values = st.dictionaries(st.sampled_from("abcde"), st.integers(0, 3), max_size=5)


@given(reserved=_values, current=_values, run=_values, legacy=st.booleans())
def test_every_key_comes_from_the_run_if_it_changed_it_else_from_the_session(
    reserved: dict[str, Any], current: dict[str, Any], run: dict[str, Any], legacy: bool
) -> None:
    """Per key: the run's value where it changed the key from its base (with a base), the
    session's current value otherwise; with no base, the session's value where it has one."""
    ref = RunRef(run_id="r1", base_conversation_metadata=None if legacy else reserved)
    merged = _settle(_session(current, ref), base={"unused": 0}, run=run)
    for key in "abcde":
        if legacy:
            expected = current.get(key, run.get(key, _MISSING))
        elif reserved.get(key, _MISSING) != run.get(key, _MISSING):
            expected = run.get(key, _MISSING)
        else:
            expected = current.get(key, _MISSING)
        assert merged.get(key, _MISSING) == expected
