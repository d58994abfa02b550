"""The provider samples of docs/providers.md run, offline, against the local wire server.

The samples are written for real use: real model names, keys from the usual environment
variables, the vendors' default endpoints. Each one runs here unmodified, as a program
(``python -c sample``), against a :class:`WireServer` that answers in the vendor's wire
format with scripted replies, and prints exactly what its ``print(...)  # value``
comments say. The tests also check what the SDK sent (model, settings, tools, the tool
result of the second step).

How each sample is pointed at the server:

- Anthropic and OpenAI: the environment (``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``,
  which the SDKs read, and a dummy key); the local-server sample's literal
  ``base_url`` (``http://127.0.0.1:8000/v1``) is replaced by the server's address, and
  it runs without ``OPENAI_API_KEY``, as the page says it can;
- Gemini and Ollama: their adapters read no base-URL variable, so a prelude, run before
  the sample, rebinds the factory the sample imports (``gemini_generate``,
  ``ollama_generate``, ``ollama_embedder``) to ``functools.partial(factory,
  base_url=<server>)``. The sample's text is not changed.

Every ```` ```python ```` block of the page must be run by some test: the last test here
fails when one is not.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from ._anthropic_wire import message, stream_events, text_block, tool_use_block, usage_of
from ._gemini_wire import reply_body
from ._gemini_wire import usage_of as gemini_usage
from ._ollama_wire import chat
from ._openai_responses_wire import function_call_item, message_item, reasoning_item, response_body
from ._openai_responses_wire import usage_of as responses_usage
from ._openai_wire import completion
from ._openai_wire import usage_of as openai_usage
from ._server import JsonReply, SseReply, WireServer
from .test_anthropic_cache import _caching_samples
from .test_mock_provider import _offline_samples

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
PRINTED = re.compile(r"^\s*print\(.*\)  # (.*)$", flags=re.MULTILINE)

# Variables that could point a sample at a real service, or lend it a real key.
_VENDOR_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GEMINI_", "GOOGLE_", "OLLAMA_")


def _section(heading: str) -> list[str]:
    """The Python blocks between ``heading`` and the next heading of the same level."""
    text = PAGE.read_text()
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + 1)
    return BLOCK.findall(text[start : end if end != -1 else len(text)])


def _sample(heading: str, marker: str) -> str:
    """The one block of the section that contains ``marker``."""
    (sample,) = [block for block in _section(heading) if marker in block]
    return sample


def _expected(sample: str) -> list[str]:
    expected = PRINTED.findall(sample)
    assert expected, "the sample says nothing about what it prints"
    return expected


def _environment(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_VENDOR_PREFIXES)}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return {**env, **variables}


def _pointing(module: str, factory: str, server: WireServer) -> str:
    """A prelude that makes ``module.factory`` default to the server's address."""
    return (
        f"import functools, {module}\n"
        f"{module}.{factory} = functools.partial({module}.{factory}, "
        f"base_url={server.base_url!r})\n"
    )


async def _run(sample: str, env: dict[str, str], prelude: str = "") -> list[str]:
    """Run ``prelude + sample`` as a program; its stdout lines (it must exit 0)."""
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-c", prelude + sample],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    lines: list[str] = done.stdout.decode().splitlines()
    return lines


def _last_message_text(body: dict[str, Any]) -> str:
    """The text of the tool result (or text block) that ends an Anthropic request."""
    block = body["messages"][-1]["content"][-1]
    content = block.get("content", block.get("text"))
    if isinstance(content, list):
        return "".join(part["text"] for part in content)
    assert isinstance(content, str)
    return content


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_anthropic_agent_sample(wire_server: WireServer) -> None:
    """Who owns the client: the adapter makes its client from ``ANTHROPIC_API_KEY`` (and
    ``ANTHROPIC_BASE_URL``); the agent calls ``get_weather`` and answers."""
    sample = _sample("## Who owns the client", "anthropic_generate")
    call = tool_use_block("toolu_01", "get_weather", {"city": "Oslo"})
    wire_server.reply(
        JsonReply(
            body=message(
                [call],
                stop_reason="tool_use",
                model="claude-sonnet-4-5",
                usage=usage_of(590, 54),
            )
        ),
        JsonReply(
            body=message(
                [text_block("It's sunny in Oslo.")],
                id="msg_02",
                model="claude-sonnet-4-5",
                usage=usage_of(662, 14),
            )
        ),
    )
    env = _environment(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=wire_server.base_url)
    assert await _run(sample, env) == _expected(sample)

    first, second = (received.json for received in wire_server.received)
    assert [r.path for r in wire_server.received] == ["/v1/messages"] * 2
    headers = wire_server.last.headers
    assert (headers.get("x-api-key") or headers["authorization"].removeprefix("Bearer ")) == "test"
    assert (first["model"], first["max_tokens"]) == ("claude-sonnet-4-5", 1024)
    assert [t["name"] for t in first["tools"]] == ["get_weather"]
    assert _last_message_text(first) == "What's the weather in Oslo?"
    assert second["messages"][-2]["content"] == [call]
    assert second["messages"][-1]["content"][-1]["tool_use_id"] == "toolu_01"
    assert _last_message_text(second) == "sunny in Oslo"


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_local_openai_compatible_server_sample(wire_server: WireServer) -> None:
    """The local-server sample, its ``base_url`` replaced by the test server's, with no
    ``OPENAI_API_KEY`` at all: a local server needs none."""
    sample = _sample("## Who owns the client", "openai_generate")
    local = "http://127.0.0.1:8000/v1"
    assert local in sample
    answer = completion(
        "Hi! How can I help you today?", model="qwen2.5-7b-instruct", usage=openai_usage(9, 10)
    )
    wire_server.reply(JsonReply(body=answer))
    here = sample.replace(local, f"{wire_server.base_url}/v1")
    assert await _run(here, _environment()) == _expected(sample)

    assert wire_server.last.path == "/v1/chat/completions"
    body = wire_server.last.json
    assert body["model"] == "qwen2.5-7b-instruct"
    assert body["messages"] == [{"role": "user", "content": "Say hi"}]


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_openai_responses_sample(wire_server: WireServer) -> None:
    """Responses API: the settings go in the body as given, the reasoning item of the
    first step is replayed with the function call's output in the second."""
    sample = _sample('## OpenAI Responses API (`api="responses"`)', "api=")
    wire_server.reply(
        JsonReply(
            body=response_body(
                reasoning_item(id="rs_1", summary="Ask the weather tool."),
                function_call_item("call_1", "get_weather", {"city": "Oslo"}, id="fc_1"),
                model="gpt-5-mini",
                usage=responses_usage(120, 80, reasoning=64),
            )
        ),
        JsonReply(
            body=response_body(
                message_item("It's sunny in Oslo.", id="msg_1"),
                id="resp_2",
                model="gpt-5-mini",
                usage=responses_usage(170, 15),
            )
        ),
    )
    env = _environment(OPENAI_API_KEY="test", OPENAI_BASE_URL=wire_server.base_url)
    assert await _run(sample, env) == _expected(sample)

    assert [r.path for r in wire_server.received] == ["/responses"] * 2
    assert wire_server.last.headers["authorization"] == "Bearer test"
    first, second = (received.json for received in wire_server.received)
    for body in (first, second):
        assert body["model"] == "gpt-5-mini"
        assert body["reasoning"] == {"effort": "low", "summary": "auto"}
        assert body["max_output_tokens"] == 2048
        assert [t["name"] for t in body["tools"]] == ["get_weather"]
    kinds = [item["type"] for item in second["input"][-3:]]
    assert kinds == ["reasoning", "function_call", "function_call_output"]
    assert second["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "sunny in Oslo",
    }


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_streaming_sample(wire_server: WireServer) -> None:
    """Streaming: the text deltas are printed as they come (they make the first line),
    then the usage of the answer assembled from the stream."""
    sample = _sample("## Streaming", "on_delta=show")
    text = "Hello from a river of tokens!"
    body = message([text_block(text)], model="claude-sonnet-4-5", usage=usage_of(14, 12))
    events = stream_events(body)
    wire_server.reply(SseReply(events=events))
    env = _environment(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=wire_server.base_url)
    assert await _run(sample, env) == [text, *_expected(sample)]

    assert wire_server.events_sent == len(events)
    sent = wire_server.last.json
    assert (sent["model"], sent["stream"]) == ("claude-sonnet-4-5", True)


async def test_the_gemini_sample(wire_server: WireServer) -> None:
    """Gemini: the key from ``GEMINI_API_KEY`` in ``x-goog-api-key``, ``temperature`` in
    ``generationConfig``; the prelude gives ``gemini_generate`` the server's address."""
    sample = _sample("## Gemini (`operative.providers.gemini`)", "gemini_generate(")
    answer = reply_body(
        [{"text": "Hi there! How can I help?"}],
        usage=gemini_usage(3, 9),
        model_version="gemini-2.5-flash",
    )
    wire_server.reply(JsonReply(body=answer))
    prelude = _pointing("operative.providers.gemini", "gemini_generate", wire_server)
    lines = await _run(sample, _environment(GEMINI_API_KEY="test"), prelude)
    assert lines == _expected(sample)

    assert wire_server.last.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert wire_server.last.headers["x-goog-api-key"] == "test"
    body = wire_server.last.json
    assert body["generationConfig"] == {"temperature": 0.2}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Say hi"}]}]


async def test_the_ollama_sample(wire_server: WireServer) -> None:
    """Ollama: ``keep_alive`` at the top of the body, ``num_ctx`` in ``options``; no key,
    no bearer token; the prelude gives ``ollama_generate`` the server's address."""
    sample = _sample("## Ollama (`operative.providers.ollama`)", "ollama_generate(")
    answer = chat(
        "Hi! How can I help you today?", model="qwen3:8b", prompt_eval_count=11, eval_count=10
    )
    wire_server.reply(JsonReply(body=answer))
    prelude = _pointing("operative.providers.ollama", "ollama_generate", wire_server)
    assert await _run(sample, _environment(), prelude) == _expected(sample)

    assert wire_server.last.path == "/api/chat"
    assert "authorization" not in wire_server.last.headers
    body = wire_server.last.json
    assert (body["model"], body["stream"], body["keep_alive"]) == ("qwen3:8b", False, "10m")
    assert body["options"] == {"num_ctx": 8192}
    assert body["messages"] == [{"role": "user", "content": "Say hi"}]


async def test_the_embeddings_sample(wire_server: WireServer) -> None:
    """Embeddings: the first ``/api/embed`` call is refused with a 503 (``retry-after: 0``,
    so no wait), the sample's ``retry=`` sends the batch again, and two 768-long vectors
    come back; the prelude gives ``ollama_embedder`` the server's address."""
    sample = _sample("## Embeddings (`operative.providers.embeddings`)", "ollama_embedder(")
    vectors = [[0.25] * 768, [-0.5] * 768]
    wire_server.reply(
        JsonReply(status=503, body={"error": "loading the model"}, headers={"retry-after": "0"}),
        JsonReply(body={"model": "nomic-embed-text", "embeddings": vectors}),
    )
    prelude = _pointing("operative.providers.embeddings", "ollama_embedder", wire_server)
    assert await _run(sample, _environment(), prelude) == _expected(sample)

    assert [r.path for r in wire_server.received] == ["/api/embed"] * 2
    sent = [r.json for r in wire_server.received]
    expected = {"model": "nomic-embed-text", "input": ["first document", "second document"]}
    assert sent == [expected, expected]


def test_every_python_block_of_the_page_is_run_by_a_test() -> None:
    """Each block is one this module runs, one of the offline fallover/routing/testing
    samples (test_mock_provider.py), the caching sample (test_anthropic_cache.py), or a
    model-string sample (test_docs_model_strings.py)."""
    here = [
        _sample("## Who owns the client", "anthropic_generate"),
        _sample("## Who owns the client", "openai_generate"),
        _sample('## OpenAI Responses API (`api="responses"`)', "api="),
        _sample("## Streaming", "on_delta=show"),
        _sample("## Gemini (`operative.providers.gemini`)", "gemini_generate("),
        _sample("## Ollama (`operative.providers.ollama`)", "ollama_generate("),
        _sample("## Embeddings (`operative.providers.embeddings`)", "ollama_embedder("),
    ]
    from .test_docs_compatible_servers import _compatible_server_samples
    from .test_docs_model_strings import _model_string_samples

    caching = [s for s in _caching_samples() if "MockTransport" in s]
    run = here + caching + _offline_samples() + _model_string_samples()
    run += _compatible_server_samples()
    from .test_docs_output_modes import _output_mode_samples

    run += _output_mode_samples()
    blocks = BLOCK.findall(PAGE.read_text())
    unrun = [block.splitlines()[:3] for block in blocks if block not in run]
    assert not unrun, f"docs/providers.md blocks no test runs: {unrun}"
    assert len(run) == len(blocks)
