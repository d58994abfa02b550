"""Property test: the loop invariants hold when budgets, retries and backpressure cut in.

Random scripts (answers, tool calls, generate errors, hangs) run under a random budget
(tokens, requests, tool calls, duration), a retry policy and sometimes a fixed delay;
whatever ends the run, every invariant of DESIGN section 2 must hold.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import operative
from operative import Conversation, open_run, stop_when
from operative.backpressure import FixedDelay
from operative.budgets import Budget
from operative.retry import RetryOptions
from operative.testing import check_run_invariants
from operative.testing.strategies import Step, model_scripts, scripted_model, scripted_tools

budgets = st.builds(
    Budget,
    max_tokens=st.none() | st.integers(0, 30_000),
    max_requests=st.none() | st.integers(0, 6),
    max_tool_calls=st.none() | st.integers(0, 6),
    max_duration=st.none() | st.sampled_from([0.5, 2.0, 10.0, 100.0]),
)


@settings(max_examples=200, deadline=None)
@given(
    script=model_scripts(),
    budget=budgets,
    retries=st.integers(1, 3),
    delay=st.none() | st.sampled_from([0.1, 1.0]),
)
def test_invariants_hold_under_budgets_and_retries(
    script: list[Step], budget: Budget, retries: int, delay: float | None
) -> None:
    """Budgets, retries and backpressure never break an invariant."""

    async def main() -> None:
        executions: dict[str, int] = {}
        events: list[Any] = []
        conversation = Conversation()
        conversation.append_user_message("go")
        options: dict[str, Any] = {
            "budget": budget,
            "retry": RetryOptions(max_attempts=retries, initial_delay=0.5, jitter=False),
        }
        if delay is not None:
            options["backpressure"] = FixedDelay(delay)
        async with open_run(
            generate=scripted_model(script),
            conversation=conversation.current,
            tools=scripted_tools(executions),
            stop_when=stop_when.no_tool_calls(),
            maximum_steps=6,
            **options,
        ) as run:
            run.add_listener("*", events.append)
            with trio.move_on_after(1e6):
                await run.result()
            run.abort("hung")
        result = await run.result()
        check_run_invariants(result, events, maximum_steps=6, executions=executions)
        if result.finish_reason == operative.FinishReason.BUDGET_EXCEEDED:
            assert (result.abort_reason or "").startswith("budget exceeded")
            assert events[-1].type == "run.completed"
        if budget.max_tool_calls is not None:
            assert sum(executions.values()) <= budget.max_tool_calls
        if budget.max_requests is not None:
            starts = sum(1 for e in events if e.type == "generate.started")
            assert starts <= budget.max_requests

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
