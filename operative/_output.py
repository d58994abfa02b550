"""Structured output: the JSON Schema offered to the model and validation of answers."""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec

from ._errors import InvalidArgument

__all__ = ["output_schema", "validate_output"]

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*?)\n?```\s*$", re.DOTALL)


def output_schema(output: Any) -> dict[str, Any]:
    """The JSON Schema of an ``output`` type (msgspec Struct, attrs class, dataclass, ...)."""
    try:
        return msgspec.json.schema(output)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"output={output!r} is not a type operative can validate ({exc}); use a "
            "msgspec Struct, an attrs class, a dataclass, a TypedDict or a builtin type"
        ) from None


@functools.lru_cache(maxsize=256)
def _decoder(output: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(output)


def validate_output(content: str, output: Any) -> tuple[bool, Any, str | None]:
    """Decode a final answer into ``output``: ``(ok, value, error message)``.

    A Markdown code fence around the JSON is tolerated; the error names the JSON path.
    """
    match = _FENCE.match(content)
    text = match.group(1) if match else content.strip()
    try:
        return True, _decoder(output).decode(text), None
    except msgspec.ValidationError as exc:
        return False, None, str(exc)
    except msgspec.DecodeError as exc:
        return False, None, f"the answer is not valid JSON ({exc})"
