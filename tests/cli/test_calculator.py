"""The demo calculator bounds what it computes, so no expression can stall the event loop."""

from __future__ import annotations

import time

import pytest

from operative.cli._agents import calculate, demo_agent, offline_generate


async def evaluate(expression: str) -> str:
    result: str = await calculate(expression)
    return result


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("17 * 23 + 4", "17 * 23 + 4 = 395"),
        ("9**64", f"9**64 = {9**64}"),
        ("2**64 * 2**64", f"2**64 * 2**64 = {2**128}"),
        ("2.5 ** 2", "2.5 ** 2 = 6.25"),
        ("7 // 2", "7 // 2 = 3"),
        ("-(3 - 5) % 4", "-(3 - 5) % 4 = 2"),
    ],
)
async def test_ordinary_arithmetic_still_works(expression: str, answer: str) -> None:
    assert await evaluate(expression) == answer


@pytest.mark.parametrize(
    "expression",
    [
        "(((9**64)**64)**64)**64",  # took 20 s of CPU on the event loop
        "(9**64)**64",
        "(2**64)**64 * 0",
        "10**64 * 10**64",
        "1e300 ** 2",
        "1e308 * 10",
        "9" * 150,
    ],
)
async def test_a_result_past_a_googol_is_refused_before_it_is_computed(expression: str) -> None:
    started = time.process_time()
    with pytest.raises(ValueError, match=r"larger than 10\*\*100"):
        await evaluate(expression)
    assert time.process_time() - started < 0.5


async def test_long_expressions_and_complex_results_are_refused() -> None:
    with pytest.raises(ValueError, match="longer than 200 characters"):
        await evaluate("+".join(["1"] * 150))
    with pytest.raises(ValueError, match="complex"):
        await evaluate("(-8) ** 0.5")


async def test_the_demo_agent_answers_with_an_error_result_the_model_reads() -> None:
    result = await demo_agent(offline_generate).run("what is (((9**64)**64)**64)**64")
    [outcome] = [r for step in result.steps for r in step.results]
    assert outcome.outcome == "error"
    assert outcome.error is not None
    assert "larger than 10**100" in outcome.error
    assert result.finish_reason == "stop-condition"
