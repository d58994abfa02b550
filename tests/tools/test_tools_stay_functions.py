"""``@tool`` keeps the function a function: callable as itself, usable on methods, and
warned about when it would reach the model with no description."""

from __future__ import annotations

import inspect
import warnings

import pytest

from operative import GenerateResponse, ToolCall, create_agent
from operative._core._errors import InvalidArgument, ToolDefinitionError
from operative.mcp._server import served_toolbox
from operative.mcp._server_content import tool_definition
from operative.testing import ScriptedModel
from operative.tools import (
    ExecutionContext,
    Tool,
    Toolbox,
    ToolDescriptionWarning,
    ToolMethod,
    tool,
)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(version="1")
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


async def test_a_tool_is_called_as_the_function_it_was() -> None:
    """Calling the tool calls the function: a sync one returns its value, an async one
    its coroutine; it is still a Tool, the same one an agent takes."""
    assert add(2, 3) == 5
    assert add(a=1, b=1) == 2
    assert await shout("hi") == "HI"
    assert isinstance(add, Tool)
    assert isinstance(shout, Tool)
    assert add.fn(2, 3) == 5  # .fn still names the function
    assert inspect.signature(add) == inspect.signature(add.fn)
    assert [t.name for t in Toolbox([add, shout])] == ["add", "shout"]


def test_a_tool_of_a_tool_wraps_the_function() -> None:
    """``tool(name=...)(a_tool)`` defines the same function anew, as it did with .fn."""
    renamed = tool(name="plus")(add)
    assert renamed.fn is add.fn
    assert renamed.name == "plus"
    assert renamed(1, 2) == 3


class Notes:
    """An object whose methods are tools."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.saved: list[str] = []

    @tool(mutates=True)
    def save(self, text: str) -> str:
        """Save a note."""
        self.saved.append(text)
        return f"saved for {self.owner}"

    @tool
    async def count(self) -> int:
        """How many notes are saved."""
        return len(self.saved)


async def test_a_method_tool_is_bound_to_its_object() -> None:
    """``obj.method`` is a Tool whose schema has no ``self``; calling it calls the method
    of that object; the class's attribute is the descriptor, callable as the function."""
    ana, bo = Notes("ana"), Notes("bo")
    assert isinstance(Notes.save, ToolMethod)
    assert isinstance(ana.save, Tool)
    assert ana.save is ana.save  # one tool per object
    assert ana.save is not bo.save
    assert ana.save.name == "save"
    assert ana.save.mutates is True
    assert ana.save.description == "Save a note."
    assert ana.save.input_schema["properties"] == {"text": {"type": "string"}}
    assert ana.count.input_schema["properties"] == {}
    assert ana.save("x") == "saved for ana"
    assert Notes.save(bo, "y") == "saved for bo"
    assert await ana.count() == 1
    assert (ana.saved, bo.saved) == (["x"], ["y"])


async def test_an_agent_takes_an_objects_method_tools() -> None:
    """``tools=[obj.method]``: the model's call runs the method on that object."""
    notes = Notes("ana")
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="save", arguments={"text": "buy milk"}),)
            ),
            GenerateResponse(tool_calls=(ToolCall(id="c2", name="count", arguments={}),)),
            "done",
        ]
    )
    agent = create_agent(generate=model, tools=[notes.save, notes.count])
    result = await agent.run("remember to buy milk")
    assert notes.saved == ["buy milk"]
    assert [step.results[0].value for step in result.steps[:2]] == ["saved for ana", 1]
    offered = model.requests[0].tools
    assert [spec.name for spec in offered] == ["save", "count"]
    assert "self" not in str(offered[0].input_schema)


def test_a_method_tool_from_the_class_is_refused_with_what_to_pass() -> None:
    """The class's attribute is no tool: a toolbox says to pass the object's."""
    with pytest.raises(InvalidArgument, match=r"obj\.save"):
        Toolbox([Notes.save])


def test_a_method_tool_is_checked_when_its_class_is_defined() -> None:
    """A method whose parameters cannot be described fails in the class body."""
    with pytest.raises(ToolDefinitionError, match="'x' has no type annotation"):

        class Broken:
            @tool
            def f(self, x) -> None:  # type: ignore[no-untyped-def]
                """Do it."""


def test_tool_on_an_unannotated_self_outside_a_class_body_says_what_to_do() -> None:
    """``Tool(fn)`` on a function taking ``self`` points at ``@tool`` in the class body."""

    def method(self, text: str) -> None:  # type: ignore[no-untyped-def]
        """Do it."""

    with pytest.raises(InvalidArgument, match="@tool on it in its class body"):
        Tool(method)


async def test_a_method_tool_is_served_over_mcp() -> None:
    """The MCP server takes an object's method tools like any other."""
    notes = Notes("ana")
    served = served_toolbox([notes.save, notes.count])
    definition = tool_definition(notes.save).model_dump(by_alias=True)
    assert definition["inputSchema"]["properties"] == {"text": {"type": "string"}}
    call = ToolCall(id="c1", name="save", arguments={"text": "hi"})
    result = await served.execute(call, ExecutionContext(run_id="r", step=1))
    assert (result.outcome, result.value, notes.saved) == ("success", "saved for ana", ["hi"])


def test_a_tool_without_a_description_warns_where_it_is_defined() -> None:
    """No docstring and no description=: a ToolDescriptionWarning naming the tool and
    the fix, pointing at the definition (not at operative's code)."""
    with pytest.warns(ToolDescriptionWarning, match="tool 'bare' has no description") as seen:

        @tool
        def bare(x: int) -> int:
            return x

    assert "docstring" in str(seen[0].message)
    assert "description=" in str(seen[0].message)
    assert seen[0].filename == __file__

    def plain(x: int) -> int:
        return x

    with pytest.warns(ToolDescriptionWarning, match="'plain'") as seen:
        Tool(plain)
    assert seen[0].filename == __file__

    with pytest.warns(ToolDescriptionWarning, match="'undocumented'") as seen:

        class Holder:
            @tool
            def undocumented(self) -> None:
                pass

    assert seen[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Holder().undocumented  # noqa: B018 - binding does not warn again


def test_a_described_tool_does_not_warn() -> None:
    """A docstring, description=..., or description="" on purpose: no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool(description="Echo it.")
        def echo(x: int) -> int:
            return x

        @tool(description="")
        def silent(x: int) -> int:
            return x

        Toolbox({"again": echo, "quiet": silent})
    assert silent.description == ""


def test_the_warning_is_a_user_warning() -> None:
    """Filters on UserWarning catch it; it is operative's own class."""
    assert issubclass(ToolDescriptionWarning, UserWarning)
    assert ToolDescriptionWarning.__module__.startswith("operative.tools")
