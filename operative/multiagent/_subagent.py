"""Subagents: an agent offered to another as a tool, its run a child of the tool's task.

::

    parent run
    └── step k
        └── tool nursery
            └── tool task "research"        the parent's abort and deadline reach it
                └── open_run(child)          a whole run: its own loop, nursery, events
                    └── ...

The child is a task tree inside the parent's, so nothing about it is special: the
parent's abort (or deadline, or budget) cancels the tool task, the child repairs its
transcript and ends ``aborted``, and the parent settles the call as ``cancelled``. What
the child spent is added to the parent's usage and charged to the parent's budget when
it ends (``subagent.completed``); the child starts with what is left of the parent's
budget, so it stops with ``budget-exceeded`` where the parent would have.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from .._agent import Agent, AgentInput, AgentRunContext, RunnableAgent
from .._core._errors import InvalidArgument, RunFailed
from .._core._events import SubagentCompleted, SubagentEvent
from .._core._open_run import open_run
from .._core._results import RunResult
from .._core._run import control_of
from .._core._types import FinishReason
from ..tools import Tool, ToolContext
from ._errors import SubagentError

if TYPE_CHECKING:
    from .._core._control import RunControl
    from ..budgets import Budget, CostBudgetMonitor

__all__ = ["run_subagent", "subagent_tool", "tool_name_for"]

_ANSWERED = frozenset({FinishReason.STOP_CONDITION, FinishReason.MAXIMUM_STEPS})
_NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_-]+")


def tool_name_for(agent: RunnableAgent, prefix: str = "") -> str:
    """A provider-safe tool name derived from the agent's name (``prefix`` first)."""
    base = _NAME_CHARACTERS.sub("_", agent.name).strip("_")
    if not base:
        raise InvalidArgument(
            f"the agent's name {agent.name!r} gives no tool name: pass name= "
            "(1 to 64 letters, digits, '_' or '-')"
        )
    return f"{prefix}{base}"[:64]


def subagent_tool(
    agent: RunnableAgent,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
) -> Tool:
    """Offer ``agent`` as a tool: each call runs it as a child run of the calling run.

    The model passes ``input`` (the task, in plain language); the tool's result is the
    child's final answer, or its structured output when the agent has an ``output``
    type. A child that errs, is aborted or runs out of budget makes the call an error
    result the parent's model can read (a :class:`SubagentError`).

    Inside a run the child inherits the parent's abort, deadline and remaining budget;
    its events reach the parent's listeners as ``subagent.event`` (tagged with the child
    run id, ``{parent run id}/{call id}``) and its usage is added to the parent's. Called
    outside a run (``Toolbox.execute`` with no context) it is a plain ``agent.run``.

    Args:
        agent: the agent to run (an :class:`~operative.Agent` or any ``RunnableAgent``;
            only an ``Agent`` can be given the parent's remaining budget).
        name: the tool's name (default: the agent's name, made provider-safe).
        description: what the parent's model reads (default: the agent's instructions).
        timeout: seconds each call may take (the child is aborted, the call an error).
        max_concurrency: how many runs of this subagent may run at once.
    """
    if not isinstance(agent, RunnableAgent):
        raise InvalidArgument(f"subagent_tool() takes an agent, got {type(agent).__name__}")
    tool_name = name if name is not None else tool_name_for(agent)
    if description is None:
        instructions = getattr(agent, "instructions", None)
        description = f"Ask the {agent.name} agent to do a task and return its answer." + (
            f" Its instructions: {instructions}" if instructions else ""
        )

    async def call_subagent(input: str, context: ToolContext) -> Any:
        result = await run_subagent(agent, input, context)
        return answer_of(agent, result)

    call_subagent.__doc__ = description
    return Tool(
        call_subagent,
        name=tool_name,
        description=description,
        timeout=timeout,
        max_concurrency=max_concurrency,
    )


def answer_of(agent: RunnableAgent, result: RunResult) -> Any:
    """The child's answer for the tool result, or a :class:`SubagentError`."""
    reason = result.finish_reason
    if reason not in _ANSWERED:
        if reason is FinishReason.ERROR:
            why = f"{type(result.error).__name__}: {result.error}"
        elif reason is FinishReason.ABORTED:
            why = result.abort_reason or "aborted"
        else:
            why = str(reason)
        raise SubagentError(
            f"the {agent.name} agent ended with {str(reason)!r} ({why}) before answering",
            result=result,
        )
    if agent.has_output and result.output is not None:
        return result.output
    return result.content


async def run_subagent(
    agent: RunnableAgent,
    input: AgentInput,
    context: ToolContext | None,
    *,
    child_run_id: str | None = None,
) -> RunResult:
    """Run ``agent`` as a child of the run ``context`` belongs to, and return its result.

    This is what :func:`subagent_tool` calls; use it to write your own subagent tools
    (one that builds the child's input from structured arguments, say). Without a parent
    run (``context`` is ``None`` or was not made by the loop) it is ``agent.run(input)``,
    whose errored result is returned rather than raised.
    """
    parent: RunControl | None = context.execution.run if context is not None else None
    if parent is None or context is None:
        try:
            return await agent.run(input)
        except RunFailed as failed:
            return failed.result  # an errored child is an answer for the caller to judge
    child_id = child_run_id or f"{parent.run_id}/{context.call_id}"
    link = _Link(parent, context, agent, child_id)
    return await link.run(input)


class _Link:
    """One child run's tie to its parent: event forwarding and accounting."""

    __slots__ = ("agent", "child", "child_id", "context", "parent", "settled", "step")

    def __init__(
        self, parent: RunControl, context: ToolContext, agent: RunnableAgent, child_id: str
    ) -> None:
        self.parent = parent
        self.context = context
        self.agent = agent
        self.child_id = child_id
        self.step = context.step
        self.child: Any = None
        self.settled = False

    async def run(self, input: AgentInput) -> RunResult:
        try:
            async with self._open(input) as child:
                self.child = child
                if self.parent.wants("subagent.event"):
                    child.add_listener("*", self._forward)
                result: RunResult = await child.result()
        finally:
            # Runs on every way out, cancellation included: the parent paid for what
            # the child spent whether or not the call's result survives.
            status = self._settle()
        if status is not None:
            await self.parent.enforce(status)
        return result

    def _open(self, input: AgentInput) -> Any:
        agent = self.agent
        parent = self.parent
        cfg = parent.config
        if not isinstance(agent, Agent):
            return agent.open_run(
                input,
                context=AgentRunContext(run_id=self.child_id, principal=cfg.principal),
            )
        options = dict(agent.options)
        options["run_id"] = self.child_id
        options.setdefault("agent_name", agent.name)
        if cfg.principal is not None:
            options.setdefault("principal", cfg.principal)
        if cfg.request_context is not None:
            options.setdefault("request_context", cfg.request_context)
        options.pop("durable", None)  # a child lives and dies with its parent's task
        remaining = parent.query("budget_remaining")
        if remaining is not None:
            options["budget"] = _tighter(options.get("budget"), remaining)
        return open_run(
            generate=agent.generate,
            conversation=agent._conversation(input),
            toolbox=agent.toolbox,
            stop_when=agent.stop_when,
            maximum_steps=agent.maximum_steps,
            **options,
        )

    def _forward(self, event: Any) -> None:
        parent = self.parent
        parent.emit_nowait(
            SubagentEvent(
                run_id=parent.run_id,
                step=self.step,
                time=event.time,
                call_id=self.context.call_id,
                tool_name=self.context.tool_name,
                agent_name=self.agent.name,
                child_run_id=self.child_id,
                event=event,
            )
        )

    def _settle(self) -> Any:
        """Add the child's spend to the parent (synchronous: safe while cancelled)."""
        child = None if self.child is None else control_of(self.child)
        result: RunResult | None = None
        if child is not None:
            result = child.ended_result
        elif self.child is not None:
            result = getattr(self.child, "ended_result", None)
        if result is None or self.settled:
            return None
        self.settled = True
        parent = self.parent
        usage = result.usage
        spent = child.query("budget_spent") if child is not None else None
        if spent is None:
            from ..budgets import BudgetSpent, usage_tokens

            spent = BudgetSpent(tokens=usage_tokens(usage), requests=len(result.steps))
        status = parent.charge(usage, step=self.step, spent=spent)
        if parent.wants("subagent.completed"):
            parent.emit_nowait(
                SubagentCompleted(
                    run_id=parent.run_id,
                    step=self.step,
                    time=parent.now(),
                    call_id=self.context.call_id,
                    tool_name=self.context.tool_name,
                    agent_name=self.agent.name,
                    child_run_id=self.child_id,
                    finish_reason=result.finish_reason,
                    usage=usage,
                    steps=len(result.steps),
                )
            )
        return status


def _tighter(own: Budget | CostBudgetMonitor | None, inherited: Budget) -> Any:
    """The child's budget: each limit the smaller of its own and the parent's remainder."""
    if own is None:
        return inherited
    from ..budgets import Budget, CostBudgetMonitor

    base = own.budget if isinstance(own, CostBudgetMonitor) else own

    def least(a: float | None, b: float | None) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        return min(a, b)

    combined = Budget(
        max_tokens=least(base.max_tokens, inherited.max_tokens),
        max_cost_usd=least(base.max_cost_usd, inherited.max_cost_usd),
        max_requests=least(base.max_requests, inherited.max_requests),
        max_tool_calls=least(base.max_tool_calls, inherited.max_tool_calls),
        max_duration=least(base.max_duration, inherited.max_duration),
        thresholds=base.thresholds,
    )
    if isinstance(own, CostBudgetMonitor):
        return attrs.evolve(own, budget=combined)
    return combined
