"""Structured output: the final answer must decode into a type, with retries.

Run it with ``python examples/structured_output.py``. It needs no API key: the model is
a SCRIPTED MODEL that first answers with the wrong shape, reads the loop's correction
and then answers with valid JSON.
"""

from __future__ import annotations

import msgspec
import trio

from operative import GenerateRequest, create_agent
from operative.testing import ScriptedModel


class Forecast(msgspec.Struct):
    city: str
    high_c: int
    summary: str


def scripted_answer(request: GenerateRequest) -> str:
    """SCRIPTED MODEL: wrong on the first try, right after the correction."""
    if request.step == 1:
        assert request.output_schema is not None  # providers pass this to the model
        return '{"city": "Lisbon", "high_c": "warm"}'
    return '```json\n{"city": "Lisbon", "high_c": 24, "summary": "Sunny"}\n```'


async def main() -> None:
    agent = create_agent(
        generate=ScriptedModel(scripted_answer),
        instructions="Answer with JSON only.",
        output=Forecast,
        schema_retries=2,
    )
    async with agent.open_run("What's the weather in Lisbon tomorrow?") as run:
        forecast = await run.output()  # raises OutputValidationError if it never fits
    result = await run.result()
    assert result.schema_validation is not None
    print(f"correction sent: {result.conversation.messages[-2].text}")
    print(f"attempts: {result.schema_validation.attempts}")
    print(f"output: {forecast!r}")


if __name__ == "__main__":
    trio.run(main)
