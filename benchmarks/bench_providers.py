"""Measure the provider adapters' per-call overhead against a local wire-format server.

Prints, in µs per call (best of 5 rounds of sequential calls over one keep-alive
connection to a server on 127.0.0.1 in the same process):
- a raw ``httpx2`` POST of an equivalent JSON body, its JSON response decoded (the HTTP
  stack both SDKs sit on: the floor);
- ``anthropic_generate`` and ``openai_generate`` (Chat Completions) over the official
  SDKs, and ``gemini_generate`` and ``ollama_generate`` over plain ``httpx``, each
  non-streaming and streaming, on a 3-message conversation with one tool offered;
and each adapter's overhead over the raw call (SDK request building, validation and
response parsing, plus the adapter's own mapping).

The server is the test suite's (``tests/providers/_server.py``), so run from a checkout:
``python benchmarks/bench_providers.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import httpx2

from operative import Conversation, GenerateRequest
from operative.providers.anthropic import anthropic_generate
from operative.providers.gemini import gemini_generate
from operative.providers.ollama import ollama_generate
from operative.providers.openai import openai_generate
from operative.tools import ToolSpec
from tests.providers import _anthropic_wire as aw
from tests.providers import _gemini_wire as gw
from tests.providers import _ollama_wire as lw
from tests.providers import _openai_wire as ow
from tests.providers._server import JsonReply, Received, Reply, SseReply, WireServer

ANTHROPIC_BODY = aw.message([aw.text_block("The answer is 42, as computed by the tool.")])
OPENAI_BODY = ow.completion("The answer is 42, as computed by the tool.")
GEMINI_BODY = gw.reply_body([{"text": "The answer is 42, as computed by the tool."}])
OLLAMA_BODY = lw.chat("The answer is 42, as computed by the tool.")


def handler(received: Received) -> Reply:
    if ":generateContent" in received.path:
        return JsonReply(body=GEMINI_BODY)
    if ":streamGenerateContent" in received.path:
        return SseReply(events=gw.stream_events(GEMINI_BODY))
    if received.path.endswith("/api/chat"):
        if b'"stream":true' in received.body:
            return SseReply(events=lw.ndjson_lines(OLLAMA_BODY))
        return JsonReply(body=OLLAMA_BODY)
    anthropic = received.path.endswith("/messages")
    streaming = b'"stream":true' in received.body
    if anthropic:
        if streaming:
            return SseReply(events=aw.stream_events(ANTHROPIC_BODY))
        return JsonReply(body=ANTHROPIC_BODY)
    if streaming:
        return SseReply(events=ow.stream_chunks(OPENAI_BODY))
    return JsonReply(body=OPENAI_BODY)


def request() -> GenerateRequest:
    conversation = Conversation()
    conversation.append_system_message("You are a calculator.")
    conversation.append_user_message("What is six times seven?")
    conversation.append_assistant_message("Let me compute that.")
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    tool = ToolSpec(name="multiply", description="Multiply.", input_schema=schema)
    return GenerateRequest(conversation=conversation.current, tools=(tool,))


async def best_of(call: Callable[[], Awaitable[Any]], calls: int, rounds: int) -> float:
    """µs per call, best round."""
    for _ in range(min(calls, 20)):  # warm up (connection, caches)
        await call()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            await call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


async def main(quick: bool) -> None:
    calls, rounds = (20, 1) if quick else (300, 5)
    req = request()
    async with trio.open_nursery() as nursery:
        server = WireServer()
        server.handler = handler
        await server.start(nursery)
        base = server.base_url
        results: dict[str, float] = {}
        async with httpx2.AsyncClient(base_url=base) as http:
            payload = {
                "model": "m",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": "x"}],
            }

            async def raw_anthropic() -> Any:
                response = await http.post("/v1/messages", json=payload)
                return response.json()

            async def raw_openai() -> Any:
                response = await http.post("/v1/chat/completions", json=payload)
                return response.json()

            results["raw httpx2, Messages body"] = await best_of(raw_anthropic, calls, rounds)
            results["raw httpx2, Chat body"] = await best_of(raw_openai, calls, rounds)
        async with httpx.AsyncClient(base_url=base) as plain:

            async def raw_gemini() -> Any:
                response = await plain.post("/v1beta/models/m:generateContent", json=payload)
                return response.json()

            async def raw_ollama() -> Any:
                response = await plain.post("/api/chat", json=payload)
                return response.json()

            results["raw httpx, generateContent body"] = await best_of(raw_gemini, calls, rounds)
            results["raw httpx, /api/chat body"] = await best_of(raw_ollama, calls, rounds)
        for stream in (False, True):
            async with anthropic_generate(
                model="m", api_key="k", base_url=base, stream=stream
            ) as a:
                results[f"anthropic_generate stream={stream}"] = await best_of(
                    lambda: a(req), calls, rounds
                )
            async with openai_generate(model="m", api_key="k", base_url=base, stream=stream) as o:
                results[f"openai_generate stream={stream}"] = await best_of(
                    lambda: o(req), calls, rounds
                )
            async with gemini_generate(model="m", api_key="k", base_url=base, stream=stream) as g:
                results[f"gemini_generate stream={stream}"] = await best_of(
                    lambda: g(req), calls, rounds
                )
            async with ollama_generate(model="m", base_url=base, stream=stream) as llama:
                results[f"ollama_generate stream={stream}"] = await best_of(
                    lambda: llama(req), calls, rounds
                )
        server_sent = len(server.received)
        nursery.cancel_scope.cancel()

    print(f"per-call time against 127.0.0.1 ({calls} calls x {rounds} rounds, best round)")
    for name, value in results.items():
        floor = results[
            "raw httpx2, Messages body"
            if "anthropic" in name
            else "raw httpx, generateContent body"
            if "gemini" in name
            else "raw httpx, /api/chat body"
            if "ollama" in name
            else "raw httpx2, Chat body"
        ]
        extra = "" if name.startswith("raw") else f"   overhead {value - floor:8.0f} µs"
        print(f"  {name:<36} {value:8.0f} µs{extra}")
    print(f"  ({server_sent} requests served)")


if __name__ == "__main__":
    trio.run(main, "--quick" in sys.argv)
