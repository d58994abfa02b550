"""Defining tools: names, descriptions, schemas and definition errors."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypedDict

import attrs
import msgspec
import pytest

import operative.tools
from operative._core._errors import InvalidArgument, ToolDefinitionError
from operative.tools import Tool, Toolbox, ToolContext, tool


def test_tools_namespace_all_is_sorted_and_complete() -> None:
    """The public namespace lists exactly what it exports, sorted."""
    names = operative.tools.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(operative.tools, name)


async def weather(city: str, days: int = 3) -> dict[str, Any]:
    """Forecast for a city.

    Returns one entry per day.
    """
    return {"city": city, "days": days}


def test_defaults_come_from_the_function() -> None:
    """Name from the function, description from the docstring, schema from the signature."""
    t = tool(weather)
    assert t.name == "weather"
    assert t.description == "Forecast for a city.\n\nReturns one entry per day."
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "default": 3},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert t.version is None
    assert not t.mutates
    assert repr(t) == "<Tool weather>"


def test_options_are_kept() -> None:
    """@tool(...) records every option; the spec uses the given name and description."""
    t = tool(
        name="get-weather",
        version="2",
        mutates=True,
        idempotent=True,
        description="Weather.",
        timeout=5,
        max_concurrency=2,
    )(weather)
    assert (t.name, t.version, t.mutates, t.idempotent, t.timeout, t.max_concurrency) == (
        "get-weather",
        "2",
        True,
        True,
        5,
        2,
    )
    assert t.spec.name == "get-weather"
    assert t.spec.description == "Weather."
    assert repr(t) == "<Tool get-weather v2>"


def test_spec_is_built_once() -> None:
    """The same spec object (and schema dict) is returned every time."""
    t = tool(weather)
    assert t.spec is t.spec
    box = Toolbox([t])
    assert box.specs() is box.specs()
    assert box.specs()[0] is t.spec


def test_tool_context_parameter_is_not_in_the_schema() -> None:
    """A ToolContext parameter is injected, never offered to the model."""

    @tool
    async def slow(n: int, ctx: ToolContext) -> int:
        """Count."""
        return n

    assert list(slow.input_schema["properties"]) == ["n"]
    assert slow._wants_context


def test_annotated_metadata_reaches_the_schema() -> None:
    """msgspec.Meta constraints and descriptions appear in the JSON Schema."""

    @tool
    async def pick(
        n: Annotated[int, msgspec.Meta(ge=1, le=10, description="how many")],
    ) -> int:
        """Pick."""
        return n

    assert pick.input_schema["properties"]["n"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 10,
        "description": "how many",
    }


class Nested(msgspec.Struct, frozen=True):
    """A nested struct."""

    x: int


def test_nested_types_keep_their_definitions() -> None:
    """Nested types stay under $defs, referenced from the inlined root."""

    @tool
    async def use(item: Nested, items: list[Nested] = []) -> int:  # noqa: B006
        """Use."""
        return item.x

    schema = use.input_schema
    assert schema["type"] == "object"
    assert schema["properties"]["item"] == {"$ref": "#/$defs/Nested"}
    assert schema["$defs"]["Nested"]["properties"] == {"x": {"type": "integer"}}


@pytest.mark.parametrize("name", ["", "has space", "dot.name", "x" * 65, "ünïcode", "slash/name"])
def test_bad_names_are_rejected(name: str) -> None:
    """Names providers would reject raise ToolDefinitionError naming the rule."""
    with pytest.raises(ToolDefinitionError, match="letters, digits"):
        tool(name=name)(weather)


def test_good_names_are_accepted() -> None:
    """Letters, digits, '_' and '-' up to 64 characters are fine."""
    assert tool(name="a-Z_09" + "x" * 58)(weather).name.startswith("a-Z_09")


def test_star_args_are_rejected() -> None:
    """*args and **kwargs cannot be described to a model."""

    async def f(*items: int) -> None: ...

    async def g(**options: int) -> None: ...

    with pytest.raises(ToolDefinitionError, match=r"\*items"):
        tool(f)
    with pytest.raises(ToolDefinitionError, match=r"\*\*options"):
        tool(g)


def test_unannotated_and_positional_only_parameters_are_rejected() -> None:
    """Every parameter needs an annotation and must be passable by name."""

    async def f(x) -> None:  # type: ignore[no-untyped-def]
        ...

    async def g(x: int, /) -> None: ...

    with pytest.raises(ToolDefinitionError, match="no type annotation"):
        tool(f)
    with pytest.raises(ToolDefinitionError, match="positional-only"):
        tool(g)


def test_unschemable_types_are_rejected() -> None:
    """A parameter type msgspec cannot describe is a definition error."""

    async def f(x: object, y: type) -> None: ...

    with pytest.raises(ToolDefinitionError):
        tool(f)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"version": ""}, "version"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_options_are_rejected(options: dict[str, Any], match: str) -> None:
    """Invalid options fail at definition."""
    with pytest.raises(ToolDefinitionError, match=match):
        Tool(weather, **options)


def test_not_a_function_is_rejected() -> None:
    """Tool wraps callables only."""
    with pytest.raises(ToolDefinitionError):
        Tool(42)  # type: ignore[arg-type]


class QueryStruct(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A query."""

    q: str
    limit: int = 10


@attrs.frozen
class QueryAttrs:
    """A query."""

    q: str
    limit: int = 10


@dataclasses.dataclass(frozen=True)
class QueryDataclass:
    """A query."""

    q: str
    limit: int = 10


class QueryDict(TypedDict):
    """A query."""

    q: str


@pytest.mark.parametrize("input_type", [QueryStruct, QueryAttrs, QueryDataclass, QueryDict])
def test_explicit_input_types(input_type: Any) -> None:
    """Structs, attrs classes, dataclasses and TypedDicts become object schemas."""

    async def search(query: Any) -> str:
        """Search."""
        return str(query)

    t = Tool(search, input_type=input_type)
    assert t.input_type is input_type
    assert t.input_schema["type"] == "object"
    assert "q" in t.input_schema["properties"]
    assert "title" not in t.input_schema
    if input_type is QueryStruct:
        assert t.input_schema["additionalProperties"] is False


def test_explicit_input_needs_one_value_parameter() -> None:
    """With input_type=, the function takes the value and nothing else (but a context)."""

    async def two(a: QueryStruct, b: int) -> None: ...

    with pytest.raises(ToolDefinitionError, match="exactly one"):
        Tool(two, input_type=QueryStruct)


def test_input_type_must_be_an_object() -> None:
    """A tool's arguments are a JSON object."""

    async def f(x: int) -> None: ...

    with pytest.raises(ToolDefinitionError, match="not an object type"):
        Tool(f, input_type=int)


@attrs.frozen
class Circle:
    """A circle."""

    radius: float


@attrs.frozen
class Square:
    """A square."""

    side: float


def test_types_msgspec_cannot_describe_need_an_explicit_schema() -> None:
    """A union of attrs classes validates through cattrs, given input_schema=."""

    async def area(shape: Circle | Square) -> float:
        """The shape's area."""
        return 1.0

    with pytest.raises(ToolDefinitionError, match="input_schema="):
        Tool(area, input_type=Circle | Square)
    schema = {"type": "object", "properties": {}}
    t = Tool(area, input_type=Circle | Square, input_schema=schema)
    assert t.input_schema == schema
    assert t.parse_arguments({"side": 2.0}) == Square(side=2.0)
    assert t.parse_arguments('{"radius": 1.5}') == Circle(radius=1.5)


def test_unschemable_output_type_is_rejected() -> None:
    """output_type must be describable too."""
    with pytest.raises(ToolDefinitionError, match="output"):
        Tool(weather, output_type=object)


def test_mapping_keys_rename_tools() -> None:
    """In a name-keyed mapping the key is the name the model sees."""
    t = tool(weather)
    box = Toolbox({"forecast": t})
    assert "forecast" in box
    assert "weather" not in box
    forecast = box.get("forecast")
    assert forecast is not None
    assert forecast.spec.name == "forecast"
    assert forecast.input_schema == t.input_schema
    assert [x.name for x in box] == ["forecast"]
    assert len(box) == 1


def test_toolbox_rejects_duplicates_and_non_tools() -> None:
    """Two tools with one name, or something that is not a Tool, fail eagerly."""
    t = tool(weather)
    with pytest.raises(ToolDefinitionError, match="two tools"):
        Toolbox([t, t])
    with pytest.raises(InvalidArgument, match="not a Tool"):
        Toolbox([weather])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        Toolbox(t)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Toolbox({1: t})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Toolbox([t], max_concurrency=0)


def test_specs_keep_definition_order() -> None:
    """specs() lists tools in the order given."""

    async def a() -> None:
        """A."""

    async def b() -> None:
        """B."""

    box = Toolbox([tool(b), tool(a)])
    assert [s.name for s in box.specs()] == ["b", "a"]
    assert repr(box) == "<Toolbox b, a>"
