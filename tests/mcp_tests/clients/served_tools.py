"""Operative tools, and an agent, that the MCP server tests serve to real clients.

Served by ``python -m operative mcp serve served_tools:tools`` from this directory (over
stdio, or with ``--http 127.0.0.1:0``). ``wait_forever`` leaves marker files in the
directory it is given, so a test in another process sees that a call started and that
the client's cancellation reached it.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import trio

import operative
from operative import ToolContext
from operative.testing import ScriptedModel


@operative.tool(idempotent=True, mutates=False)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@operative.tool(mutates=True, version="1")
async def save_note(text: str) -> str:
    """Save a note (a write: it is not read-only)."""
    return f"saved {text!r}"


class Forecast(msgspec.Struct):
    city: str
    celsius: float
    sky: str


@operative.tool(output_type=Forecast)
async def forecast(city: str) -> Forecast:
    """Tomorrow's weather in a city."""
    return Forecast(city=city, celsius=21.5, sky="clear")


@operative.tool
async def fail(reason: str) -> str:
    """Always fails, saying why."""
    raise ValueError(reason)


@operative.tool
async def count(n: int, context: ToolContext) -> str:
    """Count to n, reporting each step as progress."""
    for i in range(1, n + 1):
        await context.report_progress(i, n, f"counted {i}")
    return f"counted to {n}"


@operative.tool
async def wait_forever(marker_dir: str) -> str:
    """Wait until cancelled; leaves ``started`` and then ``cancelled`` in marker_dir."""
    markers = trio.Path(marker_dir)
    await (markers / "started").write_text("started")
    try:
        await trio.sleep_forever()
    finally:
        # Cancelled: no await can run here, so the marker is written synchronously.
        Path(marker_dir, "cancelled").write_text("cancelled")  # noqa: ASYNC240


class Name(msgspec.Struct):
    first: str
    last: str = "Smith"


@operative.tool
async def greet(context: ToolContext) -> str:
    """Ask the person for their name, and greet them."""
    name = await context.elicit("What is your name?", Name)
    if name is None:
        return "no name given"
    return f"Hello, {name.first} {name.last}!"


@operative.tool(needs_approval=True, mutates=True)
async def delete_file(path: str) -> str:
    """Delete a file (asks a person first)."""
    return f"deleted {path}"


@operative.tool(mutates=False)
async def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


def _writer_model(request: operative.GenerateRequest) -> operative.GenerateResponse | str:
    """The writer's scripted model: it counts the task's words, then answers."""
    messages = request.conversation.messages
    task = next(m.content for m in reversed(messages) if m.role == "user")
    if request.step == 1:
        call = operative.ToolCall(id="c1", name="word_count", arguments={"text": task})
        return operative.GenerateResponse(tool_calls=(call,))
    return f"Draft for: {task} ({messages[-1].content} words)"


writer = operative.create_agent(
    generate=ScriptedModel(_writer_model),
    name="writer",
    instructions="Write a short draft of what you are asked for.",
    tools=[word_count],
)

tools = [add, save_note, forecast, fail, count, wait_forever, greet, delete_file, writer]
