"""operative's quick start: an echo agent, then an agent that uses a tool.

Runs offline: both models are scripted stand-ins (labelled as such), so no API key is
needed. Swap ``generate=`` for a real provider to talk to a model.

    python examples/quickstart.py
"""

from __future__ import annotations

import trio

from operative import (
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    Usage,
    create_agent,
    tool,
)


async def echo(request: GenerateRequest) -> GenerateResponse:
    """A stand-in model that echoes the last message (swap in a real provider)."""
    last = request.conversation.messages[-1]
    return GenerateResponse(content=f"Echo: {last.text}")


@tool
async def get_weather(city: str, days: int = 1) -> dict[str, object]:
    """Forecast for a city, for the next few days."""
    await trio.sleep(0.01)  # stands in for a call to a weather API
    return {"city": city, "days": days, "forecast": "sunny", "high_c": 24}


async def scripted_weather_model(request: GenerateRequest) -> GenerateResponse:
    """A stand-in model (scripted, offline): asks for the weather, then answers."""
    last = request.conversation.messages[-1]
    if last.role == "user":
        return GenerateResponse(
            tool_calls=(ToolCall(id="call-1", name="get_weather", arguments={"city": "Oslo"}),),
            usage=Usage.of(prompt=42, completion=12),
        )
    return GenerateResponse(
        content=f"The forecast from the tool: {last.text}",
        usage=Usage.of(prompt=71, completion=18),
    )


async def main() -> None:
    # 1. The specification's quick start: an agent with an echoing model.
    assistant = create_agent(generate=echo, instructions="You are a helpful assistant.")
    result = await assistant.run("Hello, agent!")
    print(result.content)  # Echo: Hello, agent!
    print(result.finish_reason)  # stop-condition

    # 2. An agent with a tool; print every event of the run as it happens.
    forecaster = create_agent(
        generate=scripted_weather_model, tools=[get_weather], name="forecaster"
    )
    async with forecaster.open_run("What's the weather in Oslo?") as run:
        async for event in run.events():
            print(f"  [{event.type}] step={event.step}")
    result = await run.result()
    print(result.content)
    print(f"{len(result.steps)} steps, {result.usage.total} tokens, {result.finish_reason}")


if __name__ == "__main__":
    trio.run(main)
