"""The journal of a step's tool calls: what is durable before a call runs, and what a
call cut by a crash becomes when its run is recovered.

A call whose tool is idempotent is recorded with the step's next commit (cut, it simply
runs again). One that is not is durable before it runs: recovered, a call that started
and never settled is not run again but reported with :data:`UNKNOWN_OUTCOME`. A call
that settled before the crash keeps its recorded result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from .._core._extension import Execute
from .._core._types import ToolCall, ToolResult
from ._records import ToolSettled
from ._records import ToolStarted as ToolStartedRecord

if TYPE_CHECKING:
    from .._core._control import RunControl
    from ..tools import ExecutionContext
    from ._driver import DurableDriver

__all__ = ["UNKNOWN_OUTCOME", "is_idempotent", "journal_calls"]

UNKNOWN_OUTCOME = (
    "The outcome of this call is unknown: the process running it stopped before the "
    "call settled, and the tool is not declared idempotent, so it was not run again. "
    "Check whether its effect happened before relying on it."
)


def journal_calls(driver: DurableDriver, run: RunControl, execute: Execute, step: int) -> Execute:
    """``execute`` for step ``step`` of ``driver``'s run, journaling each call: its start
    (durable before it runs unless the tool is idempotent) and its result."""
    toolbox = run.config.toolbox
    replay = driver.replay
    partial = replay.partial if replay is not None else None
    if partial is not None and partial.step != step:
        partial = None
    now = trio.current_time

    async def execute_journaled(call: ToolCall, context: ExecutionContext) -> ToolResult:
        if partial is not None:
            recorded = partial.settled.get(call.id)
            if recorded is not None:
                # Settled before the crash: never run twice. A switching call (a
                # handoff) asks again (that request lived in the crashed process).
                if recorded.outcome == "success":
                    tool = toolbox.get(call.name)
                    switch = None if tool is None else tool.switch
                    if switch is not None and run.pending_switch is None:
                        run.request_switch(switch(call.id))
                return recorded
            if call.id in partial.started and not is_idempotent(toolbox, call):
                result = ToolResult(
                    call_id=call.id,
                    tool_name=call.name,
                    outcome="error",
                    error=UNKNOWN_OUTCOME,
                    detail="started before a crash, never settled; not idempotent",
                )
                await driver._append([ToolSettled(step=step, result=result)])
                return result
        idempotent = is_idempotent(toolbox, call)
        started = ToolStartedRecord(  # its own time only if it waits (idempotent)
            step=step,
            call_id=call.id,
            tool_name=call.name,
            at=driver._clock() if idempotent else None,
        )
        if idempotent:
            # Its start need not be durable before it runs (cut, it simply runs
            # again): recorded with the step's next commit, for the journal's readers.
            driver._defer(started)
        else:
            # Durable before the call runs (with whatever waits, e.g. the step's
            # answer): a crash from here on reports the call cut, never re-runs it.
            await driver._append([started])
        began = now()
        driver._in_flight += 1
        try:
            result = await execute(call, context)
        finally:
            driver._in_flight -= 1
        driver._defer(
            ToolSettled(step=step, result=result, duration=now() - began, at=driver._clock())
        )
        if driver._in_flight or run.wants("tool-result.validated") or run.wants("tools.executed"):
            # Other calls still run (they may take long, and this result must not
            # wait for them), or a listener is about to see it: commit it now.
            await driver._append([])
        return result

    return execute_journaled


def is_idempotent(toolbox: Any, call: ToolCall) -> bool:
    tool = toolbox.get(call.name)
    return bool(getattr(tool, "idempotent", False))
