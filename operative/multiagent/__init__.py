"""Multi-agent patterns: subagents, handoffs and supervisors, all as task trees.

A subagent's run is a child task of the parent's tool task; a handoff switches the run
to another agent at a step boundary; a supervisor dispatches workers as child tasks of
one tool call, in a nursery with bounded concurrency. See ``docs/multi-agent.md``.
"""

from ._errors import HandoffError as HandoffError
from ._errors import SubagentError as SubagentError
from ._errors import WorkerFailedError as WorkerFailedError
from ._handoff import InputFilter as InputFilter
from ._handoff import handoff as handoff
from ._handoff import remove_tool_messages as remove_tool_messages
from ._subagent import run_subagent as run_subagent
from ._subagent import subagent_tool as subagent_tool
from ._supervisor import OnWorkerError as OnWorkerError
from ._supervisor import WorkerReport as WorkerReport
from ._supervisor import WorkerTask as WorkerTask
from ._supervisor import create_supervisor as create_supervisor
from ._supervisor import dispatch_tool as dispatch_tool

__all__ = [
    "HandoffError",
    "InputFilter",
    "OnWorkerError",
    "SubagentError",
    "WorkerFailedError",
    "WorkerReport",
    "WorkerTask",
    "create_supervisor",
    "dispatch_tool",
    "handoff",
    "remove_tool_messages",
    "run_subagent",
    "subagent_tool",
]
