"""Where a value fails its type: a walk of the value and the type side by side.

Run only after a decode or a validation failed (success pays nothing): it steps into the
first part (a field, an item, a dict entry or key, the union member the value selects)
that fails a check on its own, down to the deepest such part, and reports its JSON path
and msgspec's message for that part alone. The path comes from the data's structure,
never from the wording of msgspec's messages.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple, TypeAlias, TypeVar

import msgspec

__all__ = ["Check", "Problem", "field_path", "json_check", "locate_problem", "struct_fields"]

Check: TypeAlias = Callable[[Any, Any], object]
"""``check(value, type)`` raises ``msgspec.ValidationError`` when ``value`` does not fit."""


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


def field_path(path: str, name: str) -> str:
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
                yield _Child(item, _Literal[config.tag], field_path(path, key))
            elif (info := by_name.get(key)) is not None:
                yield _Child(item, info.type, field_path(path, key))


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
                yield _Child(item, hints.get(named.name, Any), field_path(path, key))


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
        tag_path = field_path(path, configs[0].tag_field)
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
