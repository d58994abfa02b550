"""Terminal output: plain text, or through ``rich`` on a terminal, and the progress of a run
drawn from its events.

``rich`` is optional (``pip install 'operative[cli]'``). With it, and standard output a
terminal, lines are styled (colour unless ``NO_COLOR`` is set) and a live status shows
what the run is doing (:mod:`._live`). Piped, or without rich, every line is plain text
and nothing is redrawn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

import msgspec
import trio

from .. import Usage
from ._defaults import OFFLINE_MODEL

if TYPE_CHECKING:
    from ._live import LiveStatus

__all__ = ["Observed", "Output", "Progress", "describe_cost", "format_cost", "shorten", "tokens"]


def shorten(text: str, limit: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tokens(usage: Usage, count: int | None = None) -> str:
    """``count`` (default: the total) of ``usage``; ``~N`` when the server reported none
    and they are estimated: never a silent zero, never an estimate passed off as a count."""
    number = usage.total if count is None else count
    return f"~{number}" if usage.estimated else str(number)


def format_cost(cost: float) -> str:
    return f"${cost:.4f}" if cost < 1 else f"${cost:.2f}"


def describe_cost(cost: float | None, *, usage: Usage, unpriced_models: Sequence[str] = ()) -> str:
    """A cost in dollars, or ``n/a`` and why; the one way every command reports cost.

    ``cost`` is ``None`` when some of ``usage`` has no price; ``unpriced_models`` are the
    reported model names the price table does not know.
    """
    if usage == Usage() and not unpriced_models:
        return "n/a (no tokens were reported)"
    if cost is not None:
        return format_cost(cost)
    if list(unpriced_models) == [OFFLINE_MODEL]:
        return "n/a (the offline stand-in has no price)"
    if unpriced_models:
        return f"n/a (no price for {', '.join(unpriced_models)})"
    return "n/a (a model that did not say its name, or an attempt cut short, spent tokens)"


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{key}={value!r}" for key, value in arguments.items())
    return str(arguments)


class Output:
    """Where the command writes: ``stdout`` for results, ``stderr`` for errors.

    ``color`` (default: whether ``stdout`` is a terminal) sends lines through rich when
    it is installed; rich leaves the colour out when ``NO_COLOR`` is set.
    """

    def __init__(self, stdout: IO[str], stderr: IO[str], *, color: bool | None = None) -> None:
        self.stdout = stdout
        self.stderr = stderr
        if color is None:
            color = _isatty(stdout)
        self._console: Any = None
        self._rich_text: Any = None
        if color:
            try:
                from rich.console import Console
                from rich.text import Text
            except ImportError:
                pass
            else:
                self._console = Console(file=stdout, highlight=False, soft_wrap=True)
                self._rich_text = Text

    @property
    def rich(self) -> bool:
        return self._console is not None

    def live_status(self) -> LiveStatus | None:
        """A live status for a terminal; ``None`` when output is piped or rich is missing."""
        console = self._console
        if console is None or not console.is_terminal or console.is_dumb_terminal:
            return None
        from ._live import LiveStatus

        return LiveStatus(console)

    def line(self, text: str = "", style: str | None = None) -> None:
        if self._console is not None:
            # The style goes on the text alone, not on a live status drawn below it.
            self._console.print(self._rich_text(text, style=style or ""))
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

    With ``stream_text`` the assistant's text is shown: piped, written as it streams;
    on a terminal, streamed into the live status and printed once the model is done.
    Either way a step's text comes before its token line. On a terminal the live status
    (see :meth:`showing`) says what the run is doing and for how long.
    """

    def __init__(self, out: Output, *, stream_text: bool = False) -> None:
        self.out = out
        self.stream_text = stream_text
        self.live = out.live_status()
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.unpriced: list[str] = []
        self.answered = False
        """Whether the last model answer's text was shown (then it need not be again)."""
        self._midline = False
        self._text = ""

    def reset(self) -> None:
        self.usage = Usage()
        self.cost = 0.0
        self.unpriced = []
        self.answered = False

    @asynccontextmanager
    async def showing(self) -> AsyncIterator[None]:
        """Keep the live status redrawn for the block (nothing to do when piped)."""
        live = self.live
        if live is None:
            yield
            return
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(live.serve_refresh)
                yield
                nursery.cancel_scope.cancel()
        finally:
            live.hide()

    def end_line(self) -> None:
        """Finish a streamed line and clear the live status (before a prompt or a result)."""
        if self._midline:
            self.out.write("\n")
            self._midline = False
        if self.live is not None:
            self.live.hide()

    def _line(self, text: str, style: str | None = None) -> None:
        if self._midline:
            self.out.write("\n")
            self._midline = False
        self.out.line(text, style)

    def _status(self, activity: str, **details: Any) -> None:
        if self.live is not None:
            self.live.show(activity, **details)

    def __call__(self, event: Any) -> None:
        kind: str = event.type
        if kind == "generate.delta":
            if event.kind == "text" and event.text:
                self._delta(event)
        elif kind == "step.started":
            self._line(f"· step {event.step}", "dim")
            self._status("waiting for the model", step=event.step)
        elif kind == "generate.started":
            self._text = ""
            self._status("waiting for the model", step=event.step, text="")
        elif kind == "generate.completed":
            self._generated(event)
        elif kind == "generate.retry":
            self._line(f"  retrying the model: {shorten(event.error)}", "yellow")
            self._status(f"retrying the model (attempt {event.attempt})", text="")
        elif kind == "tools.executing":
            for call in event.calls:
                self._line(f"  → {call.name}({shorten(_arguments(call.arguments), 80)})", "cyan")
            calls = ", ".join(
                f"{call.name}({shorten(_arguments(call.arguments), 40)})" for call in event.calls
            )
            self._status(f"running {calls}")
        elif kind == "tool.progress" and event.message:
            self._status(f"{event.tool_name}: {shorten(event.message, 60)}")
        elif kind == "tools.executed":
            for result in event.results:
                ok = result.outcome == "success"
                shown = shorten(str(result.value if ok else result.error))
                self._line(
                    f"  ← {result.tool_name}: {result.outcome}: {shown}",
                    "green" if ok else "yellow",
                )
            self._status("working")
        elif kind == "run.error":
            self.end_line()
            self._line(f"  run failed: {event.error}", "red")
        elif kind == "run.aborted":
            self.end_line()
            self._line(f"  run aborted: {event.reason}", "red")
        elif kind == "run.completed":
            self.end_line()

    def _delta(self, event: Any) -> None:
        self._text += event.text
        if self.live is not None:
            self.live.show("the model is writing", text=self._text)
        elif self.stream_text:
            if not self._midline:
                self.out.write("assistant: ")
            self.out.write(event.text)
            self._midline = True

    def _generated(self, event: Any) -> None:
        usage: Usage = event.usage
        self.usage = self.usage + usage
        from ..budgets import cost_of  # the first step loads the price table

        cost = cost_of(usage, event.model) if event.model else None
        if cost is None:
            if event.model and event.model not in self.unpriced:
                self.unpriced.append(event.model)
            self.cost = None
        elif self.cost is not None:
            self.cost += cost
        text = self._text or event.content
        self.answered = False
        if self.live is not None:
            self.live.show("working", text="")  # the text moves from the status to a line
        if self._midline:  # the text streamed onto this line: end it
            self.out.write("\n")
            self._midline = False
            self.answered = True
        elif self.stream_text and text:
            self._line(f"assistant: {text}", "green")
            self.answered = True
        self._text = ""
        priced = describe_cost(
            cost, usage=usage, unpriced_models=[event.model] if event.model and cost is None else ()
        )
        what = f"{tokens(usage, usage.prompt)} in, {tokens(usage, usage.completion)} out"
        if usage.estimated:  # the server reported none: say so, never a silent zero
            what += " (estimated)"
        self._line(f"  model {event.model or '?'}: {what} tokens, cost {priced}", "dim")

    def totals(self) -> str:
        cost = describe_cost(self.cost, usage=self.usage, unpriced_models=self.unpriced)
        return f"{tokens(self.usage)} tokens, cost {cost}"


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
