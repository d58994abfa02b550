"""What the tests of how a run is set up and driven share: sample tools, a one-call
model, a run's configuration with ``open_run``'s defaults, and the summary two runs of
one script must agree on."""

from __future__ import annotations

from typing import Any

import operative
from operative import Conversation, GenerateResponse, ToolCall
from operative._core._options import configure_run
from operative.extending import RunConfig

ANSWER = GenerateResponse(content="done")


@operative.tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@operative.tool
async def with_context(ctx: operative.ToolContext) -> str:
    """A tool that is handed the run's context (and through it, the run)."""
    return ctx.run_id


@operative.tool(needs_approval=lambda arguments: False)
async def checked(a: int) -> int:
    """A tool with a per-call approval check (which is handed a context)."""
    return a


_ARGUMENTS: dict[str, dict[str, Any]] = {"add": {"a": 1, "b": 2}, "checked": {"a": 1}}


async def one_call(request: operative.GenerateRequest) -> GenerateResponse:
    """Call the first tool offered once, then answer ``"done"``."""
    if request.step == 1:
        name = request.tools[0].name
        call = ToolCall(id="c1", name=name, arguments=_ARGUMENTS.get(name, {}))
        return GenerateResponse(tool_calls=(call,))
    return ANSWER


def history() -> Conversation:
    """A transcript of one user message."""
    conversation = Conversation()
    conversation.append_user_message("go")
    return conversation


def configure(**options: Any) -> tuple[RunConfig, Conversation]:
    """``configure_run`` with ``open_run``'s defaults (and ``one_call`` over ``add``)."""
    options.setdefault("generate", one_call)
    options.setdefault("conversation", history())
    options.setdefault("stop_when", operative.stop_when.no_tool_calls())
    options.setdefault("maximum_steps", 25)
    options.setdefault("toolbox", None)
    if options["toolbox"] is None:
        options.setdefault("tools", [add])
    else:
        options.setdefault("tools", None)
    return configure_run(**options)


def summary(result: operative.RunResult) -> tuple[Any, ...]:
    """What two runs of one script must agree on (ids and times aside)."""
    return (
        result.finish_reason,
        result.abort_reason,
        result.content,
        str(result.error) if result.error is not None else None,
        [
            (
                step.content,
                [call.name for call in step.tool_calls],
                [(outcome.outcome, outcome.value, outcome.error) for outcome in step.results],
                step.aborted,
            )
            for step in result.steps
        ],
        [(message.role, message.content) for message in result.conversation.messages],
    )
