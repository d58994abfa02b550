"""The live status a terminal shows while a run works: what it is doing, for how long,
the text streaming in, the tools in flight.

It is rich's ``Live`` display with ``auto_refresh=False``: rich starts no thread of its
own, and a Trio task (:meth:`LiveStatus.serve_refresh`) redraws it, so the elapsed time
moves while the model is silent. The region is transient: it is cleared when the run
ends or a prompt needs the terminal, and permanent lines print above it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

__all__ = ["LiveStatus"]

REFRESH_SECONDS = 0.1
"""How often the status is redrawn while it shows."""


def _tail(text: str, width: int, rows: int) -> str:
    """The end of ``text`` that fits in ``rows`` lines of ``width`` columns."""
    kept: list[str] = []
    used = 0
    for line in reversed(text.splitlines() or [""]):
        need = max(1, -(-len(line) // max(width, 1)))
        if used + need > rows:
            if not kept:
                kept.append(line[-(rows * width) :])
            break
        kept.append(line)
        used += need
    return "\n".join(reversed(kept))


class LiveStatus:
    """A status line (and the text streaming in) at the bottom of a terminal."""

    def __init__(self, console: Any, *, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.live import Live

        self._console = console
        self._live = Live(
            console=console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
            vertical_overflow="crop",
        )
        self._clock = clock
        self._shown = False
        self._activity = ""
        self._step: int | None = None
        self._since = 0.0
        self._text = ""
        self._spinner: Any = None

    @property
    def shown(self) -> bool:
        return self._shown

    def show(self, activity: str, *, step: int | None = None, text: str | None = None) -> None:
        """Say what the run is doing now (the clock restarts when the activity changes)."""
        if activity != self._activity or not self._shown:
            self._since = self._clock()
        self._activity = activity
        if step is not None:
            self._step = step
        if text is not None:
            self._text = text
        if not self._shown:
            self._live.start()
            self._shown = True
        self.refresh()

    def hide(self) -> None:
        """Clear the region (before a prompt, and when the run ends)."""
        self._text = ""
        if self._shown:
            self._shown = False
            self._live.stop()

    def refresh(self) -> None:
        if self._shown:
            self._live.update(self.render(), refresh=True)

    def status_line(self) -> str:
        """``step 2 · waiting for the model · 3.4 s``"""
        elapsed = self._clock() - self._since
        head = f"step {self._step} · " if self._step is not None else ""
        return f"{head}{self._activity} · {elapsed:.1f} s"

    def render(self) -> Any:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.text import Text

        line = Text(self.status_line(), style="dim")
        if self._spinner is None:
            self._spinner = Spinner("dots", text=line, style="cyan")
        else:
            self._spinner.update(text=line)
        status = self._spinner
        if not self._text:
            return status
        rows = max(1, self._console.size.height - 2)
        tail = _tail(self._text, self._console.size.width, rows)
        return Group(Text(tail, style="green"), status)

    async def serve_refresh(self) -> None:
        """Redraw every REFRESH_SECONDS until cancelled (the elapsed time moves)."""
        while True:
            await trio.sleep(REFRESH_SECONDS)
            self.refresh()
