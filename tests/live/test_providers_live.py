"""One small real round trip per provider: a text answer, a tool call, a stream.

Selected with ``-m live`` or ``OPERATIVE_LIVE=1`` (see ``conftest.py``). Each provider
runs when its key or server is configured, and is skipped with the reason otherwise:

- Anthropic: ``ANTHROPIC_API_KEY``; model ``OPERATIVE_LIVE_ANTHROPIC_MODEL``
  (claude-haiku-4-5).
- OpenAI: ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` (a compatible server);
  ``OPERATIVE_LIVE_OPENAI_MODEL`` (gpt-4o-mini).
- Gemini: ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``; ``OPERATIVE_LIVE_GEMINI_MODEL``
  (gemini-2.5-flash-lite).
- Ollama: ``OLLAMA_HOST``; ``OPERATIVE_LIVE_OLLAMA_MODEL`` (qwen2.5:1.5b).

``OPERATIVE_LIVE_TIMEOUT`` bounds each test (seconds, default 120).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

import pytest
import trio

from operative import GenerateRequest, GenerateResponse, create_agent, tool
from operative.providers import Delta, DeltaCallback
from operative.retry import RetryOptions

pytestmark = pytest.mark.live

PROVIDERS = ["anthropic", "openai", "gemini", "ollama"]
RETRY = RetryOptions(max_attempts=3, initial_delay=2.0)


class LiveGenerate(Protocol):
    """What every adapter factory returns: a generate function and an async context."""

    async def __call__(self, request: GenerateRequest) -> GenerateResponse: ...

    async def __aenter__(self) -> LiveGenerate: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


Factory = Callable[..., LiveGenerate]
"""``factory(stream=False, on_delta=None)``: a configured adapter for the provider."""


def _model(provider: str, default: str) -> str:
    return os.environ.get(f"OPERATIVE_LIVE_{provider.upper()}_MODEL") or default


def _timeout() -> float:
    return float(os.environ.get("OPERATIVE_LIVE_TIMEOUT") or 120)


def _needs(provider: str, *variables: str) -> None:
    if not any(os.environ.get(variable) for variable in variables):
        wanted = " or ".join(variables)
        pytest.skip(f"{wanted} is not set: the live {provider} tests need it")


def _ollama_url(host: str) -> str:
    """``OLLAMA_HOST`` as Ollama reads it: ``host``, ``host:port`` or a URL."""
    url = host if "://" in host else f"http://{host}"
    scheme, _, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    if ":" not in authority.rsplit("]", 1)[-1]:
        authority = f"{authority}:11434"
    return f"{scheme}://{authority}"


def _anthropic() -> Factory:
    _needs("Anthropic", "ANTHROPIC_API_KEY")
    pytest.importorskip("anthropic", reason="the anthropic extra is not installed")
    from operative.providers.anthropic import anthropic_generate

    model = _model("anthropic", "claude-haiku-4-5")

    def make(stream: bool = False, on_delta: DeltaCallback | None = None) -> LiveGenerate:
        return anthropic_generate(
            model=model, max_tokens=512, temperature=0, stream=stream, on_delta=on_delta
        )

    return make


def _openai() -> Factory:
    _needs("OpenAI", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from operative.providers.openai import openai_generate

    model = _model("openai", "gpt-4o-mini")
    base_url = os.environ.get("OPENAI_BASE_URL") or None

    def make(stream: bool = False, on_delta: DeltaCallback | None = None) -> LiveGenerate:
        return openai_generate(model=model, base_url=base_url, stream=stream, on_delta=on_delta)

    return make


def _gemini() -> Factory:
    _needs("Gemini", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    from operative.providers.gemini import gemini_generate

    model = _model("gemini", "gemini-2.5-flash-lite")

    def make(stream: bool = False, on_delta: DeltaCallback | None = None) -> LiveGenerate:
        return gemini_generate(model=model, temperature=0, stream=stream, on_delta=on_delta)

    return make


def _ollama() -> Factory:
    _needs("Ollama", "OLLAMA_HOST")
    from operative.providers.ollama import ollama_generate

    model = _model("ollama", "qwen2.5:1.5b")
    base_url = _ollama_url(os.environ["OLLAMA_HOST"])

    def make(stream: bool = False, on_delta: DeltaCallback | None = None) -> LiveGenerate:
        return ollama_generate(
            model=model, base_url=base_url, temperature=0, stream=stream, on_delta=on_delta
        )

    return make


FACTORIES: dict[str, Callable[[], Factory]] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "gemini": _gemini,
    "ollama": _ollama,
}


@pytest.fixture(params=PROVIDERS)
def live(request: pytest.FixtureRequest) -> Factory:
    """The provider's adapter factory; skips when its key or server is not configured."""
    return FACTORIES[request.param]()


@tool
async def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"18 degrees and sunny in {city}"


async def test_text_answer(live: Factory) -> None:
    with trio.fail_after(_timeout()):
        async with live() as generate:
            agent = create_agent(
                generate=generate,
                instructions="Answer with a single word, without punctuation.",
                retry=RETRY,
            )
            result = await agent.run("What is the capital of France?")
    assert result.error is None, result.error
    assert "paris" in result.content.lower()
    assert result.usage.total > 0


async def test_one_tool_call_through_an_agent(live: Factory) -> None:
    with trio.fail_after(_timeout()):
        async with live() as generate:
            agent = create_agent(
                generate=generate,
                instructions=(
                    "You answer weather questions. Always call the get_weather tool "
                    "first, then answer in one short sentence."
                ),
                tools=[get_weather],
                maximum_steps=4,
                retry=RETRY,
            )
            result = await agent.run("What is the weather in Oslo right now?")
    assert result.error is None, result.error
    calls = [call for step in result.steps for call in step.tool_calls]
    assert calls, f"no tool call; the model answered {result.content!r}"
    assert calls[0].name == "get_weather"
    arguments: Any = calls[0].arguments
    assert isinstance(arguments, dict)
    assert "oslo" in str(arguments.get("city", "")).lower()
    outcomes = [r.outcome for step in result.steps for r in step.results]
    assert "success" in outcomes
    assert result.finish_reason == "stop-condition"
    assert result.content.strip()


async def test_streaming(live: Factory) -> None:
    deltas: list[Delta] = []
    with trio.fail_after(_timeout()):
        async with live(stream=True, on_delta=deltas.append) as generate:
            agent = create_agent(generate=generate, retry=RETRY)
            result = await agent.run("Count from one to five in words, separated by spaces.")
    assert result.error is None, result.error
    assert "three" in result.content.lower()
    texts = [delta.text for delta in deltas if delta.kind == "text"]
    assert texts
    assert "".join(texts) == result.content
