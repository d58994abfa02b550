"""A ``tools/call`` result as the value the model reads.

- structured content (a tool with an output schema) is the value itself: the JSON;
- text only: the text (blocks joined by a blank line);
- anything else: a list of parts, each a dict the model reads as JSON: ``text``,
  ``image`` and ``audio`` (``mime_type``, base64 ``data``), ``resource`` (an embedded
  resource: ``uri``, ``mime_type`` and its ``text`` or base64 ``blob``) and
  ``resource_link`` (``uri``, ``name``, ``description``, ``mime_type``);
- ``isError``: :class:`MCPToolError` with the tool's own text, so the call settles as an
  ``error`` result that says what the server said.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ._errors import MCPToolError

__all__ = ["result_value"]


def result_value(result: types.CallToolResult) -> Any:
    """The value of a successful result.

    Raises:
        MCPToolError: the tool reported a failure.
    """
    if result.is_error:
        text = _text(result.content) or "the tool reported an error and said nothing more"
        raise MCPToolError(text)
    if result.structured_content is not None:
        return result.structured_content
    content = result.content
    if all(isinstance(block, types.TextContent) for block in content):
        return _text(content)
    return [_part(block) for block in content]


def _text(content: list[types.ContentBlock]) -> str:
    return "\n\n".join(block.text for block in content if isinstance(block, types.TextContent))


def _part(block: types.ContentBlock) -> dict[str, Any]:
    if isinstance(block, types.TextContent):
        return {"type": "text", "text": block.text}
    if isinstance(block, types.ImageContent | types.AudioContent):
        return {"type": block.type, "mime_type": block.mime_type, "data": block.data}
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        part: dict[str, Any] = {"type": "resource", "uri": str(resource.uri)}
        if resource.mime_type is not None:
            part["mime_type"] = resource.mime_type
        if isinstance(resource, types.TextResourceContents):
            part["text"] = resource.text
        else:
            part["blob"] = resource.blob
        return part
    part = {"type": "resource_link", "uri": str(block.uri), "name": block.name}
    if block.description is not None:
        part["description"] = block.description
    if block.mime_type is not None:
        part["mime_type"] = block.mime_type
    return part
