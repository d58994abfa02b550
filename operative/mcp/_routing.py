"""Which run a server-initiated request belongs to.

A server asks for things in the middle of a tool call: input from a person
(elicitation), a model's answer (sampling). They belong to the run that made the call.

Over streamable HTTP the transport says which call a request belongs to: the server
sends it on that call's own response stream, and the SDK hands it to us in the context
of the task that made the call (where :data:`_CURRENT_CALL` is set). Over stdio (and
legacy SSE) nothing links a request to a call, so the choice follows one rule:

- one call in flight on this server: that call;
- several calls, all of one run: that run (no particular call, ``tool_call_id=None``);
- calls of several runs: nobody. An elicitation is declined and a sampling request is
  answered without charging a run, because a person's answer must never reach a run
  that did not ask. Give each run its own stdio server, or use HTTP, when several runs
  elicit at once.
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import trio

from ..tools import ToolContext

__all__ = ["Call", "CallRouter", "Route"]


@attrs.define(eq=False)
class Call:
    """One ``tools/call`` in flight."""

    router: CallRouter
    number: int
    context: ToolContext
    ended: trio.Event = attrs.field(factory=trio.Event)

    @property
    def run_key(self) -> int:
        """What tells runs apart: the run's identity (the execution context's, for a host
        that calls the toolbox itself)."""
        execution = self.context.execution
        return id(execution.run if execution.run is not None else execution)


_CURRENT_CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar(
    "operative_mcp_call", default=None
)


@attrs.frozen
class Route:
    """Where a server request goes: the calls it may belong to (empty: no run), whether
    it is known to come from the one call (``exact``), and why, for the logs."""

    calls: tuple[Call, ...]
    exact: bool = False
    why: str = ""

    @property
    def context(self) -> ToolContext | None:
        """The context of the (first) call: its run's handlers and event emitter."""
        return self.calls[0].context if self.calls else None

    @property
    def tool_call_id(self) -> str | None:
        return self.calls[0].context.call_id if self.calls and self.exact else None

    async def wait_abandoned(self) -> None:
        """Return once every call the request may belong to has ended: nobody waits for
        its answer any more."""
        for call in self.calls:
            await call.ended.wait()


class CallRouter:
    """The calls in flight on one server, and the rule that picks one for a request."""

    def __init__(self) -> None:
        self._calls: dict[int, Call] = {}
        self._numbers = itertools.count(1)

    @contextmanager
    def calling(self, context: ToolContext) -> Iterator[Call]:
        """Register a call for as long as it is in flight, and mark the task making it."""
        call = Call(router=self, number=next(self._numbers), context=context)
        self._calls[call.number] = call
        token = _CURRENT_CALL.set(call)
        try:
            yield call
        finally:
            _CURRENT_CALL.reset(token)
            del self._calls[call.number]
            call.ended.set()

    def linked(self) -> Call | None:
        """The call the transport links the message being handled to, if it does."""
        linked = _CURRENT_CALL.get()
        if linked is not None and linked.router is self and linked.number in self._calls:
            return linked
        return None

    def route(self) -> Route:
        """The run (and call) the request being handled now belongs to."""
        linked = self.linked()
        if linked is not None:
            return Route((linked,), exact=True, why="the transport linked it to its call")
        calls = tuple(self._calls.values())
        if not calls:
            return Route((), why="no tool call is in flight on this server")
        if len(calls) == 1:
            return Route(calls, exact=True, why="one tool call is in flight")
        runs = {call.run_key for call in calls}
        if len(runs) == 1:
            return Route(calls, why=f"{len(calls)} calls of one run are in flight")
        return Route(
            (),
            why=(
                f"{len(calls)} calls of {len(runs)} runs are in flight and the transport does "
                "not say which one asked"
            ),
        )
