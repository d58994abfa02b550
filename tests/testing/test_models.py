"""ScriptedModel and ToolCallingModel: scripted answers, faults on cue, schema-drawn calls."""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from typing import Annotated, Any, Literal, TypedDict

import msgspec
import pytest
import trio
import trio.testing

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    Tool,
    Toolbox,
    ToolContext,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative.testing import (
    HANG,
    ScriptedModel,
    ScriptExhausted,
    ToolCallingModel,
    check_run_invariants,
)


def _request(step: int = 1) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message("hi")
    return GenerateRequest(conversation=conversation.current, step=step)


async def test_scripted_model_answers_in_order_and_records_requests() -> None:
    """Items are played in order (str becomes content) and every request is kept."""
    model = ScriptedModel(["one", GenerateResponse(content="two", usage=Usage.of(1, 1))])
    first, second = await model(_request(1)), await model(_request(2))
    assert (first.content, second.content, second.usage) == ("one", "two", Usage.of(1, 1))
    assert [r.step for r in model.requests] == [1, 2]
    assert model.calls == 2
    with pytest.raises(ScriptExhausted, match="3th time"):
        await model(_request(3))
    assert "3 calls" in repr(model)


async def test_scripted_model_raises_and_hangs_on_cue(autojump_clock: Any) -> None:
    """An exception item is raised; HANG never returns until cancelled."""
    model = ScriptedModel([ValueError("nope"), HANG])
    with pytest.raises(ValueError, match="nope"):
        await model(_request())
    with trio.move_on_after(3600) as scope:
        await model(_request())
    assert scope.cancelled_caught


async def test_scripted_model_function_of_the_request() -> None:
    """A function (sync or async) computes each answer from the request, HANG included."""

    async def answer(request: GenerateRequest) -> str:
        return f"step {request.step}"

    assert (await ScriptedModel(answer)(_request(4))).content == "step 4"
    model = ScriptedModel(lambda request: GenerateResponse(content="x"))
    assert (await model(_request())).content == "x"
    with pytest.raises(InvalidArgument, match="must return"):
        await ScriptedModel(lambda request: 42)(_request())  # type: ignore[arg-type, return-value]


async def test_scripted_model_delay_is_virtual_think_time(autojump_clock: Any) -> None:
    """delay= makes each call take that long on trio's clock."""
    model = ScriptedModel(["a", "b"], delay=2.5)
    start = trio.current_time()
    await model(_request())
    await model(_request())
    assert trio.current_time() - start == pytest.approx(5.0)


def test_scripted_model_rejects_bad_arguments() -> None:
    """Bad items and delays are refused when the model is built."""
    with pytest.raises(InvalidArgument, match="script items"):
        ScriptedModel([42])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="delay"):
        ScriptedModel([], delay=-1)
    assert ScriptedModel.__test__ is False
    assert ToolCallingModel.__test__ is False


# -- ToolCallingModel ------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(msgspec.Struct):
    x: int
    y: float = 0.0


class Add(msgspec.Struct, tag="add"):
    value: int


class Remove(msgspec.Struct, tag="remove"):
    key: Annotated[str, msgspec.Meta(min_length=1)]


class Tree(msgspec.Struct):
    label: str
    children: list[Tree] = []


class Movie(TypedDict):
    title: str
    year: Annotated[int, msgspec.Meta(ge=1888, le=2100)]


@tool
async def scalars(
    count: int,
    ratio: Annotated[float, msgspec.Meta(gt=0, le=1)],
    flag: bool,
    name: Annotated[str, msgspec.Meta(min_length=2, max_length=4)],
    step: Annotated[int, msgspec.Meta(ge=-10, lt=10, multiple_of=5)],
    nothing: None = None,
) -> str:
    """Scalars with bounds."""
    return "ok"


@tool
async def shapes(
    color: Color,
    mode: Literal["fast", "slow"],
    point: Point,
    change: Add | Remove,
    tags: set[str],
    pair: tuple[int, str],
    weights: dict[str, float],
    maybe: int | None = None,
    tree: Tree | None = None,
) -> str:
    """Enums, structs, tagged unions, containers and recursion."""
    return "ok"


@tool
async def formats(
    id: uuid.UUID,
    day: datetime.date,
    amount: decimal.Decimal,
    wait: datetime.timedelta,
    blob: bytes,
    anything: Any,
    ctx: ToolContext,
) -> str:
    """String formats msgspec writes, and a context the model never sees."""
    return ctx.call_id


@tool(input_type=Movie)
def movie(value: Movie) -> str:
    """A TypedDict input, run in a thread."""
    return value["title"]


TOOLS = [scalars, shapes, formats, movie]


async def _run_all(model: ToolCallingModel, tools: list[Tool]) -> Any:
    conversation = Conversation()
    conversation.append_user_message("use every tool")
    events: list[Any] = []
    async with open_run(
        generate=model, conversation=conversation, tools=tools, stop_when=stop_when.no_tool_calls()
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events, maximum_steps=25)
    return result


@pytest.mark.parametrize("seed", range(12))
async def test_tool_calling_model_sends_valid_arguments(seed: int) -> None:
    """Every offered tool is called once with arguments its schema accepts, then it answers."""
    result = await _run_all(ToolCallingModel(seed=seed), TOOLS)
    first, last = result.steps
    assert [c.name for c in first.tool_calls] == [t.name for t in TOOLS]
    assert [r.outcome for r in first.results] == ["success"] * len(TOOLS), [
        r.error for r in first.results
    ]
    summary = msgspec.json.decode(last.content)
    assert summary == {
        "scalars": "ok",
        "shapes": "ok",
        "formats": first.results[2].value,
        "movie": first.results[3].value,
    }


async def test_tool_calling_model_is_reproducible() -> None:
    """The same seed draws the same arguments, whatever order tools come in; seeds differ."""
    specs = [t.spec for t in TOOLS]
    same = [ToolCallingModel(seed=7).arguments_for(s) for s in specs]
    again = [ToolCallingModel(seed=7).arguments_for(s) for s in reversed(specs)][::-1]
    assert same == again
    others = [ToolCallingModel(seed=8).arguments_for(s) for s in specs]
    assert same != others
    first = await _run_all(ToolCallingModel(seed=3), TOOLS)
    second = await _run_all(ToolCallingModel(seed=3), TOOLS)
    assert [c.arguments for c in first.steps[0].tool_calls] == [
        c.arguments for c in second.steps[0].tool_calls
    ]


async def test_tool_calling_model_options() -> None:
    """tools= picks which tools are called, text= the answer; no tools means an answer."""
    model = ToolCallingModel(tools=["scalars"], text="finished", usage=Usage.of(2, 3))
    result = await _run_all(model, TOOLS)
    assert [c.name for c in result.steps[0].tool_calls] == ["scalars"]
    assert result.content == "finished"
    assert result.usage == Usage.of(4, 6)
    assert len(model.requests) == 2
    alone = await _run_all(ToolCallingModel(), [])
    assert alone.content == "{}"
    with pytest.raises(InvalidArgument):
        ToolCallingModel(tools="scalars")
    with pytest.raises(InvalidArgument):
        ToolCallingModel(seed="x")  # type: ignore[arg-type]


async def test_tool_calling_model_arguments_execute_through_a_toolbox() -> None:
    """Arguments drawn for each tool validate when the toolbox executes them directly."""
    toolbox = Toolbox(TOOLS)
    for seed in range(20):
        model = ToolCallingModel(seed=seed)
        for spec in toolbox.specs():
            from operative import ToolCall

            call = ToolCall(id=f"c{seed}", name=spec.name, arguments=model.arguments_for(spec))
            outcome = await toolbox.execute(call)
            assert outcome.outcome == "success", (spec.name, outcome.error)
