"""The one cattrs converter, for the user types msgspec cannot validate on its own.

msgspec handles Structs, dataclasses, attrs classes and TypedDicts directly and is much
faster; this converter covers the rest (e.g. a union of several attrs classes in a tool's
input or a run's structured output). :func:`validate` picks the right one for a type and
turns every failure into a :class:`~operative.DataValidationError` carrying the JSON path
of the problem (``$.field[0]``).
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import msgspec

from ._errors import DataValidationError, InvalidArgument

__all__ = [
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


@functools.cache
def get_converter() -> MsgspecJsonConverter:
    """The shared converter (built on first use: importing cattrs costs ~35 ms).

    Register hooks on it for types it cannot structure.
    """
    from cattrs.preconf.msgspec import make_converter

    return make_converter()


_MSGSPEC_PATH = re.compile(r" - at `(?P<path>\$[^`]*)`$")
_CATTRS_PATH = re.compile(r" @ (?P<path>\$.*)$")


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

    if isinstance(exc, cattrs.BaseValidationError):
        messages: list[Any] = cattrs.transform_error(exc)
        return "; ".join(str(m) for m in messages)
    if isinstance(exc, KeyError):  # e.g. no union member has this tag
        return f"no variant matches {exc.args[0]!r} @ $" if exc.args else "no variant matches @ $"
    return str(exc)


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
            raise _invalid(what, str(exc), _MSGSPEC_PATH) from None
    import cattrs

    try:
        return get_converter().structure(value, type)
    except cattrs.errors.StructureHandlerNotFoundError as exc:
        raise InvalidArgument(f"cannot validate values of type {type!r}: {exc}") from exc
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _invalid(what, describe_error(exc).split("; ")[0], _CATTRS_PATH) from None


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
        except msgspec.ValidationError as exc:
            raise _invalid(what, str(exc), _MSGSPEC_PATH) from None
        except msgspec.DecodeError as exc:
            raise _invalid(what, f"not valid JSON: {exc}", _MSGSPEC_PATH) from None
    try:
        value = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise _invalid(what, f"not valid JSON: {exc}", _MSGSPEC_PATH) from None
    return validate(value, type, what=what)


def _invalid(what: str, detail: str, pattern: re.Pattern[str]) -> DataValidationError:
    match = pattern.search(detail)
    path = match["path"] if match else "$"
    problem = detail[: match.start()] if match else detail
    return DataValidationError(
        f"{what} is invalid at {path}: {problem}", what=what, path=path, detail=problem
    )
