"""A hand-written ``input_schema`` is what a call is checked against, not only what is shown."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from operative import GenerateResponse, ToolCall, create_agent
from operative._core._errors import ToolDefinitionError
from operative.testing import ScriptedModel
from operative.tools import Tool, Toolbox, tool

LIMITED = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10}},
    "required": ["n"],
}


def _counter(ran: list[int]) -> Tool:
    @tool(input_schema=LIMITED)
    async def count(n: int) -> int:
        """Count to n."""
        ran.append(n)
        return n

    return count


@pytest.mark.parametrize("arguments", [{"n": 999}, '{"n": 999}'])
async def test_a_call_outside_the_schema_is_an_error_result_with_its_path(
    arguments: dict[str, Any] | str,
) -> None:
    """The model was shown maximum 10: a call with 999 does not run and reads why, and where."""
    ran: list[int] = []
    box = Toolbox([_counter(ran)])
    result = await box.execute(ToolCall(id="c1", name="count", arguments=arguments))
    assert result.outcome == "error"
    assert result.error is not None
    assert "999 is greater than the maximum of 10" in result.error
    assert "`$.n`" in result.error
    assert ran == []
    ok = await box.execute(ToolCall(id="c2", name="count", arguments={"n": 7}))
    assert (ok.outcome, ok.value, ran) == ("success", 7, [7])


async def test_the_path_names_a_nested_value() -> None:
    """A violation deep in the arguments is reported at its JSON path."""
    schema = {
        "type": "object",
        "properties": {
            "lines": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}$"}},
                },
            }
        },
    }

    @tool(input_schema=schema)
    async def order(lines: list[dict[str, str]]) -> int:
        """Place an order."""
        return len(lines)

    result = await Toolbox([order]).execute(
        ToolCall(id="c1", name="order", arguments={"lines": [{"sku": "ABC"}, {"sku": "abc"}]})
    )
    assert result.outcome == "error"
    assert result.error is not None
    assert "`$.lines[1].sku`" in result.error


async def test_an_input_type_with_an_explicit_schema_is_checked_against_both() -> None:
    """With input_type= and input_schema=, the schema is checked first, then the type."""

    async def area(shape: dict[str, float]) -> float:
        """Area of a square."""
        return shape["side"] ** 2

    schema = {
        "type": "object",
        "properties": {"side": {"type": "number", "exclusiveMinimum": 0}},
        "required": ["side"],
    }
    square = Tool(area, input_type=dict[str, float], input_schema=schema)
    box = Toolbox([square])
    refused = await box.execute(ToolCall(id="c1", name="area", arguments={"side": -1}))
    assert refused.outcome == "error"
    assert refused.error is not None
    assert "`$.side`" in refused.error
    wrong_type = await box.execute(
        ToolCall(id="c2", name="area", arguments={"side": 2, "colour": "red"})
    )
    assert wrong_type.outcome == "error"  # the schema allows it; dict[str, float] does not
    ok = await box.execute(ToolCall(id="c3", name="area", arguments={"side": 2}))
    assert (ok.outcome, ok.value) == ("success", 4.0)


async def test_a_recursive_schema_and_deep_arguments_make_an_error_result() -> None:
    """Arguments too deep to check against a self-referencing schema never crash the call."""
    schema = {
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "$ref": "#/$defs/node",
    }

    async def walk(tree: dict[str, Any]) -> str:
        """Walk a tree."""
        return "walked"

    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["child"] = {}
        node = node["child"]
    walker = Tool(walk, input_type=dict[str, Any], input_schema=schema)
    result = await Toolbox([walker]).execute(ToolCall(id="c1", name="walk", arguments=deep))
    assert result.outcome == "error"
    assert result.error is not None
    assert "nested too deeply" in result.error


def test_an_invalid_schema_is_refused_when_the_tool_is_defined() -> None:
    """A schema that is not JSON Schema fails early, with where it is wrong."""

    async def f(n: int) -> int:
        return n

    with pytest.raises(ToolDefinitionError, match=r"not a valid JSON Schema.*\$\.type"):
        Tool(f, input_schema={"type": "objekt"})


async def test_a_renamed_tool_keeps_enforcing_its_schema() -> None:
    """A toolbox's mapping key renames the tool; its schema still applies."""
    box = Toolbox({"tally": _counter([])})
    result = await box.execute(ToolCall(id="c1", name="tally", arguments={"n": -1}))
    assert result.outcome == "error"
    assert result.error is not None
    assert "`$.n`" in result.error


async def test_a_run_goes_on_after_a_call_outside_the_schema() -> None:
    """In a run the model reads the violation and can call again; the run does not crash."""
    ran: list[int] = []
    model = ScriptedModel(
        [
            GenerateResponse(tool_calls=(ToolCall(id="c1", name="count", arguments={"n": 999}),)),
            GenerateResponse(tool_calls=(ToolCall(id="c2", name="count", arguments={"n": 9}),)),
            "counted",
        ]
    )
    result = await create_agent(generate=model, tools=[_counter(ran)]).run("count")
    assert result.finish_reason == "stop-condition"
    assert [step.results[0].outcome for step in result.steps[:2]] == ["error", "success"]
    assert ran == [9]
    assert "maximum of 10" in (model.requests[1].conversation.messages[-1].text or "")


def test_import_operative_does_not_load_jsonschema() -> None:
    """The validator is imported only by a tool given a schema by hand."""
    code = (
        "import sys, operative\n"
        "from operative import tool\n"
        "@tool\n"
        "async def f(n: int) -> int:\n"
        "    '''Echo n.'''\n"
        "    return n\n"
        "assert 'jsonschema' not in sys.modules, 'imported eagerly'\n"
        "tool(input_schema={'type': 'object'})(f)\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
