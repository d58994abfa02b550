"""``SessionHandle.cancel()`` with no run of its own attached: the engine is asked to
cancel the turn the session records as open, and its actual outcome is stored."""

from __future__ import annotations

import msgspec

from operative.conversation import Conversation, ConversationHistory
from operative.kvstore import MemoryStore
from operative.sessions import (
    AgentSession,
    RunOutcome,
    RunRef,
    create_agent_session,
    create_session_store,
    open_session,
)

from ._sessions import cut_turn
from .conftest import DurableDb


async def test_cancel_without_an_attached_run_cancels_it_in_the_engine_and_stores_it(
    sqlite_db: DurableDb,
) -> None:
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        await cut_turn(sessions, backend)
        stored = await sessions.load("s")
        assert stored is not None
        run_id = stored.runs[0].run_id
        assert stored.runs[0].outcome is None
        record = await engine.get(run_id)
        assert record is not None
        assert record.status == "running"
        # A recover-only handle (no agent): cancel() reaches the run nobody holds.
        async with open_session(
            "s", store=sessions, agent_name="worker", durable=backend
        ) as handle:
            handle.cancel("the user gave up")
        record = await engine.get(run_id)
        stored = await sessions.load("s")
    assert record is not None
    assert record.status == "aborted"
    assert stored is not None
    assert stored.runs[0].outcome == RunOutcome(finish_reason="aborted")
    # The journaled transcript (the user message and the call that was cut) is kept.
    assert [m.role for m in stored.conversation_history.messages][:2] == ["user", "assistant"]


async def test_cancel_keeps_another_writers_classification_and_newer_turns(
    sqlite_db: DurableDb,
) -> None:
    """A turn settled by someone else meanwhile keeps its outcome; a turn reserved after
    cancel() was called is not touched."""
    sessions = create_session_store(MemoryStore())
    async with sqlite_db.backend() as backend:
        engine = backend.engine
        await cut_turn(sessions, backend)
        async with open_session(
            "s", store=sessions, agent_name="worker", durable=backend
        ) as handle:
            run_id = handle.session.runs[0].run_id
            # Between the request and the task that settles it, another worker stores a
            # classification and a newer turn is reserved.
            newer = RunRef(run_id="run_newer")

            def meddle(current: AgentSession) -> AgentSession:
                ref = msgspec.structs.replace(
                    current.runs[0], outcome=RunOutcome(finish_reason="stop-condition")
                )
                return msgspec.structs.replace(current, runs=(ref, newer))

            handle.cancel()
            await sessions.update("s", meddle)
        stored = await sessions.load("s")
        record = await engine.get(run_id)
    assert record is not None
    assert record.status == "aborted"
    assert stored is not None
    assert stored.run(run_id) is not None
    assert stored.runs[0].outcome == RunOutcome(finish_reason="stop-condition")
    assert stored.runs[1] == newer  # still open: not this cancel's to settle


async def test_cancel_without_a_durable_engine_keeps_the_history() -> None:
    sessions = create_session_store(MemoryStore())
    session = create_agent_session(agent_name="worker", id="s")
    await sessions.save(session)

    def open_turn(current: AgentSession) -> AgentSession:
        convo = Conversation()
        convo.append_user_message("hello")
        return msgspec.structs.replace(
            current,
            conversation_history=ConversationHistory(messages=convo.messages),
            runs=(RunRef(run_id="run_lost"),),
        )

    await sessions.update("s", open_turn)
    async with open_session("s", store=sessions, agent_name="worker") as handle:
        handle.cancel()
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome == RunOutcome(finish_reason="aborted")
    assert [m.text for m in stored.conversation_history.messages] == ["hello"]
