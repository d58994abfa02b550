"""Model strings: open_model("provider:model") and create_agent(model=...), the real SDKs
over a socket to the local wire servers."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import trio

pytest.importorskip("anthropic")
pytest.importorskip("openai")

import anthropic
from _doubles import get_weather

from operative import (
    Conversation,
    GenerateRequest,
    InvalidArgument,
    ToolCall,
    create_agent,
    tool,
)
from operative.providers import ProviderAuthenticationError, open_model
from operative.providers._model_strings import (
    PROVIDERS,
    ModelString,
    RunModel,
    parse_model_string,
)

from ._anthropic_wire import message, text_block, tool_use_block
from ._gemini_wire import reply_body
from ._ollama_wire import chat
from ._openai_responses_wire import message_item, response_body
from ._openai_wire import completion
from ._server import JsonReply, WireServer

_VENDOR_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "OLLAMA_HOST",
    "OLLAMA_API_KEY",
)


@pytest.fixture(autouse=True)
def _no_vendor_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VENDOR_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def request_of(text: str) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message(text)
    return GenerateRequest(conversation=conversation.current)


# -- parsing -----------------------------------------------------------------------------


def test_every_prefix_parses_and_the_model_keeps_its_colons() -> None:
    """Each prefix names its provider; everything after the first colon is the model."""
    assert PROVIDERS == ("anthropic", "openai", "openai-responses", "gemini", "ollama")
    for provider in PROVIDERS:
        assert parse_model_string(f"{provider}:m-1") == ModelString(provider=provider, model="m-1")
    assert parse_model_string("ollama:qwen3:8b").model == "qwen3:8b"
    assert str(parse_model_string("openai-responses:gpt-5")) == "openai-responses:gpt-5"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("acme:fast", "the provider must be one of anthropic, openai, openai-responses"),
        ("gpt-4o", "the provider must be one of"),
        ("anthropic", "name the model, as in 'anthropic:MODEL'"),
        ("openai: ", "name the model"),
        (42, "a model string is a str"),
    ],
)
def test_a_bad_model_string_is_invalid_argument(spec: Any, says: str) -> None:
    """A bad string says what a good one looks like."""
    with pytest.raises(InvalidArgument, match=says):
        parse_model_string(spec)


# -- open_model --------------------------------------------------------------------------


class _ClientSpy:
    """Records each Anthropic SDK client made and closed."""

    def __init__(self) -> None:
        self.made: list[anthropic.AsyncAnthropic] = []
        self.closed: list[anthropic.AsyncAnthropic] = []


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> _ClientSpy:
    spy = _ClientSpy()
    init = anthropic.AsyncAnthropic.__init__
    close = anthropic.AsyncAnthropic.close

    def spying_init(self: anthropic.AsyncAnthropic, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        spy.made.append(self)

    async def spying_close(self: anthropic.AsyncAnthropic) -> None:
        spy.closed.append(self)
        await close(self)

    monkeypatch.setattr(anthropic.AsyncAnthropic, "__init__", spying_init)
    monkeypatch.setattr(anthropic.AsyncAnthropic, "close", spying_close)
    return spy


async def test_open_model_owns_and_closes_the_client(
    wire_server: WireServer, clients: _ClientSpy
) -> None:
    """The block makes the SDK client when it opens (settings reach the factory) and
    closes it when it ends."""
    wire_server.reply(JsonReply(body=message([text_block("hi")])))
    async with open_model(
        "anthropic:claude-test-1", api_key="k", base_url=wire_server.base_url, temperature=0.5
    ) as generate:
        assert len(clients.made) == 1, "the client is made when the block opens"
        response = await generate(request_of("hello"))
        assert not clients.made[0].is_closed()
    assert response.content == "hi"
    assert clients.closed == clients.made
    assert clients.made[0].is_closed()
    body = wire_server.last.json
    assert (body["model"], body["temperature"]) == ("claude-test-1", 0.5)
    assert wire_server.last.path == "/v1/messages"


async def test_the_client_is_closed_when_the_block_raises(
    wire_server: WireServer, clients: _ClientSpy
) -> None:
    """An exception in the block still closes the client."""
    with pytest.raises(RuntimeError, match="boom"):
        async with open_model("anthropic:m", api_key="k", base_url=wire_server.base_url):
            raise RuntimeError("boom")
    assert len(clients.made) == 1
    assert clients.closed == clients.made


async def test_openai_strings_take_the_base_url_from_the_environment(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """openai: is Chat Completions, openai-responses: the Responses API; both find an
    OpenAI-compatible server through OPENAI_BASE_URL and need no key there."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{wire_server.base_url}/v1")
    wire_server.reply(
        JsonReply(body=completion("chat answer", model="qwen")),
        JsonReply(body=response_body(message_item("responses answer"), model="qwen")),
    )
    async with open_model("openai:qwen") as chat_generate:
        assert (await chat_generate(request_of("hi"))).content == "chat answer"
    async with open_model("openai-responses:qwen") as responses_generate:
        assert (await responses_generate(request_of("hi"))).content == "responses answer"
    assert [r.path for r in wire_server.received] == ["/v1/chat/completions", "/v1/responses"]
    assert [r.json["model"] for r in wire_server.received] == ["qwen", "qwen"]


async def test_gemini_and_ollama_strings(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gemini: takes its key from GEMINI_API_KEY; ollama: finds the server through
    OLLAMA_HOST, given as a bare host:port as Ollama's own clients accept it."""
    monkeypatch.setenv("GEMINI_API_KEY", "g-key")
    monkeypatch.setenv("OLLAMA_HOST", wire_server.base_url.removeprefix("http://"))
    wire_server.reply(
        JsonReply(body=reply_body([{"text": "from gemini"}])),
        JsonReply(body=chat("from ollama", model="qwen3:8b")),
    )
    async with open_model("gemini:gemini-2.5-flash", base_url=wire_server.base_url) as g:
        assert (await g(request_of("hi"))).content == "from gemini"
    async with open_model("ollama:qwen3:8b") as o:
        assert (await o(request_of("hi"))).content == "from ollama"
    gemini, ollama = wire_server.received
    assert gemini.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert gemini.headers["x-goog-api-key"] == "g-key"
    assert (ollama.path, ollama.json["model"]) == ("/api/chat", "qwen3:8b")


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY"),
        ("openai:gpt-4o-mini", "OPENAI_API_KEY"),
        ("openai-responses:gpt-5", "OPENAI_API_KEY"),
        ("gemini:gemini-2.5-flash", "GEMINI_API_KEY"),
    ],
)
async def test_a_missing_key_fails_when_the_block_opens(spec: str, variable: str) -> None:
    """No key: ProviderAuthenticationError naming the variable, before the body runs
    (so before any request)."""
    with pytest.raises(ProviderAuthenticationError, match=variable):
        async with open_model(spec):
            pytest.fail("the block ran without a key")


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"model": "other"}, "model= is named by the model string"),
        ({"api": "chat"}, "api= is chosen by the prefix"),
    ],
)
async def test_settings_that_contradict_the_string_are_refused(
    settings: dict[str, Any], says: str
) -> None:
    with pytest.raises(InvalidArgument, match=says):
        async with open_model("openai-responses:gpt-5", api_key="k", **settings):
            pass


def _without_the_anthropic_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import anthropic`` fail, as it does without the extra."""
    for name in [n for n in sys.modules if n.startswith("operative.providers.anthropic")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "anthropic", None)


async def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the anthropic SDK, opening an anthropic: string is InvalidArgument that
    says which extra to install."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    _without_the_anthropic_sdk(monkeypatch)
    with pytest.raises(InvalidArgument, match=r"pip install 'operative\[anthropic\]'"):
        async with open_model("anthropic:claude-haiku-4-5"):
            pytest.fail("opened without the SDK")
    with pytest.raises(InvalidArgument, match=r"pip install 'operative\[anthropic\]'"):
        create_agent(model="anthropic:claude-haiku-4-5")


# -- create_agent(model=...) -------------------------------------------------------------


def _point_anthropic_at(server: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)


def _round_trip(server: WireServer, n: int) -> None:
    """A tool call, then an answer."""
    call = tool_use_block(f"toolu_{n}", "get_weather", {"city": "Oslo"})
    server.reply(
        JsonReply(body=message([call], stop_reason="tool_use")),
        JsonReply(body=message([text_block(f"sunny, run {n}")])),
    )


async def test_each_run_opens_and_closes_its_own_client(
    wire_server: WireServer, clients: _ClientSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_agent(model=...): a run makes one client when it opens, uses it for every
    step, and closes it once the run has ended; the next run makes its own."""
    _point_anthropic_at(wire_server, monkeypatch)
    agent = create_agent(model="anthropic:claude-test-1", tools=[get_weather])
    assert clients.made == [], "defining the agent makes no client"
    open_during_tool: list[bool] = []

    @tool
    async def check(city: str) -> str:
        """Whether the run's client is open while a tool runs."""
        open_during_tool.append(len(clients.made) == 1 and not clients.made[0].is_closed())
        return f"sunny in {city}"

    checking = create_agent(model="anthropic:claude-test-1", tools={"get_weather": check})
    _round_trip(wire_server, 1)
    async with checking.open_run("Weather in Oslo?") as run:
        result = await run.result()
    assert result.error is None, result.error
    assert result.content == "sunny, run 1"
    assert open_during_tool == [True]
    assert len(clients.made) == 1
    assert clients.closed == clients.made

    _round_trip(wire_server, 2)
    second = await agent.run("Weather in Oslo?")
    assert second.content == "sunny, run 2"
    assert second.steps[0].tool_calls == (
        ToolCall(id="toolu_2", name="get_weather", arguments={"city": "Oslo"}),
    )
    assert len(clients.made) == 2, "one client per run, not per request"
    assert clients.closed == clients.made
    assert [r.json["model"] for r in wire_server.received] == ["claude-test-1"] * 4


async def test_runs_side_by_side_have_clients_of_their_own(
    wire_server: WireServer, clients: _ClientSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two concurrent runs of one agent each open (and close) their own client."""
    _point_anthropic_at(wire_server, monkeypatch)
    wire_server.handler = lambda received: JsonReply(body=message([text_block("ok")]))
    agent = create_agent(model="anthropic:claude-test-1")
    results: list[str] = []

    async def one() -> None:
        results.append((await agent.run("hi")).content)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one)
        nursery.start_soon(one)
    assert results == ["ok", "ok"]
    assert len(clients.made) == 2
    assert sorted(map(id, clients.closed)) == sorted(map(id, clients.made))


async def test_a_missing_key_fails_the_run_before_any_request(
    wire_server: WireServer,
) -> None:
    """Without ANTHROPIC_API_KEY, opening a run of a model-string agent raises
    ProviderAuthenticationError naming it; nothing is sent."""
    agent = create_agent(model="anthropic:claude-test-1")
    with pytest.raises(ProviderAuthenticationError, match="ANTHROPIC_API_KEY"):
        await agent.run("hi")
    assert wire_server.received == []


def test_generate_and_model_are_mutually_exclusive() -> None:
    """Both, or neither, is InvalidArgument; a bad string fails where the agent is defined."""
    with pytest.raises(InvalidArgument, match="mutually exclusive"):
        create_agent(generate=RunModel("anthropic:m"), model="anthropic:m")
    with pytest.raises(InvalidArgument, match="needs a model"):
        create_agent()
    with pytest.raises(InvalidArgument, match="the provider must be one of"):
        create_agent(model="acme:fast")


async def test_called_outside_a_run_it_opens_a_client_per_call(
    wire_server: WireServer, clients: _ClientSpy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent's generate called directly (as a handoff does) opens and closes a
    client around the call."""
    _point_anthropic_at(wire_server, monkeypatch)
    wire_server.reply(JsonReply(body=message([text_block("direct")])))
    agent = create_agent(model="anthropic:claude-test-1")
    assert isinstance(agent.generate, RunModel)
    assert (agent.generate.provider, agent.generate.model) == ("anthropic", "claude-test-1")
    assert (await agent.generate(request_of("hi"))).content == "direct"
    assert len(clients.made) == 1
    assert clients.closed == clients.made


def test_defining_a_model_string_agent_imports_no_sdk() -> None:
    """create_agent(model=...) looks for the SDK without importing it."""
    code = (
        "import sys, operative; "
        "operative.create_agent(model='anthropic:claude-haiku-4-5'); "
        "operative.create_agent(model='openai:gpt-4o-mini'); "
        "print(sorted(m for m in ('anthropic', 'openai', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
