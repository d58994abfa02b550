"""An MCP server's tools as operative tools: names, annotations, versions, results."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from operative import ToolCall
from operative.kvstore import MemoryStore
from operative.mcp import MCPServer
from operative.mcp._tools import tool_name
from operative.tools import (
    ApprovalDecision,
    ApprovalError,
    ApprovalPolicy,
    PendingApproval,
    Toolbox,
)

from .conftest import faulty_server, run_calls

VERSION = re.compile(r"mcp-[0-9a-f]{16}")


def _by_name(tools: list[Any]) -> dict[str, Any]:
    return {tool.name: tool for tool in tools}


async def test_annotations_say_whether_a_tool_mutates_and_may_run_again(
    time_server: tuple[str, list[str]], everything_stdio: tuple[str, list[str]], tmp_path: Path
) -> None:
    async with (
        MCPServer.stdio(*time_server) as clock,
        MCPServer.stdio(*everything_stdio) as everything,
        MCPServer.stdio(*faulty_server()) as faulty,
    ):
        tools = _by_name(
            [*await clock.list_tools(), *await everything.list_tools(), *await faulty.list_tools()]
        )
    shapes = {
        name: (tools[name].mutates, tools[name].idempotent)
        for name in (
            "get_current_time",  # readOnlyHint, idempotentHint
            "toggle-simulated-logging",  # neither
            "gzip-file-as-resource",  # idempotentHint only
            "flip",  # no annotations at all: the protocol's default may do anything
        )
    }
    assert shapes == {
        "get_current_time": (False, True),
        "toggle-simulated-logging": (True, False),
        "gzip-file-as-resource": (True, True),
        "flip": (True, False),
    }
    echo = tools["echo"]
    assert echo.description == "Echoes back the input string"
    assert echo.input_schema["required"] == ["message"]


async def test_a_tool_version_is_a_digest_of_its_definition(
    everything_stdio: tuple[str, list[str]],
) -> None:
    async with MCPServer.stdio(*everything_stdio) as first:
        one = _by_name(await first.list_tools())
    async with MCPServer.stdio(*everything_stdio) as second:
        two = _by_name(await second.list_tools())
    assert all(VERSION.fullmatch(tool.version) for tool in one.values())
    assert {name: tool.version for name, tool in one.items()} == {
        name: tool.version for name, tool in two.items()
    }
    assert len({tool.version for tool in one.values()}) == len(one)


async def test_prefix_renames_and_the_filter_sees_the_servers_own_definitions(
    everything_stdio: tuple[str, list[str]],
) -> None:
    seen: list[types.Tool] = []

    def keep(definition: types.Tool) -> bool:
        seen.append(definition)
        return definition.annotations is not None and bool(definition.annotations.read_only_hint)

    async with MCPServer.stdio(*everything_stdio, prefix="ev", tool_filter=keep) as server:
        tools = _by_name(await server.list_tools())
        result, _ = await run_calls([server], ("ev_echo", {"message": "renamed"}))
    assert "echo" in {definition.name for definition in seen}
    assert "ev_echo" in tools
    assert "ev_toggle-simulated-logging" not in tools  # it may write: filtered out
    assert all(name.startswith("ev_") for name in tools)
    assert result.steps[0].results[0].value == "Echo: renamed"


def test_a_name_providers_refuse_is_made_acceptable() -> None:
    assert tool_name("files/read.text", None) == "files_read_text"
    assert tool_name("search", "web") == "web_search"
    assert tool_name("x" * 80, "p") == "p_" + "x" * 62


async def test_the_list_is_kept_until_the_server_says_it_changed(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"

    def listings() -> int:
        lines = log.read_text().splitlines()
        return sum(json.loads(line)["method"] == "tools/list" for line in lines)

    async with MCPServer.stdio(*faulty_server(log)) as server:
        first = await server.list_tools()
        again = await server.list_tools()
        assert listings() == 1
        assert [a is b for a, b in zip(first, again, strict=True)] == [True] * len(first)
        flip = _by_name(first)["flip"]
        await run_calls([flip], ("flip", {}))  # the server changes the tool and says so
        changed = _by_name(await server.list_tools())
        assert listings() == 2
    assert changed["flip"].version != flip.version
    assert changed["flip"].description == "Flips a switch (flipped 1 times)."


async def test_an_approval_for_a_tool_the_server_changed_is_refused(tmp_path: Path) -> None:
    async with MCPServer.stdio(*faulty_server()) as server:
        before = _by_name(await server.list_tools())
        secret, state = b"s" * 32, MemoryStore()
        policy = ApprovalPolicy(mode="on-mutation")
        gated = Toolbox(
            [before["flip"]], approval_policy=policy, approval_secret=secret, approval_state=state
        )
        parked = await gated.execute(ToolCall(id="c1", name="flip", arguments={}))
        assert parked.outcome == "action-required"
        assert parked.pending_approval is not None
        assert parked.pending_approval.tool_version == before["flip"].version
        await run_calls([before["flip"]], ("flip", {}))  # meanwhile the tool changes
        after = _by_name(await server.list_tools())["flip"]
        reread = Toolbox(
            [after], approval_policy=policy, approval_secret=secret, approval_state=state
        )
        with pytest.raises(ApprovalError) as refused:
            await reread.resume_approval(parked.pending_approval)
    assert refused.value.reason == "version-changed"


async def test_on_approval_is_asked_for_tools_that_may_write_and_not_for_read_only_ones(
    time_server: tuple[str, list[str]], everything_stdio: tuple[str, list[str]]
) -> None:
    asked: list[PendingApproval] = []

    async def on_approval(approval: PendingApproval) -> ApprovalDecision:
        asked.append(approval)
        return ApprovalDecision(approved=approval.tool_name != "toggle-simulated-logging")

    async with MCPServer.stdio(*time_server) as clock, MCPServer.stdio(*everything_stdio) as ev:
        result, _ = await run_calls(
            [clock, ev],
            ("get_current_time", {"timezone": "UTC"}),
            ("toggle-simulated-logging", {}),
            ("gzip-file-as-resource", {"name": "n", "data": "data:text/plain;base64,aGk="}),
            on_approval=on_approval,
        )
    outcomes = {r.tool_name: r.outcome for r in result.steps[0].results}
    assert outcomes == {
        "get_current_time": "success",
        "toggle-simulated-logging": "denied",
        "gzip-file-as-resource": "success",
    }
    assert sorted(a.tool_name for a in asked) == [
        "gzip-file-as-resource",
        "toggle-simulated-logging",
    ]


async def test_results_map_to_what_the_model_reads(
    everything_stdio: tuple[str, list[str]], time_server: tuple[str, list[str]]
) -> None:
    async with MCPServer.stdio(*everything_stdio) as ev, MCPServer.stdio(*time_server) as clock:
        result, _ = await run_calls(
            [ev, clock],
            ("get-structured-content", {"location": "New York"}),
            ("get-tiny-image", {}),
            ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
            ("get-resource-links", {"count": 2}),
            ("get_current_time", {"timezone": "Nowhere/Atlantis"}),
        )
    structured, image, resource, links, failed = result.steps[0].results
    assert set(structured.value) == {"temperature", "conditions", "humidity"}
    text, picture, *_ = image.value
    assert text == {"type": "text", "text": "Here's the image you requested:"}
    assert picture["type"] == "image"
    assert picture["mime_type"] == "image/png"
    assert base64.b64decode(picture["data"]).startswith(b"\x89PNG")
    embedded = [part for part in resource.value if part["type"] == "resource"]
    assert embedded[0]["uri"] == "demo://resource/dynamic/text/2"
    assert "text" in embedded[0]
    assert [part["type"] for part in links.value] == ["text", "resource_link", "resource_link"]
    assert links.value[1]["uri"].startswith("demo://resource/dynamic/")
    assert failed.outcome == "error"
    assert failed.error is not None
    assert "MCPToolError" in failed.error
    assert "Nowhere/Atlantis" in failed.error


async def test_protocol_faults_and_a_dying_server_are_typed_error_results(
    tmp_path: Path,
) -> None:
    async with MCPServer.stdio(*faulty_server()) as server:
        result, _ = await run_calls(
            [server],
            ("rpc_error", {}),
            ("broken_result", {}),
            ("bad_structured", {}),
        )
        errors = {r.tool_name: r.error or "" for r in result.steps[0].results}
        assert "MCPProtocolError" in errors["rpc_error"]
        assert "error -32603: the database is down" in errors["rpc_error"]
        assert "MCPProtocolError" in errors["broken_result"]
        assert "does not parse" in errors["broken_result"]
        assert "MCPProtocolError" in errors["bad_structured"]
        assert "structured content" in errors["bad_structured"]
        died, _ = await run_calls([server], ("die", {}))
    (settled,) = died.steps[0].results
    assert settled.outcome == "error"
    assert settled.error is not None
    assert "MCPConnectionError" in settled.error
    assert "exited with code 7" in settled.error
    assert "giving up on purpose" in settled.error
