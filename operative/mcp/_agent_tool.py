"""A whole agent served as one MCP tool."""

from __future__ import annotations

from typing import Any

from .._agent import Agent, RunnableAgent
from .._core._errors import InvalidArgument
from ..multiagent import subagent_tool
from ..multiagent._subagent import answer_of, run_subagent
from ..tools import ApprovalPolicy, Tool, ToolContext

__all__ = ["agent_tool"]


def agent_tool(
    agent: RunnableAgent,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> Tool:
    """``agent`` as one tool: each call runs the agent on the call's ``input`` (the task,
    in plain language) and returns its answer (its structured output when it has an
    ``output`` type).

    This is what an agent in the list given to :func:`serve_stdio` or :func:`mcp_app`
    becomes; call it yourself to pick the name or description the client sees. It is
    read-only (``mutates=False``, ``readOnlyHint: true``) only when every tool the agent
    has is declared ``mutates=False`` and none needs approval; it mutates
    (``mutates=True``) when one is declared ``mutates=True`` or needs approval, or when
    its tools are not known before it runs (tool sources, a lazy agent); otherwise (a
    tool left undeclared) it is undeclared too, which MCP clients read as a tool that
    may change the world. While
    the agent runs, each finished step is reported as progress (``"step 2 of the
    writer agent finished"``), so a client that asked for progress sees it work; a
    client that cancels the call aborts the run. A run that errs, is aborted or runs
    out of budget is an error result. Inside an operative run (the tool offered to
    another agent) it runs as that run's subagent, as
    :func:`operative.multiagent.subagent_tool`.

    Args:
        agent: the agent (an :class:`~operative.Agent` or any ``RunnableAgent``).
        name: the tool's name (default: the agent's name, made provider-safe).
        description: what the client reads (default: the agent's name and instructions).
        timeout: seconds each call may take (the run is aborted, the call an error).
    """
    if not isinstance(agent, RunnableAgent):
        raise InvalidArgument(f"agent_tool() takes an agent, got {type(agent).__name__}")
    # The same name, description and input as a subagent tool of this agent.
    shape = subagent_tool(agent, name=name, description=description, timeout=timeout)

    async def run_agent(input: str, context: ToolContext) -> Any:
        if context.execution.run is not None:
            return answer_of(agent, await run_subagent(agent, input, context))
        async with agent.open_run(input) as run:
            finished = 0
            async for _ in run.events("step.completed"):
                finished += 1
                await context.report_progress(
                    finished, None, f"step {finished} of the {agent.name} agent finished"
                )
            result = await run.result()
        return answer_of(agent, result)

    run_agent.__doc__ = shape.description
    return Tool(
        run_agent,
        name=shape.name,
        description=shape.description,
        timeout=timeout,
        mutates=_may_mutate(agent),
        output_type=agent.options.get("output") if isinstance(agent, Agent) else None,
    )


def _may_mutate(agent: RunnableAgent) -> bool | None:
    """What a run of ``agent`` is declared to do to the world: True when one of its
    tools is declared ``mutates=True`` or needs approval (its own or its toolbox's
    approval policy's), or its tools are not known until it runs (tool sources, a lazy
    agent's definition); False when every tool is declared ``mutates=False`` and needs
    no approval; None (undeclared) otherwise."""
    if not isinstance(agent, Agent):
        return True
    if agent.options.get("tool_sources"):
        return True
    tools = list(agent.toolbox)
    policy = agent.toolbox.approval_policy

    def gated(tool: Tool) -> bool:
        if tool.mutates is True or tool.needs_approval is not False:
            return True
        if policy is None:
            return False
        return policy.requires(tool) if isinstance(policy, ApprovalPolicy) else True

    if any(gated(tool) for tool in tools):
        return True
    if all(tool.mutates is False for tool in tools):
        return False
    return None
