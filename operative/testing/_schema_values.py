"""Values drawn from a JSON Schema: the arguments a test model sends to a tool.

One generator, two sources of choices: a seeded :class:`random.Random` (for
:class:`~operative.testing.ToolCallingModel`, reproducible without hypothesis) and
hypothesis's ``draw`` (for :func:`operative.testing.strategies.tool_calls`, which shrinks).

The supported subset is what ``msgspec.json.schema`` emits (draft 2020-12): ``type``
(one or a list), ``object`` with ``properties``/``required``/``additionalProperties``/
``minProperties``/``maxProperties``, ``string`` with ``enum``/``minLength``/
``maxLength`` and the formats msgspec writes (``uuid``, ``date``, ``date-time``,
``time``, ``duration``, ``decimal``, ``email``, ``uri``; ``contentEncoding: base64``),
``integer``/``number`` with ``minimum``/``maximum``/``exclusiveMinimum``/
``exclusiveMaximum``/``multipleOf``, ``boolean``, ``null``, ``array`` with ``items``/
``prefixItems``/``minItems``/``maxItems``/``uniqueItems``, ``anyOf``/``oneOf``,
``$ref`` into ``$defs``, ``const`` and ``enum``. ``pattern`` is not honoured.
"""

from __future__ import annotations

import base64
import math
import random
import string
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from .._core._errors import InvalidArgument

__all__ = ["RandomSource", "SchemaValues", "Source", "json_types_of"]

_ALPHABET = string.ascii_letters + string.digits + " _-"
_DEFAULT_SPAN = 1000
_MAX_EXTRA_ITEMS = 3
_SHALLOW_DEPTH = 4
"""Past this depth, optional parts are left out and unions prefer their plainest branch."""
_MAX_DEPTH = 32


class Source(Protocol):
    """Where the generator's choices come from."""

    def integer(self, low: int, high: int) -> int:
        """An integer in ``[low, high]``."""
        ...

    def real(self, low: float, high: float, *, exclude_low: bool, exclude_high: bool) -> float:
        """A finite float between ``low`` and ``high``."""
        ...

    def text(self, min_size: int, max_size: int) -> str:
        """A string whose length (in code points) is within the bounds."""
        ...


class RandomSource:
    """Choices from a seeded :class:`random.Random`: the same seed, the same values."""

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self._rng.randint(low, high)

    def real(self, low: float, high: float, *, exclude_low: bool, exclude_high: bool) -> float:
        value = self._rng.uniform(low, high)
        if exclude_low and value <= low:
            value = math.nextafter(low, math.inf)
        if exclude_high and value >= high:
            value = math.nextafter(high, -math.inf)
        return value

    def text(self, min_size: int, max_size: int) -> str:
        size = self._rng.randint(min_size, max_size)
        return "".join(self._rng.choice(_ALPHABET) for _ in range(size))


def json_types_of(value: Any) -> set[str]:
    """The JSON Schema types ``value`` belongs to (an integer is also a number)."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number"} | ({"integer"} if value.is_integer() else set())
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list | tuple):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


class SchemaValues:
    """Draws JSON values that validate against one schema (its ``$defs`` resolved)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        if not isinstance(schema, Mapping):
            raise InvalidArgument(f"a JSON Schema is a mapping, not {type(schema).__name__}")
        self.schema = schema

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        """``node`` with any ``$ref`` (into ``$defs`` or ``definitions``) followed."""
        seen = 0
        while "$ref" in node:
            ref = node["$ref"]
            if ref == "#":
                node = self.schema
            elif isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
                section, name = ref[2:].split("/", 1)
                defs = self.schema.get(section, {})
                if name not in defs:
                    raise InvalidArgument(f"the schema refers to {ref!r}, which it does not define")
                node = defs[name]
            else:
                raise InvalidArgument(f"only local references are supported, not {ref!r}")
            seen += 1
            if seen > _MAX_DEPTH:
                raise InvalidArgument(f"the reference {ref!r} never resolves to a schema")
        return node

    def allowed_types(self, node: Mapping[str, Any] | bool) -> set[str] | None:
        """The JSON types ``node`` may accept, or ``None`` when it says nothing about them."""
        if node is True:
            return None
        if node is False:
            return set()
        assert isinstance(node, Mapping)
        node = self.resolve(node)
        if "const" in node:
            return json_types_of(node["const"])
        if "enum" in node:
            return set().union(*(json_types_of(v) for v in node["enum"]))
        branches = node.get("anyOf") or node.get("oneOf")
        if branches:
            found: set[str] = set()
            for branch in branches:
                types = self.allowed_types(branch)
                if types is None:
                    return None
                found |= types
            return found
        kind = node.get("type")
        if kind is None:
            return None
        types = {kind} if isinstance(kind, str) else set(kind)
        if "number" in types:
            types.add("integer")
        return types

    def draw(self, source: Source, node: Mapping[str, Any] | None = None) -> Any:
        """A value valid against ``node`` (default: the whole schema)."""
        return self._value(source, self.schema if node is None else node, 0, "$")

    # -- the generator -----------------------------------------------------------------

    def _value(self, source: Source, node: Any, depth: int, path: str) -> Any:
        if depth > _MAX_DEPTH:
            raise InvalidArgument(
                f"the schema at {path} has no finite value (every branch recurses)"
            )
        if node is True or node == {}:
            return self._any(source)
        if not isinstance(node, Mapping):
            raise InvalidArgument(f"the schema at {path} is {node!r}, which accepts nothing")
        node = self.resolve(node)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            options = list(node["enum"])
            if not options:
                raise InvalidArgument(f"the schema at {path} has an empty enum")
            return options[source.integer(0, len(options) - 1)]
        branches = node.get("anyOf") or node.get("oneOf")
        if branches:
            return self._value(source, self._branch(source, list(branches), depth), depth + 1, path)
        kind = node.get("type")
        if isinstance(kind, list):
            if not kind:
                raise InvalidArgument(f"the schema at {path} allows no type")
            kind = kind[0] if depth >= _SHALLOW_DEPTH else kind[source.integer(0, len(kind) - 1)]
        if kind is None:
            if "properties" in node or "additionalProperties" in node:
                kind = "object"
            elif "items" in node or "prefixItems" in node:
                kind = "array"
            else:
                return self._any(source)
        if kind == "null":
            return None
        if kind == "boolean":
            return source.integer(0, 1) == 1
        if kind == "integer":
            return self._integer(source, node, path)
        if kind == "number":
            return self._number(source, node, path)
        if kind == "string":
            return self._string(source, node, path)
        if kind == "array":
            return self._array(source, node, depth, path)
        if kind == "object":
            return self._object(source, node, depth, path)
        raise InvalidArgument(f"the schema at {path} has an unknown type {kind!r}")

    def _branch(self, source: Source, branches: list[Any], depth: int) -> Any:
        if depth >= _SHALLOW_DEPTH:
            # Deep inside: the plainest branch first (null, then one that does not recurse).
            for branch in branches:
                if isinstance(branch, Mapping) and branch.get("type") == "null":
                    return branch
            for branch in branches:
                if isinstance(branch, Mapping) and "$ref" not in branch:
                    return branch
            return branches[0]
        return branches[source.integer(0, len(branches) - 1)]

    def _any(self, source: Source) -> Any:
        choice = source.integer(0, 3)
        if choice == 0:
            return None
        if choice == 1:
            return source.integer(0, 1) == 1
        if choice == 2:
            return source.integer(-_DEFAULT_SPAN, _DEFAULT_SPAN)
        return source.text(0, 8)

    @staticmethod
    def _bounds(node: Mapping[str, Any]) -> tuple[float, float, bool, bool]:
        low, high = -math.inf, math.inf
        exclude_low = exclude_high = False
        if "minimum" in node:
            low = node["minimum"]
        if "exclusiveMinimum" in node and node["exclusiveMinimum"] >= low:
            low, exclude_low = node["exclusiveMinimum"], True
        if "maximum" in node:
            high = node["maximum"]
        if "exclusiveMaximum" in node and node["exclusiveMaximum"] <= high:
            high, exclude_high = node["exclusiveMaximum"], True
        return low, high, exclude_low, exclude_high

    @staticmethod
    def _span(low: float, high: float) -> tuple[float, float]:
        """Finite bounds: an open side gets ``_DEFAULT_SPAN`` past the other (or zero)."""
        if math.isinf(low) and math.isinf(high):
            return -_DEFAULT_SPAN, _DEFAULT_SPAN
        if math.isinf(low):
            return min(high, 0) - _DEFAULT_SPAN, high
        if math.isinf(high):
            return low, max(low, 0) + _DEFAULT_SPAN
        return low, high

    def _integer(self, source: Source, node: Mapping[str, Any], path: str) -> int:
        low, high, exclude_low, exclude_high = self._bounds(node)
        low, high = self._span(low, high)
        first = math.floor(low) + 1 if exclude_low else math.ceil(low)
        last = math.ceil(high) - 1 if exclude_high else math.floor(high)
        step = node.get("multipleOf")
        if step is not None:
            if step <= 0 or not float(step).is_integer():
                raise InvalidArgument(f"the schema at {path}: multipleOf={step!r} for an integer")
            step = int(step)
            first, last = -(-first // step), last // step
            if first > last:
                raise InvalidArgument(f"the schema at {path} admits no integer")
            return source.integer(first, last) * step
        if first > last:
            raise InvalidArgument(f"the schema at {path} admits no integer")
        return source.integer(first, last)

    def _number(self, source: Source, node: Mapping[str, Any], path: str) -> float | int:
        low, high, exclude_low, exclude_high = self._bounds(node)
        step = node.get("multipleOf")
        if step is not None:
            low, high = self._span(low, high)
            first = math.floor(low / step) + 1 if exclude_low else math.ceil(low / step)
            last = math.ceil(high / step) - 1 if exclude_high else math.floor(high / step)
            if first > last:
                raise InvalidArgument(f"the schema at {path} admits no number")
            return source.integer(first, last) * step  # type: ignore[no-any-return]
        low, high = self._span(low, high)
        if low > high or (low == high and (exclude_low or exclude_high)):
            raise InvalidArgument(f"the schema at {path} admits no number")
        return source.real(low, high, exclude_low=exclude_low, exclude_high=exclude_high)

    def _string(self, source: Source, node: Mapping[str, Any], path: str) -> str:
        fmt = node.get("format")
        if fmt == "uuid":
            return str(uuid.UUID(int=source.integer(0, 2**128 - 1)))
        if fmt == "date":
            return f"{source.integer(1970, 2100):04d}-{source.integer(1, 12):02d}-" + (
                f"{source.integer(1, 28):02d}"
            )
        if fmt == "time":
            return f"{source.integer(0, 23):02d}:{source.integer(0, 59):02d}:00"
        if fmt == "date-time":
            return (
                f"{source.integer(1970, 2100):04d}-{source.integer(1, 12):02d}-"
                f"{source.integer(1, 28):02d}T{source.integer(0, 23):02d}:"
                f"{source.integer(0, 59):02d}:00Z"
            )
        if fmt == "duration":
            return f"PT{source.integer(0, 86_400)}S"
        if fmt == "decimal":
            return f"{source.integer(-_DEFAULT_SPAN, _DEFAULT_SPAN)}.{source.integer(0, 99):02d}"
        if fmt == "email":
            return f"{source.text(1, 8).replace(' ', '_') or 'x'}@example.com"
        if fmt in ("uri", "url"):
            return f"https://example.com/{source.integer(0, _DEFAULT_SPAN)}"
        if node.get("contentEncoding") == "base64":
            raw = bytes(source.integer(0, 255) for _ in range(source.integer(0, 8)))
            return base64.b64encode(raw).decode()
        min_size = int(node.get("minLength", 0))
        max_size = int(node.get("maxLength", min_size + 12))
        if min_size > max_size:
            raise InvalidArgument(f"the schema at {path} admits no string")
        return source.text(min_size, max_size)

    def _array(self, source: Source, node: Mapping[str, Any], depth: int, path: str) -> list[Any]:
        prefix = list(node.get("prefixItems", ()))
        items = node.get("items", True)
        min_items = int(node.get("minItems", 0))
        if items is False:
            max_items = len(prefix)
        else:
            extra = 0 if depth >= _SHALLOW_DEPTH else _MAX_EXTRA_ITEMS
            max_items = int(node.get("maxItems", max(min_items, len(prefix)) + extra))
        if min_items > max_items:
            raise InvalidArgument(f"the schema at {path} admits no array")
        size = source.integer(max(min_items, min(len(prefix), max_items)), max_items)
        unique = bool(node.get("uniqueItems"))
        values: list[Any] = []
        keys: set[bytes] = set()
        attempts = 0
        while len(values) < size:
            index = len(values)
            item_schema = prefix[index] if index < len(prefix) else items
            value = self._value(source, item_schema, depth + 1, f"{path}[{index}]")
            if unique:
                key = msgspec.json.encode(value, order="sorted")
                if key in keys:
                    attempts += 1
                    if attempts > 20:
                        if len(values) >= min_items:
                            break
                        raise InvalidArgument(
                            f"the schema at {path} wants {min_items} unique items; "
                            "could not draw that many"
                        )
                    continue
                keys.add(key)
            values.append(value)
        return values

    def _object(
        self, source: Source, node: Mapping[str, Any], depth: int, path: str
    ) -> dict[str, Any]:
        properties: Mapping[str, Any] = node.get("properties", {})
        required = list(node.get("required", ()))
        result: dict[str, Any] = {}
        for name, schema in properties.items():
            wanted = name in required or (depth < _SHALLOW_DEPTH and source.integer(0, 1) == 1)
            if wanted:
                result[name] = self._value(source, schema, depth + 1, f"{path}.{name}")
        for name in required:
            if name not in result:  # required but not described: anything goes
                result[name] = self._any(source)
        additional = node.get("additionalProperties", True)
        min_properties = int(node.get("minProperties", 0))
        max_properties = int(node.get("maxProperties", len(result) + _MAX_EXTRA_ITEMS))
        if additional is not False and (not properties or len(result) < min_properties):
            extra = 0 if depth >= _SHALLOW_DEPTH else _MAX_EXTRA_ITEMS
            target = source.integer(
                max(min_properties, len(result)),
                max(min_properties, min(max_properties, len(result) + extra)),
            )
            attempts = 0
            while len(result) < target and attempts < 50:
                attempts += 1
                key = source.text(1, 8)
                if key in result or key in properties:
                    continue
                value_schema = additional if isinstance(additional, Mapping) else True
                result[key] = self._value(source, value_schema, depth + 1, f"{path}.{key}")
        if len(result) < min_properties:
            raise InvalidArgument(f"the schema at {path} wants {min_properties} properties")
        return result
