"""The one cattrs converter, for the user types msgspec cannot validate on its own.

msgspec handles Structs, dataclasses, attrs classes and TypedDicts directly and is much
faster; this converter covers the rest (e.g. a union of several attrs classes in a tool's
input or a run's structured output). :func:`validate` picks the right one for a type and
turns every failure into a :class:`~operative.errors.DataValidationError` carrying the JSON path
of the problem (``$.field[0]``).

Paths come from structure, never from the wording of an error message: for msgspec,
:func:`~._locate.locate_problem` walks the value and its type side by side to the part
that fails on its own; for cattrs, :func:`cattrs_problems` walks its tree of validation
errors.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import msgspec

from ._errors import DataValidationError, InvalidArgument

__all__ = [
    "cattrs_problems",
    "describe_error",
    "get_converter",
    "msgspec_supports",
    "structure",
    "unstructure",
    "validate",
    "validate_json",
]

T = TypeVar("T")
_Data: TypeAlias = bytes | bytearray | memoryview | str

if TYPE_CHECKING:
    from cattrs.preconf.msgspec import MsgspecJsonConverter

    from ._locate import Problem


@functools.cache
def get_converter() -> MsgspecJsonConverter:
    """The shared converter (built on first use: importing cattrs costs ~35 ms).

    Register hooks on it for types it cannot structure.
    """
    from cattrs.preconf.msgspec import make_converter

    return make_converter()


@overload
def structure(value: Any, type: type[T]) -> T: ...
@overload
def structure(value: Any, type: Any) -> Any: ...
def structure(value: Any, type: Any) -> Any:
    """Build a ``type`` from plain data with the shared converter (cattrs errors as-is)."""
    return get_converter().structure(value, type)


def unstructure(value: Any) -> Any:
    """Plain, JSON-encodable data for ``value`` with the shared converter."""
    return get_converter().unstructure(value)


def describe_error(exc: BaseException) -> str:
    """A one-line explanation of a structuring failure, naming JSON paths."""
    import cattrs

    if isinstance(exc, cattrs.BaseValidationError | KeyError):
        return "; ".join(f"{cause} @ {path}" for path, cause in cattrs_problems(exc))
    return str(exc)


def cattrs_problems(exc: BaseException, path: str = "$") -> list[tuple[str, str]]:
    """Every ``(JSON path, cause)`` in a cattrs structuring failure, in order.

    Walks the tree cattrs builds (class and iterable validation errors, whose notes name
    the attribute, index or key), so no message is parsed; the causes are cattrs' own
    descriptions (``"invalid value for type, expected int"``).
    """
    from cattrs.errors import ClassValidationError, IterableValidationError

    from ._locate import field_path

    parts: list[tuple[BaseException, str, Any]]
    if isinstance(exc, ClassValidationError):
        fields, without = exc.group_exceptions()
        parts = [(sub, field_path(path, note.name), note.type) for sub, note in fields]
    elif isinstance(exc, IterableValidationError):
        items, without = exc.group_exceptions()
        parts = [(sub, f"{path}[{note.index!r}]", note.type) for sub, note in items]
    elif isinstance(exc, KeyError):  # e.g. no union member has this tag
        return [(path, f"no variant matches {exc.args[0]!r}" if exc.args else "no variant matches")]
    else:  # not from cattrs' validation: its own words
        return [(path, str(exc))]
    parts += [(sub, path, None) for sub in without]
    problems: list[tuple[str, str]] = []
    for sub, sub_path, sub_type in parts:
        if isinstance(sub, ClassValidationError | IterableValidationError):
            problems += cattrs_problems(sub, sub_path)
        else:
            problems.append((sub_path, _cattrs_cause(sub, sub_type)))
    return problems


def _cattrs_cause(exc: BaseException, type: Any) -> str:
    from cattrs.v import format_exception

    cause = format_exception(exc, type)
    if type is None and isinstance(exc, ValueError) and str(exc):
        # e.g. an attrs validator: its message says which bound was broken
        cause = f"{cause} ({exc})"
    return cause


@functools.lru_cache(maxsize=512)
def _cached_decoder(type: Any) -> msgspec.json.Decoder[Any] | None:
    return _new_decoder(type)


def _new_decoder(type: Any) -> msgspec.json.Decoder[Any] | None:
    try:
        return msgspec.json.Decoder(type)
    except TypeError:
        return None


def _decoder(type: Any) -> msgspec.json.Decoder[Any] | None:
    try:
        hash(type)
    except TypeError:  # an unhashable annotation: do not cache
        return _new_decoder(type)
    return _cached_decoder(type)


def msgspec_supports(type: Any) -> bool:
    """Whether msgspec can decode and validate ``type`` by itself (cached per type)."""
    return _decoder(type) is not None


@overload
def validate(value: Any, type: type[T], *, what: str = ..., strict: bool = ...) -> T: ...
@overload
def validate(value: Any, type: Any, *, what: str = ..., strict: bool = ...) -> Any: ...
def validate(value: Any, type: Any, *, what: str = "value", strict: bool = True) -> Any:
    """Validate decoded JSON ``value`` into ``type``, with msgspec when it supports the
    type and with the shared cattrs converter otherwise.

    Args:
        value: plain data, as a JSON decoder returns it.
        type: the type wanted (a Struct, attrs class, dataclass, TypedDict, union, ...).
        what: how to name the value in errors, e.g. ``"arguments of 'search'"``.
        strict: with msgspec, refuse lax conversions such as ``"1"`` for an ``int``.

    Raises:
        DataValidationError: ``value`` does not fit ``type``; ``.path`` says where.
        InvalidArgument: neither msgspec nor the converter can build ``type``.
    """
    if msgspec_supports(type):
        try:
            return msgspec.convert(value, type, strict=strict)
        except msgspec.ValidationError as exc:
            from ._locate import locate_problem  # only failures pay for it

            check = functools.partial(msgspec.convert, strict=strict)
            raise _invalid(what, exc, locate_problem(value, type, check)) from None
    import cattrs

    try:
        return get_converter().structure(value, type)
    except cattrs.errors.StructureHandlerNotFoundError as exc:
        raise InvalidArgument(f"cannot validate values of type {type!r}: {exc}") from exc
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError) as exc:
        path, cause = cattrs_problems(exc)[0]
        raise _invalid_at(what, path, cause) from None


@overload
def validate_json(data: _Data, type: type[T], *, what: str = ...) -> T: ...
@overload
def validate_json(data: _Data, type: Any, *, what: str = ...) -> Any: ...
def validate_json(data: _Data, type: Any, *, what: str = "value") -> Any:
    """Parse JSON ``data`` and validate it into ``type`` (one pass when msgspec can).

    Raises:
        DataValidationError: ``data`` is not JSON, or does not fit ``type``.
        InvalidArgument: neither msgspec nor the converter can build ``type``.
    """
    decoder = _decoder(type)
    if decoder is not None:
        try:
            return decoder.decode(data)
        except msgspec.DecodeError as exc:
            invalid = exc
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _invalid_at(what, "$", f"not valid JSON: {exc}") from None
    if decoder is None:
        return validate(value, type, what=what)
    from ._locate import json_check, locate_problem  # only failures pay for it

    raise _invalid(what, invalid, locate_problem(value, type, json_check)) from None


def _invalid(what: str, exc: BaseException, problem: Problem | None) -> DataValidationError:
    if problem is None:  # not located: the whole explanation, for the whole value
        return _invalid_at(what, "$", str(exc))
    return _invalid_at(what, problem.path, problem.cause)


def _invalid_at(what: str, path: str, cause: str) -> DataValidationError:
    return DataValidationError(
        f"{what} is invalid at {path}: {cause}", what=what, path=path, detail=cause
    )
