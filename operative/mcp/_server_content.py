"""What operative's MCP server says about a tool, and what it sends back for a call.

The definition:

- the name, description and input schema are the tool's own (what a model is offered);
- annotations: only a tool declared ``mutates=False`` that needs no approval is
  ``readOnlyHint: true``. One declared ``mutates=True``, or that needs approval
  (``needs_approval`` other than False), is ``readOnlyHint: false, destructiveHint:
  true`` (operative does not tell a write from a destruction, so it says what an
  approval policy assumes). An undeclared one is ``readOnlyHint: false`` with no
  ``destructiveHint`` (MCP's defaults: a tool that may change the world; a client such
  as operative's own asks before calling it). ``idempotentHint`` is the tool's
  ``idempotent``;
- ``outputSchema``: the schema of the tool's ``output_type`` when that is a JSON object.

A call's value (the tool's return value, already plain JSON):

- a ``str`` is one text block;
- a content part, or a list of them, is those blocks: each part a dict with ``"type"`` ``text``
  (``text``), ``image`` or ``audio`` (``data`` in base64 and ``mime_type``; what an
  :class:`~operative.ImagePart` with ``data=`` becomes), ``resource`` (an embedded
  resource: ``uri``, optional ``mime_type``, and ``text`` or a base64 ``blob``) or
  ``resource_link`` (``uri``, ``name``, optional ``description`` and ``mime_type``).
  These are the parts operative's MCP client makes of another server's results, so
  tools it reads can be served again unchanged;
- any other value is its JSON as one text block and, when it is an object, also the
  result's ``structuredContent``.

A call that did not succeed is an ``isError`` result whose text is what a model would
have read.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import msgspec

from .._core._types import ToolResult
from ..tools import Tool
from ..tools._schema import json_schema

__all__ = ["call_result", "error_result", "is_read_only", "tool_definition"]

_PART_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # type: (required keys, optional keys), besides "type"
    "text": (frozenset({"text"}), frozenset()),
    "image": (frozenset({"data"}), frozenset({"mime_type", "media_type"})),
    "audio": (frozenset({"data"}), frozenset({"mime_type", "media_type"})),
    "resource": (frozenset({"uri"}), frozenset({"mime_type", "text", "blob"})),
    "resource_link": (frozenset({"uri", "name"}), frozenset({"description", "mime_type"})),
}


def tool_definition(tool: Tool) -> types.Tool:
    """The MCP definition of ``tool``."""
    gated = tool.mutates is True or tool.needs_approval is not False
    annotations = types.ToolAnnotations(
        read_only_hint=is_read_only(tool),
        destructive_hint=True if gated else None,
        idempotent_hint=tool.idempotent,
    )
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=output_schema(tool),
        annotations=annotations,
    )


def is_read_only(tool: Tool) -> bool:
    """Whether ``tool`` may be served as read-only: declared ``mutates=False``, and no
    call of it needs a person's approval (an undeclared tool may change the world)."""
    return tool.mutates is False and tool.needs_approval is False


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The schema of the tool's ``output_type``, when it describes a JSON object."""
    if tool.output_type is None:
        return None
    schema = json_schema(tool.output_type, what=f"output of tool {tool.name!r}", object_only=False)
    return schema if schema.get("type") == "object" else None


def call_result(result: ToolResult) -> types.CallToolResult:
    """The ``tools/call`` result for how a call settled."""
    if result.outcome != "success":
        return error_result(result.error or f"the call to {result.tool_name!r} did not succeed")
    value = result.value
    if isinstance(value, str):
        return types.CallToolResult(content=[types.TextContent(text=value)])
    blocks = _content_blocks(value)
    if blocks is not None:
        return types.CallToolResult(content=blocks)
    text = msgspec.json.encode(value).decode()
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=value if isinstance(value, dict) else None,
    )


def error_result(message: str) -> types.CallToolResult:
    """An ``isError`` result saying ``message``."""
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def _content_blocks(value: Any) -> list[types.ContentBlock] | None:
    """``value`` as content blocks when it is a content part or a list of them."""
    if _is_part(value):
        return [_block(value)]
    if not isinstance(value, list) or not value:
        return None
    if not all(_is_part(item) for item in value):
        return None
    return [_block(item) for item in value]


def _is_part(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    keys = _PART_KEYS.get(item.get("type"))  # type: ignore[arg-type]
    if keys is None:
        return False
    required, optional = keys
    present = item.keys() - {"type"}
    if not required <= present or not present <= required | optional:
        return False
    if item["type"] == "resource" and ("text" in item) == ("blob" in item):
        return False
    if item["type"] in ("image", "audio") and not present & {"mime_type", "media_type"}:
        return False
    return all(isinstance(item[key], str) for key in present)


def _block(part: dict[str, str]) -> types.ContentBlock:
    kind = part["type"]
    mime_type = part.get("mime_type") or part.get("media_type")
    if kind == "text":
        return types.TextContent(text=part["text"])
    if kind == "image":
        return types.ImageContent(data=part["data"], mime_type=mime_type or "")
    if kind == "audio":
        return types.AudioContent(data=part["data"], mime_type=mime_type or "")
    if kind == "resource":
        contents: types.TextResourceContents | types.BlobResourceContents
        if "text" in part:
            contents = types.TextResourceContents(
                uri=part["uri"], mime_type=mime_type, text=part["text"]
            )
        else:
            contents = types.BlobResourceContents(
                uri=part["uri"], mime_type=mime_type, blob=part["blob"]
            )
        return types.EmbeddedResource(resource=contents)
    return types.ResourceLink(
        uri=part["uri"],
        name=part["name"],
        description=part.get("description"),
        mime_type=mime_type,
    )
