"""Terminal output: plain text, coloured with ``rich`` when it is installed and we are on a
terminal, and live progress of a run drawn from its events.

``rich`` is optional (``pip install 'operative[cli]'``): without it, or when output is
piped, every line is plain text. No ``rich.live`` display is used, since it redraws from
a thread of its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any

import msgspec

from .. import Usage
from ..budgets import cost_of
from ._agents import OFFLINE_MODEL

__all__ = ["Observed", "Output", "Progress", "format_cost", "shorten"]


def shorten(text: str, limit: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_cost(cost: float | None) -> str:
    if cost is None:
        return "n/a"
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return str(arguments)


class Output:
    """Where the command writes: ``stdout`` for results, ``stderr`` for errors."""

    def __init__(self, stdout: IO[str], stderr: IO[str], *, color: bool | None = None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        if color is None:
            color = "NO_COLOR" not in os.environ and _isatty(stdout)
        self._console: Any = None
        if color:
            try:
                from rich.console import Console
            except ImportError:
                pass
            else:
                self._console = Console(file=stdout, highlight=False, soft_wrap=True)

    @property
    def rich(self) -> bool:
        return self._console is not None

    def line(self, text: str = "", style: str | None = None) -> None:
        if self._console is not None and style:
            self._console.print(text, style=style, markup=False)
        else:
            self.stdout.write(text + "\n")
        self.stdout.flush()

    def write(self, text: str) -> None:
        self.stdout.write(text)
        self.stdout.flush()

    def json(self, value: Any) -> None:
        self.stdout.write(msgspec.json.encode(value).decode() + "\n")
        self.stdout.flush()

    def error(self, text: str) -> None:
        self.stderr.write(f"operative: error: {text}\n")
        self.stderr.flush()

    def warn(self, text: str) -> None:
        self.stderr.write(f"operative: {text}\n")
        self.stderr.flush()


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A run listener printing steps, tool calls, tokens and cost as they happen.

    With ``stream_text`` the answer's text deltas are written as they arrive.
    """

    def __init__(self, out: Output, *, stream_text: bool = False) -> None:
        self.out = out
        self.stream_text = stream_text
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.streamed = False
        """Whether text was streamed since :meth:`reset` (then it need not be printed)."""
        self._midline = False

    def reset(self) -> None:
        self.usage = Usage()
        self.cost = 0.0
        self.streamed = False

    def end_line(self) -> None:
        if self._midline:
            self.out.write("\n")
            self._midline = False

    def _line(self, text: str, style: str | None = None) -> None:
        self.end_line()
        self.out.line(text, style)

    def __call__(self, event: Any) -> None:
        kind: str = event.type
        if kind == "generate.delta":
            if self.stream_text and event.kind == "text" and event.text:
                if not self._midline:
                    self.out.write("assistant: ")
                self.out.write(event.text)
                self._midline = self.streamed = True
        elif kind == "step.started":
            self._line(f"· step {event.step}", "dim")
        elif kind == "generate.completed":
            self._generated(event)
        elif kind == "generate.retry":
            self._line(f"  retrying the model: {shorten(event.error)}", "yellow")
        elif kind == "tools.executing":
            for call in event.calls:
                self._line(f"  → {call.name}({shorten(_arguments(call.arguments), 80)})", "cyan")
        elif kind == "tools.executed":
            for result in event.results:
                ok = result.outcome == "success"
                shown = shorten(str(result.value if ok else result.error))
                self._line(
                    f"  ← {result.tool_name}: {result.outcome}: {shown}",
                    "green" if ok else "yellow",
                )
        elif kind == "run.error":
            self._line(f"  run failed: {event.error}", "red")
        elif kind == "run.aborted":
            self._line(f"  run aborted: {event.reason}", "red")

    def _generated(self, event: Any) -> None:
        usage: Usage = event.usage
        self.usage = self.usage + usage
        cost = cost_of(usage, event.model) if event.model else None
        if event.model == OFFLINE_MODEL:
            cost = 0.0  # the scripted stand-in costs nothing
        self.cost = None if cost is None or self.cost is None else self.cost + cost
        if self.streamed and self._midline:
            self.end_line()
        what = f"{usage.prompt} in, {usage.completion} out"
        if usage.estimated:  # the server reported none: say so, never a silent zero
            what = f"~{usage.prompt} in, ~{usage.completion} out (estimated)"
        self._line(f"  model {event.model or '?'}: {what} tokens, cost {format_cost(cost)}", "dim")

    def totals(self) -> str:
        about = "~" if self.usage.estimated else ""
        return f"{about}{self.usage.total} tokens, cost {format_cost(self.cost)}"


class Observed:
    """An agent whose runs report to a :class:`Progress` (for sessions and recovery)."""

    def __init__(self, agent: Any, progress: Progress) -> None:
        self._agent = agent
        self._progress = progress

    @property
    def name(self) -> str:
        name: str = self._agent.name
        return name

    @property
    def has_output(self) -> bool:
        return bool(self._agent.has_output)

    @property
    def instructions(self) -> str | None:
        instructions: str | None = self._agent.instructions
        return instructions

    async def run(self, input: Any, *, context: Any = None) -> Any:
        async with self.open_run(input, context=context) as run:
            pass
        return await run.result()

    @asynccontextmanager
    async def open_run(
        self, input: Any, *, context: Any = None, durable: Any = None
    ) -> AsyncIterator[Any]:
        options: dict[str, Any] = {} if durable is None else {"durable": durable}
        async with self._agent.open_run(input, context=context, **options) as run:
            run.add_listener("*", self._progress)
            yield run
