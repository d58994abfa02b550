"""Tool input schemas: from a function's signature or an explicit type, via msgspec.

Schemas are JSON Schema draft 2020-12 with the root type inlined (providers want an
object at the top) and any nested definitions kept under ``$defs``. They are built once
per tool, so the dict a model sees is identical on every step and every run.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

import msgspec

from .._core._errors import ToolDefinitionError
from ._context import ToolContext

__all__ = ["NAME_PATTERN", "SignatureInput", "check_tool_name", "json_schema", "signature_input"]

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names every major provider accepts."""


def check_tool_name(name: object) -> str:
    """``name`` if providers accept it as a tool name, else ``ToolDefinitionError``."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1 to 64 letters, digits, '_' or '-' "
            "(providers reject anything else); pass name= to choose another"
        )
    return name


def json_schema(type_: Any, *, what: str, object_only: bool = True) -> dict[str, Any]:
    """The JSON Schema of ``type_`` with its root definition inlined."""
    try:
        raw = msgspec.json.schema(type_)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"cannot build a JSON Schema for the {what} {type_!r}: {exc}; use JSON-like "
            "types (Structs, dataclasses, attrs classes, TypedDicts, scalars, lists, dicts) "
            "or pass input_schema= explicitly"
        ) from None
    defs: dict[str, Any] = dict(raw.pop("$defs", {}))
    ref = raw.get("$ref")
    schema: dict[str, Any]
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(raw) == 1:
        name = ref.removeprefix("#/$defs/")
        schema = dict(defs[name])
        schema.pop("title", None)
        if not _refers_to(defs, ref):
            del defs[name]
    else:
        schema = raw
    if object_only and schema.get("type") != "object":
        raise ToolDefinitionError(
            f"the {what} {type_!r} is not an object type: a tool's arguments are a JSON "
            "object, so use a Struct, dataclass, attrs class or TypedDict"
        )
    if defs:
        schema["$defs"] = defs
    return schema


def _refers_to(node: Any, ref: str) -> bool:
    if isinstance(node, dict):
        return node.get("$ref") == ref or any(_refers_to(v, ref) for v in node.values())
    if isinstance(node, list):
        return any(_refers_to(v, ref) for v in node)
    return False


class SignatureInput(msgspec.Struct, frozen=True, kw_only=True):
    """What a function's signature says about its tool input."""

    struct: type[msgspec.Struct] | None
    """The arguments as a Struct (``None`` when the function takes an explicit input)."""
    context_parameter: str | None
    """The parameter annotated ``ToolContext``, if any."""
    value_parameters: tuple[str, ...]
    """Every other parameter, in order."""
    positional: bool = False
    """True when the value parameters, in order, are all that may be passed by position
    (no ``ToolContext`` parameter, none keyword-only): a call then passes the arguments
    by position, without building a dict of them."""


def signature_input(
    fn: Callable[..., Any], *, tool_name: str, build_struct: bool
) -> SignatureInput:
    """Read ``fn``'s signature; with ``build_struct``, turn it into an arguments Struct."""
    where = f"tool {tool_name!r}"
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"{where}: cannot read the function's signature or annotations ({exc}); "
            "make every annotation importable from the function's module"
        ) from None
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    context: str | None = None
    values: list[str] = []
    positional = True
    for parameter in signature.parameters.values():
        kind = parameter.kind
        if kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
            positional = False
        if kind is inspect.Parameter.VAR_POSITIONAL or kind is inspect.Parameter.VAR_KEYWORD:
            star = "*" if kind is inspect.Parameter.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{where}: parameter {star}{parameter.name} cannot be described to a model; "
                "use named, annotated parameters (or an explicit input type)"
            )
        annotation = hints.get(parameter.name, inspect.Parameter.empty)
        if annotation is ToolContext:
            context = parameter.name
            positional = False
            continue
        values.append(parameter.name)
        if not build_struct:
            continue
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{where}: parameter {parameter.name!r} is positional-only; tool arguments "
                "are passed by name, so drop the '/'"
            )
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"{where}: parameter {parameter.name!r} has no type annotation; annotate "
                "it so its JSON Schema can be built"
            )
        if parameter.default is inspect.Parameter.empty:
            fields.append((parameter.name, annotation))
        else:
            fields.append((parameter.name, annotation, parameter.default))
    struct: type[msgspec.Struct] | None = None
    if build_struct:
        try:
            # Untracked by the cyclic collector (gc=False): it holds a call's decoded
            # JSON arguments and is handed to the tool unpacked, so it is in no cycle.
            struct = msgspec.defstruct(
                tool_name,
                fields,
                kw_only=True,
                forbid_unknown_fields=True,
                frozen=True,
                gc=False,
            )
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"{where}: unusable parameters: {exc}") from None
    return SignatureInput(
        struct=struct,
        context_parameter=context,
        value_parameters=tuple(values),
        positional=positional,
    )
