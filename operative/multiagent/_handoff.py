"""Handoffs: a tool that passes the run, with its conversation, to another agent.

The handoff tool does not run the other agent; it asks the run to switch. At the end of
the step that called it (every tool result in the transcript), the run takes the new
agent's generate function, tools, stop conditions, settings and name, appends its
instructions as a system message, emits ``handoff``, and goes on with the next step.
The step that handed off is not checked against the old agent's stop conditions: its
turn is over. Hooks, budget, retries, output type and the step count stay the run's.

In a durable run the handoff is journaled like any tool call (the tool is idempotent: it
only asks for the switch). Recovery replays the switches of the completed steps from
the results of their handoff calls, found by name in the toolbox of the agent in charge
at each step, and re-arms a handoff whose call settled in a step cut short.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import msgspec

from .._agent import Agent
from .._core._errors import InvalidArgument
from .._core._events import Handoff
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from ..conversation import ConversationHistory
from ..tools import Tool, ToolContext
from ._errors import HandoffError
from ._subagent import tool_name_for

if TYPE_CHECKING:
    from .._core._control import RunControl
    from .._core._options import RunConfig
    from .._core._results import StepResult

__all__ = ["InputFilter", "handoff", "remove_tool_messages"]

InputFilter = Callable[[ConversationHistory], ConversationHistory]
"""Maps the conversation up to the handoff to what the new agent sees in its place."""


def handoff(
    agent: Agent,
    *,
    name: str | None = None,
    description: str | None = None,
    input_filter: InputFilter | None = None,
) -> Tool:
    """A tool that hands the run over to ``agent``.

    Calling it ends the calling agent's turn at the end of the step; from the next step
    the run goes on under ``agent``'s instructions (appended as a system message),
    tools, generate function and stop conditions. The tool's result in the transcript
    says who took over; the run emits a ``handoff`` event.

    ``input_filter`` shapes what the new agent sees of the conversation before the
    handoff, at every request it makes (the stored transcript keeps everything).

    The specification's warning applies to the agent that takes over: an agent that is
    meant to finish on a tool call (a ``submit`` tool, or handing off again outside a
    run) must say so with ``stop_when=stop_when.tool_called(...)``; the default
    ``no_tool_calls()`` keeps it going after the call.

    Args:
        agent: the agent that takes over (an :class:`~operative.Agent`).
        name: the tool's name (default ``transfer_to_<agent name>``).
        description: what the model reads (default: who the agent is).
        input_filter: ``ConversationHistory -> ConversationHistory`` for the history
            before the handoff (see :func:`remove_tool_messages`).
    """
    if not isinstance(agent, Agent):
        raise InvalidArgument(
            f"handoff() takes an Agent (made by create_agent), got {type(agent).__name__}"
        )
    if input_filter is not None and not callable(input_filter):
        raise InvalidArgument(f"input_filter= takes a callable, got {input_filter!r}")
    tool_name = name if name is not None else tool_name_for(agent, "transfer_to_")
    if description is None:
        description = f"Hand the conversation over to the {agent.name} agent."
        if agent.instructions:
            description += f" Its instructions: {agent.instructions}"

    async def transfer(context: ToolContext) -> str:
        run: RunControl | None = context.execution.run
        if run is None:
            raise HandoffError(
                f"{tool_name} only works inside a run (the run switches agents); "
                "run the agent with open_run or agent.run"
            )
        pending = run.pending_switch
        if pending is not None:
            to = pending.agent.name if isinstance(pending, _PendingHandoff) else "another agent"
            raise HandoffError(
                f"control already passed to {to} in this step; hand off once per step"
            )
        run.request_switch(target.pending(context.call_id))
        return f"Transferred to {agent.name}: {agent.name} takes over from here."

    target = _HandoffTarget(agent=agent, input_filter=input_filter)
    # ``switch=``: how a durable run rebuilt from its journal asks for the switch again.
    return Tool(
        transfer, name=tool_name, description=description, idempotent=True, switch=target.pending
    )


@attrs.frozen(kw_only=True)
class _HandoffTarget:
    """Who a handoff tool passes the run to, and what that agent is shown."""

    agent: Agent
    input_filter: InputFilter | None

    def pending(self, call_id: str) -> _PendingHandoff:
        return _PendingHandoff(agent=self.agent, call_id=call_id, input_filter=self.input_filter)


def _answer_id(run: RunControl, call_id: str) -> str | None:
    """The id of the tool message that answers ``call_id`` (a step's last message)."""
    for message in reversed(run.conversation.messages):
        if message.tool_call_id == call_id:
            return message.id
    return None


@attrs.frozen(kw_only=True)
class _PendingHandoff:
    """Asked for by a handoff tool; applied by the loop at the step's end."""

    agent: Agent
    call_id: str
    input_filter: InputFilter | None

    async def apply(self, run: RunControl) -> None:
        """Switch at the end of the step that called the tool, and announce it."""
        cfg = run.config
        messages = run.conversation.messages
        self.switch(run, boundary=messages[-1].id if messages else None, instructions=True)
        if run.wants("handoff"):
            await run.emit(
                Handoff(
                    run_id=run.run_id,
                    step=run.current_step,
                    time=run.now(),
                    call_id=self.call_id,
                    from_agent=cfg.agent_name,
                    to_agent=self.agent.name,
                )
            )

    def replay(self, run: RunControl, step: StepResult, *, last: bool) -> None:
        """Switch again, silently, in a run rebuilt from its journal. The new agent's
        instructions are in the journal unless this switch was its last act."""
        boundary = _answer_id(run, step.results[-1].call_id)
        self.switch(run, boundary=boundary, instructions=last)

    def switch(self, run: RunControl, *, boundary: str | None, instructions: bool) -> RunConfig:
        """Give the run the new agent's configuration; ``boundary`` is the id of the last
        message the input filter applies to, ``instructions`` whether to append them."""
        agent = self.agent
        cfg = run.config
        conversation = run.conversation
        generate: GenerateFunction = agent.generate
        if self.input_filter is not None and boundary is not None:
            generate = _filtered(generate, self.input_filter, boundary)
        settings = agent.options.get("settings")
        new = msgspec.structs.replace(
            cfg,
            generate=generate,
            toolbox=agent.toolbox,
            stop_when=agent.stop_when,
            agent_name=agent.name,
            settings=dict(settings) if settings else cfg.settings,
        )
        run.reconfigure(new)
        if instructions and agent.instructions:
            conversation.append_system_message(agent.instructions)
        return new


def _filtered(
    generate: GenerateFunction, input_filter: InputFilter, boundary: str
) -> GenerateFunction:
    """``generate`` sent the filtered history up to ``boundary`` (a message id)."""

    async def filtered(request: GenerateRequest) -> GenerateResponse:
        history = request.conversation
        messages = history.messages
        for index, message in enumerate(messages):
            if message.id == boundary:
                before = ConversationHistory(
                    messages=messages[: index + 1], metadata=history.metadata
                )
                shown = input_filter(before)
                if not isinstance(shown, ConversationHistory):
                    raise HandoffError(
                        f"input_filter {input_filter!r} returned {type(shown).__name__}; "
                        "return a ConversationHistory"
                    )
                history = msgspec.structs.replace(
                    history, messages=shown.messages + messages[index + 1 :]
                )
                request = msgspec.structs.replace(request, conversation=history)
                break
        return await generate(request)

    return filtered


def remove_tool_messages(history: ConversationHistory) -> ConversationHistory:
    """An ``input_filter``: drop tool calls and results (the new agent sees only what
    was said, not how the previous agent worked)."""
    kept: list[Any] = []
    for message in history.messages:
        if message.role == "tool":
            continue
        if message.tool_calls:
            if not message.text:
                continue
            message = msgspec.structs.replace(message, tool_calls=())
        kept.append(message)
    return msgspec.structs.replace(history, messages=tuple(kept))
