"""operative.providers.test: MockProvider, provider_error, StreamRecorder/StreamReplayer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import trio
import trio.testing
from _doubles import get_weather

from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    create_agent,
)
from operative.errors import InvalidResponseError
from operative.providers import (
    Delta,
    ProviderAuthenticationError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderUnavailableError,
)
from operative.providers.test import (
    MockProvider,
    StreamChunk,
    StreamRecorder,
    StreamReplayer,
    provider_error,
)
from operative.retry import RetryOptions


def request_of(text: str = "hi", **kw: object) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current, **kw)  # type: ignore[arg-type]


async def test_a_sync_handler_answers_and_requests_are_recorded() -> None:
    generate = MockProvider(lambda request: f"echo {request.step}")
    first = await generate(request_of(step=1))
    second = await generate(request_of(step=2))
    assert (first.content, second.content) == ("echo 1", "echo 2")
    assert [r.step for r in generate.requests] == [1, 2]
    assert generate.calls == 2


async def test_an_async_handler_can_take_virtual_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def handler(request: GenerateRequest) -> GenerateResponse:
        await trio.sleep(3)
        return GenerateResponse(content="late", model="m")

    start = trio.current_time()
    response = await MockProvider(handler)(request_of())
    assert response.content == "late"
    assert trio.current_time() - start == 3


async def test_an_exception_returned_by_the_handler_is_raised() -> None:
    generate = MockProvider(lambda request: provider_error(529, "overloaded"))
    with pytest.raises(ProviderUnavailableError, match="overloaded") as caught:
        await generate(request_of())
    assert caught.value.retryable
    assert caught.value.status == 529


async def test_a_handler_returning_junk_is_an_invalid_response() -> None:
    generate = MockProvider(lambda request: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(InvalidResponseError, match="returned int"):
        await generate(request_of())


async def test_a_cancelled_call_is_recorded(autojump_clock: trio.testing.MockClock) -> None:
    async def handler(request: GenerateRequest) -> str:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    generate = MockProvider(handler)
    with trio.move_on_after(1):
        await generate(request_of())
    assert len(generate.cancelled) == 1


def test_provider_error_maps_statuses_like_the_adapters() -> None:
    assert isinstance(provider_error(429, retry_after=2), ProviderRateLimitError)
    assert provider_error(429, retry_after=2).retry_after == 2
    assert isinstance(provider_error(401), ProviderAuthenticationError)
    assert isinstance(provider_error(400), ProviderRequestError)
    assert not provider_error(400).retryable
    with pytest.raises(InvalidArgument):
        provider_error(200)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(InvalidArgument):
        MockProvider("not a handler")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        StreamReplayer([StreamChunk(delta=Delta(kind="text", text="x"), gap=-1)])
    with pytest.raises(InvalidArgument):
        StreamReplayer(["text"])  # type: ignore[list-item]


async def test_mock_provider_drives_an_agent_through_a_tool_round_trip() -> None:
    def handler(request: GenerateRequest) -> GenerateResponse | str:
        if request.step == 1:
            call = ToolCall(id="c1", name="get_weather", arguments={"city": "Oslo"})
            return GenerateResponse(tool_calls=(call,))
        return f"It is {request.conversation.messages[-1].content}."

    generate = MockProvider(handler)
    agent = create_agent(generate=generate, tools=[get_weather], retry=RetryOptions(max_attempts=1))
    result = await agent.run("Weather in Oslo?")
    assert result.content == "It is sunny in Oslo."
    assert [r.tools[0].name for r in generate.requests] == ["get_weather", "get_weather"]


RECORDED = [
    StreamChunk(delta=Delta(kind="text", text="Let me "), gap=0.0),
    StreamChunk(delta=Delta(kind="text", text="look."), gap=0.25),
    StreamChunk(
        delta=Delta(kind="tool_arguments", text='{"ci', index=1, call_id="c1", tool_name="w"),
        gap=0.5,
    ),
    StreamChunk(delta=Delta(kind="tool_arguments", text='ty": "Oslo"}', index=1), gap=0.25),
]


async def test_the_replayer_keeps_the_recorded_gaps_and_assembles_the_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[tuple[float, Delta]] = []
    start = trio.current_time()
    replayer = StreamReplayer(
        RECORDED,
        on_delta=lambda d: seen.append((trio.current_time() - start, d)),
        stop_reason="tool_use",
    )
    response = await replayer(request_of())
    assert [t for t, _ in seen] == [0.0, 0.25, 0.75, 1.0]
    assert [d for _, d in seen] == [c.delta for c in RECORDED]
    assert response.content == "Let me look."
    assert response.tool_calls == (ToolCall(id="c1", name="w", arguments={"city": "Oslo"}),)
    assert response.stop_reason == "tool_use"


async def test_a_replayed_stream_can_be_cut_off(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[Delta] = []
    replayer = StreamReplayer(RECORDED[:2], error=ConnectionError("cut"))
    with pytest.raises(ConnectionError, match="cut"):
        await replayer.replay(seen.append)
    assert [d.text for d in seen] == ["Let me ", "look."]


async def test_recorded_chunks_round_trip_through_json_and_replay_identically(
    autojump_clock: trio.testing.MockClock,
) -> None:
    recorder = StreamRecorder()
    await StreamReplayer(RECORDED, on_delta=recorder).replay()
    assert recorder.chunks == RECORDED
    stored = msgspec.json.encode(recorder.chunks)
    loaded = msgspec.json.decode(stored, type=list[StreamChunk])
    assert loaded == RECORDED


async def test_the_replayer_is_a_generate_function_for_an_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    texts: list[str] = []
    replayer = StreamReplayer(
        [Delta(kind="text", text="Hel"), Delta(kind="text", text="lo")],
        on_delta=lambda d: texts.append(d.text),
    )
    result = await create_agent(generate=replayer).run("hi")
    assert result.content == "Hello"
    assert texts == ["Hel", "lo"]
    assert len(replayer.requests) == 1


PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def _offline_samples() -> list[str]:
    text = PAGE.read_text()
    text = text[text.index("## Fallover") : text.index("## Streamed deltas")]
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize("index", range(len(_offline_samples())))
def test_the_offline_docs_samples_print_what_their_comments_say(index: int) -> None:
    """Each sample in the fallover, routing and testing sections runs and prints the
    values its ``print(...)  # value`` comments promise."""
    sample = _offline_samples()[index]
    done = subprocess.run(
        [sys.executable, "-c", sample], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    expected = re.findall(r"^\s*print\(.*\)  # (.*)$", sample, flags=re.MULTILINE)
    assert expected
    assert done.stdout.splitlines() == expected
