"""A lazy agent in a session behaves exactly as the agent it loads."""

from __future__ import annotations

import pytest

from operative import GenerateRequest, GenerateResponse, create_agent, create_lazy_agent
from operative.conversation import ConversationHistory
from operative.errors import AsyncDefinitionLoadError
from operative.sessions import SessionStore, open_session


class Recorder:
    """A model that answers "ok" and keeps every conversation it was sent."""

    __test__ = False

    def __init__(self) -> None:
        self.seen: list[ConversationHistory] = []

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        self.seen.append(request.conversation)
        return GenerateResponse(content="ok")


async def test_a_lazy_agents_instructions_reach_the_model(sessions: SessionStore) -> None:
    """The loaded agent's instructions open the session, once, as an Agent's do."""
    model = Recorder()
    lazy = create_lazy_agent(
        lambda: create_agent(generate=model, instructions="Be kind.", name="helper")
    )
    async with open_session("s", store=sessions, agent_name="helper", agent=lazy) as handle:
        await handle.run("hi")
        await handle.run("again")
    first, second = model.seen
    assert [(m.role, m.text) for m in first.messages] == [("system", "Be kind."), ("user", "hi")]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    stored = await sessions.load("s")
    assert stored is not None
    assert [m.role for m in stored.conversation_history.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert lazy.loads == 1


async def test_a_definition_that_does_not_load_stores_nothing(sessions: SessionStore) -> None:
    """A failed load raises from run() before the turn is reserved; the next turn loads again."""
    model = Recorder()
    attempts: list[int] = []

    def loader() -> object:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("the registry is down")
        return create_agent(generate=model, instructions="Be kind.", name="helper")

    lazy = create_lazy_agent(loader)
    async with open_session("s", store=sessions, agent_name="helper", agent=lazy) as handle:
        with pytest.raises(AsyncDefinitionLoadError, match="registry is down"):
            await handle.run("hi")
        stored = await sessions.load("s")
        assert stored is not None
        assert stored.runs == ()
        assert stored.conversation_history.messages == ()
        result = await handle.run("hi")
    assert result.content == "ok"
    assert [m.role for m in model.seen[0].messages] == ["system", "user"]
