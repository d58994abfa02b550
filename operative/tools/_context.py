"""What a tool call runs inside: the loop's ``ExecutionContext`` and the tool's view of it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import trio

from .._core._events import Event, ToolProgress
from .._core._types import RequestContext

if TYPE_CHECKING:
    from ._elicitation import OnElicitation

__all__ = ["ExecutionContext", "ToolContext"]

T = TypeVar("T")


class ExecutionContext(msgspec.Struct, frozen=True, kw_only=True):
    """Where a tool call runs: the run and step, the request it acts for, and the hooks
    it may use to reach the host (events, elicitation).

    The loop builds one per step; a host calling :meth:`Toolbox.execute` directly can
    pass its own (or none: every field has a neutral default).
    """

    run_id: str = ""
    step: int = 0
    agent_id: str = ""
    request_context: RequestContext | None = None
    """The authenticated request the run acts for; bound into approvals it issues."""
    on_elicitation: OnElicitation | None = None
    """Answers a tool's :meth:`ToolContext.elicit`; without it, elicitation fails."""
    emit: Callable[[Event], Awaitable[None]] | None = None
    """The run's event emitter (progress and elicitation events go through it)."""
    run: Any = None
    """The run the call belongs to, when the loop runs it (subagents and handoffs reach
    their parent run through it); ``None`` for a host calling ``Toolbox.execute``."""


EMPTY_CONTEXT = ExecutionContext()


class ToolContext(msgspec.Struct, frozen=True, kw_only=True):
    """Given to a tool that declares a parameter annotated ``ToolContext``.

    That parameter is not part of the tool's input schema: the toolbox fills it in.
    From a sync tool (which runs in a worker thread) call the async methods through
    ``trio.from_thread.run(ctx.report_progress, ...)``.
    """

    call_id: str
    tool_name: str
    run_id: str = ""
    step: int = 0
    agent_id: str = ""
    request_context: RequestContext | None = None
    execution: ExecutionContext = EMPTY_CONTEXT
    """The execution context the call runs in."""

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the host how far the tool got (emits a ``tool.progress`` event)."""
        emit = self.execution.emit
        if emit is None:
            await trio.lowlevel.checkpoint()
            return
        await emit(
            ToolProgress(
                run_id=self.run_id,
                step=self.step,
                time=trio.current_time(),
                call_id=self.call_id,
                tool_name=self.tool_name,
                progress=progress,
                total=total,
                message=message,
            )
        )

    async def elicit(self, message: str, type: type[T]) -> T | None:
        """Ask the host for a value of ``type``; ``None`` when the person declines.

        Raises:
            ElicitationError: the run has no ``on_elicitation`` handler, or it answered
                for another request or with data that does not match ``type``.
        """
        from ._elicitation import run_elicitation  # loaded when a tool first asks

        execution = self.execution
        return await run_elicitation(
            handler=execution.on_elicitation,
            emit=execution.emit,
            run_id=self.run_id,
            step=self.step,
            tool_call_id=self.call_id,
            message=message,
            type_=type,
        )
