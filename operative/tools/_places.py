"""The capacity places a tool call holds while it runs (its toolbox's and its tool's
limits, and for a sync tool, trio's thread limiter), and the result of a call its
timeout cut."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import trio

from .._core._types import ToolCall, ToolResult

if TYPE_CHECKING:
    from ._tool import Tool

__all__ = ["CallPlaces", "timed_out"]

_logger = logging.getLogger("operative.tools")


class CallPlaces:
    """The capacity places one call holds: its toolbox's and its tool's (either may be
    absent), taken on behalf of the call itself (so one task can make many calls).

    For a sync tool this is also the ``limiter`` of ``trio.to_thread.run_sync``:
    acquiring takes a place of trio's default thread limiter, and the call's places
    pass to the thread, which gives them all back when it has *actually* finished
    (trio calls ``release_on_behalf_of`` then, even for an abandoned thread). A
    thread still running when ``trio.run`` returns never gives them back.
    """

    __slots__ = (
        "_abandoned",
        "_call_id",
        "_finished",
        "_limiters",
        "_started",
        "_thread_limiter",
        "_tool_name",
    )

    def __init__(
        self, tool_name: str, call_id: str, *limiters: trio.CapacityLimiter | None
    ) -> None:
        self._tool_name = tool_name
        self._call_id = call_id
        self._limiters = tuple(limiter for limiter in limiters if limiter is not None)
        self._thread_limiter: trio.CapacityLimiter | None = None
        self._started = False
        self._finished = False
        self._abandoned = False

    @property
    def thread_running(self) -> bool:
        """A thread was started for the call and has not finished."""
        return self._started and not self._finished

    async def acquire(self) -> None:
        taken: list[trio.CapacityLimiter] = []
        try:
            for limiter in self._limiters:
                await limiter.acquire_on_behalf_of(self)
                taken.append(limiter)
        except BaseException:
            for limiter in taken:
                limiter.release_on_behalf_of(self)
            raise

    def release(self) -> None:
        """The call's task is done with its places: give them back, unless its thread
        (abandoned) still runs, which then gives them back itself when it ends."""
        if not self._started:
            self._give_back()
        elif not self._finished:
            self._abandoned = True
            _logger.warning(
                "tool %r call %s was abandoned while its worker thread runs (a thread "
                "cannot be stopped); the thread may still be running and keeps the "
                "call's concurrency places until it ends",
                self._tool_name,
                self._call_id,
            )

    def _give_back(self) -> None:
        for limiter in reversed(self._limiters):
            limiter.release_on_behalf_of(self)

    # trio.to_thread.run_sync's limiter protocol.

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        limiter = trio.to_thread.current_default_thread_limiter()
        await limiter.acquire_on_behalf_of(borrower)
        self._thread_limiter = limiter
        self._started = True

    def release_on_behalf_of(self, borrower: object) -> None:
        self._finished = True
        try:
            self._give_back()
        finally:
            if self._thread_limiter is not None:
                self._thread_limiter.release_on_behalf_of(borrower)
        if self._abandoned:
            _logger.info(
                "the abandoned worker thread of tool %r call %s has ended; its "
                "concurrency places are free again",
                self._tool_name,
                self._call_id,
            )


def timed_out(tool: Tool, call: ToolCall, places: CallPlaces | None = None) -> ToolResult:
    """The result of a call cut by its tool's ``timeout`` (abandoned, if it runs in a
    thread that had started)."""
    if places is None or not places._started:
        return ToolResult(
            call_id=call.id,
            tool_name=tool.name,
            outcome="error",
            error=f"Tool {tool.name!r} timed out after {tool.timeout:g} s and was stopped.",
        )
    if places.thread_running:
        state = "it may still be running, and still take effect"
        detail = "abandoned; its worker thread was still running when the call settled"
    else:
        state = "its thread has since ended"
        detail = "abandoned; its worker thread ended as the call settled"
    return ToolResult(
        call_id=call.id,
        tool_name=tool.name,
        outcome="error",
        error=(
            f"Tool {tool.name!r} timed out after {tool.timeout:g} s. It runs in a thread, "
            f"which cannot be stopped: the call was abandoned ({state}), and its result "
            "will be discarded."
        ),
        detail=detail,
    )
