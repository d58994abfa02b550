"""Streaming helpers: text deltas, merged runs, server-sent events, consumer policies."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio

from operative import Conversation, GenerateResponse, InvalidArgument, open_run, stop_when
from operative._core._events import RunCompleted, RunEvent
from operative.providers import Delta
from operative.providers.test import StreamChunk, StreamReplayer
from operative.streaming import (
    SSE_CONTENT_TYPE,
    ConsumerPolicy,
    encode_sse,
    merge_events,
    open_merged_events,
    sse_comment,
    sse_stream,
    text_deltas,
)
from operative.testing import ScriptedModel


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("hello")
    return conversation


def _streaming_model() -> StreamReplayer:
    return StreamReplayer(
        [
            StreamChunk(delta=Delta(kind="thinking", text="hmm"), gap=0.1),
            StreamChunk(delta=Delta(kind="text", text="Hel"), gap=0.1),
            StreamChunk(delta=Delta(kind="text", text="lo"), gap=0.1),
        ]
    )


async def test_text_deltas_yield_the_streamed_text(autojump_clock: Any) -> None:
    """Only text pieces, in order; the stream ends with the run."""
    async with open_run(
        generate=_streaming_model(),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        pieces = [piece async for piece in text_deltas(run)]
    assert pieces == ["Hel", "lo"]
    assert (await run.result()).content == "Hello"


async def test_text_deltas_may_include_thinking(autojump_clock: Any) -> None:
    """kinds= selects which delta kinds come through; step and attempt are kept."""
    async with (
        open_run(
            generate=_streaming_model(),
            conversation=_conversation(),
            stop_when=stop_when.no_tool_calls(),
        ) as run,
        text_deltas(run, kinds=("thinking", "text")) as deltas,
    ):
        pieces = [piece async for piece in deltas]
        assert (deltas.step, deltas.attempt, deltas.dropped) == (1, 1, 0)
    assert pieces == ["hmm", "Hel", "lo"]
    with pytest.raises(InvalidArgument, match="delta kind"):
        text_deltas(run, kinds=("audio",))


async def test_merged_events_of_many_runs(autojump_clock: Any) -> None:
    """Two runs' events arrive in one stream; it ends when both runs have ended."""
    async with (
        open_run(
            generate=ScriptedModel(["a"], delay=1),
            conversation=_conversation(),
            stop_when=stop_when.no_tool_calls(),
            run_id="run-a",
        ) as run_a,
        open_run(
            generate=ScriptedModel(["b"], delay=2),
            conversation=_conversation(),
            stop_when=stop_when.no_tool_calls(),
            run_id="run-b",
        ) as run_b,
        open_merged_events([run_a, run_b], types=["run.started", "run.completed"]) as events,
    ):
        seen = [(event.run_id, event.type) async for event in events]
    assert sorted(seen[:2]) == [("run-a", "run.started"), ("run-b", "run.started")]
    assert seen[2:] == [("run-a", "run.completed"), ("run-b", "run.completed")]
    assert events.dropped == 0


async def test_merge_events_in_the_callers_nursery(autojump_clock: Any) -> None:
    """keep_open lets runs join later; close() ends the stream once they are done."""
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        merged = merge_events(nursery, types=["run.completed"], keep_open=True)

        async def consume() -> None:
            seen.extend([event.run_id async for event in merged])

        nursery.start_soon(consume)
        for name in ("first", "second"):
            async with open_run(
                generate=ScriptedModel([name], delay=1),
                conversation=_conversation(),
                stop_when=stop_when.no_tool_calls(),
                run_id=name,
            ) as run:
                merged.add(run)
        merged.close()
    assert seen == ["first", "second"]
    with pytest.raises(InvalidArgument, match="closed to new runs"):
        merged.add(run)


async def test_leaving_a_merged_stream_early_releases_the_runs(autojump_clock: Any) -> None:
    """A consumer that stops reading never holds a blocking run back."""
    async with (
        open_run(
            generate=ScriptedModel(["x"] * 50, delay=0.01),
            conversation=_conversation(),
            maximum_steps=50,
            run_id="long",
        ) as run,
        open_merged_events([run], policy=ConsumerPolicy(capacity=1)) as events,
    ):
        async for event in events:
            if event.type == "step.completed":
                break
    assert (await run.result()).finish_reason == "maximum-steps"

    async with (
        open_run(
            generate=ScriptedModel(["x"] * 50, delay=0.01),
            conversation=_conversation(),
            maximum_steps=50,
        ) as run,
        trio.open_nursery() as nursery,
    ):
        merged = merge_events(nursery, [run], policy=ConsumerPolicy(capacity=1))
        await merged.__anext__()
        await merged.aclose()
    assert (await run.result()).finish_reason == "maximum-steps"


async def test_a_live_policy_drops_instead_of_blocking(autojump_clock: Any) -> None:
    """drop-oldest: a consumer that never reads costs the run nothing, and counts drops."""
    async with open_run(
        generate=ScriptedModel(["x"] * 20),
        conversation=_conversation(),
        maximum_steps=20,
    ) as run:
        deltas = text_deltas(run, policy=ConsumerPolicy.live(capacity=2))
        stream = run.events(capacity=2, overflow="drop-oldest")
        stream.__aiter__()
    assert (await run.result()).finish_reason == "maximum-steps"
    assert stream.dropped > 0
    assert deltas.dropped == 0  # a non-streaming model sends no deltas
    await deltas.aclose()


def test_consumer_policy_is_validated() -> None:
    """Capacity and overflow are checked when the policy is made."""
    assert ConsumerPolicy.lossless() == ConsumerPolicy()
    assert ConsumerPolicy.live(8).overflow == "drop-oldest"
    with pytest.raises(InvalidArgument, match="capacity"):
        ConsumerPolicy(capacity=0)
    with pytest.raises(InvalidArgument, match="overflow"):
        ConsumerPolicy(overflow="drop-newest")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="policy="):
        text_deltas(object(), policy="live")  # type: ignore[arg-type]


async def test_unknown_types_are_refused() -> None:
    """A misspelt event type fails when the merged stream is made."""
    async with trio.open_nursery() as nursery:
        with pytest.raises(InvalidArgument, match="unknown event type"):
            merge_events(nursery, types=["step.done"])


def _parse_sse(chunk: bytes) -> dict[str, str]:
    assert chunk.endswith(b"\n\n")
    fields: dict[str, str] = {}
    for line in chunk.decode().strip("\n").split("\n"):
        name, _, value = line.partition(": ")
        fields[name] = value
    return fields


async def test_server_sent_events_round_trip(autojump_clock: Any) -> None:
    """Each chunk names the event type, counts ids up, and decodes back to the event."""
    decoder = msgspec.json.Decoder(RunEvent)
    async with open_run(
        generate=ScriptedModel([GenerateResponse(content="line one\nline two")]),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        chunks = [chunk async for chunk in sse_stream(run.events())]
    fields = [_parse_sse(chunk) for chunk in chunks]
    assert fields[0]["event"] == "run.started"
    assert fields[-1]["event"] == "run.completed"
    assert [f["id"] for f in fields] == [str(n) for n in range(1, len(fields) + 1)]
    final = decoder.decode(fields[-1]["data"])
    assert isinstance(final, RunCompleted)
    assert final.content == "line one\nline two"
    assert SSE_CONTENT_TYPE == "text/event-stream"


def test_sse_encoding_details() -> None:
    """Unencodable values become their repr; comments and ids are well formed."""
    from operative._core._events import ToolResultValidated
    from operative._core._types import ToolResult

    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    event = ToolResultValidated(
        run_id="r",
        step=1,
        result=ToolResult(call_id="c", tool_name="t", outcome="success", value=Opaque()),
    )
    fields = _parse_sse(encode_sse(event, id="7"))
    assert fields["id"] == "7"
    assert json.loads(fields["data"])["result"]["value"] == "<opaque>"
    assert sse_comment() == b": keep-alive\n\n"
    assert sse_comment("a\nb") == b": a\n: b\n\n"
    with pytest.raises(InvalidArgument, match="line break"):
        encode_sse(event, id="1\n2")
    with pytest.raises(InvalidArgument, match="async iterator"):
        sse_stream([event])


async def test_sse_stream_closes_its_source(autojump_clock: Any) -> None:
    """Leaving an SSE stream early lets go of the run."""
    async with (
        open_run(
            generate=ScriptedModel(["x"] * 30),
            conversation=_conversation(),
            maximum_steps=30,
        ) as run,
        sse_stream(run.events(capacity=1)) as chunks,
    ):
        async for _ in chunks:
            break
    assert (await run.result()).finish_reason == "maximum-steps"


# -- backpressure for streamed deltas -----------------------------------------------------


def _many_pieces(count: int) -> StreamReplayer:
    """A fast stream: ``count`` text pieces with no gap, then a thinking piece."""
    chunks = [StreamChunk(delta=Delta(kind="text", text=f"{i},")) for i in range(count)]
    chunks.append(StreamChunk(delta=Delta(kind="thinking", text="done")))
    return StreamReplayer(chunks)


async def test_a_slow_consumer_of_a_block_stream_never_has_more_than_capacity_buffered(
    autojump_clock: Any,
) -> None:
    """20,000 deltas, a consumer that takes a second each: the buffer stays within its
    capacity, nothing is lost or reordered, and the run waits for the consumer."""
    count = 20_000
    seen: list[Any] = []
    buffered: list[int] = []
    listened: list[str] = []
    async with open_run(
        generate=_many_pieces(count),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("generate.delta", lambda event: listened.append(event.text))
        stream = run.events("generate.delta", "generate.completed", capacity=64)
        async for event in stream:
            buffered.append(stream.statistics()["buffered"] + 1)  # +1: this one
            seen.append(event)
            await trio.sleep(1)
    assert max(buffered) <= 64
    assert stream.statistics() == {"buffered": 0, "capacity": 64, "dropped": 0}
    deltas = [e for e in seen if e.type == "generate.delta"]
    text = "".join(e.text for e in deltas if e.kind == "text")
    assert text == "".join(f"{i}," for i in range(count))
    assert [e.text for e in deltas if e.kind == "thinking"] == ["done"]
    assert deltas[-1].kind == "thinking"
    assert seen[-1].type == "generate.completed"  # held-back deltas came first
    assert len(deltas) <= 2 * 64  # what did not fit was merged, not buffered
    assert len(listened) == count + 1  # listeners still see every piece
    assert (await run.result()).content == text


async def test_held_back_deltas_make_the_run_wait_for_the_consumer(autojump_clock: Any) -> None:
    """The step completes only once the consumer is within ``capacity`` of the end."""
    consumed = 0
    at_completion: list[int] = []
    async with open_run(
        generate=_many_pieces(500),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        run.add_listener("step.completed", lambda event: at_completion.append(consumed))
        async for _ in run.events("generate.delta", capacity=4):
            consumed += 1
            await trio.sleep(1)
    [consumed_then] = at_completion
    assert consumed_then >= consumed - 4
    assert consumed > 4


async def test_a_drop_oldest_stream_still_drops_deltas(autojump_clock: Any) -> None:
    """A live consumer never holds the run back: it misses deltas instead."""
    async with open_run(
        generate=_many_pieces(1_000),
        conversation=_conversation(),
        stop_when=stop_when.no_tool_calls(),
    ) as run:
        stream = run.events("generate.delta", capacity=8, overflow="drop-oldest")
        stream.__aiter__()
        start = trio.current_time()
    assert trio.current_time() == start
    assert stream.dropped == 1_001 - 8
    assert stream.statistics()["buffered"] == 8


async def test_deltas_of_a_failed_attempt_come_before_its_error(autojump_clock: Any) -> None:
    """A call that fails mid-stream still hands over what streamed, then the error."""
    chunks = [StreamChunk(delta=Delta(kind="text", text=f"{i}")) for i in range(50)]
    replayer = StreamReplayer(chunks, error=RuntimeError("cut"))
    seen: list[str] = []
    async with open_run(generate=replayer, conversation=_conversation()) as run:
        async for event in run.events("generate.delta", "generate.error", capacity=4):
            seen.append(event.type)
            await trio.sleep(1)
    assert seen[-1] == "generate.error"
    assert set(seen[:-1]) == {"generate.delta"}
    assert (await run.result()).finish_reason == "error"
