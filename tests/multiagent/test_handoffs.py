"""Handoffs: the run goes on under another agent's instructions, tools and model."""

from __future__ import annotations

from typing import Any

from operative import FinishReason, Toolbox, ToolCall, create_agent, stop_when, tool
from operative.multiagent import handoff, remove_tool_messages
from operative.testing import ScriptedModel, check_run_invariants

from ._helpers import call


@tool
async def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool
async def lookup(order: str) -> str:
    """Look an order up."""
    return f"{order}: shipped"


def _agents(**triage_options: Any) -> tuple[Any, ScriptedModel, ScriptedModel]:
    billing_model = ScriptedModel([call("refund", "b1", order="42"), "Refunded order 42."])
    billing = create_agent(
        name="billing", instructions="You handle refunds.", generate=billing_model, tools=[refund]
    )
    triage_model = ScriptedModel(
        [call("lookup", "t1", order="42"), call("transfer_to_billing", "t2")]
    )
    triage = create_agent(
        name="triage",
        instructions="You route requests.",
        generate=triage_model,
        tools=[lookup, handoff(billing, **triage_options)],
    )
    return triage, triage_model, billing_model


async def test_handoff_switches_instructions_tools_and_model() -> None:
    """After the handoff step the new agent's model is asked, with its tools and
    instructions; the handoff is an event and a tool result naming the new agent."""
    triage, triage_model, billing_model = _agents()
    events: list[Any] = []
    async with triage.open_run("refund order 42") as run:
        run.add_listener("*", events.append)
        result = await run.result()
    assert result.finish_reason is FinishReason.STOP_CONDITION
    assert result.content == "Refunded order 42."
    assert triage_model.calls == 2
    assert billing_model.calls == 2
    first = billing_model.requests[0]
    assert [spec.name for spec in first.tools] == ["refund"]
    assert first.conversation.messages[-1].role == "system"
    assert first.conversation.messages[-1].content == "You handle refunds."
    handoff_message = next(m for m in result.conversation.messages if m.tool_call_id == "t2")
    assert handoff_message.outcome == "success"
    assert "billing takes over" in str(handoff_message.content)
    [event] = [e for e in events if e.type == "handoff"]
    assert (event.from_agent, event.to_agent, event.call_id, event.step) == (
        "triage",
        "billing",
        "t2",
        2,
    )
    # Events after the switch carry on the same run; tool calls run under billing's box.
    executed = [e for e in events if e.type == "tools.executed"]
    assert [r.tool_name for e in executed for r in e.results] == [
        "lookup",
        "transfer_to_billing",
        "refund",
    ]
    check_run_invariants(result, events)


async def test_the_handing_off_agents_stop_condition_does_not_end_the_run() -> None:
    """A triage agent that stops on its handoff call (as the specification advises) still
    passes the run on: the switch comes before stop conditions."""
    billing_model = ScriptedModel(["On it."])
    billing = create_agent(name="billing", generate=billing_model)
    triage = create_agent(
        name="triage",
        generate=ScriptedModel([call("transfer_to_billing", "t1")]),
        tools=[handoff(billing)],
        stop_when=stop_when.tool_called("transfer_to_billing"),
    )
    result = await triage.run("help")
    assert result.content == "On it."
    assert billing_model.calls == 1


async def test_input_filter_shapes_what_the_new_agent_sees() -> None:
    """remove_tool_messages hides the first agent's tool work from the new agent; the
    stored transcript keeps it, and the new agent's own tool loop is untouched."""
    triage, _, billing_model = _agents(input_filter=remove_tool_messages)
    result = await triage.run("refund order 42")
    assert result.content == "Refunded order 42."
    first, second = billing_model.requests
    assert [m.role for m in first.conversation.messages] == ["system", "user", "system"]
    assert [m.role for m in second.conversation.messages][-2:] == ["assistant", "tool"]
    assert any(m.tool_call_id == "t1" for m in result.conversation.messages)


async def test_second_handoff_in_a_step_and_handoff_outside_a_run_are_errors() -> None:
    """One handoff per step; with no run to switch the tool is an error result."""
    one = create_agent(name="one", generate=ScriptedModel(["from one"]))
    two = create_agent(name="two", generate=ScriptedModel(["from two"]))
    from operative import GenerateResponse

    both = GenerateResponse(
        content="",
        tool_calls=(
            ToolCall(id="h1", name="transfer_to_one", arguments={}),
            ToolCall(id="h2", name="transfer_to_two", arguments={}),
        ),
    )
    router = create_agent(
        name="router", generate=ScriptedModel([both]), tools=[handoff(one), handoff(two)]
    )
    result = await router.run("go")
    outcomes = sorted(r.outcome for r in result.steps[0].results)
    assert outcomes == ["error", "success"]
    assert result.content in ("from one", "from two")
    alone = await Toolbox([handoff(one)]).execute(
        ToolCall(id="x", name="transfer_to_one", arguments={})
    )
    assert alone.outcome == "error"
    assert "only works inside a run" in (alone.error or "")
