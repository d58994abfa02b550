"""A recovered session turn merges its metadata with edits made meanwhile, against the
base its ``RunRef`` captured when the turn was reserved."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from operative.conversation import ConversationHistory
from operative.kvstore import MemoryStore
from operative.sessions import (
    AgentSession,
    RunOutcome,
    RunRef,
    create_agent_session,
    create_session_store,
    open_session,
)

from .conftest import DurableDb
from .test_durable_runs import make_agent, until


class Tagging:
    """An agent whose runs tag their conversation's metadata as they open (a host might)."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self.name = "worker"
        self.has_output = False

    async def run(self, input: Any, *, context: Any = None) -> Any:
        raise NotImplementedError

    @asynccontextmanager
    async def open_run(
        self, input: Any, *, context: Any = None, durable: Any = None
    ) -> AsyncIterator[Any]:
        async with self._agent.open_run(input, context=context, durable=durable) as run:
            run.conversation.update_metadata(handled_by="worker")
            yield run


def _edit(current: AgentSession) -> AgentSession:
    """Someone else's edit: topic changed, tier removed, owner added."""
    metadata = dict(current.conversation_history.metadata)
    metadata["topic"] = "refunds"
    del metadata["tier"]
    metadata["owner"] = "bob"
    history = msgspec.structs.replace(current.conversation_history, metadata=metadata)
    return msgspec.structs.replace(current, conversation_history=history)


async def test_a_recovered_turn_keeps_concurrent_metadata_edits_and_applies_its_own(
    sqlite_db: DurableDb,
) -> None:
    """Edits made while the recovered turn ran survive; the run's own change is applied,
    although its journal began after the run made it."""
    executions: Counter[str] = Counter()
    script = [["idem"], []]
    sessions = create_session_store(MemoryStore())
    await sessions.save(
        create_agent_session(
            agent_name="worker",
            id="s",
            conversation_history=ConversationHistory(metadata={"topic": "billing", "tier": "gold"}),
        )
    )
    async with sqlite_db.backend() as backend:
        with trio.CancelScope() as scope:
            async with (
                open_session(
                    "s",
                    store=sessions,
                    agent_name="worker",
                    agent=Tagging(make_agent(script, executions, trio.Event())),
                    durable=backend,
                ) as handle,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(handle.run, "hello")
                await until(lambda: executions)
                scope.cancel()  # the host process shuts down mid-call
        reserved = await sessions.load("s")
        assert reserved is not None
        assert reserved.runs[0].outcome is None
        assert reserved.runs[0].base_conversation_metadata == {"topic": "billing", "tier": "gold"}
        gate = trio.Event()
        async with open_session(
            "s",
            store=sessions,
            agent_name="worker",
            agent=Tagging(make_agent(script, executions, gate)),
            durable=backend,
        ) as handle:
            recovered = await handle.recover()
            assert recovered is not None
            await until(lambda: executions["idem:10"] == 2)  # the recovered turn is running
            await sessions.update("s", _edit)
            gate.set()
            result = await recovered.result()
    stored = await sessions.load("s")
    assert result.finish_reason == "stop-condition"
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.conversation_history.metadata == {
        "topic": "refunds",
        "owner": "bob",
        "handled_by": "worker",
    }


async def test_a_turn_that_never_started_keeps_the_metadata_as_it_is_now(
    sqlite_db: DurableDb,
) -> None:
    """A reserved turn with no run record is settled aborted; an edit made after the
    session was opened (so the handle's copy is stale) is not undone."""
    sessions = create_session_store(MemoryStore())
    reserved = create_agent_session(
        agent_name="worker",
        id="s",
        conversation_history=ConversationHistory(metadata={"topic": "refunds"}),
    )
    await sessions.save(
        msgspec.structs.replace(
            reserved,
            runs=(RunRef(run_id="lost", base_conversation_metadata={"topic": "billing"}),),
        )
    )

    def later_edit(current: AgentSession) -> AgentSession:
        history = msgspec.structs.replace(
            current.conversation_history, metadata={"topic": "disputes"}
        )
        return msgspec.structs.replace(current, conversation_history=history)

    async with (
        sqlite_db.engine() as engine,
        sqlite_db.store() as store,
        open_session(
            "s", store=sessions, agent_name="worker", engine=engine, checkpoint_store=store
        ) as handle,
    ):
        await sessions.update("s", later_edit)
        assert await handle.recover() is None
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome == RunOutcome(finish_reason="aborted")
    assert stored.conversation_history.metadata == {"topic": "disputes"}
