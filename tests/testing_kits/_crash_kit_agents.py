"""Toy agents for the crash kit's tests: a sound one and two with seeded bugs.

The model answers as a function of the conversation (so a step asked again after a
crash is asked the same way): step 1 charges the order and looks it up, step 2 writes a
note, then it answers. The slow tools leave a window in which a kill cuts them short.
"""

from __future__ import annotations

import trio

from operative import (
    Agent,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    ToolContext,
    Usage,
    create_agent,
    tool,
)
from operative.testing.crash import effect

SLOW = 0.03


async def _model(request: GenerateRequest) -> GenerateResponse:
    messages = request.conversation.messages
    done = sum(1 for message in messages if message.role == "assistant")
    usage = Usage.of(prompt=10, completion=1)
    await trio.sleep(0.002)
    calls: tuple[ToolCall, ...]
    if done == 0:
        calls = (
            ToolCall(id="c1", name="charge", arguments={"order": "A-17"}),
            ToolCall(id="c2", name="lookup", arguments={"order": "A-17"}),
        )
        return GenerateResponse(content="charging", tool_calls=calls, usage=usage)
    if done == 1:
        calls = (ToolCall(id="c3", name="note", arguments={"text": "charged"}),)
        return GenerateResponse(content="noting", tool_calls=calls, usage=usage)
    return GenerateResponse(content="done", usage=usage)


@tool(idempotent=True)
async def lookup(order: str, context: ToolContext) -> str:
    """Look an order up (a read: repeatable)."""
    effect(f"read {context.run_id} {order}", context, repeatable=True)
    await trio.sleep(SLOW)
    return f"{order}: open"


@tool
async def note(text: str, context: ToolContext) -> str:
    """Write a note (not idempotent)."""
    effect(f"note {context.run_id}", context)
    return "noted"


def _agent(charge: object) -> Agent:
    return create_agent(generate=_model, tools=[charge, lookup, note], name="toy", maximum_steps=5)


def sound_agent() -> Agent:
    """``charge`` is not declared idempotent: a charge cut short is reported, not redone."""

    @tool
    async def charge(order: str, context: ToolContext) -> str:
        """Charge the order's card (not idempotent)."""
        effect(f"charge {context.run_id} {order}", context)
        await trio.sleep(SLOW)
        return "charged"

    return _agent(charge)


def falsely_idempotent_agent() -> Agent:
    """Bug: ``charge`` is declared idempotent, so recovery charges again."""

    @tool(idempotent=True)
    async def charge(order: str, context: ToolContext) -> str:
        """Charge the order's card (declared idempotent: wrong)."""
        effect(f"charge {context.run_id} {order}", context)
        await trio.sleep(SLOW)
        return "charged"

    return _agent(charge)


def double_writing_agent() -> Agent:
    """Bug: ``charge`` retries its own write, charging twice even without a crash."""

    @tool
    async def charge(order: str, context: ToolContext) -> str:
        """Charge the order's card (twice, by mistake)."""
        for _ in range(2):
            effect(f"charge {context.run_id} {order}", context)
        await trio.sleep(SLOW)
        return "charged"

    return _agent(charge)
