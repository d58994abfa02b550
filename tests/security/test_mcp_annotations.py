"""A served tool claims to be read-only only when it is declared so.

``operative mcp serve`` (a real process) serves three tools that touch real files: one
with ``mutates`` left undeclared, one declared ``mutates=False``, one that needs
approval. Read back through operative's own MCP client and through the official SDK's
client, only the declared one is read-only; and operative's client, whose approval
policy follows MCP's defaults, asks a person before calling the other two, so a denied
call leaves the file in place (the finding was a file deleted without asking).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import operative
from operative import GenerateResponse, ToolCall, create_agent
from operative.mcp import MCPServer, agent_tool
from operative.mcp._server_content import tool_definition
from operative.testing import ScriptedModel
from operative.tools import ApprovalDecision, PendingApproval

pytest.importorskip("mcp")

MODULE = textwrap.dedent(
    '''
    import os

    import operative


    @operative.tool
    async def remove(path: str) -> str:
        """Delete a file (mutates is left undeclared)."""
        os.remove(path)
        return f"deleted {path}"


    @operative.tool(mutates=False, idempotent=True)
    async def peek(path: str) -> bool:
        """Whether a file exists."""
        return os.path.exists(path)


    @operative.tool(needs_approval=True)
    async def erase(path: str) -> str:
        """Delete a file; a person approves each call first."""
        os.remove(path)
        return f"erased {path}"


    tools = [remove, peek, erase]
    '''
)

MODULE_NAME = "annotated_tools"


@pytest.fixture
def app_dir(tmp_path: Path) -> Iterator[Path]:
    """The directory holding the served module (the server imports it with --app-dir)."""
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / f"{MODULE_NAME}.py").write_text(MODULE)
    yield directory
    sys.modules.pop(MODULE_NAME, None)


def serve_args(app_dir: Path) -> list[str]:
    return ["-m", "operative", "mcp", "serve", f"{MODULE_NAME}:tools", "--app-dir", str(app_dir)]


@pytest.mark.heavy  # a real server process: seconds
async def test_operative_client_reads_only_the_declared_tool_as_read_only(app_dir: Path) -> None:
    served = MCPServer.stdio(sys.executable, serve_args(app_dir))
    with trio.fail_after(60):
        async with served:
            tools = {tool.name: tool for tool in await served.list_tools()}
    assert {name: tool.mutates for name, tool in tools.items()} == {
        "remove": True,  # undeclared: MCP's default, a tool that may change the world
        "peek": False,
        "erase": True,
    }
    assert tools["peek"].idempotent is True


@pytest.mark.heavy  # a real server process: seconds
async def test_official_sdk_client_reads_the_same_annotations(app_dir: Path) -> None:
    # The SDK's client runs on anyio, here on Trio's backend: no second event loop.
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=serve_args(app_dir))
    with trio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
    annotations = {
        tool.name: tool.annotations.model_dump(by_alias=True, exclude_none=True)
        if tool.annotations is not None
        else {}
        for tool in listed.tools
    }
    assert annotations == {
        "remove": {"readOnlyHint": False, "idempotentHint": False},
        "peek": {"readOnlyHint": True, "idempotentHint": True},
        "erase": {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
    }


class Person:
    """Answers approvals with ``approve`` and records what it was asked."""

    def __init__(self, approve: bool) -> None:
        self.approve = approve
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, approval: PendingApproval) -> ApprovalDecision:
        self.asked.append((approval.tool_name, dict(approval.arguments)))
        return ApprovalDecision(approved=self.approve, reason="not that file")


async def run_calls(
    served: MCPServer, person: Person, *calls: tuple[str, dict[str, Any]]
) -> dict[str, operative.ToolResult]:
    """One run whose model makes ``calls`` in one step through the served tools."""
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=tuple(
                    ToolCall(id=name, name=name, arguments=arguments) for name, arguments in calls
                )
            ),
            "done",
        ]
    )
    agent = create_agent(generate=model, tools=[served], on_approval=person)
    with trio.fail_after(60):
        async with served:
            result = await agent.run("tidy up")
    return {r.tool_name: r for r in result.steps[0].results}


@pytest.mark.heavy  # a real server process: seconds
async def test_operative_client_asks_before_calling_tools_not_declared_read_only(
    app_dir: Path, tmp_path: Path
) -> None:
    kept = tmp_path / "kept.txt"
    also_kept = tmp_path / "also-kept.txt"
    for file in (kept, also_kept):
        file.write_text("precious")
    served = MCPServer.stdio(sys.executable, serve_args(app_dir))

    refuser = Person(approve=False)
    results = await run_calls(
        served,
        refuser,
        ("remove", {"path": str(kept)}),
        ("erase", {"path": str(also_kept)}),
        ("peek", {"path": str(kept)}),
    )
    # Asked for the undeclared tool and the one needing approval, never for the
    # read-only one; denied, neither call reached the server.
    assert sorted(name for name, _ in refuser.asked) == ["erase", "remove"]
    assert results["remove"].outcome == "denied"
    assert results["erase"].outcome == "denied"
    assert kept.read_text() == "precious"
    assert also_kept.read_text() == "precious"
    assert results["peek"].outcome == "success"
    assert results["peek"].value == "true"  # a JSON value that is not an object: its text

    # Approved, the undeclared tool really deletes: what the approval stood in front of.
    approver = Person(approve=True)
    results = await run_calls(served, approver, ("remove", {"path": str(kept)}))
    assert approver.asked == [("remove", {"path": str(kept)})]
    assert results["remove"].outcome == "success"
    assert not kept.exists()


@operative.tool
async def undeclared(text: str) -> str:
    """Echo."""
    return text


@operative.tool(mutates=False)
async def reads(text: str) -> str:
    """Echo."""
    return text


@operative.tool(mutates=False, needs_approval=lambda arguments: arguments["text"] == "x")
async def reads_but_asks(text: str) -> str:
    """Echo, asking a person for one argument."""
    return text


def hints(tool: operative.Tool) -> dict[str, Any]:
    annotations = tool_definition(tool).annotations
    assert annotations is not None
    dumped: dict[str, Any] = annotations.model_dump(by_alias=True, exclude_none=True)
    return dumped


def test_a_tool_needing_approval_is_never_read_only_even_declared_so() -> None:
    assert undeclared.mutates is None
    assert hints(undeclared)["readOnlyHint"] is False
    assert "destructiveHint" not in hints(undeclared)
    assert hints(reads)["readOnlyHint"] is True
    assert hints(reads_but_asks) == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
    }


def test_an_agent_is_read_only_only_when_every_tool_is_declared_read_only() -> None:
    def agent_with(*tools: operative.Tool) -> operative.Agent:
        return create_agent(generate=ScriptedModel(["ok"]), name="a", tools=list(tools))

    assert agent_tool(agent_with(reads)).mutates is False
    assert hints(agent_tool(agent_with(reads)))["readOnlyHint"] is True
    # An undeclared tool leaves the agent undeclared: not read-only over MCP.
    assert agent_tool(agent_with(reads, undeclared)).mutates is None
    assert hints(agent_tool(agent_with(reads, undeclared)))["readOnlyHint"] is False
    # A tool that needs approval makes it one that may change the world.
    assert agent_tool(agent_with(reads, reads_but_asks)).mutates is True
    assert hints(agent_tool(agent_with(reads_but_asks)))["destructiveHint"] is True


def test_operative_policies_gate_only_tools_declared_to_mutate() -> None:
    """Inside operative an undeclared tool is not gated: ``on-mutation`` and
    ``allow_mutation`` act on ``mutates=True`` alone (documented on both)."""
    from operative.tools import ApprovalPolicy, PermissionPolicy

    writes = operative.tool(mutates=True, version="1")(undeclared)
    policy = ApprovalPolicy(mode="on-mutation")
    assert (policy.requires(undeclared), policy.requires(reads), policy.requires(writes)) == (
        False,
        False,
        True,
    )
    permissions = PermissionPolicy(allowed_tools=None)
    assert permissions.refusal(undeclared) is None
    assert permissions.refusal(writes) is not None
