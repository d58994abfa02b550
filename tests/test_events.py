"""Event delivery: listeners, bounded streams, backpressure, drop-oldest, early exit."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio

import operative
from operative import Conversation, GenerateResponse, ToolCall, open_run, stop_when, tool
from operative._core._events import RunEvent
from operative.testing import ScriptedModel


@tool
async def ping() -> str:
    """Answer pong."""
    return "pong"


def _model(steps: int) -> ScriptedModel:
    def respond(request: operative.GenerateRequest) -> GenerateResponse:
        if request.step < steps:
            return GenerateResponse(
                tool_calls=(ToolCall(id=f"c{request.step}", name="ping", arguments={}),)
            )
        return GenerateResponse(content="done")

    return ScriptedModel(respond)


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("go")
    return conversation


def _run(steps: int = 3) -> Any:
    return open_run(
        generate=_model(steps),
        conversation=_conversation(),
        tools=[ping],
        stop_when=stop_when.no_tool_calls(),
    )


async def test_stream_sees_every_event_in_order_and_ends() -> None:
    """events() yields the same events as a '*' listener, then ends after the terminal one."""
    heard: list[Any] = []
    async with _run() as run:
        run.add_listener("*", heard.append)
        streamed = [event async for event in run.events()]
    assert streamed == heard
    assert streamed[0].type == "run.started"
    assert streamed[-1].type == "run.completed"


async def test_stream_filters_by_type() -> None:
    """events(*types) yields only those types."""
    async with _run() as run:
        seen = [event.type async for event in run.events("step.completed", "run.completed")]
    assert seen == ["step.completed"] * 3 + ["run.completed"]


async def test_slow_consumer_applies_backpressure(autojump_clock: Any) -> None:
    """With capacity 1 the run waits for the consumer and nothing is lost."""
    async with _run(steps=4) as run:
        seen: list[str] = []
        async for event in run.events(capacity=1):
            await trio.sleep(1)
            seen.append(event.type)
            if event.type == "step.started" and event.step == 1:
                # The run cannot be more than one event ahead of this consumer.
                assert run.snapshot().step == 1
    assert seen.count("step.completed") == 4
    assert seen[-1] == "run.completed"


async def test_drop_oldest_never_blocks_and_counts_drops() -> None:
    """overflow='drop-oldest' keeps the newest events and counts what it dropped."""
    async with _run(steps=5) as run:
        stream = run.events(capacity=2, overflow="drop-oldest")
        async with stream:
            result = await run.result()
            leftover = [event async for event in stream]
    assert result.finish_reason == "stop-condition"
    assert len(leftover) == 2
    assert leftover[-1].type == "run.completed"
    assert stream.dropped > 0


async def test_leaving_a_stream_early_does_not_hold_the_run() -> None:
    """Breaking out of an event loop lets the run finish (the stream lets go)."""
    async with _run(steps=10) as run:
        async for event in run.events(capacity=1):
            if event.type == "step.started":
                break
    result = await run.result()
    assert result.finish_reason == "stop-condition"
    assert len(result.steps) == 10


async def test_aclose_detaches_a_stream() -> None:
    """aclose() detaches the stream; the run no longer waits for it."""
    async with _run(steps=5) as run:
        stream = run.events(capacity=1)
        async with stream:
            await stream.__anext__()
        result = await run.result()
    assert len(result.steps) == 5


async def test_complete_ends_streams_but_not_the_run() -> None:
    """complete() ends every stream; the run carries on to its own end."""
    async with _run(steps=3) as run:
        seen = []
        async for event in run.events():
            seen.append(event.type)
            if event.type == "step.completed":
                run.complete()
        result = await run.result()
    assert result.finish_reason == "stop-condition"
    assert len(result.steps) == 3
    assert "run.completed" not in seen


async def test_stream_after_the_run_ended_is_empty() -> None:
    """A stream opened after the run ended ends at once."""
    async with _run(steps=1) as run:
        pass
    assert [event async for event in run.events()] == []


async def test_remover_detaches_a_listener() -> None:
    """The function add_listener returns removes that listener."""
    heard: list[str] = []
    async with _run(steps=3) as run:
        remove = run.add_listener("step.completed", lambda event: heard.append(event.type))
        run.add_listener("step.completed", lambda event: remove() if event.step == 1 else None)
    assert heard == ["step.completed"]


async def test_unknown_event_types_are_rejected() -> None:
    """A typo in an event type fails loudly instead of never firing."""
    async with _run(steps=1) as run:
        with pytest.raises(operative.InvalidArgument, match="unknown event type"):
            run.add_listener("step.complete", print)
        with pytest.raises(operative.InvalidArgument, match="unknown event type"):
            run.events("run.finished")
        with pytest.raises(operative.InvalidArgument, match="capacity"):
            run.events(capacity=0)


async def test_events_are_records_that_round_trip() -> None:
    """Every event encodes to JSON with its type tag and decodes in one pass."""
    heard: list[Any] = []
    async with _run(steps=2) as run:
        run.add_listener("*", heard.append)
    for event in heard:
        data = msgspec.json.encode(event)
        assert msgspec.json.decode(data)["type"] == event.type
        assert msgspec.json.decode(data, type=RunEvent) == event
        assert event.run_id == run.run_id


async def test_event_times_are_monotonic(autojump_clock: Any) -> None:
    """Event times come from trio's clock and never go backwards."""
    heard: list[Any] = []
    async with _run(steps=3) as run:
        run.add_listener("*", heard.append)
    times = [event.time for event in heard]
    assert times == sorted(times)


async def test_streamed_deltas_become_generate_delta_events(autojump_clock: Any) -> None:
    """A streaming model's deltas reach run listeners as generate.delta, in order."""
    from operative.providers import Delta
    from operative.providers.test import StreamChunk, StreamReplayer

    model = StreamReplayer(
        [
            StreamChunk(delta=Delta(kind="text", text="Hel"), gap=0.1),
            StreamChunk(delta=Delta(kind="text", text="lo"), gap=0.1),
        ]
    )
    async with open_run(
        generate=model, conversation=_conversation(), stop_when=stop_when.no_tool_calls()
    ) as run:
        deltas: list[str] = []
        types: list[str] = []
        run.add_listener("generate.delta", lambda event: deltas.append(event.text))
        run.add_listener("*", lambda event: types.append(event.type))
    result = await run.result()
    assert result.content == "Hello"
    assert deltas == ["Hel", "lo"]
    assert types.index("generate.started") < types.index("generate.delta")
    assert types.index("generate.delta") < types.index("generate.completed")
