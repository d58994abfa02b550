"""How a call that ran settles: the ``ToolResult`` of a value the tool returned, or of
what it raised."""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING, Any

import msgspec

from .._core._types import ToolCall, ToolResult

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = ["describe", "failed", "settled"]


def failed(tool: Tool, call: ToolCall, exc: Exception) -> ToolResult:
    """The result of a call whose tool raised ``exc``."""
    return ToolResult(
        call_id=call.id,
        tool_name=tool.name,
        outcome="error",
        error=f"Tool {tool.name!r} failed: {type(exc).__name__}: {exc}",
        detail=describe(exc),
    )


def settled(tool: Tool, call: ToolCall, value: Any) -> ToolResult:
    """The result of a call whose tool returned ``value`` (an error if it cannot be sent)."""
    try:
        encoded = tool.encode_result(value)
    except (TypeError, ValueError, msgspec.ValidationError) as exc:
        return ToolResult(
            call_id=call.id,
            tool_name=tool.name,
            outcome="error",
            error=(
                f"Tool {tool.name!r} returned a value that cannot be sent to the model "
                f"({type(value).__name__}: {exc})."
            ),
            detail=describe(exc),
        )
    return ToolResult(call_id=call.id, tool_name=tool.name, outcome="success", value=encoded)


def describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
