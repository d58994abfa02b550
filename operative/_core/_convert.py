"""The one cattrs converter, for the user types msgspec cannot validate on its own, and
the search for where a value fails its type.

msgspec handles Structs, dataclasses, attrs classes and TypedDicts directly and is much
faster; this converter covers the rest (e.g. a union of several attrs classes in a tool's
input or a run's structured output). :func:`validate` picks the right one for a type and
turns every failure into a :class:`~operative.DataValidationError` carrying the JSON path
of the problem (``$.field[0]``).

Paths come from structure, never from the wording of an error message: for msgspec,
:func:`locate_problem` walks the value and its type side by side to the part that fails
on its own; for cattrs, :func:`cattrs_problems` walks its tree of validation errors.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias, TypeVar, overload

import msgspec

from ._errors import DataValidationError, InvalidArgument

__all__ = [
    "Problem",
    "cattrs_problems",
    "describe_error",
    "get_converter",
    "json_check",
    "locate_problem",
    "msgspec_supports",
    "struct_fields",
    "structure",
    "unstructure",
    "validate",
    "validate_json",
]

T = TypeVar("T")
_Data: TypeAlias = bytes | bytearray | memoryview | str
Check: TypeAlias = Callable[[Any, Any], object]
"""``check(value, type)`` raises ``msgspec.ValidationError`` when ``value`` does not fit."""

if TYPE_CHECKING:
    from cattrs.preconf.msgspec import MsgspecJsonConverter


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

    parts: list[tuple[BaseException, str, Any]]
    if isinstance(exc, ClassValidationError):
        fields, without = exc.group_exceptions()
        parts = [(sub, _field_path(path, note.name), note.type) for sub, note in fields]
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
    raise _invalid(what, invalid, locate_problem(value, type, json_check)) from None


def _invalid(what: str, exc: BaseException, problem: Problem | None) -> DataValidationError:
    if problem is None:  # not located: the whole explanation, for the whole value
        return _invalid_at(what, "$", str(exc))
    return _invalid_at(what, problem.path, problem.cause)


def _invalid_at(what: str, path: str, cause: str) -> DataValidationError:
    return DataValidationError(
        f"{what} is invalid at {path}: {cause}", what=what, path=path, detail=cause
    )


class Problem(NamedTuple):
    """Where a value fails its type, and why."""

    path: str
    """The JSON path of the failing part (``$`` for the whole value)."""
    cause: str
    """msgspec's explanation of that part alone (it names no path)."""
    error: BaseException
    """The error of that part alone (its ``__cause__`` is what a ``__post_init__`` raised)."""
    nodes: tuple[tuple[Any, Any], ...]
    """``(type, value)`` of every part from the whole value down to the failing one."""


class _Child(NamedTuple):
    value: Any
    type: Any
    path: str
    key: bool = False  # a mapping key, checked as ``{key: None}`` against ``dict[K, Any]``


def json_check(value: Any, type: Any) -> None:
    """A :data:`Check` with JSON decoding's rules: ``value`` as JSON decodes as ``type``."""
    msgspec.json.decode(msgspec.json.encode(value), type=type)


def locate_problem(value: Any, type: Any, check: Check) -> Problem | None:
    """Where ``value`` fails ``type``: the part that fails while each of its own parts fits.

    The walk goes from the whole value into the first field, item, entry or key that fails
    ``check`` (and, for a union, into the member the value selects: by JSON kind, or by
    tag), so the path comes from the value's structure and the cause is ``check``'s
    explanation of that part alone. Only failures pay for it: each step checks the parts
    of one node, so the cost is at most the depth times the size of the value.

    Returns ``None`` when ``value`` fits, or when the walk cannot go on (a check fails
    with something other than ``msgspec.ValidationError``, such as nesting too deep to
    re-encode): the caller then reports the whole message, path unknown.
    """
    error = None  # the whole value's own error: only needed when no part fails
    path = "$"
    nodes = [(type, value)]
    try:
        while True:
            for child in _children(value, type, path):
                child_error = _fails(check, child.value, child.type)
                if child_error is not None:
                    break
            else:
                if error is None and (error := _fails(check, value, type)) is None:
                    return None  # it fits
                return Problem(path, str(error), error, tuple(nodes))
            if child.key:  # a key has no parts: explain it on its own
                key, key_type = next(iter(child.value)), typing.get_args(child.type)[0]
                alone = _fails(msgspec.convert, key, key_type, strict=False)
                cause = f"invalid key {key!r}: {alone or child_error}"
                return Problem(path, cause, child_error, tuple(nodes))
            value, type, path, error = child.value, child.type, child.path, child_error
            nodes.append((type, value))
    except Exception:  # e.g. nesting too deep to re-encode: explaining must not fail
        return None


def _fails(check: Callable[..., object], value: Any, type: Any, **options: Any) -> Any:
    """The ``msgspec.ValidationError`` ``check`` raises, or ``None`` when the value fits.

    Any other exception propagates: the walk cannot tell where the problem is.
    """
    try:
        check(value, type, **options)
    except msgspec.ValidationError as exc:
        return exc
    return None


_ARRAYS = frozenset(
    {
        list,
        tuple,
        set,
        frozenset,
        collections.abc.Collection,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
        collections.abc.Set,
        collections.abc.MutableSet,
    }
)
_MAPPINGS = frozenset({dict, collections.abc.Mapping, collections.abc.MutableMapping})
_UNIONS = frozenset({typing.Union, types.UnionType})
_MISSING: Any = object()
_Literal: Any = Literal  # subscripted with values known only at run time
_dict: Any = dict


def _children(value: Any, tp: Any, path: str) -> Iterator[_Child]:
    """The parts of ``value`` that ``tp`` checks one by one, in document order."""
    if not isinstance(value, dict | list):
        return  # a scalar has no parts
    tp = _bare(tp)
    origin = typing.get_origin(tp) or tp
    if origin in _UNIONS:
        yield from _selected_member(value, typing.get_args(tp), path)
    elif _is_struct(origin):
        yield from _struct_fields(value, tp, origin.__struct_config__, path)
    elif origin in _ARRAYS and isinstance(value, list):
        yield from _items(value, typing.get_args(tp), origin, path)
    elif origin in _MAPPINGS and isinstance(value, dict):
        key_type, item_type = typing.get_args(tp) or (Any, Any)
        for key, item in value.items():
            if key_type not in (Any, str):
                yield _Child({key: None}, _dict[key_type, Any], path, key=True)
            yield _Child(item, item_type, f"{path}[{key!r}]")
    elif isinstance(origin, type):
        yield from _class_fields(value, tp, origin, path)


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated`` constraints and ``NewType`` names."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif isinstance(tp, typing.NewType):
            tp = tp.__supertype__
        else:
            return tp


def _is_struct(origin: Any) -> bool:
    return isinstance(origin, type) and issubclass(origin, msgspec.Struct)


def _field_path(path: str, name: str) -> str:
    return f"{path}.{name}" if name.isidentifier() else f"{path}[{name!r}]"


def struct_fields(type: Any) -> tuple[msgspec.structs.FieldInfo, ...]:
    """``msgspec.structs.fields``, cached per type (resolving annotations is slow)."""
    try:
        return _cached_fields(type)
    except TypeError:  # an unhashable annotation: do not cache
        return msgspec.structs.fields(type)


@functools.lru_cache(maxsize=256)
def _cached_fields(type: Any) -> tuple[msgspec.structs.FieldInfo, ...]:
    return msgspec.structs.fields(type)


def _struct_fields(value: Any, tp: Any, config: Any, path: str) -> Iterator[_Child]:
    fields = struct_fields(tp)
    if config.array_like:
        if not isinstance(value, list):
            return
        first = 0
        if config.tag is not None:
            if value:
                yield _Child(value[0], _Literal[config.tag], f"{path}[0]")
            first = 1
        for index, (field, item) in enumerate(zip(fields, value[first:], strict=False), first):
            yield _Child(item, field.type, f"{path}[{index}]")
    elif isinstance(value, dict):
        by_name = {field.encode_name: field for field in fields}
        for key, item in value.items():
            if key == config.tag_field and config.tag is not None:
                yield _Child(item, _Literal[config.tag], _field_path(path, key))
            elif (info := by_name.get(key)) is not None:
                yield _Child(item, info.type, _field_path(path, key))


def _class_fields(value: Any, tp: Any, origin: type, path: str) -> Iterator[_Child]:
    """Fields of a dataclass, attrs class, TypedDict (objects) or NamedTuple (arrays)."""
    info = _type_info(tp)
    if info is None:
        return
    try:
        hints = typing.get_type_hints(origin, include_extras=True)
    except Exception:  # an annotation that does not resolve: msgspec could not use it
        return
    import msgspec.inspect as mi

    if origin is not tp:  # a generic class with arguments: put them in its hints
        parameters = getattr(origin, "__parameters__", ())
        arguments = dict(zip(parameters, typing.get_args(tp), strict=False))
        hints = {name: _substitute(hint, arguments) for name, hint in hints.items()}
    if isinstance(info, mi.NamedTupleType) and isinstance(value, list):
        for index, (field, item) in enumerate(zip(info.fields, value, strict=False)):
            yield _Child(item, hints.get(field.name, Any), f"{path}[{index}]")
    elif isinstance(info, mi.DataclassType | mi.TypedDictType) and isinstance(value, dict):
        by_name = {field.encode_name: field for field in info.fields}
        for key, item in value.items():
            if (named := by_name.get(key)) is not None:
                yield _Child(item, hints.get(named.name, Any), _field_path(path, key))


def _substitute(hint: Any, arguments: dict[Any, Any]) -> Any:
    """``hint`` with the type variables of ``arguments`` replaced (``list[T]`` → ``list[int]``)."""
    if isinstance(hint, TypeVar):
        return arguments.get(hint, hint)
    parameters = getattr(hint, "__parameters__", ())
    if not parameters:
        return hint
    try:
        return hint[tuple(arguments.get(parameter, parameter) for parameter in parameters)]
    except TypeError:  # not subscriptable after all: leave it (checks only get laxer)
        return hint


def _type_info(tp: Any) -> Any:
    """msgspec's description of a class, or ``None`` when it has none."""
    import msgspec.inspect as mi

    try:
        return mi.type_info(tp)
    except Exception:  # a type msgspec cannot describe
        return None


def _items(value: list[Any], args: tuple[Any, ...], origin: Any, path: str) -> Iterator[_Child]:
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) == len(value):  # otherwise the tuple's length is the problem
            for index, (item, item_type) in enumerate(zip(value, args, strict=True)):
                yield _Child(item, item_type, f"{path}[{index}]")
        return
    item_type = args[0] if args else Any
    if item_type is not Any:
        for index, item in enumerate(value):
            yield _Child(item, item_type, f"{path}[{index}]")


def _json_kind(tp: Any) -> str | None:
    """``"object"`` or ``"array"``: how values of ``tp`` look in JSON (else ``None``)."""
    tp = _bare(tp)
    origin = typing.get_origin(tp) or tp
    if _is_struct(origin):
        return "array" if origin.__struct_config__.array_like else "object"
    if origin in _MAPPINGS:
        return "object"
    if origin in _ARRAYS:
        return "array"
    if not isinstance(origin, type):
        return None
    import msgspec.inspect as mi

    info = _type_info(tp)
    if isinstance(info, mi.NamedTupleType):
        return "array"
    if isinstance(info, mi.DataclassType | mi.TypedDictType):
        return "object"
    return None


def _selected_member(value: Any, members: tuple[Any, ...], path: str) -> Iterator[_Child]:
    """The union member a JSON object or array selects (by kind, or by tag)."""
    kind = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else None
    if kind is None:
        return  # a scalar: the union itself explains the mismatch
    fitting = [member for member in members if _json_kind(member) == kind]
    if len(fitting) == 1:
        yield _Child(value, fitting[0], path)
        return
    configs = [_bare(member).__struct_config__ for member in fitting if _is_struct(_bare(member))]
    if not fitting or len(configs) != len(fitting) or any(c.tag is None for c in configs):
        return
    by_tag = {config.tag: member for config, member in zip(configs, fitting, strict=True)}
    if kind == "object":
        tag_path = _field_path(path, configs[0].tag_field)
        tag = value.get(configs[0].tag_field, _MISSING)
    else:
        tag_path = f"{path}[0]"
        tag = value[0] if value else _MISSING
    if tag is _MISSING:
        return  # the union itself explains that the tag is missing
    if type(tag) is type(configs[0].tag) and tag in by_tag:
        yield _Child(value, by_tag[tag], path)
    else:
        yield _Child(tag, _Literal[tuple(by_tag)], tag_path)
