"""Session records and the session store: round trips, merges, concurrency, listing."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
import trio

import operative.sessions
from operative import InvalidArgument, decode, encode
from operative.conversation import Conversation, ConversationHistory
from operative.errors import CorruptRecordError, SchemaVersionError
from operative.kvstore import ConditionalTextValueStore, ConflictError, Operation, Put
from operative.sessions import (
    AgentSession,
    RunOutcome,
    RunRef,
    SessionNotFoundError,
    SessionStore,
    create_agent_session,
    create_session_store,
    load_agent_session,
    resume_session,
    save_agent_session,
)

from .conftest import FakeClock, HookedStore


def _history(*texts: str) -> ConversationHistory:
    conversation = Conversation()
    for text in texts:
        conversation.append_user_message(text)
    return conversation.current


def _isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


def test_all_is_sorted_and_complete() -> None:
    """The public namespace lists exactly what it exports, sorted."""
    names = list(operative.sessions.__all__)
    assert names == sorted(names, key=_isort_key)
    for name in names:
        assert hasattr(operative.sessions, name)


def test_records_round_trip() -> None:
    """A session with runs and outcomes encodes and decodes to an equal record."""
    session = create_agent_session(
        agent_name="helper", conversation_history=_history("hi"), id="s1", metadata={"k": 1}
    )
    session = msgspec.structs.replace(
        session,
        runs=(
            RunRef(
                run_id="r1",
                user_message_id=session.conversation_history.messages[0].id,
                outcome=RunOutcome(finish_reason="stop-condition"),
                base_conversation_metadata={},
                started_at=1.0,
                ended_at=2.0,
            ),
            RunRef(run_id="r2", started_at=3.0),
        ),
    )
    data = encode(session)
    assert decode(data, AgentSession) == session
    assert b'"schema_version":1' in data
    first, second = session.run("r1"), session.run("r2")
    assert first is not None
    assert first.settled
    assert second is not None
    assert not second.settled
    assert session.run("nope") is None


def test_outcome_success_flags() -> None:
    """Only a normal finish with no classifier reads as a success."""
    assert RunOutcome(finish_reason="stop-condition").succeeded
    assert not RunOutcome(finish_reason="stop-condition", error="output/INVALID_OUTPUT").succeeded
    assert not RunOutcome(finish_reason="aborted").succeeded


def test_newer_schema_is_refused() -> None:
    """A session written by a newer operative raises SchemaVersionError, not a crash."""
    data = encode(create_agent_session(agent_name="a", id="s")).replace(
        b'"schema_version":1', b'"schema_version":99'
    )
    with pytest.raises(SchemaVersionError):
        decode(data, AgentSession)


def test_create_validates() -> None:
    """Bad arguments fail eagerly."""
    with pytest.raises(InvalidArgument):
        create_agent_session(agent_name="")
    with pytest.raises(InvalidArgument):
        create_agent_session(agent_name="a", id="")
    with pytest.raises(InvalidArgument):
        create_agent_session(agent_name="a", conversation_history=Conversation())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        create_session_store(object())  # type: ignore[arg-type]
    assert create_agent_session(agent_name="a").id.startswith("session_")


async def test_save_load_delete(sessions: SessionStore, wall_clock: FakeClock) -> None:
    """A saved session loads back equal, with revision and times stamped."""
    session = create_agent_session(
        agent_name="a", id="s/1", conversation_history=_history("x"), clock=wall_clock
    )
    wall_clock.advance(5)
    stored = await sessions.save(session)
    assert stored.revision == 1
    assert stored.updated_at == wall_clock.now
    assert stored.created_at == session.created_at
    assert await sessions.load("s/1") == stored
    assert await sessions.load("other") is None
    assert await sessions.delete("s/1") is True
    assert await sessions.delete("s/1") is False
    assert await sessions.load("s/1") is None
    assert await sessions.list() == []


async def test_module_helpers(kv: ConditionalTextValueStore) -> None:
    """save_agent_session and load_agent_session use the default layout."""
    session = create_agent_session(agent_name="a", id="s")
    stored = await save_agent_session(kv, session)
    assert await load_agent_session(kv, "s") == stored
    assert await create_session_store(kv).load("s") == stored


async def test_plain_save_replaces(sessions: SessionStore) -> None:
    """Saving a session derived from the stored one replaces it (removals stick)."""
    stored = await sessions.save(
        create_agent_session(agent_name="a", id="s", metadata={"keep": 1, "drop": 2})
    )
    changed = msgspec.structs.replace(stored, metadata={"keep": 1})
    again = await sessions.save(changed)
    assert again.revision == 2
    assert again.metadata == {"keep": 1}


async def test_concurrent_save_merges(sessions: SessionStore) -> None:
    """Two saves from the same base keep both sides' messages, metadata and runs."""
    base = await sessions.save(
        create_agent_session(agent_name="a", id="s", conversation_history=_history("start"))
    )
    left_conv = Conversation.from_history(base.conversation_history)
    left_conv.append_user_message("left")
    left_conv.update_metadata(side="left", shared="left")
    right_conv = Conversation.from_history(base.conversation_history)
    right_conv.append_user_message("right")
    right_conv.update_metadata(shared="right", other=True)
    settled = RunRef(run_id="r", outcome=RunOutcome(finish_reason="stop-condition"))
    left = msgspec.structs.replace(
        base,
        conversation_history=left_conv.current,
        metadata={"l": 1},
        runs=(RunRef(run_id="r"),),
    )
    right = msgspec.structs.replace(
        base, conversation_history=right_conv.current, metadata={"r": 2}, runs=(settled,)
    )
    await sessions.save(left)
    merged = await sessions.save(right)
    assert merged.revision == 3
    texts = [m.content for m in merged.conversation_history.messages]
    assert texts == ["start", "left", "right"]
    assert merged.conversation_history.metadata == {
        "side": "left",
        "shared": "right",
        "other": True,
    }
    assert merged.metadata == {"l": 1, "r": 2}
    assert merged.runs == (settled,)  # a settled run is never replaced by an unsettled one
    # ... and a stored outcome is never overwritten by another one.
    other = RunRef(run_id="r", outcome=RunOutcome(finish_reason="aborted"))
    stale = msgspec.structs.replace(base, runs=(other,))
    assert (await sessions.save(stale)).runs == (settled,)


async def test_concurrent_updates_lose_nothing(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """Many tasks updating one session at once all land (optimistic retries)."""
    await sessions.save(create_agent_session(agent_name="a", id="s", metadata={"n": 0}))
    tasks = 40

    def bump(index: int) -> operative.sessions.SessionUpdater:
        def updater(current: AgentSession) -> AgentSession:
            seen = [*current.metadata.get("seen", []), index]
            return msgspec.structs.replace(
                current, metadata={"n": current.metadata["n"] + 1, "seen": seen}
            )

        return updater

    async with trio.open_nursery() as nursery:
        for index in range(tasks):
            nursery.start_soon(sessions.update, "s", bump(index))
    final = await sessions.load("s")
    assert final is not None
    assert final.metadata["n"] == tasks
    assert sorted(final.metadata["seen"]) == list(range(tasks))
    assert final.revision == tasks + 1


async def test_update_refresh_activity(sessions: SessionStore, wall_clock: FakeClock) -> None:
    """refresh_activity=False keeps updated_at; the default stamps it."""
    stored = await sessions.save(create_agent_session(agent_name="a", id="s"))
    wall_clock.advance(60)
    quiet = await sessions.update(
        "s", lambda s: msgspec.structs.replace(s, metadata={"x": 1}), refresh_activity=False
    )
    assert quiet.updated_at == stored.updated_at
    assert quiet.metadata == {"x": 1}
    loud = await sessions.update("s", lambda s: s)
    assert loud.updated_at == wall_clock.now


async def test_update_errors(sessions: SessionStore) -> None:
    """A missing session, a bad updater and a changed id are clear errors."""
    with pytest.raises(SessionNotFoundError) as info:
        await sessions.update("missing", lambda s: s)
    assert info.value.session_id == "missing"
    await sessions.save(create_agent_session(agent_name="a", id="s"))
    with pytest.raises(InvalidArgument):
        await sessions.update("s", lambda s: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidArgument):
        await sessions.update("s", lambda s: msgspec.structs.replace(s, id="t"))


async def test_update_gives_up_after_bounded_attempts(
    kv: ConditionalTextValueStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A key that changes under every attempt ends in ConflictError after max_attempts."""
    hooked = HookedStore(kv)
    sessions = create_session_store(hooked, max_attempts=3)
    await sessions.save(create_agent_session(agent_name="a", id="s"))
    key = sessions.record_key("s")
    meddled = 0

    async def meddle(operations: Sequence[Operation]) -> None:
        nonlocal meddled
        meddled += 1
        current = await kv.get(key)
        assert current is not None
        # Another writer slips in between this read and its write, every time.
        await kv.conditional_batch([Put(key=key, value=current.value)])

    hooked.before_batch = meddle
    with pytest.raises(ConflictError):
        await sessions.update("s", lambda s: s)
    assert meddled == 3


async def test_list_sort_and_filter(sessions: SessionStore, wall_clock: FakeClock) -> None:
    """list filters by agent and sorts most recent first by either time."""
    for name, agent in [("one", "a"), ("two", "b"), ("three", "a")]:
        await sessions.save(create_agent_session(agent_name=agent, id=name, clock=wall_clock))
        wall_clock.advance(10)
    await sessions.update("one", lambda s: s)  # most recently active now
    assert [s.id for s in await sessions.list()] == ["one", "three", "two"]
    assert [s.id for s in await sessions.list(sort_by="createdAt")] == ["three", "two", "one"]
    assert [s.id for s in await sessions.list("a")] == ["one", "three"]
    assert [s.id for s in await sessions.list(agent_name="b")] == ["two"]
    assert await sessions.list("nobody") == []
    with pytest.raises(InvalidArgument):
        await sessions.list(sort_by="name")  # type: ignore[arg-type]


async def test_list_pages_through_many(sessions: SessionStore) -> None:
    """Listing reads every index page."""
    for index in range(1203):
        await sessions.save(create_agent_session(agent_name="a", id=f"s{index:04}"))
    assert len(await sessions.list("a")) == 1203


async def test_cleanup_deletes_only_idle(sessions: SessionStore, wall_clock: FakeClock) -> None:
    """cleanup removes sessions idle for longer than older_than, records and index."""
    await sessions.save(create_agent_session(agent_name="a", id="old", clock=wall_clock))
    wall_clock.advance(3600)
    await sessions.save(create_agent_session(agent_name="a", id="new", clock=wall_clock))
    wall_clock.advance(1800)
    assert await sessions.cleanup(older_than=3000) == 1
    assert await sessions.load("old") is None
    assert await sessions.load("new") is not None
    assert [s.id for s in await sessions.list()] == ["new"]
    with pytest.raises(InvalidArgument):
        await sessions.cleanup(older_than=-1)


async def test_corrupt_record_names_the_key(
    sessions: SessionStore, kv: ConditionalTextValueStore
) -> None:
    """A corrupt stored session is a CorruptRecordError naming the key, and stays stored."""
    await sessions.save(create_agent_session(agent_name="a", id="s"))
    key = sessions.record_key("s")
    await kv.conditional_batch([Put(key=key, value='{"id": "s", "agent_name": 3')])
    with pytest.raises(CorruptRecordError) as info:
        await sessions.load("s")
    assert key in str(info.value)
    with pytest.raises(CorruptRecordError):
        await sessions.update("s", lambda s: s)
    found = await kv.get(key)
    assert found is not None
    assert found.value.startswith('{"id"')
    index = sessions.index_key("a", "s")
    await kv.conditional_batch([Put(key=index, value="nope")])
    with pytest.raises(CorruptRecordError, match="session index"):
        await sessions.list()


async def test_resume_session(sessions: SessionStore) -> None:
    """resume_session creates a new session or restores a live conversation."""
    fresh = await resume_session(sessions, "s", agent_name="a")
    assert fresh.is_new
    assert fresh.session.id == "s"
    assert len(fresh.conversation) == 0
    fresh.conversation.append_user_message("hello")
    await sessions.save(
        msgspec.structs.replace(fresh.session, conversation_history=fresh.conversation.current)
    )
    again = await resume_session(sessions, "s", agent_name="a")
    assert not again.is_new
    assert [m.content for m in again.conversation.messages] == ["hello"]
    with pytest.raises(InvalidArgument, match="belongs to agent 'a'"):
        await resume_session(sessions, "s", agent_name="b")
