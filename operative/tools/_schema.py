"""Tool input schemas: from a function's signature or an explicit type, via msgspec.

Schemas are JSON Schema draft 2020-12 with the root type inlined (providers want an
object at the top) and any nested definitions kept under ``$defs``. They are built once
per tool, so the dict a model sees is identical on every step and every run.

Every JSON Schema operative is handed (a tool's ``input_schema``, an AG-UI client's tool
parameters, an MCP server's input, output and elicitation schemas, an output type's
schema) is checked by :func:`check_local_refs` where it is given, and every validator is
built by :func:`compile_schema`: a ``$ref`` must point inside the schema, and nothing is
ever fetched over the network or read from the disk to resolve one.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

import msgspec

from .._core._errors import OperativeError, ToolDefinitionError
from ._context import ToolContext

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "NAME_PATTERN",
    "SignatureInput",
    "check_local_refs",
    "check_tool_name",
    "compile_schema",
    "json_schema",
    "signature_input",
]

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
    check_local_refs(schema, where=f"the JSON Schema of the {what} {type_!r}")
    return schema


# -- references: never resolved outside the schema ----------------------------------------

_ONE_SCHEMA = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "items",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
"""Keywords whose value is one subschema (``items`` is a list of them before 2020-12)."""

_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
"""Keywords whose value is a list of subschemas."""

_SCHEMA_MAPS = frozenset(
    {"$defs", "definitions", "dependentSchemas", "dependencies", "patternProperties", "properties"}
)
"""Keywords whose value maps names to subschemas (``dependencies`` may also map a name
to a list of property names, which holds no schema)."""

_REFERENCES = ("$ref", "$dynamicRef")

_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_local_refs(
    schema: object, *, where: str, error: type[OperativeError] = ToolDefinitionError
) -> None:
    """Refuse ``schema`` if a ``$ref`` or ``$dynamicRef`` in it points outside it.

    A reference is local when it starts with ``#`` or, resolved against the ``$id`` in
    scope, names a resource (an ``$id``) the schema itself defines. Anything else (an
    ``http:``, ``https:`` or ``file:`` URL, a relative file name) would have to be
    fetched, which operative never does: ``error`` is raised, naming ``where`` the
    schema came from, the reference and its place in the schema. Only the keywords that
    hold subschemas are walked, so a ``{"$ref": ...}`` inside ``const``, ``enum``,
    ``default`` or ``examples`` (data, never resolved) is left alone.
    """
    known: set[str] = set()
    found: list[tuple[str, str, str, tuple[object, ...]]] = []  # keyword, ref, resolved, path
    stack: list[tuple[object, str, tuple[object, ...]]] = [(schema, "", ())]
    seen: set[tuple[int, str]] = set()
    while stack:
        node, base, path = stack.pop()
        if not isinstance(node, Mapping) or (id(node), base) in seen:
            continue
        seen.add((id(node), base))
        identifier = node.get("$id")
        if isinstance(identifier, str):
            base = urldefrag(urljoin(base, identifier)).url
        if not path or isinstance(identifier, str):
            known.add(base)  # the schema itself, or a resource embedded in it
        for keyword in _REFERENCES:
            ref = node.get(keyword)
            if isinstance(ref, str) and not ref.startswith("#"):
                found.append((keyword, ref, urldefrag(urljoin(base, ref)).url, path))
        for keyword, value in node.items():
            if keyword in _ONE_SCHEMA:
                stack.append((value, base, (*path, keyword)))
            if keyword in _SCHEMA_LISTS and isinstance(value, list):
                stack.extend((item, base, (*path, keyword, i)) for i, item in enumerate(value))
            if keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
                stack.extend((item, base, (*path, keyword, name)) for name, item in value.items())
    for keyword, ref, resolved, path in found:
        if resolved not in known:
            raise error(
                f"{where}: {keyword} {ref!r} at `{_json_path(path)}` points outside the "
                "schema, and operative never fetches a schema over the network or from a "
                "file; inline the definition under `$defs` and refer to it as "
                "'#/$defs/<name>'"
            )


def _json_path(path: tuple[object, ...]) -> str:
    parts = ["$"]
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif isinstance(part, str) and _SIMPLE_KEY.match(part):
            parts.append(f".{part}")
        else:
            parts.append(f"[{str(part)!r}]")
    return "".join(parts)


def compile_schema(
    schema: Mapping[str, Any], *, where: str, error: type[OperativeError] = ToolDefinitionError
) -> Validator:
    """The validator of ``schema``: the one way operative compiles a JSON Schema.

    The schema is refused (``error``, naming ``where`` it came from) when a reference
    points outside it (:func:`check_local_refs`) or when it is not valid JSON Schema for
    its ``$schema`` (draft 2020-12 without one). The validator resolves references in
    an empty ``referencing.Registry``, so a reference that would slip past the check
    still resolves only inside the schema (and the metaschemas jsonschema bundles):
    nothing is ever fetched. ``jsonschema`` is imported here, on first use.
    """
    check_local_refs(schema, where=where, error=error)
    # Imported here (~70 ms): only schemas written by hand, or received, load it.
    import jsonschema
    from jsonschema.exceptions import SchemaError
    from referencing import Registry

    document = dict(schema)
    cls = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(document)
    except SchemaError as exc:
        raise error(
            f"{where} is not a valid JSON Schema ({exc.message} - at `{exc.json_path}`)"
        ) from None
    # Empty, with referencing's default retrieve, which refuses every URI it is asked for
    # (jsonschema's own default would download it).
    return cls(document, registry=Registry())


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
        if annotation is inspect.Parameter.empty and parameter.name == "self":
            raise ToolDefinitionError(
                f"{where}: parameter 'self' has no type annotation; for a method, put "
                "@tool on it in its class body and give an agent obj.method (Tool(fn) "
                "takes a function or a bound method)"
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
