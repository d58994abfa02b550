"""``on_approval`` is asked about a step's parked calls one at a time, unless the run
says ``concurrent_approvals=True``."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _doubles import calls_then

from operative import ToolCall, create_agent
from operative._core._errors import InvalidArgument
from operative._core._types import PendingApproval
from operative.testing import ScriptedModel
from operative.tools import tool


@tool(version="1", needs_approval=True)
async def delete_file(path: str) -> str:
    """Delete one file."""
    return f"deleted {path}"


def _model() -> ScriptedModel:
    calls = tuple(
        ToolCall(id=f"c{i}", name="delete_file", arguments={"path": f"/{i}"}) for i in range(3)
    )
    return calls_then(*calls)


class Prompt:
    """A person at a terminal: each question takes a second to answer."""

    def __init__(self) -> None:
        self.open = 0
        self.most_open = 0
        self.asked: list[str] = []

    async def __call__(self, pending: PendingApproval) -> bool:
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        self.asked.append(pending.call_id)
        try:
            await trio.sleep(1)
        finally:
            self.open -= 1
        return True


async def test_one_prompt_at_a_time_by_default(autojump_clock: trio.testing.MockClock) -> None:
    """Three parallel calls wait for approval: the handler is asked about one, then the
    next; every call runs once approved."""
    prompt = Prompt()
    agent = create_agent(generate=_model(), tools=[delete_file], on_approval=prompt)
    start = trio.current_time()
    result = await agent.run("tidy up")
    assert prompt.most_open == 1
    assert sorted(prompt.asked) == ["c0", "c1", "c2"]
    assert trio.current_time() - start == pytest.approx(3)
    assert [r.outcome for r in result.steps[0].results] == ["success"] * 3


async def test_concurrent_approvals_asks_about_every_call_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``concurrent_approvals=True``: the handler is asked about every parked call at
    once (a handler that shows them all together, or decides without a person)."""
    prompt = Prompt()
    agent = create_agent(
        generate=_model(), tools=[delete_file], on_approval=prompt, concurrent_approvals=True
    )
    start = trio.current_time()
    result = await agent.run("tidy up")
    assert prompt.most_open == 3
    assert trio.current_time() - start == pytest.approx(1)
    assert [r.outcome for r in result.steps[0].results] == ["success"] * 3


async def test_waiting_for_the_prompt_counts_toward_the_approval_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A call queued behind another's prompt is still waiting for approval: with
    ``approval_timeout=1.5`` the call asked first is approved and the others are denied."""
    prompt = Prompt()
    agent = create_agent(
        generate=_model(), tools=[delete_file], on_approval=prompt, approval_timeout=1.5
    )
    result = await agent.run("tidy up")
    outcomes = {r.call_id: r.outcome for r in result.steps[0].results}
    assert outcomes[prompt.asked[0]] == "success"
    assert sorted(outcomes.values()) == ["denied", "denied", "success"]


@pytest.mark.parametrize("value", [1, "yes", None])
def test_concurrent_approvals_takes_a_bool(value: Any) -> None:
    with pytest.raises(InvalidArgument, match="concurrent_approvals= takes True or False"):
        create_agent(generate=_model(), tools=[delete_file], concurrent_approvals=value)
