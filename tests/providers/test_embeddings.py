"""Embedders: httpx over a socket to a local server speaking each vendor's wire format."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from operative import InvalidArgument
from operative.providers import (
    ProviderAuthenticationError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderUnavailableError,
)
from operative.providers.embeddings import (
    Embedder,
    HttpEmbedder,
    gemini_embedder,
    ollama_embedder,
    openai_embedder,
    voyage_embedder,
)
from operative.retry import RetryOptions

from ._server import JsonReply, Received, Reply, WireServer


def vector(text: str) -> list[float]:
    """A deterministic vector for ``text`` (its length, then its first character)."""
    return [float(len(text)), float(ord(text[0]) if text else 0)]


def openai_handler(received: Received) -> Reply:
    """An OpenAI/Voyage ``/embeddings`` reply, with ``data`` in reversed order."""
    texts = received.json["input"]
    data = [
        {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
    ]
    return JsonReply(
        body={
            "object": "list",
            "data": data[::-1],
            "model": received.json["model"],
            "usage": {"prompt_tokens": 3, "total_tokens": 3},
        }
    )


def ollama_handler(received: Received) -> Reply:
    texts = received.json["input"]
    return JsonReply(
        body={"model": received.json["model"], "embeddings": [vector(t) for t in texts]}
    )


def gemini_handler(received: Received) -> Reply:
    requests = received.json["requests"]
    texts = [r["content"]["parts"][0]["text"] for r in requests]
    return JsonReply(body={"embeddings": [{"values": vector(t)} for t in texts]})


TEXTS = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff", "g", "hh", "iii", "jjjj"]


async def test_openai_wire_format_and_mapping(wire_server: WireServer) -> None:
    """input/model/dimensions in the body, the key as a bearer token, data by index."""
    wire_server.handler = openai_handler
    async with openai_embedder(
        model="text-embedding-3-small",
        api_key="sk-test",
        base_url=f"{wire_server.base_url}/v1",
        dimensions=2,
    ) as embedder:
        assert isinstance(embedder, Embedder)
        assert (embedder.model, embedder.dimensions) == ("text-embedding-3-small", 2)
        vectors = await embedder.embed(["hello", "a"])
    assert vectors == [vector("hello"), vector("a")]
    (received,) = wire_server.received
    assert (received.method, received.path) == ("POST", "/v1/embeddings")
    assert received.headers["authorization"] == "Bearer sk-test"
    assert received.json == {
        "input": ["hello", "a"],
        "model": "text-embedding-3-small",
        "encoding_format": "float",
        "dimensions": 2,
    }


async def test_openai_key_from_environment(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    wire_server.handler = openai_handler
    async with openai_embedder(model="m", base_url=wire_server.base_url) as embedder:
        assert await embedder(["x"]) == [vector("x")]
    assert wire_server.last.headers["authorization"] == "Bearer sk-env"
    assert "dimensions" not in wire_server.last.json


async def test_ollama_wire_format_and_mapping(wire_server: WireServer) -> None:
    """POST /api/embed with ``input`` as a list; ``embeddings`` in order."""
    wire_server.handler = ollama_handler
    async with ollama_embedder(
        model="nomic-embed-text", base_url=wire_server.base_url, keep_alive="5m"
    ) as embedder:
        vectors = await embedder.embed(["one", "three"])
    assert vectors == [vector("one"), vector("three")]
    (received,) = wire_server.received
    assert received.path == "/api/embed"
    assert "authorization" not in received.headers
    assert received.json == {
        "model": "nomic-embed-text",
        "input": ["one", "three"],
        "keep_alive": "5m",
    }


async def test_gemini_wire_format_and_mapping(wire_server: WireServer) -> None:
    """batchEmbedContents: one request per text, the key in x-goog-api-key."""
    wire_server.handler = gemini_handler
    async with gemini_embedder(
        model="gemini-embedding-001",
        api_key="g-key",
        base_url=wire_server.base_url,
        dimensions=768,
        task_type="RETRIEVAL_DOCUMENT",
    ) as embedder:
        vectors = await embedder.embed(["x", "yy"])
    assert vectors == [vector("x"), vector("yy")]
    (received,) = wire_server.received
    assert received.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert received.headers["x-goog-api-key"] == "g-key"
    assert received.json == {
        "requests": [
            {
                "model": "models/gemini-embedding-001",
                "content": {"parts": [{"text": text}]},
                "taskType": "RETRIEVAL_DOCUMENT",
                "outputDimensionality": 768,
            }
            for text in ("x", "yy")
        ]
    }


async def test_gemini_key_falls_back_to_google_api_key(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "google-key")
    wire_server.handler = gemini_handler
    async with gemini_embedder(model="models/e", base_url=wire_server.base_url) as embedder:
        assert await embedder.embed(["z"]) == [vector("z")]
    assert wire_server.last.headers["x-goog-api-key"] == "google-key"
    assert wire_server.last.path == "/v1beta/models/e:batchEmbedContents"


async def test_voyage_wire_format_and_mapping(wire_server: WireServer) -> None:
    wire_server.handler = openai_handler
    async with voyage_embedder(
        model="voyage-3.5",
        api_key="pa-test",
        base_url=f"{wire_server.base_url}/v1",
        input_type="query",
        dimensions=256,
    ) as embedder:
        vectors = await embedder.embed(["q1", "q22"])
    assert vectors == [vector("q1"), vector("q22")]
    received = wire_server.last
    assert received.path == "/v1/embeddings"
    assert received.headers["authorization"] == "Bearer pa-test"
    assert received.json == {
        "input": ["q1", "q22"],
        "model": "voyage-3.5",
        "input_type": "query",
        "output_dimension": 256,
    }


def make(kind: str, server: WireServer, **kw: Any) -> HttpEmbedder:
    if kind == "openai":
        server.handler = openai_handler
        return openai_embedder(model="m", api_key="k", base_url=server.base_url, **kw)
    if kind == "gemini":
        server.handler = gemini_handler
        return gemini_embedder(model="m", api_key="k", base_url=server.base_url, **kw)
    if kind == "voyage":
        server.handler = openai_handler
        return voyage_embedder(model="m", api_key="k", base_url=server.base_url, **kw)
    server.handler = ollama_handler
    return ollama_embedder(model="m", base_url=server.base_url, **kw)


KINDS = ["openai", "gemini", "voyage", "ollama"]


def batch_texts(kind: str, received: Received) -> list[str]:
    if kind == "gemini":
        return [r["content"]["parts"][0]["text"] for r in received.json["requests"]]
    return list(received.json["input"])


@pytest.mark.parametrize("kind", KINDS)
async def test_batches_are_reassembled_in_input_order(wire_server: WireServer, kind: str) -> None:
    """10 texts in batches of 3: four requests, vectors in input order."""
    async with make(kind, wire_server, batch_size=3) as embedder:
        vectors = await embedder.embed(TEXTS)
    assert vectors == [vector(t) for t in TEXTS]
    batches = sorted(
        (batch_texts(kind, r) for r in wire_server.received), key=lambda b: TEXTS.index(b[0])
    )
    assert batches == [TEXTS[0:3], TEXTS[3:6], TEXTS[6:9], TEXTS[9:]]


@pytest.mark.parametrize("kind", KINDS)
async def test_empty_input_sends_no_request(wire_server: WireServer, kind: str) -> None:
    async with make(kind, wire_server) as embedder:
        assert await embedder.embed([]) == []
    assert wire_server.received == []


async def test_a_bare_string_is_refused(wire_server: WireServer) -> None:
    async with make("openai", wire_server) as embedder:
        with pytest.raises(InvalidArgument, match="wrap a single text"):
            await embedder.embed("hello")


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts requests in flight over a real socket transport."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.in_flight = 0
        self.peak = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            response = await self.inner.handle_async_request(request)
            await response.aread()
            return response
        finally:
            self.in_flight -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("limit", [1, 2, 4])
async def test_concurrency_bound_is_honoured(wire_server: WireServer, limit: int) -> None:
    """Six batches, each answered after 10 ms: at most ``limit`` in flight, and with
    more than one allowed they do overlap."""

    def slow(received: Received) -> Reply:
        reply = ollama_handler(received)
        assert isinstance(reply, JsonReply)
        return JsonReply(body=reply.body, delay=0.01)

    transport = CountingTransport()
    async with httpx.AsyncClient(transport=transport) as client:
        embedder = ollama_embedder(
            model="m",
            base_url=wire_server.base_url,
            http_client=client,
            batch_size=1,
            max_concurrency=limit,
        )
        wire_server.handler = slow
        texts = [f"t{i}" for i in range(6)]
        assert await embedder.embed(texts) == [vector(t) for t in texts]
        await embedder.aclose()
        assert not client.is_closed  # the caller's client stays open
    assert transport.peak == limit


async def test_retry_after_a_429_honours_retry_after(wire_server: WireServer) -> None:
    """A 429 with ``retry-after: 0.05`` is retried after at least that long."""
    wire_server.reply(
        JsonReply(
            status=429,
            body={"error": {"message": "slow down", "type": "rate_limit"}},
            headers={"retry-after": "0.05"},
        )
    )
    retry = RetryOptions(max_attempts=3, initial_delay=5.0, jitter=False)
    async with make("openai", wire_server, retry=retry) as embedder:
        start = trio.current_time()
        vectors = await embedder.embed(["a", "b"])
        elapsed = trio.current_time() - start
    assert vectors == [vector("a"), vector("b")]
    assert len(wire_server.received) == 2
    assert 0.05 <= elapsed < 1.0  # retry_after, not the 5 s backoff


async def test_backoff_without_retry_after_then_give_up(wire_server: WireServer) -> None:
    """503s are retried with backoff; after max_attempts the typed error is raised."""
    for _ in range(2):
        wire_server.reply(JsonReply(status=503, body={"error": "overloaded"}))
    retry = RetryOptions(max_attempts=2, initial_delay=0.01, jitter=False)
    async with make("ollama", wire_server, retry=retry) as embedder:
        with pytest.raises(ProviderUnavailableError, match="overloaded") as caught:
            await embedder.embed(["a"])
    assert caught.value.provider == "ollama"
    assert caught.value.status == 503
    assert len(wire_server.received) == 2


async def test_a_400_is_not_retried(wire_server: WireServer) -> None:
    wire_server.reply(JsonReply(status=400, body={"error": {"message": "bad input"}}))
    async with make("openai", wire_server, retry=RetryOptions(initial_delay=0.01)) as embedder:
        with pytest.raises(ProviderRequestError, match="bad input"):
            await embedder.embed(["a"])
    assert len(wire_server.received) == 1


async def test_a_429_without_retry_raises_the_rate_limit_error(wire_server: WireServer) -> None:
    wire_server.reply(
        JsonReply(status=429, body={"detail": "too many"}, headers={"retry-after": "7"})
    )
    async with make("voyage", wire_server) as embedder:
        with pytest.raises(ProviderRateLimitError, match="too many") as caught:
            await embedder.embed(["a"])
    assert caught.value.retry_after == 7.0
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("kind", "variable"),
    [
        ("openai", "OPENAI_API_KEY"),
        ("voyage", "VOYAGE_API_KEY"),
        ("gemini", "GEMINI_API_KEY (or GOOGLE_API_KEY)"),
    ],
)
async def test_a_401_names_the_key_variable(
    wire_server: WireServer, kind: str, variable: str
) -> None:
    wire_server.reply(
        JsonReply(status=401, body={"error": {"message": "Incorrect API key provided"}})
    )
    async with make(kind, wire_server) as embedder:
        with pytest.raises(ProviderAuthenticationError) as caught:
            await embedder.embed(["a"])
    message = str(caught.value)
    assert f"set the {variable} environment variable" in message
    assert "Incorrect API key provided" in message
    assert caught.value.status == 401


@pytest.mark.parametrize(
    ("kind", "variables"),
    [
        ("openai", ["OPENAI_API_KEY"]),
        ("voyage", ["VOYAGE_API_KEY"]),
        ("gemini", ["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
    ],
)
async def test_a_missing_key_names_the_variable_without_a_request(
    wire_server: WireServer, monkeypatch: pytest.MonkeyPatch, kind: str, variables: list[str]
) -> None:
    for variable in variables:
        monkeypatch.delenv(variable, raising=False)
    factory: dict[str, Callable[..., HttpEmbedder]] = {
        "openai": openai_embedder,
        "voyage": voyage_embedder,
        "gemini": gemini_embedder,
    }
    async with factory[kind](model="m", base_url=wire_server.base_url) as embedder:
        with pytest.raises(ProviderAuthenticationError, match=variables[0]):
            await embedder.embed(["a"])
    assert wire_server.received == []


async def test_a_failing_batch_cancels_the_others(wire_server: WireServer) -> None:
    """One batch fails at once; the slow siblings are cancelled and the error raised
    as itself (not wrapped in a group)."""

    def handler(received: Received) -> Reply:
        if received.json["input"] == ["boom"]:
            return JsonReply(status=400, body={"error": "no such model"})
        reply = ollama_handler(received)
        assert isinstance(reply, JsonReply)
        return JsonReply(body=reply.body, delay=5.0)

    async with ollama_embedder(
        model="m", base_url=wire_server.base_url, batch_size=1, max_concurrency=4
    ) as embedder:
        wire_server.handler = handler
        start = trio.current_time()
        with pytest.raises(ProviderRequestError, match="no such model"):
            await embedder.embed(["a", "b", "boom", "c"])
        assert trio.current_time() - start < 1.0


async def test_a_vector_count_mismatch_is_an_error(wire_server: WireServer) -> None:
    wire_server.reply(JsonReply(body={"embeddings": [[1.0]]}))
    async with ollama_embedder(model="m", base_url=wire_server.base_url) as embedder:
        with pytest.raises(ProviderError, match="1 vectors for 2 texts"):
            await embedder.embed(["a", "b"])


async def test_connection_refused_is_a_retryable_provider_error() -> None:
    async with ollama_embedder(model="m", base_url="http://127.0.0.1:9") as embedder:
        with pytest.raises(ProviderError) as caught:
            await embedder.embed(["a"])
    assert caught.value.retryable


async def test_closing_twice_and_using_after_close() -> None:
    embedder = openai_embedder(model="m", api_key="k")
    await embedder.aclose()
    await embedder.aclose()
    with pytest.raises(InvalidArgument, match="closed"):
        await embedder.embed(["a"])


@pytest.mark.parametrize(
    "kw",
    [
        {"model": ""},
        {"model": "m", "batch_size": 0},
        {"model": "m", "max_concurrency": 0},
        {"model": "m", "dimensions": -1},
        {"model": "m", "base_url": "ftp://x"},
    ],
)
def test_arguments_are_checked(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        openai_embedder(**kw)


def test_voyage_input_type_is_checked() -> None:
    with pytest.raises(InvalidArgument, match="input_type"):
        voyage_embedder(model="m", input_type="passage")


def test_import_operative_does_not_import_embeddings() -> None:
    """In a fresh interpreter, operative and operative.providers leave embeddings unloaded."""
    code = (
        "import sys, operative, operative.providers; "
        "print([m for m in sys.modules if m.startswith('operative.providers.embeddings')])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
