"""JSON Schema to the OpenAPI subset Gemini's ``Schema`` accepts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["gemini_schema"]

# Keywords Gemini's Schema object takes as they are.
_KEPT = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "default",
        "minimum",
        "maximum",
        "propertyOrdering",
        "required",
    }
)
_MAX_DEPTH = 16


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` rewritten for Gemini's function declarations and ``responseSchema``.

    ``$ref`` is inlined from ``$defs``/``definitions`` (recursion stops after a few
    levels), a ``type`` list with ``"null"`` and ``anyOf [X, null]`` become
    ``nullable``, ``const`` becomes a one-value ``enum``, ``oneOf`` becomes ``anyOf``, a
    single ``allOf`` is merged in, and non-string ``enum``s are dropped (Gemini takes
    only strings). Everything else Gemini rejects is left out: ``additionalProperties``,
    ``$schema``, ``$id``, ``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
    ``uniqueItems``, ``patternProperties``, ``not``, ``if``/``then``/``else``, ...
    """
    defs: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        found = schema.get(key)
        if isinstance(found, Mapping):
            defs.update({f"#/{key}/{name}": value for name, value in found.items()})
    return _convert(schema, defs, 0)


def _convert(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        return {}
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref)
        merged = {**(target if isinstance(target, Mapping) else {}), **schema}
        merged.pop("$ref")
        return _convert(merged, defs, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        merged = {**all_of[0], **{k: v for k, v in schema.items() if k != "allOf"}}
        return _convert(merged, defs, depth + 1)
    out: dict[str, Any] = {key: value for key, value in schema.items() if key in _KEPT}
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        if kinds:
            out["type"] = kinds[0]
        else:
            out.pop("type")
    if "const" in schema:
        out["enum"] = [schema["const"]]
    enum = out.get("enum")
    if enum is not None:
        values = [v for v in enum if v is not None]
        if len(values) < len(enum):
            out["nullable"] = True
        if values and all(isinstance(v, str) for v in values):
            out["enum"] = values
            out.setdefault("type", "string")
        else:
            out.pop("enum")
    any_of = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(any_of, list):
        options = [o for o in any_of if isinstance(o, Mapping)]
        real = [o for o in options if o.get("type") != "null"]
        if len(real) < len(options):
            out["nullable"] = True
        if len(real) == 1:
            out.update(_convert(real[0], defs, depth + 1))
        elif real:
            out["anyOf"] = [_convert(o, defs, depth + 1) for o in real]
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        out["properties"] = {
            name: _convert(sub, defs, depth + 1) if isinstance(sub, Mapping) else {}
            for name, sub in properties.items()
        }
        if "required" in out:
            out["required"] = [name for name in out["required"] if name in properties]
    items = schema.get("items")
    if isinstance(items, Mapping):
        out["items"] = _convert(items, defs, depth + 1)
    return out
