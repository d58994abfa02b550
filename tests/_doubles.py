"""The test doubles many test files share: two sample tools and a one-step model.

``add`` and ``get_weather`` are the tools the run, provider and instrumentation tests
offer a model; their descriptions ("Add two integers.", "The weather in a city.") are
what those tests expect to see sent. ``calls_then`` is the model of a test about what
happens to some tool calls: it makes them in its first step, then answers.
"""

from __future__ import annotations

from operative import GenerateResponse, ToolCall, tool
from operative.testing import ScriptedModel

__all__ = ["add", "calls_then", "get_weather"]


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def calls_then(*calls: ToolCall, answer: str = "done") -> ScriptedModel:
    """A model that makes ``calls`` at once in its first step, then answers ``answer``."""
    return ScriptedModel([GenerateResponse(tool_calls=calls), answer])
