"""An MCP server's tool definitions as operative ``Tool``\\ s.

- the name: the server's, with ``prefix + "_"`` in front when a prefix is given, and any
  character providers refuse replaced by ``_`` (cut to 64 characters); the call still
  goes out under the server's own name;
- the description: the server's (its title when it has none); the input schema: the
  server's, enforced before a call is sent; a tool whose input or output schema has a
  ``$ref`` pointing outside the schema is refused (left out), never fetched;
- the annotations carry meaning: ``mutates=True`` unless ``readOnlyHint`` is true (the
  MCP default is a tool that may change the world, so an ``on-mutation`` approval policy
  gates it), else ``mutates=False``: a remote tool is never left undeclared;
  ``idempotent`` when ``idempotentHint`` is true, or when the tool is read-only (the
  protocol says the hint only matters for tools that write; a read-only call has no
  effect to repeat), so a durable run's recovery runs it again;
- the version: a digest of the whole definition (name, description, schemas,
  annotations), so an approval signed for one shape of a tool is refused
  (``version-changed``) once the server changes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types

from ..tools import Tool, ToolContext
from ..tools._schema import check_local_refs

__all__ = ["ToolCaller", "definition_version", "make_tool", "tool_name"]

ToolCaller = Callable[[str, dict[str, Any], ToolContext], Awaitable[Any]]
"""``(server's tool name, arguments, context) -> value``: what a tool's function calls."""

_REFUSED = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64


def tool_name(name: str, prefix: str | None) -> str:
    """The name the model sees for the server's tool ``name``."""
    full = f"{prefix}_{name}" if prefix else name
    return _REFUSED.sub("_", full)[:_MAX_NAME] or "_"


def definition_version(definition: types.Tool) -> str:
    """A digest of everything the server says about the tool."""
    shape = definition.model_dump(by_alias=True, mode="json", exclude_none=True)
    shape.pop("_meta", None)
    canonical = json.dumps(shape, sort_keys=True, separators=(",", ":"))
    return "mcp-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]


def make_tool(
    definition: types.Tool, call: ToolCaller, *, prefix: str | None, timeout: float | None
) -> Tool:
    """The operative tool that calls ``definition`` through ``call``.

    Raises:
        ToolDefinitionError: the server's input schema is not a valid JSON Schema, or its
            input or output schema has a ``$ref`` that points outside it.
    """
    remote = definition.name
    check_local_refs(definition.input_schema, where=f"the inputSchema of the tool {remote!r}")
    if definition.output_schema is not None:
        check_local_refs(definition.output_schema, where=f"the outputSchema of the tool {remote!r}")
    annotations = definition.annotations
    read_only = bool(annotations is not None and annotations.read_only_hint)
    idempotent = bool(annotations is not None and annotations.idempotent_hint)

    async def call_tool(arguments: dict[str, Any], context: ToolContext) -> Any:
        return await call(remote, arguments, context)

    call_tool.__name__ = tool_name(remote, None)
    call_tool.__qualname__ = f"mcp:{remote}"
    return Tool(
        call_tool,
        name=tool_name(remote, prefix),
        description=definition.description or definition.title or "",
        input_type=dict[str, Any],
        input_schema=definition.input_schema,
        version=definition_version(definition),
        mutates=not read_only,
        idempotent=idempotent or read_only,
        timeout=timeout,
    )
