"""``on_approval=`` is never silently ignored: it asks before every call of a mutating tool."""

from __future__ import annotations

from typing import Any

import pytest
from _doubles import calls_then

from operative import (
    Conversation,
    InvalidArgument,
    Toolbox,
    ToolCall,
    create_agent,
    open_run,
    stop_when,
)
from operative.testing import ScriptedModel
from operative.tools import ApprovalPolicy, PendingApproval, Tool, ToolDefinitionError, tool


def _tools(ran: list[str]) -> list[Tool]:
    @tool(version="1", mutates=True)
    async def delete_file(path: str) -> str:
        """Delete one file."""
        ran.append(f"delete {path}")
        return "deleted"

    @tool
    async def read_file(path: str) -> str:
        """Read one file."""
        ran.append(f"read {path}")
        return "contents"

    return [delete_file, read_file]


def _model() -> ScriptedModel:
    calls = (
        ToolCall(id="c1", name="read_file", arguments={"path": "/a"}),
        ToolCall(id="c2", name="delete_file", arguments={"path": "/a"}),
    )
    return calls_then(*calls)


class Person:
    """Answers every approval request the same way, and remembers what it was asked."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def __call__(self, pending: PendingApproval) -> bool:
        self.asked.append(pending.tool_name)
        return self.answer


@pytest.mark.parametrize("answer", [True, False])
async def test_create_agent_with_tools_and_on_approval_asks_before_mutating(
    answer: bool,
) -> None:
    """tools= with on_approval= and no policy: the mutating call waits for the handler."""
    ran: list[str] = []
    person = Person(answer)
    agent = create_agent(generate=_model(), tools=_tools(ran), on_approval=person)
    result = await agent.run("tidy up")
    assert person.asked == ["delete_file"]  # the read-only tool is not asked about
    outcomes = [r.outcome for r in result.steps[0].results]
    if answer:
        assert outcomes == ["success", "success"]
        assert ran == ["read /a", "delete /a"]
    else:
        assert outcomes == ["success", "denied"]
        assert ran == ["read /a"]


async def test_open_run_with_tools_and_on_approval_asks_too() -> None:
    """The same holds for open_run(tools=..., on_approval=...)."""
    ran: list[str] = []
    person = Person(False)
    conversation = Conversation()
    conversation.append_user_message("tidy up")
    async with open_run(
        generate=_model(),
        conversation=conversation,
        tools=_tools(ran),
        stop_when=stop_when.no_tool_calls(),
        on_approval=person,
    ) as run:
        pass
    result = await run.result()
    assert person.asked == ["delete_file"]
    assert [r.outcome for r in result.steps[0].results] == ["success", "denied"]
    assert ran == ["read /a"]


@pytest.mark.parametrize("build", ["create_agent", "open_run"])
async def test_a_toolbox_without_an_approval_policy_is_refused(build: str) -> None:
    """A pre-built toolbox with no policy would never ask: on_approval= with it is an error."""
    toolbox = Toolbox(_tools([]))
    options: dict[str, Any] = {"toolbox": toolbox, "on_approval": Person(True)}
    with pytest.raises(InvalidArgument, match="approval_policy"):
        if build == "create_agent":
            create_agent(generate=_model(), **options)
        else:
            async with open_run(generate=_model(), conversation=Conversation(), **options):
                pass


async def test_a_toolbox_with_its_own_policy_is_used_as_it_is() -> None:
    """A toolbox that has a policy keeps it (here: every call asks)."""
    ran: list[str] = []
    person = Person(True)
    toolbox = Toolbox(
        [t for t in _tools(ran) if t.name == "delete_file"],
        approval_policy=ApprovalPolicy(mode="always"),
    )
    agent = create_agent(generate=_model(), toolbox=toolbox, on_approval=person)
    result = await agent.run("tidy up")
    assert person.asked == ["delete_file"]
    assert [r.outcome for r in result.steps[0].results] == ["error", "success"]  # no read_file


def test_an_unversioned_mutating_tool_is_refused_naming_on_approval() -> None:
    """Approvals bind the tool's version, so on_approval= needs versioned mutating tools."""

    @tool(mutates=True)
    async def drop(name: str) -> str:
        """Drop a table."""
        return name

    with pytest.raises(ToolDefinitionError, match=r"on_approval=.*'drop'.*version"):
        create_agent(generate=_model(), tools=[drop], on_approval=Person(True))
    create_agent(generate=_model(), tools=[drop])  # without a handler nothing asks
