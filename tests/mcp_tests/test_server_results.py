"""What operative's MCP server says about a tool, and what it sends back for a call.

In process: tool definitions, call results (text, content parts, structured JSON,
errors), elicitation forms, what may be served, and agents as tools.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import mcp_types as types
import msgspec
import pytest

import operative
import operative.tools
from operative import ImagePart, ToolResult
from operative.mcp import agent_tool
from operative.mcp._server import served_toolbox
from operative.mcp._server_content import call_result, tool_definition
from operative.mcp._server_elicitation import form_schema
from operative.testing import ScriptedModel
from operative.tools._elicitation import elicitation_schema


def success(value: Any) -> ToolResult:
    return ToolResult(call_id="c", tool_name="t", outcome="success", value=value)


def wire(result: types.CallToolResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


@operative.tool(idempotent=True, mutates=False)
async def lookup(key: str) -> str:
    """Look a key up."""
    return key


@operative.tool(mutates=True, version="2")
async def store(key: str, value: int) -> None:
    """Store a value."""


class Point(msgspec.Struct):
    x: float
    y: float


@operative.tool(output_type=Point)
async def origin() -> Point:
    """The origin."""
    return Point(0, 0)


@operative.tool(output_type=list[int])
async def primes() -> list[int]:
    """A few primes."""
    return [2, 3, 5]


def test_definitions_carry_annotations_and_object_output_schemas() -> None:
    assert wire_tool(lookup) == {
        "name": "lookup",
        "description": "Look a key up.",
        "inputSchema": lookup.input_schema,
        "annotations": {"readOnlyHint": True, "idempotentHint": True},
    }
    assert wire_tool(store)["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
    }
    assert wire_tool(origin)["outputSchema"] == {
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"],
    }
    # MCP output schemas describe objects: a list result has none.
    assert "outputSchema" not in wire_tool(primes)


def wire_tool(tool: operative.Tool) -> dict[str, Any]:
    dumped: dict[str, Any] = tool_definition(tool).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    return dumped


def test_a_string_is_one_text_block_and_json_is_text_plus_structured_content() -> None:
    assert wire(call_result(success("plain"))) == {
        "content": [{"type": "text", "text": "plain"}],
        "isError": False,
        "resultType": "complete",
    }
    structured = wire(call_result(success({"x": 1.5, "y": [1, 2]})))
    assert structured["content"] == [{"type": "text", "text": '{"x":1.5,"y":[1,2]}'}]
    assert structured["structuredContent"] == {"x": 1.5, "y": [1, 2]}
    # Only an object is structured content; other JSON is its text alone.
    for value, text in (([1, 2], "[1,2]"), (7, "7"), (None, "null"), (True, "true")):
        result = wire(call_result(success(value)))
        assert result["content"] == [{"type": "text", "text": text}]
        assert "structuredContent" not in result


def test_content_parts_become_content_blocks() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    parts = [
        {"type": "text", "text": "look:"},
        {"type": "image", "data": png, "mime_type": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mime_type": "audio/wav"},
        {"type": "resource", "uri": "file:///a.txt", "mime_type": "text/plain", "text": "A"},
        {"type": "resource", "uri": "file:///b.bin", "blob": "AAE="},
        {"type": "resource_link", "uri": "file:///c", "name": "c", "description": "the c"},
    ]
    assert wire(call_result(success(parts)))["content"] == [
        {"type": "text", "text": "look:"},
        {"type": "image", "data": png, "mimeType": "image/png"},
        {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
        {
            "type": "resource",
            "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "A"},
        },
        {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAE="}},
        {"type": "resource_link", "uri": "file:///c", "name": "c", "description": "the c"},
    ]


async def test_an_image_part_a_tool_returns_is_an_image_block() -> None:
    @operative.tool
    async def picture() -> ImagePart:
        """A picture."""
        return ImagePart(data=b"\x89PNG", media_type="image/png")

    toolbox = served_toolbox([picture])
    result = await toolbox.execute(operative.ToolCall(id="1", name="picture"))
    image = {
        "type": "image",
        "data": base64.b64encode(b"\x89PNG").decode(),
        "mimeType": "image/png",
    }
    assert wire(call_result(result)) == {
        "content": [image],
        "isError": False,
        "resultType": "complete",
    }
    listed = success([msgspec.to_builtins(ImagePart(data=b"\x89PNG", media_type="image/png"))])
    assert wire(call_result(listed))["content"] == [image]


@pytest.mark.parametrize(
    "value",
    [
        [],
        [{"type": "text"}],  # no text
        [{"type": "text", "text": "a", "extra": 1}],  # an unknown key
        [{"type": "image", "data": "AA=="}],  # no mime type
        [{"type": "resource", "uri": "u", "text": "a", "blob": "AA=="}],  # both bodies
        [{"type": "text", "text": 3}],  # not a string
        [{"type": "video", "data": "AA=="}],  # not a content type
        [{"type": "text", "text": "a"}, "b"],  # not every item a part
    ],
)
def test_lists_that_are_not_all_content_parts_are_plain_json(value: list[Any]) -> None:
    result = wire(call_result(success(value)))
    assert result["content"] == [{"type": "text", "text": msgspec.json.encode(value).decode()}]


def test_a_call_that_did_not_succeed_is_an_error_result() -> None:
    for outcome in ("error", "denied", "cancelled"):
        failed = ToolResult(call_id="c", tool_name="t", outcome=outcome, error=f"it {outcome}")
        assert wire(call_result(failed)) == {
            "content": [{"type": "text", "text": f"it {outcome}"}],
            "isError": True,
            "resultType": "complete",
        }


class Choice(msgspec.Struct):
    color: Literal["red", "green"]
    sizes: list[Literal["s", "m"]]
    note: str = ""


class Outer(msgspec.Struct):
    choice: Choice


def test_forms_inline_fields_type_string_enums_and_wrap_what_is_not_an_object() -> None:
    form, wrapped = form_schema(elicitation_schema(Choice))
    assert not wrapped
    assert form == {
        "type": "object",
        "properties": {
            "color": {"enum": ["green", "red"], "type": "string"},
            "sizes": {"type": "array", "items": {"enum": ["m", "s"], "type": "string"}},
            "note": {"type": "string", "default": ""},
        },
        "required": ["color", "sizes"],
    }
    form, wrapped = form_schema(elicitation_schema(bool))
    assert wrapped
    assert form == {
        "type": "object",
        "properties": {"value": {"type": "boolean"}},
        "required": ["value"],
    }
    # A field whose type is a definition of its own is inlined.
    form, _ = form_schema(elicitation_schema(Outer))
    assert form["properties"]["choice"]["type"] == "object"
    assert "$ref" not in form["properties"]["choice"]


def test_what_may_be_served() -> None:
    toolbox = operative.Toolbox([lookup])
    assert served_toolbox(toolbox) is toolbox
    assert [t.name for t in served_toolbox(lookup)] == ["lookup"]
    assert [t.name for t in served_toolbox({"find": lookup, "put": store})] == ["find", "put"]
    for bad in (42, "lookup", [lookup, 42], [print]):
        with pytest.raises(operative.InvalidArgument):
            served_toolbox(bad)  # type: ignore[arg-type]
    with pytest.raises(operative.tools.ToolDefinitionError, match="two tools are named"):
        served_toolbox([lookup, lookup])


async def test_an_agent_is_one_tool_that_runs_it_and_reports_its_steps() -> None:
    agent = operative.create_agent(
        generate=ScriptedModel(
            [
                operative.GenerateResponse(
                    tool_calls=(operative.ToolCall(id="1", name="lookup", arguments={"key": "k"}),)
                ),
                "the answer",
            ]
        ),
        name="finder",
        tools=[lookup],
    )
    (tool,) = served_toolbox([agent])
    assert tool.name == "finder"
    assert tool.mutates is False  # its one tool is read-only
    reported: list[Any] = []

    async def emit(event: Any) -> None:
        reported.append((event.progress, event.message))

    result = await served_toolbox([agent]).execute(
        operative.ToolCall(id="c", name="finder", arguments={"input": "find k"}),
        operative.tools.ExecutionContext(emit=emit),
    )
    assert result.outcome == "success"
    assert result.value == "the answer"
    assert reported == [
        (1.0, "step 1 of the finder agent finished"),
        (2.0, "step 2 of the finder agent finished"),
    ]


def test_an_agent_with_a_mutating_tool_or_unknown_tools_may_mutate() -> None:
    writer = operative.create_agent(generate=ScriptedModel(["ok"]), name="w", tools=[store])
    assert agent_tool(writer).mutates is True
    named = agent_tool(writer, name="scribe", description="Writes.")
    assert (named.name, named.description) == ("scribe", "Writes.")

    class Source:
        async def list_tools(self) -> list[operative.Tool]:
            return [lookup]

    sourced = operative.create_agent(generate=ScriptedModel(["ok"]), name="s", tools=[Source()])
    assert agent_tool(sourced).mutates is True
    with pytest.raises(operative.InvalidArgument):
        agent_tool(lookup)  # type: ignore[arg-type]
