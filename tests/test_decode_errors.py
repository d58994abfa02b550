"""Decode and validation errors name the JSON path and the cause from structure.

The path is found by walking the value and its type, never by reading msgspec's or
cattrs' wording: the tests at the end reword every msgspec message and expect the same
paths.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Annotated, Any, Generic, Literal, NamedTuple, TypedDict, TypeVar

import attrs
import msgspec
import pytest

from operative._core import _codec, _convert
from operative._core._codec import check_schema_version, decode
from operative._core._convert import (
    cattrs_problems,
    describe_error,
    get_converter,
    validate,
    validate_json,
)
from operative._core._errors import CorruptRecordError, DataValidationError, SchemaVersionError
from operative._core._locate import json_check, locate_problem


class Inner(msgspec.Struct):
    count: int
    label: str = ""


class Circle(msgspec.Struct, tag="circle", tag_field="kind"):
    radius: float


class Square(msgspec.Struct, tag="square", tag_field="kind"):
    side: float


class Pair(msgspec.Struct, array_like=True):
    left: int
    right: str


class Point(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass
class Size:
    width: int
    height: int


class Options(TypedDict, total=False):
    depth: int


T = TypeVar("T")


@dataclasses.dataclass
class Holder(Generic[T]):
    item: T
    more: list[T] = dataclasses.field(default_factory=list)


class Outer(msgspec.Struct, rename={"odd": "odd key"}):
    inner: Inner | None = None
    items: list[Inner] = []
    by_name: dict[str, Inner] = {}
    by_id: dict[int, str] = {}
    shapes: list[Circle | Square] = []
    value: int | str | list[int] = 0
    fixed: tuple[int, str] = (0, "")
    pair: Pair | None = None
    point: Point | None = None
    size: Size | None = None
    options: Options | None = None
    small: list[Annotated[int, msgspec.Meta(ge=0)]] = []
    holder: Holder[int] | None = None
    odd: int = 0


class Plain(msgspec.Struct):
    """Versioned without a ``__post_init__`` check (as the durable records are)."""

    x: int
    schema_version: int = 1


class Note(msgspec.Struct):
    """Versioned, with the check in ``__post_init__``."""

    text: str = ""
    schema_version: int = 2

    def __post_init__(self) -> None:
        check_schema_version("Note", self.schema_version, 2)


class Box(msgspec.Struct):
    plain: Plain | None = None
    notes: list[Note] = []


def corrupt(data: bytes, type_: Any = Outer) -> CorruptRecordError:
    with pytest.raises(CorruptRecordError) as caught:
        decode(data, type_)
    assert not isinstance(caught.value, SchemaVersionError)
    return caught.value


CASES = [
    # (bytes of an Outer, path, words of the cause)
    (b'{"inner": {"count": "3"}}', "$.inner.count", "`int`"),
    (b'{"inner": {"label": "a"}}', "$.inner", "missing required field `count`"),
    (b'{"inner": []}', "$.inner", "got `array`"),
    (b'{"items": [{"count": 1}, {"count": 2}, {"count": null}]}', "$.items[2].count", "`int`"),
    (b'{"items": {"count": 1}}', "$.items", "`array`"),
    (b'{"by_name": {"a": {"count": 1}, "b": {"count": "x"}}}', "$.by_name['b'].count", "`int`"),
    (b'{"by_id": {"1": "one", "two": "2"}}', "$.by_id", "invalid key 'two'"),
    (b'{"by_id": {"1": 1}}', "$.by_id['1']", "`str`"),
    (
        b'{"shapes": [{"kind": "circle", "radius": 1}, {"kind": "hexagon"}]}',
        "$.shapes[1].kind",
        "'hexagon'",
    ),
    (b'{"shapes": [{"kind": 7}]}', "$.shapes[0].kind", "`str`"),
    (b'{"shapes": [{"kind": "square", "side": "big"}]}', "$.shapes[0].side", "`float`"),
    (b'{"shapes": [{"side": 1}]}', "$.shapes[0]", "missing required field `kind`"),
    (b'{"value": 1.5}', "$.value", "`int | str | array`"),
    (b'{"value": [1, "x"]}', "$.value[1]", "`int`"),
    (b'{"fixed": [1, 2]}', "$.fixed[1]", "`str`"),
    (b'{"fixed": [1]}', "$.fixed", "length 2"),
    (b'{"pair": [1, 2]}', "$.pair[1]", "`str`"),
    (b'{"point": [1, "y"]}', "$.point[1]", "`int`"),
    (b'{"size": {"width": 1, "height": "tall"}}', "$.size.height", "`int`"),
    (b'{"options": {"depth": "deep"}}', "$.options.depth", "`int`"),
    (b'{"small": [0, 1, -1]}', "$.small[2]", ">= 0"),
    (b'{"holder": {"item": "x"}}', "$.holder.item", "`int`"),
    (b'{"holder": {"item": 1, "more": [2, "x"]}}', "$.holder.more[1]", "`int`"),
    (b'{"odd key": "x"}', "$['odd key']", "`int`"),
]


@pytest.mark.parametrize(("data", "path", "cause"), CASES)
def test_decode_names_the_path_and_the_cause(data: bytes, path: str, cause: str) -> None:
    """Nested structs, lists, dicts (values and keys), unions, tuples, constraints."""
    error = corrupt(data)
    assert error.detail.endswith(f" (at {path})")
    assert cause in error.detail
    assert "- at `" not in error.detail  # the cause is the failing part's own, pathless
    assert str(error).startswith(f"cannot decode Outer: {error.detail}. ")


@pytest.mark.parametrize(("data", "cause"), [(b"[]", "`object`"), (b'{"inner": 5', "truncated")])
def test_a_problem_with_the_whole_value_names_no_path(data: bytes, cause: str) -> None:
    """A wrong top-level type, and bytes that are not JSON at all, have no path."""
    error = corrupt(data)
    assert cause in error.detail
    assert "(at " not in str(error)


def test_nesting_too_deep_to_decode_is_corrupt() -> None:
    """Nesting past the decoder's recursion limit is a CorruptRecordError, not a crash."""
    error = corrupt(b"[" * 50_000 + b"]" * 50_000, list[Any])
    assert error.detail == "nested deeper than the decoder can follow"


def test_bytes_that_are_not_json_are_explained_as_such() -> None:
    """Truncated bytes whose first field is also wrong: the truncation is the problem."""
    assert "truncated" in corrupt(b'{"inner": {"count": "x"}, "items": [').detail


def test_a_newer_record_inside_a_list_asks_for_an_upgrade() -> None:
    """A record checked in ``__post_init__`` is found wherever it is nested."""
    with pytest.raises(SchemaVersionError, match="Upgrade operative") as caught:
        decode(b'{"notes": [{"text": "a"}, {"text": "b", "schema_version": 5}]}', Box)
    assert (caught.value.found, caught.value.supported, caught.value.what) == (5, 2, "Box")
    assert "Note schema version 5" in str(caught.value)
    assert caught.value.detail.endswith("(at $.notes[1])")


def test_a_newer_nested_record_with_unknown_fields_asks_for_an_upgrade() -> None:
    """A newer version on the failing path explains the failure, with no check to raise."""
    with pytest.raises(SchemaVersionError) as caught:
        decode(b'{"plain": {"x": "changed", "schema_version": 2}}', Box)
    assert (caught.value.found, caught.value.supported) == (2, 1)
    assert "Plain schema version 2" in str(caught.value)
    assert caught.value.detail.endswith("(at $.plain.x)")


def test_an_older_or_current_version_that_does_not_fit_is_corrupt() -> None:
    """Only a version above this code's makes a failure a SchemaVersionError."""
    error = corrupt(b'{"plain": {"x": "changed", "schema_version": 1}}', Box)
    assert error.detail.endswith("(at $.plain.x)")


def test_check_schema_version_raises_a_schema_version_error() -> None:
    """Built directly, a newer record is refused with the versions attached (a ValueError)."""
    with pytest.raises(SchemaVersionError, match="upgrade operative") as caught:
        Note(schema_version=3)
    assert isinstance(caught.value, ValueError)
    assert (caught.value.what, caught.value.found, caught.value.supported) == ("Note", 3, 2)


@pytest.mark.parametrize(
    ("value", "path", "cause"),
    [
        ({"inner": {"count": "3"}}, "$.inner.count", "`int`"),
        ({"by_name": {"b": {"count": "x"}}}, "$.by_name['b'].count", "`int`"),
        ({"shapes": [{"kind": "hexagon"}]}, "$.shapes[0].kind", "'hexagon'"),
        ({"value": [1, "x"]}, "$.value[1]", "`int`"),
    ],
)
def test_validate_with_msgspec_names_the_path(value: Any, path: str, cause: str) -> None:
    """msgspec.convert failures are located the same way."""
    with pytest.raises(DataValidationError) as caught:
        validate(value, Outer, what="arguments of 'draw'")
    assert (caught.value.path, caught.value.what) == (path, "arguments of 'draw'")
    assert cause in caught.value.detail
    assert str(caught.value) == f"arguments of 'draw' is invalid at {path}: {caught.value.detail}"


def test_validate_is_lax_when_asked() -> None:
    """With strict=False the walk uses the same lax rules, and still finds the path."""
    assert validate({"inner": {"count": "3"}}, Outer, strict=False).inner == Inner(count=3)
    with pytest.raises(DataValidationError) as caught:
        validate({"inner": {"count": "three"}}, Outer, strict=False)
    assert caught.value.path == "$.inner.count"


def test_validate_json_names_the_path() -> None:
    """Raw JSON that parses but does not fit is located; JSON that does not parse is not."""
    with pytest.raises(DataValidationError) as caught:
        validate_json(b'{"by_name": {"b": {"count": "x"}}}', Outer)
    assert caught.value.path == "$.by_name['b'].count"
    with pytest.raises(DataValidationError, match="not valid JSON") as caught:
        validate_json(b'{"inner": {"count": "x"}', Outer)
    assert caught.value.path == "$"


def test_locate_problem_returns_none_for_a_fitting_value() -> None:
    """A value that fits has no problem (the walk checks the whole value last)."""
    assert locate_problem({"items": [{"count": 1}]}, Outer, json_check) is None


def test_locate_problem_gives_up_when_a_check_fails_otherwise() -> None:
    """A check that fails with something other than a validation error stops the walk."""

    def broken(value: Any, type_: Any) -> None:
        raise RuntimeError("cannot tell")

    assert locate_problem({"inner": {"count": "x"}}, Outer, broken) is None


def test_the_nodes_lead_from_the_whole_value_to_the_problem() -> None:
    """Every (type, value) on the path is kept, for the schema-version check."""
    problem = locate_problem({"items": [{"count": 1}, {"count": "x"}]}, Outer, json_check)
    assert problem is not None
    assert problem.path == "$.items[1].count"
    assert [node_type for node_type, _ in problem.nodes] == [Outer, list[Inner], Inner, int]
    assert problem.nodes[-1][1] == "x"


def test_decode_falls_back_to_the_whole_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the walk cannot tell, msgspec's whole explanation is given, path unknown."""

    def cannot_encode(value: Any) -> bytes:
        raise msgspec.EncodeError("cannot re-encode")

    monkeypatch.setattr(msgspec.json, "encode", cannot_encode)
    error = corrupt(b'{"inner": {"count": "3"}}')
    assert error.detail == "Expected `int`, got `str` - at `$.inner.count`"
    assert "(at " not in str(error)


# -- cattrs -------------------------------------------------------------------------------


@attrs.frozen
class Disc:
    kind: Literal["disc"]
    radius: float = attrs.field(validator=attrs.validators.gt(0))


@attrs.frozen
class Tile:
    kind: Literal["tile"]
    side: float


@attrs.frozen
class Board:
    pieces: dict[str, Disc | Tile]
    rows: list[list[int]]
    name: str


def structure_error(value: Any, type_: Any) -> BaseException:
    with pytest.raises(Exception) as caught:  # noqa: PT011 - cattrs raises several kinds
        get_converter().structure(value, type_)
    return caught.value


def test_cattrs_problems_walk_the_error_tree() -> None:
    """Attributes, mapping keys and list indices become paths, every problem in order."""
    exc = structure_error(
        {"pieces": {"a": {"kind": "tile", "side": "big"}}, "rows": [[1], [2, "x"]]}, Board
    )
    assert cattrs_problems(exc) == [
        ("$.pieces['a'].side", "invalid value for type, expected float"),
        ("$.rows[1][1]", "invalid value for type, expected int"),
        ("$.name", "required field missing"),
    ]
    assert describe_error(exc) == (
        "invalid value for type, expected float @ $.pieces['a'].side; "
        "invalid value for type, expected int @ $.rows[1][1]; required field missing @ $.name"
    )


def test_cattrs_problems_keep_a_validator_message() -> None:
    """A class-level failure (an attrs validator) says what the validator said."""
    exc = structure_error({"kind": "disc", "radius": -1}, Disc)
    [(path, cause)] = cattrs_problems(exc)
    assert path == "$"
    assert "'radius' must be > 0" in cause


def test_cattrs_problems_for_other_errors() -> None:
    """An unknown union tag, and errors from outside cattrs' validation."""
    assert cattrs_problems(structure_error({"kind": "hexagon"}, Disc | Tile)) == [
        ("$", "no variant matches 'hexagon'")
    ]
    assert cattrs_problems(RuntimeError("boom")) == [("$", "boom")]


def test_validate_with_cattrs_names_the_first_path() -> None:
    """A type msgspec cannot take goes through cattrs, with the first problem's path."""
    value = {"pieces": {"a": {"kind": "disc", "radius": "r"}}, "rows": [], "name": "n"}
    with pytest.raises(DataValidationError) as caught:
        validate(value, Board, what="board")
    assert caught.value.path == "$.pieces['a'].radius"
    assert caught.value.detail == "invalid value for type, expected float"
    assert str(caught.value) == (
        "board is invalid at $.pieces['a'].radius: invalid value for type, expected float"
    )


# -- msgspec rewords its messages -----------------------------------------------------------


def reword(exc: msgspec.ValidationError) -> msgspec.ValidationError:
    """The same failure in other words: no "- at `$...`" suffix, different casing."""
    return msgspec.ValidationError("REWORDED " + str(exc).upper().replace(" - AT ", " IN "))


@pytest.fixture
def reworded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """msgspec's decoders and convert, raising reworded validation errors."""
    real_decoder, real_decode, real_convert = (
        msgspec.json.Decoder,
        msgspec.json.decode,
        msgspec.convert,
    )

    def rewording(function: Any) -> Any:
        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except msgspec.ValidationError as exc:
                raise reword(exc) from exc.__cause__

        return call

    class Decoder:
        def __init__(self, type_: Any) -> None:
            self.decode = rewording(real_decoder(type_).decode)

    monkeypatch.setattr(msgspec.json, "Decoder", Decoder)
    monkeypatch.setattr(msgspec.json, "decode", rewording(real_decode))
    monkeypatch.setattr(msgspec, "convert", rewording(real_convert))
    _codec._cached_decoder.cache_clear()
    _convert._cached_decoder.cache_clear()
    yield
    _codec._cached_decoder.cache_clear()
    _convert._cached_decoder.cache_clear()


@pytest.mark.usefixtures("reworded")
@pytest.mark.parametrize(("data", "path", "cause"), CASES)
def test_paths_do_not_depend_on_msgspec_wording(data: bytes, path: str, cause: str) -> None:
    """Reworded messages: the same paths, and the failing part's (reworded) explanation."""
    error = corrupt(data)
    assert error.detail.endswith(f" (at {path})")
    assert "REWORDED " in error.detail
    assert " IN $" not in error.detail  # the part's own message, which names no path


@pytest.mark.usefixtures("reworded")
def test_newer_records_do_not_depend_on_msgspec_wording() -> None:
    """A nested newer record is still recognised when the message says it otherwise."""
    with pytest.raises(SchemaVersionError) as caught:
        decode(b'{"notes": [{"schema_version": 5}]}', Box)
    assert (caught.value.found, caught.value.supported) == (5, 2)
    assert caught.value.detail.endswith("(at $.notes[0])")


@pytest.mark.usefixtures("reworded")
def test_validate_does_not_depend_on_msgspec_wording() -> None:
    """validate and validate_json find the same paths in reworded messages."""
    with pytest.raises(DataValidationError) as caught:
        validate({"items": [{"count": 1}, {"count": "x"}]}, Outer)
    assert caught.value.path == "$.items[1].count"
    assert caught.value.detail.startswith("REWORDED ")
    with pytest.raises(DataValidationError) as caught:
        validate_json(b'{"by_id": {"q": "x"}}', Outer)
    assert caught.value.path == "$.by_id"
    assert caught.value.detail.startswith("invalid key 'q': REWORDED ")
