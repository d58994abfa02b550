"""Structured output: the JSON Schema offered to the model, how it is asked for, and
validation of answers."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import msgspec

from ._errors import InvalidArgument

__all__ = [
    "OUTPUT_MODES",
    "OutputMode",
    "check_output_mode",
    "output_schema",
    "validate_output",
]

OutputMode: TypeAlias = Literal["native", "tool", "prompted"]
"""How a structured output is asked of the model (``GenerateRequest.output_mode``):

- ``"native"``: the provider's own structured-output format (OpenAI's
  ``response_format``/``text.format`` ``json_schema``, Anthropic's ``output_config``,
  Gemini's ``responseSchema``, Ollama's ``format``), and nothing else;
- ``"tool"``: the schema is offered as a final-answer tool the model must call; its
  arguments are the answer;
- ``"prompted"``: the schema goes into the system prompt and the answer is read from
  the text (in the provider's JSON mode where it has one).

``None`` (the default): native where the provider has it, falling back to prompted
when a server refuses the native format.
"""

OUTPUT_MODES: tuple[OutputMode, ...] = ("native", "tool", "prompted")

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def output_schema(output: Any) -> dict[str, Any]:
    """The JSON Schema of an ``output`` type (msgspec Struct, attrs class, dataclass, ...).

    A ``$ref`` pointing outside the schema (one an ``extra_json_schema`` put there) is
    refused with ``InvalidArgument``: nothing is ever fetched to resolve it.
    """
    from ..tools._schema import check_local_refs

    try:
        schema = msgspec.json.schema(output)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"output={output!r} is not a type operative can validate ({exc}); use a "
            "msgspec Struct, an attrs class, a dataclass, a TypedDict or a builtin type"
        ) from None
    check_local_refs(schema, where=f"the JSON Schema of output={output!r}", error=InvalidArgument)
    return schema


def check_output_mode(mode: object) -> OutputMode:
    """``mode`` when it is one of :data:`OUTPUT_MODES`, else ``InvalidArgument``."""
    if mode not in OUTPUT_MODES:
        raise InvalidArgument(
            f"output_mode= takes 'native', 'tool' or 'prompted' (or None: native where the "
            f"provider has it), got {mode!r}"
        )
    return mode


@functools.lru_cache(maxsize=256)
def _decoder(output: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(output)


_ANY = msgspec.json.Decoder()


def validate_output(content: str, output: Any) -> tuple[bool, Any, str | None]:
    """Decode a final answer into ``output``: ``(ok, value, error message)``.

    A Markdown code fence around the JSON is tolerated. The error is written for the
    model to act on: an answer that is not JSON, or JSON of another kind than the output
    type (an array where an object is asked for), is told so, with what is asked for;
    JSON of the right kind names the path of its first wrong value.
    """
    match = _FENCE.match(content)
    text = match.group(1) if match else content.strip()
    try:
        return True, _decoder(output).decode(text), None
    except msgspec.ValidationError as exc:
        return False, None, _mismatch(text, output, exc)
    except msgspec.DecodeError as exc:
        return False, None, _not_json(text, output, exc)
    except RecursionError:
        return (
            False,
            None,
            f"the answer is not {_expected(output).wanted()}: it nests too deeply to read",
        )


def _mismatch(text: str, output: Any, exc: msgspec.ValidationError) -> str:
    """A valid-JSON-looking answer that does not fit ``output``.

    msgspec reports a wrong top-level type as soon as it reads the first character, so
    ``[Paris] is the capital`` and ``[1, 2]`` both fail as "Expected `object`, got
    `array`": the text is decoded again, untyped, to tell the two apart.
    """
    try:
        value = _ANY.decode(text)
    except msgspec.DecodeError as error:
        return _not_json(text, output, error)
    except RecursionError:
        return f"the answer is not {_expected(output).wanted()}: it nests too deeply to read"
    expected = _expected(output)
    kind = _json_kind(value)
    if expected.kinds and not _fits(kind, expected.kinds):
        return f"the answer is {_A_KIND[kind]}, not {expected.wanted()}"
    return f"the JSON does not fit the output type: {exc}"


def _not_json(text: str, output: Any, exc: msgspec.DecodeError) -> str:
    """An answer msgspec cannot decode as JSON: say where it stops being JSON."""
    wanted = _expected(output).wanted()
    if not text:
        return f"the answer is empty, not {wanted}"
    import json  # only a failed answer pays for it

    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as error:
        if error.pos == 0:
            return f"the answer is not {wanted}: it is not valid JSON (it begins {_excerpt(text)})"
        where = _excerpt(text[error.pos :]) if error.pos < len(text) else "where the text ends"
        return (
            f"the answer is not {wanted}: it is not valid JSON at line {error.lineno}, "
            f"column {error.colno} ({error.msg}): {where}"
        )
    except RecursionError:
        return f"the answer is not {wanted}: it nests too deeply to read"
    rest = text[end:].strip()
    if rest:
        return (
            f"the answer has text after its JSON (from {_excerpt(rest)}): the output type "
            f"asks for {_expected(output).thing()} alone, without prose around it"
        )
    # JSON to the standard library, but not to msgspec (NaN, Infinity, ...).
    return f"the answer is not {wanted}: {exc}"


def _excerpt(text: str, size: int = 40) -> str:
    return repr(text[:size] + ("…" if len(text) > size else ""))


# What the JSON value of an answer is, in words.
_A_KIND = {
    "object": "a JSON object",
    "array": "a JSON array",
    "string": "a JSON string",
    "integer": "a JSON number",
    "number": "a JSON number",
    "boolean": "a JSON boolean",
    "null": "JSON null",
}


def _json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "null"


def _fits(kind: str, kinds: frozenset[str]) -> bool:
    return kind in kinds or (kind == "integer" and "number" in kinds)


class _Expected(msgspec.Struct, frozen=True):
    """The top level of an output type's schema: its JSON kinds and object fields."""

    kinds: frozenset[str]
    fields: tuple[str, ...] = ()

    def thing(self) -> str:
        """E.g. ``the JSON object with the fields "city", "high_c"``, ``the JSON array``."""
        words = [_NOUN[kind] for kind in sorted(self.kinds) if kind in _NOUN]
        noun = " or ".join(dict.fromkeys(words)) or "value"
        if self.kinds == {"object"} and self.fields:
            import json  # only an error message needs it

            named = ", ".join(json.dumps(field) for field in self.fields)
            return f"the JSON object with the fields {named}"
        return f"the JSON {noun}"

    def wanted(self) -> str:
        """:meth:`thing`, followed by what asks for it."""
        if self.fields and self.kinds == {"object"}:
            return f"{self.thing()} that the output type asks for"
        return f"{self.thing()} the output type asks for"


_NOUN = {
    "object": "object",
    "array": "array",
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
}


@functools.lru_cache(maxsize=256)
def _expected(output: Any) -> _Expected:
    try:
        schema = msgspec.json.schema(output)
    except (TypeError, ValueError):
        return _Expected(frozenset())
    defs = schema.get("$defs") or {}
    kinds: set[str] = set()
    fields: list[str] = []
    for node in _branches(schema, defs, depth=0):
        kind = node.get("type")
        if isinstance(kind, str):
            kinds.add(kind)
        elif isinstance(kind, list):
            kinds.update(k for k in kind if isinstance(k, str))
        else:
            return _Expected(frozenset())  # enum, const, any: no kind to name
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            required = node.get("required") or list(properties)
            fields.extend(str(name) for name in required)
    return _Expected(frozenset(kinds), tuple(dict.fromkeys(fields)))


def _branches(node: Mapping[str, Any], defs: Mapping[str, Any], *, depth: int) -> list[Any]:
    """The alternatives of a schema's top level (``$ref`` followed, ``anyOf`` split)."""
    if depth > 8:
        return [{}]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref.removeprefix("#/$defs/"))
        return _branches(target, defs, depth=depth + 1) if isinstance(target, Mapping) else [{}]
    for key in ("anyOf", "oneOf"):
        options = node.get(key)
        if isinstance(options, list):
            return [
                branch
                for option in options
                if isinstance(option, Mapping)
                for branch in _branches(option, defs, depth=depth + 1)
            ]
    return [node]
