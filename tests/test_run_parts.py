"""An ``ActiveRun`` is composed of parts that never keep the run handle: a run that has
ended is freed by reference counting, without waiting for the cycle collector (what
keeps memory per in-flight run flat when thousands of runs come and go)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import operative
import operative.budgets
import operative.retry
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative._core import (
    _final_answer,
    _generate_phase,
    _run,
    _run_scope,
    _run_state,
    _step,
    _tool_phase,
)
from operative.budgets._extension import BudgetExtension

_PARTS = (
    _run.ActiveRun,
    _run_state.RunState,
    _run_scope.RunScope,
    BudgetExtension,
    _final_answer.FinalAnswer,
    _generate_phase.GeneratePhase,
    _tool_phase.ToolPhase,
    _step.StepLoop,
)


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"budget": operative.budgets.Budget(max_tokens=10**9, max_tool_calls=100)},
        {"retry": operative.retry.RetryOptions()},
    ],
    ids=["plain", "budget", "retry"],
)
async def test_an_ended_run_leaves_no_reference_cycle(options: dict[str, Any]) -> None:
    script = [
        GenerateResponse(
            tool_calls=(ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 2}'),),
            usage=Usage(prompt=3, completion=1, total=4),
        ),
        GenerateResponse(content="3", usage=Usage(prompt=5, completion=1, total=6)),
    ]

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    conversation = Conversation()
    conversation.append_user_message("1 + 2?")
    seen: list[str] = []
    gc.collect()
    gc.disable()  # whatever the run leaves in cycles stays for the check below
    try:
        async with open_run(
            generate=generate,
            conversation=conversation,
            tools=[add],
            stop_when=stop_when.no_tool_calls(),
            **options,
        ) as run:
            run.add_listener("*", lambda event: seen.append(event.type))
        result = await run.result()
        assert result.content == "3"
        assert "run.completed" in seen
        del run, result
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        parts = [type(obj).__name__ for obj in gc.garbage if isinstance(obj, _PARTS)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not parts, f"parts of an ended run were left in reference cycles: {parts}"
