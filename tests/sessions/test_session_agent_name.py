"""The agent a session belongs to: ``agent=`` names it, ``agent_name=`` only without one."""

from __future__ import annotations

import pytest

from operative import create_agent
from operative._agent import Agent
from operative._core._errors import InvalidArgument
from operative._lazy._agent import create_lazy_agent
from operative.sessions import SessionStore, open_session
from operative.testing import ScriptedModel


def _agent(name: str = "helper") -> Agent:
    return create_agent(generate=ScriptedModel(lambda request: "fine"), name=name)


async def test_the_session_takes_its_agents_name(sessions: SessionStore) -> None:
    """``open_session(id, agent=...)`` needs no ``agent_name=``: the agent's name is it."""
    async with open_session("s", store=sessions, agent=_agent()) as handle:
        result = await handle.run("hi")
    assert result.content == "fine"
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.agent_name == "helper"


async def test_an_agent_name_that_agrees_is_accepted(sessions: SessionStore) -> None:
    async with open_session("s", store=sessions, agent_name="helper", agent=_agent()) as handle:
        assert handle.session.agent_name == "helper"


async def test_an_agent_name_that_disagrees_is_refused(sessions: SessionStore) -> None:
    """Two names for one session: an error naming both and what to do, nothing stored."""
    with pytest.raises(InvalidArgument) as raised:
        async with open_session("s", store=sessions, agent_name="other", agent=_agent()):
            pass
    message = str(raised.value)
    assert "agent_name='other'" in message
    assert "'helper'" in message
    assert "drop agent_name=" in message
    assert await sessions.load("s") is None


async def test_without_an_agent_the_name_is_needed(sessions: SessionStore) -> None:
    with pytest.raises(InvalidArgument, match="pass agent="):
        async with open_session("s", store=sessions):
            pass
    with pytest.raises(InvalidArgument, match="non-empty str"):
        async with open_session("s", store=sessions, agent_name=""):
            pass
    async with open_session("s", store=sessions, agent_name="reader") as handle:
        assert handle.session.agent_name == "reader"


async def test_a_lazy_agent_is_named_by_its_name_or_by_agent_name(sessions: SessionStore) -> None:
    """A lazy agent whose name is known only once it loads takes ``agent_name=``; one
    given ``name=`` is named by it, and ``agent_name=`` must agree."""
    unnamed = create_lazy_agent(_agent)
    with pytest.raises(InvalidArgument, match=r"create_lazy_agent\(\.\.\., name=\.\.\.\)"):
        async with open_session("s", store=sessions, agent=unnamed):
            pass
    async with open_session("s", store=sessions, agent_name="helper", agent=unnamed) as handle:
        await handle.run("hi")
        assert handle.session.agent_name == "helper"
    named = create_lazy_agent(_agent, name="helper")
    async with open_session("t", store=sessions, agent=named) as handle:
        assert handle.session.agent_name == "helper"
    with pytest.raises(InvalidArgument, match="drop agent_name="):
        async with open_session("u", store=sessions, agent_name="other", agent=named):
            pass
