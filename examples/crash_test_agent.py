"""Crash-test an agent: kill the processes running it, recover its runs, check the effects.

The agent books a trip: it reserves a seat (not idempotent: a second reservation is a
second seat) and reads the fare (a read: repeatable), then answers. Its model is a
function of the conversation, so a step asked again after a crash is asked the same
way, and no API key is needed. The tools record their side effects with ``effect``.

Run it with ``python examples/crash_test_agent.py``; the test suite runs it too. In a
project, the last lines are a pytest test: ``crash_test("myapp.agents:make_agent")``.
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
from operative.testing.crash import crash_test, effect


async def plan_trip(request: GenerateRequest) -> GenerateResponse:
    """Step 1: reserve a seat and read the fare; step 2: answer."""
    asked = sum(1 for message in request.conversation.messages if message.role == "assistant")
    usage = Usage.of(prompt=20, completion=5)
    if asked == 0:
        calls = (
            ToolCall(id="reserve-1", name="reserve_seat", arguments={"flight": "TP 1234"}),
            ToolCall(id="fare-1", name="read_fare", arguments={"flight": "TP 1234"}),
        )
        return GenerateResponse(content="Booking.", tool_calls=calls, usage=usage)
    return GenerateResponse(content="Your seat on TP 1234 is reserved.", usage=usage)


@tool
async def reserve_seat(flight: str, context: ToolContext) -> str:
    """Reserve a seat (not idempotent: each call books one more seat)."""
    effect(f"seat for {context.run_id} on {flight}", context)
    await trio.sleep(0.02)  # the booking system answers
    return "seat 12A"


@tool(idempotent=True)
async def read_fare(flight: str, context: ToolContext) -> str:
    """Read the fare (a read: running it again is harmless)."""
    effect(f"fare of {flight}", context, repeatable=True)
    await trio.sleep(0.02)
    return "EUR 120"


def make_agent() -> Agent:
    """The agent under test: the crash kit's worker processes import and call this."""
    return create_agent(generate=plan_trip, tools=[reserve_seat, read_fare], name="trips")


if __name__ == "__main__":
    report = crash_test(make_agent, runs=10, kills=4, aborts=10, seed=2)
    print(report)
