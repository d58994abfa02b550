"""A property test of a small agent: whatever faults hit its tools and its model, the
loop keeps its promises and the agent keeps its own.

The model is a ``ToolCallingModel`` (it calls every tool once with arguments drawn from
the tool's schema, then answers), so no API key is needed. Hypothesis draws the seed of
those arguments and two fault plans: one for the tools (failures, stalls, hangs,
timeouts, and maybe an abort), one for the model. Everything runs in virtual time.

Run it with ``python examples/property_test_agent.py``; the test suite runs it too.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import operative
from operative.retry import RetryOptions
from operative.testing import (
    FaultPlan,
    RunRecorder,
    ToolCallingModel,
    check_run_invariants,
    faulty_generate,
    faulty_tool,
)
from operative.testing.strategies import fault_plans

# -- the agent under test ---------------------------------------------------------------


@operative.tool(timeout=30)
async def forecast(city: str, days: Annotated[int, msgspec.Meta(ge=1, le=7)] = 1) -> list[str]:
    """Forecast the weather in a city for the next few days."""
    await trio.sleep(0.2)  # the weather service
    return ["sunny"] * days


@operative.tool
async def convert(celsius: float, unit: Literal["F", "K"]) -> float:
    """Convert a temperature from Celsius."""
    return celsius * 9 / 5 + 32 if unit == "F" else celsius + 273.15


MAXIMUM_STEPS = 4


def weather_agent(
    generate: operative.GenerateFunction, tools: list[operative.Tool]
) -> operative.Agent:
    """The agent: two tools, a step cap, and retries for a flaky model."""
    return operative.create_agent(
        generate=generate,
        instructions="You answer questions about the weather.",
        tools=tools,
        maximum_steps=MAXIMUM_STEPS,
        retry=RetryOptions(max_attempts=3, initial_delay=1.0, jitter=False),
        name="weather",
    )


# -- the property -----------------------------------------------------------------------

TIME_LIMIT = 3600.0
"""Virtual seconds after which the test aborts a run that still hangs."""


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 1000),
    tool_faults=fault_plans(),
    model_faults=fault_plans(actions=["fail", "delay", "timeout"], abort=False),
)
def test_weather_agent_survives_faults(
    seed: int, tool_faults: FaultPlan, model_faults: FaultPlan
) -> None:
    """The loop's invariants hold, and only a model fault can end the run in an error."""

    async def main() -> None:
        model = faulty_generate(ToolCallingModel(seed=seed), model_faults)
        tools = [faulty_tool(forecast, tool_faults), faulty_tool(convert, tool_faults)]
        recorder = RunRecorder()
        async with weather_agent(model, tools).open_run("Weather in Lisbon, in F?") as run:
            recorder.attach(run)
            with trio.move_on_after(TIME_LIMIT):
                await tool_faults.abort_when_due(run)
                await run.result()
            run.abort("the test's time limit")
        result = await run.result()

        check_run_invariants(result, recorder.events_of(run), maximum_steps=MAXIMUM_STEPS)
        # A failing, hanging or slow tool becomes a result the model reads: never an error.
        if result.finish_reason == "error":
            actions = {fault.action for fault in model_faults.faults}
            assert actions & {"fail", "timeout"}, f"a healthy model's run failed: {result.error}"
        # Every call got exactly one result, and a cut call says it was cut.
        for step in result.steps:
            for outcome in step.results:
                assert outcome.outcome in ("success", "error", "cancelled"), outcome
                if outcome.outcome == "cancelled":
                    assert result.finish_reason == "aborted"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


if __name__ == "__main__":
    test_weather_agent_survives_faults()
    print("the weather agent survives every fault plan hypothesis drew")
