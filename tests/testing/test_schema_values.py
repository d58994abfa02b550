"""SchemaValues: values drawn from hand-written JSON Schemas honour every keyword."""

from __future__ import annotations

from typing import Any

import pytest

from operative import InvalidArgument
from operative.testing import SchemaValues
from operative.testing._schema_values import RandomSource, json_types_of


def draws(schema: dict[str, Any], count: int = 60) -> list[Any]:
    values = SchemaValues(schema)
    return [values.draw(RandomSource(seed)) for seed in range(count)]


def test_numbers_honour_their_bounds() -> None:
    """minimum, maximum, the exclusive ones and multipleOf bound every draw."""
    for value in draws({"type": "integer", "exclusiveMinimum": 3, "maximum": 6}):
        assert 3 < value <= 6
    for value in draws({"type": "integer", "minimum": 10, "multipleOf": 7}):
        assert value >= 10
        assert value % 7 == 0
    for value in draws({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.001}):
        assert 0 < value < 0.001
    for value in draws({"type": "number", "maximum": -5}):
        assert value <= -5
    for value in draws({"type": "number", "multipleOf": 0.5, "minimum": 1, "maximum": 2}):
        assert value in (1.0, 1.5, 2.0)


def test_strings_arrays_and_objects() -> None:
    """Lengths, item counts, uniqueness, prefixItems and required properties hold."""
    for text in draws({"type": "string", "minLength": 3, "maxLength": 5}):
        assert 3 <= len(text) <= 5
    for items in draws({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}):
        assert len(items) == len(set(items)) <= 2
    for items in draws({"type": "array", "items": {"type": "null"}, "minItems": 2, "maxItems": 2}):
        assert items == [None, None]
    pair = {
        "type": "array",
        "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": False,
    }
    for first, second in draws(pair):
        assert isinstance(first, int)
        assert isinstance(second, str)
    record = {
        "type": "object",
        "properties": {"a": {"const": 1}, "b": {"type": ["string", "null"]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    seen_b = False
    for value in draws(record):
        assert value["a"] == 1
        assert set(value) <= {"a", "b"}
        seen_b = seen_b or "b" in value
    assert seen_b
    for value in draws(
        {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2}
    ):
        assert len(value) >= 2
        assert all(isinstance(v, int) for v in value.values())


def test_references_unions_and_recursion() -> None:
    """$ref into $defs resolves, anyOf picks branches, recursion stays finite."""
    schema = {
        "$ref": "#/$defs/Node",
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]},
                    "kind": {"enum": ["a", "b"]},
                },
                "required": ["next", "kind"],
            }
        },
    }
    depths = set()
    for value in draws(schema):
        depth = 0
        while value is not None:
            assert value["kind"] in ("a", "b")
            value, depth = value["next"], depth + 1
        depths.add(depth)
    assert max(depths) > 1


def test_formats_msgspec_writes() -> None:
    """uuid, date, duration, decimal and base64 strings parse as what they claim."""
    import base64
    import datetime
    import uuid

    for value in draws({"type": "string", "format": "uuid"}, 5):
        uuid.UUID(value)
    for value in draws({"type": "string", "format": "date"}, 5):
        datetime.date.fromisoformat(value)
    for value in draws({"type": "string", "contentEncoding": "base64"}, 5):
        base64.b64decode(value, validate=True)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "integer", "minimum": 3, "maximum": 2}, "admits no integer"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "admits no string"),
        ({"enum": []}, "empty enum"),
        ({"$ref": "#/$defs/Missing"}, "does not define"),
        ({"$ref": "https://example.com/schema"}, "only local references"),
        ({"type": "tuple"}, "unknown type"),
        (
            {
                "$ref": "#/$defs/Loop",
                "$defs": {
                    "Loop": {
                        "type": "object",
                        "properties": {"again": {"$ref": "#/$defs/Loop"}},
                        "required": ["again"],
                    }
                },
            },
            "no finite value",
        ),
    ],
)
def test_unsatisfiable_schemas_are_refused(schema: dict[str, Any], message: str) -> None:
    """A schema no value satisfies raises InvalidArgument saying where."""
    with pytest.raises(InvalidArgument, match=message):
        SchemaValues(schema).draw(RandomSource(0))


def test_allowed_types_and_json_types() -> None:
    """allowed_types reads type, enum, const and unions; integers are numbers."""
    values = SchemaValues({})
    assert values.allowed_types({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == {
        "integer",
        "null",
    }
    assert values.allowed_types({"type": "number"}) == {"number", "integer"}
    assert values.allowed_types({"enum": ["a", 1]}) == {"string", "integer", "number"}
    assert values.allowed_types({"anyOf": [{}, {"type": "null"}]}) is None
    assert json_types_of(True) == {"boolean"}
    assert json_types_of(2.0) == {"number", "integer"}
