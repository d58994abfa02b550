"""The codec (msgspec JSON records) and the converter (user types at the seams)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Literal

import attrs
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from operative._core import _codec
from operative._core._codec import (
    check_schema_version,
    decode,
    encode,
    supported_schema_version,
)
from operative._core._convert import (
    describe_error,
    msgspec_supports,
    structure,
    unstructure,
    validate,
    validate_json,
)
from operative._core._errors import (
    CorruptRecordError,
    DataValidationError,
    InvalidArgument,
    SchemaVersionError,
)
from operative._core._types import ToolCall, ToolResult, Usage


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """A small versioned record for these tests."""

    text: str
    tags: tuple[str, ...] = ()
    schema_version: int = 2

    def __post_init__(self) -> None:
        check_schema_version("Note", self.schema_version, 2)


notes = st.builds(
    Note, text=st.text(max_size=20), tags=st.lists(st.text(max_size=5), max_size=3).map(tuple)
)


@given(notes)
def test_records_round_trip(note: Note) -> None:
    """Any record decodes back to an equal record."""
    assert decode(encode(note), Note) == note


@given(notes, st.data())
def test_truncated_records_are_rejected(note: Note, data: st.DataObject) -> None:
    """Any strict prefix raises CorruptRecordError, never a bare msgspec error."""
    encoded = encode(note)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(CorruptRecordError, match="cannot decode Note"):
        decode(encoded[:cut], Note)


@given(st.binary(max_size=40))
def test_arbitrary_bytes_never_escape_as_other_errors(data: bytes) -> None:
    """Whatever the bytes, the codec returns a record or raises CorruptRecordError."""
    with contextlib.suppress(CorruptRecordError):
        decode(data, Note)


def test_decoders_are_cached_per_type() -> None:
    """One decoder per type is built and reused."""
    _codec._cached_decoder.cache_clear()
    for _ in range(3):
        decode(b'{"text": "a"}', Note)
        decode(b'{"call_id": "c", "tool_name": "t", "outcome": "error"}', ToolResult)
    assert _codec._cached_decoder.cache_info().currsize == 2


def test_leaf_records_decode() -> None:
    """The shared leaf records are records like any other."""
    call = ToolCall(id="c", name="t", arguments={"a": [1, 2]})
    assert decode(encode(call), ToolCall) == call
    assert decode(encode(Usage.of(3, 4)), Usage) == Usage.of(3, 4)


def test_generic_types_decode() -> None:
    """Plain generic types decode with validation too (uncached if unhashable)."""
    assert decode(b"[1, 2]", list[int]) == [1, 2]
    with pytest.raises(CorruptRecordError, match=r"\(at \$\[1\]\)"):
        decode(b'[1, "x"]', list[int], what="numbers")


def test_newer_version_asks_for_an_upgrade() -> None:
    """A version above the one this code writes is a SchemaVersionError."""
    with pytest.raises(SchemaVersionError, match="Upgrade operative") as caught:
        decode(b'{"text": "a", "schema_version": 3}', Note)
    assert isinstance(caught.value, CorruptRecordError)
    assert (caught.value.found, caught.value.supported, caught.value.what) == (3, 2, "Note")


def test_newer_version_with_changed_fields_asks_for_an_upgrade() -> None:
    """Even when the newer bytes do not validate here, the version is what is reported."""
    with pytest.raises(SchemaVersionError):
        decode(b'{"text": 5, "schema_version": 9}', Note)


def test_older_versions_decode() -> None:
    """Older versions (missing fields take defaults) still decode."""
    assert decode(b'{"text": "a", "schema_version": 1}', Note).schema_version == 1
    assert decode(b'{"text": "a"}', Note).tags == ()


def test_supported_schema_version() -> None:
    """The version a type writes is its schema_version default; others have none."""
    assert supported_schema_version(Note) == 2
    assert supported_schema_version(Usage) is None
    assert supported_schema_version(list[int]) is None


def test_unknown_fields_are_ignored() -> None:
    """Fields a newer writer added are skipped, as schema evolution requires."""
    assert decode(b'{"text": "a", "colour": "red"}', Note) == Note(text="a")


def test_error_attributes() -> None:
    """The error carries what was decoded and the explanation of the failing part."""
    with pytest.raises(CorruptRecordError) as caught:
        decode(b'{"tags": []}', Note, what="note 7")
    assert caught.value.what == "note 7"
    assert "missing required field `text`" in caught.value.detail
    assert str(caught.value).startswith("cannot decode note 7: Object missing")


def test_unencodable_values_are_misuse() -> None:
    """Encoding a value JSON cannot hold raises InvalidArgument naming the record."""
    with pytest.raises(InvalidArgument, match="cannot encode ToolResult"):
        encode(ToolResult(call_id="c", tool_name="t", outcome="success", value=object()))


def test_undecodable_types_and_inputs_are_misuse() -> None:
    """A type msgspec cannot decode, or data that is not bytes, is InvalidArgument."""
    with pytest.raises(InvalidArgument, match="cannot decode records of type"):
        decode(b"{}", object())
    with pytest.raises(InvalidArgument, match="bytes or str"):
        decode(42, Note)  # type: ignore[call-overload]


@attrs.frozen
class Circle:
    kind: Literal["circle"]
    radius: float = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class Square:
    kind: Literal["square"]
    side: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


Shape = Circle | Square


def test_msgspec_supports() -> None:
    """msgspec takes single attrs classes and dataclasses, not unions of them."""
    assert msgspec_supports(Circle)
    assert msgspec_supports(Point)
    assert msgspec_supports(list[Point])
    assert not msgspec_supports(Shape)


@pytest.mark.parametrize(
    ("value", "type_", "expected"),
    [
        ({"kind": "circle", "radius": 1.5}, Shape, Circle(kind="circle", radius=1.5)),
        ({"kind": "square", "side": 2}, Shape, Square(kind="square", side=2)),
        ({"x": 1, "y": 2}, Point, Point(1, 2)),
        ({"text": "a"}, Note, Note(text="a")),
        ([{"kind": "square", "side": 1}], list[Shape], [Square(kind="square", side=1)]),
    ],
)
def test_validate_builds_user_types(value: Any, type_: Any, expected: Any) -> None:
    """Values validate into Structs, dataclasses, attrs classes and unions of them."""
    assert validate(value, type_) == expected


@pytest.mark.parametrize(
    ("value", "type_", "path"),
    [
        ({"x": 1, "y": "2"}, Point, "$.y"),
        ({"kind": "circle", "radius": -1}, Circle, "$"),
        ([{"kind": "square", "side": "big"}], list[Shape], "$[0].side"),
        ({"kind": "square", "side": "big"}, Shape, "$.side"),
        ({"kind": "triangle"}, Shape, "$"),
        ({"tags": []}, Note, "$"),
    ],
)
def test_validate_reports_the_path(value: Any, type_: Any, path: str) -> None:
    """Every failure is a DataValidationError that names the JSON path."""
    with pytest.raises(DataValidationError) as caught:
        validate(value, type_, what="arguments of 'draw'")
    assert caught.value.path == path
    assert str(caught.value).startswith(f"arguments of 'draw' is invalid at {path}: ")
    assert caught.value.what == "arguments of 'draw'"


def test_validate_json_in_one_pass_or_two() -> None:
    """Raw JSON validates directly (msgspec) or through the converter (unions)."""
    assert validate_json('{"x": 1, "y": 2}', Point) == Point(1, 2)
    assert validate_json(b'{"kind": "circle", "radius": 2}', Shape) == Circle(
        kind="circle", radius=2
    )
    for data, type_ in [(b'{"x": 1', Point), (b"{", Shape)]:
        with pytest.raises(DataValidationError, match="not valid JSON"):
            validate_json(data, type_)
    with pytest.raises(DataValidationError) as caught:
        validate_json(b'{"x": 1, "y": null}', Point)
    assert caught.value.path == "$.y"


def test_structure_and_unstructure_round_trip() -> None:
    """The shared converter turns user types into plain data and back."""
    shapes = [Circle(kind="circle", radius=1.0), Square(kind="square", side=2.0)]
    plain = unstructure(shapes)
    assert plain == [{"kind": "circle", "radius": 1.0}, {"kind": "square", "side": 2.0}]
    assert structure(plain, list[Shape]) == shapes


def test_describe_error_falls_back_to_the_message() -> None:
    """Errors that are not cattrs validation errors are described by their text."""
    assert describe_error(RuntimeError("boom")) == "boom"
