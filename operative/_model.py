"""The seam to a model: ``GenerateRequest`` in, ``GenerateResponse`` out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import msgspec

from ._types import ToolCall, ToolSpec, Usage
from .conversation import ConversationHistory

__all__ = ["GenerateFunction", "GenerateRequest", "GenerateResponse"]


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything a model call needs for one step."""

    conversation: ConversationHistory
    """A snapshot of the transcript (shared, never copied per step)."""
    tools: tuple[ToolSpec, ...] = ()
    """The tools offered at this step."""
    step: int = 1
    """1-based step number."""
    run_id: str = ""
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    """Model settings for this step (temperature, max tokens, ...)."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema of the structured output the run expects, when it has one."""
    attempt: int = 1
    """1-based attempt number (retries of the same step count up)."""


class GenerateResponse(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the model said: text, the tool calls it asked for, and what it cost."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    model: str | None = None
    """The model that answered, when the provider says."""
    stop_reason: str | None = None
    """The provider's own stop reason, as it sent it."""
    response_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Provider extras a later turn needs (e.g. reasoning items, thinking signatures)."""


GenerateFunction: TypeAlias = Callable[[GenerateRequest], Awaitable[GenerateResponse]]
"""``async def generate(request: GenerateRequest) -> GenerateResponse``."""
