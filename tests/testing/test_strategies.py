"""Every strategy of operative.testing.strategies produces values the runtime accepts.

Invalid tool calls are the exception: the toolbox rejects each with an ``error`` result
that says what is wrong, never an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import msgspec
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from operative import (
    Conversation,
    ConversationHistory,
    GenerateResponse,
    Message,
    Toolbox,
    ToolCall,
    Usage,
    decode,
    encode,
    open_run,
    stop_when,
    tool,
)
from operative.conversation import find_dangling_tool_calls
from operative.testing import (
    FaultPlan,
    ScriptedModel,
    ToolCallingModel,
    check_run_invariants,
    faulty_generate,
    faulty_tool,
)
from operative.testing.strategies import (
    fault_plans,
    histories,
    json_values,
    messages,
    tool_calls,
    usages,
)

FAST = settings(max_examples=25, deadline=None)


def run_trio(main: Callable[[], Awaitable[None]]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class Address(msgspec.Struct):
    street: str
    number: Annotated[int, msgspec.Meta(ge=1)]


@tool
async def book(
    guests: Annotated[int, msgspec.Meta(ge=1, le=12)],
    kind: Literal["lunch", "dinner"],
    address: Address,
    notes: list[str] = [],  # noqa: B006 - a tool default, never mutated
    vip: bool = False,
) -> str:
    """Book a table."""
    return f"booked for {guests}"


@tool
async def search(query: str, limit: int | None = None) -> list[str]:
    """Search for something."""
    return [query] * (limit or 1)


TOOLBOX = Toolbox([book, search])


def user(text: str) -> Conversation:
    conversation = Conversation()
    conversation.append_user_message(text)
    return conversation


async def answered_run(conversation: Any) -> None:
    """One scripted answer over ``conversation``; the invariants must hold."""
    events: list[Any] = []
    async with open_run(
        generate=ScriptedModel(["ok"]),
        conversation=conversation,
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events)
    assert result.content == "ok"


@FAST
@given(message=messages(tool_calls=True))
def test_messages_are_accepted(message: Message) -> None:
    """A drawn message round-trips the codec and starts a run (dangling calls repaired)."""
    assert decode(encode(message), Message) == message
    run_trio(lambda: answered_run(ConversationHistory(messages=(message,))))


@FAST
@given(history=histories(complete=True))
def test_complete_histories_run_unchanged(history: ConversationHistory) -> None:
    """A complete history has no dangling call, starts a run and is never mutated."""
    assert find_dangling_tool_calls(history) == ()
    before = history.messages

    async def main() -> None:
        await answered_run(history)

    run_trio(main)
    assert history.messages is before


@FAST
@given(history=histories(complete=False))
def test_incomplete_histories_are_repaired(history: ConversationHistory) -> None:
    """A history with dangling calls still runs: the run answers them first."""
    run_trio(lambda: answered_run(Conversation.from_history(history)))


@FAST
@given(value=json_values(), usage=usages())
def test_json_values_and_usages(value: Any, usage: Usage) -> None:
    """JSON values encode; usages have total == prompt + completion."""
    msgspec.json.encode(value)
    assert usage.total == usage.prompt + usage.completion


@FAST
@given(data=st.data())
def test_valid_tool_calls_succeed(data: st.DataObject) -> None:
    """A call drawn valid against a tool's schema executes successfully."""
    target = data.draw(st.sampled_from([book, search]))
    call = data.draw(tool_calls(target))

    async def main() -> None:
        result = await TOOLBOX.execute(call)
        assert result.outcome == "success", result.error

    run_trio(main)


@FAST
@given(data=st.data())
def test_invalid_tool_calls_get_an_error_result(data: st.DataObject) -> None:
    """A call drawn invalid is answered with an error result naming the problem."""
    target = data.draw(st.sampled_from([book, search]))
    call = data.draw(tool_calls(target.spec, valid=False))

    async def main() -> None:
        result = await TOOLBOX.execute(call)
        assert result.outcome == "error"
        assert "Invalid arguments" in (result.error or "") or "not valid JSON" in (
            result.error or ""
        ), result.error

    run_trio(main)


@FAST
@given(call=tool_calls({"type": "object", "properties": {"x": {"type": "integer"}}}, name="t"))
def test_tool_calls_from_a_bare_schema(call: ToolCall) -> None:
    """A plain schema mapping works too; arguments are a mapping or its JSON text."""
    assert call.name == "t"
    arguments = (
        msgspec.json.decode(call.arguments) if isinstance(call.arguments, str) else (call.arguments)
    )
    assert set(arguments) <= {"x"}


@settings(max_examples=40, deadline=None)
@given(tool_plan=fault_plans(call_ids=["call_1_0_book"]), model_plan=fault_plans(abort=False))
def test_fault_plans_drive_faulty_wrappers(tool_plan: FaultPlan, model_plan: FaultPlan) -> None:
    """Whatever a plan injects, a bounded run ends and every invariant holds."""

    async def main() -> None:
        generate = faulty_generate(ToolCallingModel(seed=1), model_plan)
        tools = [faulty_tool(book, tool_plan), faulty_tool(search, tool_plan)]
        events: list[Any] = []
        async with open_run(
            generate=generate,
            conversation=user("go"),
            tools=tools,
            stop_when=stop_when.no_tool_calls(),
            maximum_steps=4,
        ) as run:
            run.add_listener("*", events.append)
            with trio.move_on_after(3600):  # a plan may hang forever without an abort
                await tool_plan.abort_when_due(run)
                await run.result()
            run.abort("bounded")
        result = await run.result()
        check_run_invariants(result, events, maximum_steps=4)

    run_trio(main)


def test_a_response_with_drawn_calls_runs() -> None:
    """Calls drawn from tool_calls() can be scripted into a whole run."""

    @FAST
    @given(calls=st.lists(tool_calls(search), min_size=1, max_size=3))
    def check(calls: list[ToolCall]) -> None:
        model = ScriptedModel([GenerateResponse(tool_calls=tuple(calls)), "done"])

        async def main() -> None:
            events: list[Any] = []
            async with open_run(
                generate=model,
                conversation=user("go"),
                tools=[search],
                stop_when=stop_when.no_tool_calls(),
            ) as run:
                run.add_listener("*", events.append)
            result = await run.result()
            check_run_invariants(result, events)
            assert all(r.outcome == "success" for r in result.steps[0].results)

        run_trio(main)

    check()
