"""anthropic_generate(cache=...): prompt-caching breakpoints on the wire, and cache usage."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

from _doubles import get_weather

from operative import (
    Conversation,
    GenerateRequest,
    InvalidArgument,
    ToolCall,
    ToolResult,
    create_agent,
    tool,
)
from operative.providers.anthropic import CACHE_CONTROL_KEY, PromptCache, anthropic_generate
from operative.tools import ToolSpec

from ._anthropic_wire import message, stream_events, text_block, tool_use_block, usage_of
from ._server import JsonReply, SseReply, WireServer

FIVE_MINUTES = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


def breakpoints(body: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Every ``cache_control`` in a request body, keyed by where it is."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, spec in enumerate(body.get("tools", ())):
        if "cache_control" in spec:
            found["tools", i] = spec["cache_control"]
    system = body.get("system", ())
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if "cache_control" in block:
            found["system", i] = block["cache_control"]
    for t, turn in enumerate(body["messages"]):
        for b, block in enumerate(turn["content"]):
            if "cache_control" in block:
                found["messages", t, b] = block["cache_control"]
    if "cache_control" in body:
        found["top",] = body["cache_control"]
    return found


def reply(server: WireServer, body: dict[str, Any], *, stream: bool = False) -> None:
    if stream:
        server.reply(SseReply(events=stream_events(body)))
    else:
        server.reply(JsonReply(body=body))


def spec(name: str) -> ToolSpec:
    return ToolSpec(name=name, description=name, input_schema={"type": "object"})


@tool
async def get_time(city: str) -> str:
    """The time in a city."""
    return f"noon in {city}"


@pytest.mark.parametrize("stream", [False, True])
async def test_auto_marks_system_last_tool_and_latest_user_turn_through_an_agent(
    wire_server: WireServer, stream: bool
) -> None:
    """Each request carries three breakpoints; the message one moves to the newest turn,
    and the run's usage adds up cache reads and writes."""
    reply(
        wire_server,
        message(
            [tool_use_block("toolu_1", "get_weather", {"city": "Oslo"})],
            stop_reason="tool_use",
            usage=usage_of(10, 5, cache_read=0, cache_write=2000),
        ),
        stream=stream,
    )
    reply(
        wire_server,
        message([text_block("Sunny.")], usage=usage_of(12, 3, cache_read=2000, cache_write=40)),
        stream=stream,
    )
    async with anthropic_generate(
        model="claude-test-1",
        api_key="k",
        base_url=wire_server.base_url,
        stream=stream,
        cache="auto",
    ) as generate:
        agent = create_agent(
            generate=generate, instructions="Be brief.", tools=[get_time, get_weather]
        )
        result = await agent.run("Weather in Oslo?")

    assert result.error is None, result.error
    first, second = (r.json for r in wire_server.received)
    assert breakpoints(first) == {
        ("tools", 1): FIVE_MINUTES,
        ("system", 0): FIVE_MINUTES,
        ("messages", 0, 0): FIVE_MINUTES,
    }
    assert breakpoints(second) == {
        ("tools", 1): FIVE_MINUTES,
        ("system", 0): FIVE_MINUTES,
        ("messages", 2, 0): FIVE_MINUTES,  # the tool result; the first turn is bare again
    }
    assert second["messages"][2]["content"][0]["type"] == "tool_result"
    assert (result.usage.prompt, result.usage.completion) == (22, 8)
    assert (result.usage.cache_read, result.usage.cache_write) == (2000, 2040)
    assert result.usage.total == 22 + 8 + 2000 + 2040
    for received in wire_server.received:
        assert "anthropic-beta" not in received.headers


async def test_nothing_is_marked_by_default(wire_server: WireServer) -> None:
    reply(wire_server, message([text_block("ok")]))
    conversation = Conversation()
    conversation.append_system_message("sys")
    conversation.append_user_message("hi")
    async with anthropic_generate(model="m", api_key="k", base_url=wire_server.base_url) as g:
        await g(GenerateRequest(conversation=conversation.current, tools=(spec("f"),)))
    assert b"cache_control" not in wire_server.last.body


async def test_a_message_hint_marks_that_messages_last_block(wire_server: WireServer) -> None:
    """Without cache=, only hinted messages get breakpoints: a user message, a system
    message, an assistant turn (after its thinking blocks) and a tool result."""
    reply(wire_server, message([text_block("ok")]))
    thinking = {"type": "thinking", "thinking": "hm", "signature": "s"}
    conversation = Conversation()
    conversation.append_system_message("rules", metadata={CACHE_CONTROL_KEY: True})
    conversation.append_system_message("more rules")
    conversation.append_user_message("a long document", metadata={CACHE_CONTROL_KEY: "5m"})
    conversation.append_user_message("question")
    conversation.append_assistant_message(
        "Looking.",
        [ToolCall(id="t1", name="f", arguments={})],
        metadata={"anthropic": {"thinking": [thinking]}, CACHE_CONTROL_KEY: FIVE_MINUTES},
    )
    conversation.append_tool_result(ToolResult(call_id="t1", tool_name="f", outcome="success"))
    async with anthropic_generate(model="m", api_key="k", base_url=wire_server.base_url) as g:
        await g(GenerateRequest(conversation=conversation.current))
    body = wire_server.last.json
    assert breakpoints(body) == {
        ("system", 0): FIVE_MINUTES,
        ("messages", 0, 0): FIVE_MINUTES,
        ("messages", 1, 2): FIVE_MINUTES,
    }
    assert body["messages"][1]["content"][0] == thinking  # sent back unchanged
    assert body["messages"][1]["content"][2]["type"] == "tool_use"
    assert "cache_control" not in body["messages"][0]["content"][1]  # "question"


async def test_never_more_than_four_breakpoints(wire_server: WireServer) -> None:
    """Hints are kept before automatic marks; among hints, the latest ones."""
    conversation = Conversation()
    conversation.append_system_message("sys")
    for n in range(6):
        conversation.append_user_message(f"doc {n}", metadata={CACHE_CONTROL_KEY: True})
        conversation.append_assistant_message(f"read {n}")
    conversation.append_user_message("question")
    request = GenerateRequest(conversation=conversation.current, tools=(spec("f"),))
    reply(wire_server, message([text_block("ok")]))
    reply(wire_server, message([text_block("ok")]))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, cache="auto"
    ) as g:
        await g(request)
        everything = breakpoints(wire_server.last.json)
        assert len(everything) == 4
        # Hints come first, and of six the four latest are kept.
        assert sorted(everything) == [
            ("messages", 4, 0),
            ("messages", 6, 0),
            ("messages", 8, 0),
            ("messages", 10, 0),
        ]

        two_hints = Conversation()
        two_hints.append_system_message("sys")
        two_hints.append_user_message("doc", metadata={CACHE_CONTROL_KEY: True})
        two_hints.append_assistant_message("read")
        two_hints.append_user_message("doc 2", metadata={CACHE_CONTROL_KEY: True})
        two_hints.append_assistant_message("read")
        two_hints.append_user_message("question")
        await g(GenerateRequest(conversation=two_hints.current, tools=(spec("f"),)))
        # Two hints, the latest turn, the system; the tools breakpoint is the one left out.
        assert sorted(breakpoints(wire_server.last.json)) == [
            ("messages", 0, 0),
            ("messages", 2, 0),
            ("messages", 4, 0),
            ("system", 0),
        ]


async def test_the_callers_own_breakpoints_count_against_the_four(
    wire_server: WireServer,
) -> None:
    """cache_control already in given system blocks and tools, and the top-level one."""
    server_tool = {
        "type": "web_search_20250305",
        "name": "web_search",
        "cache_control": FIVE_MINUTES,
    }
    given_system = [{"type": "text", "text": "house rules", "cache_control": ONE_HOUR}]
    reply(wire_server, message([text_block("ok")]))
    conversation = Conversation()
    conversation.append_system_message("sys")
    conversation.append_user_message("hi")
    async with anthropic_generate(
        model="m",
        api_key="k",
        base_url=wire_server.base_url,
        cache=PromptCache(messages=2),
        system=given_system,
        tools=[server_tool],
        cache_control=FIVE_MINUTES,
    ) as g:
        await g(GenerateRequest(conversation=conversation.current, tools=(spec("f"),)))
    body = wire_server.last.json
    assert breakpoints(body) == {
        ("tools", 1): FIVE_MINUTES,  # the caller's, on the last tool already
        ("system", 0): ONE_HOUR,  # the caller's
        ("top",): FIVE_MINUTES,  # the caller's automatic caching
        ("messages", 0, 0): FIVE_MINUTES,  # the one slot left
    }
    assert given_system[0] == {"type": "text", "text": "house rules", "cache_control": ONE_HOUR}
    assert "cache_control" not in body["system"][1]


async def test_one_hour_ttl_and_longer_ttls_first(wire_server: WireServer) -> None:
    """ttl="1h" goes on every mark; a mark in front of a one-hour hint lasts an hour too."""
    conversation = Conversation()
    conversation.append_system_message("sys")
    conversation.append_user_message("hi")
    reply(wire_server, message([text_block("ok")]))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, cache=PromptCache(ttl="1h")
    ) as g:
        await g(GenerateRequest(conversation=conversation.current, tools=(spec("f"),)))
    assert set(map(str, breakpoints(wire_server.last.json).values())) == {str(ONE_HOUR)}
    assert "anthropic-beta" not in wire_server.last.headers

    mixed = Conversation()
    mixed.append_system_message("sys")
    mixed.append_user_message("big document", metadata={CACHE_CONTROL_KEY: "1h"})
    mixed.append_assistant_message("read")
    mixed.append_user_message("question")
    reply(wire_server, message([text_block("ok")]))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, cache="auto"
    ) as g:
        await g(GenerateRequest(conversation=mixed.current, tools=(spec("f"),)))
    assert breakpoints(wire_server.last.json) == {
        ("tools", 0): ONE_HOUR,
        ("system", 0): ONE_HOUR,
        ("messages", 0, 0): ONE_HOUR,
        ("messages", 2, 0): FIVE_MINUTES,
    }


async def test_prompt_cache_chooses_what_is_marked(wire_server: WireServer) -> None:
    conversation = Conversation()
    conversation.append_system_message("sys")
    conversation.append_user_message("one")
    conversation.append_assistant_message("ok")
    conversation.append_user_message("two")
    conversation.append_assistant_message("ok")
    conversation.append_user_message("three")
    request = GenerateRequest(conversation=conversation.current, tools=(spec("f"),))
    cases: list[tuple[PromptCache, set[tuple[Any, ...]]]] = [
        (
            PromptCache(system=False, tools=False, messages=2),
            {("messages", 2, 0), ("messages", 4, 0)},
        ),
        (PromptCache(messages=None), {("system", 0), ("tools", 0)}),
        (PromptCache(tools=False, messages="last"), {("system", 0), ("messages", 4, 0)}),
        (PromptCache(system=False, tools=False, messages=0), set()),
    ]
    for cache, expected in cases:
        reply(wire_server, message([text_block("ok")]))
        async with anthropic_generate(
            model="m", api_key="k", base_url=wire_server.base_url, cache=cache
        ) as g:
            await g(request)
        assert set(breakpoints(wire_server.last.json)) == expected, cache


async def test_a_requests_settings_turn_caching_on_or_off(wire_server: WireServer) -> None:
    conversation = Conversation()
    conversation.append_user_message("hi")
    reply(wire_server, message([text_block("ok")]))
    reply(wire_server, message([text_block("ok")]))
    async with anthropic_generate(
        model="m", api_key="k", base_url=wire_server.base_url, cache="auto"
    ) as g:
        await g(GenerateRequest(conversation=conversation.current, settings={"cache": None}))
        assert b"cache_control" not in wire_server.last.body
    async with anthropic_generate(model="m", api_key="k", base_url=wire_server.base_url) as g:
        await g(GenerateRequest(conversation=conversation.current, settings={"cache": "auto"}))
    body = wire_server.last.json
    assert breakpoints(body) == {("messages", 0, 0): FIVE_MINUTES}
    assert "cache" not in body


async def test_bad_cache_settings_are_refused(wire_server: WireServer) -> None:
    with pytest.raises(InvalidArgument, match="cache="):
        anthropic_generate(model="m", cache="always")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="ttl"):
        PromptCache(ttl="2h")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="messages"):
        PromptCache(messages=5)
    with pytest.raises(InvalidArgument, match="system"):
        PromptCache(system="yes")  # type: ignore[arg-type]
    conversation = Conversation()
    conversation.append_user_message("hi", metadata={CACHE_CONTROL_KEY: "forever"})
    async with anthropic_generate(model="m", api_key="k", base_url=wire_server.base_url) as g:
        with pytest.raises(InvalidArgument, match=re.escape(CACHE_CONTROL_KEY)):
            await g(GenerateRequest(conversation=conversation.current))
    assert wire_server.received == []


PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def _caching_samples() -> list[str]:
    text = PAGE.read_text()
    start = text.index("## Prompt caching (Anthropic)")
    text = text[start : text.index("\n## ", start + 1)]
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


@pytest.mark.heavy  # the sample in a real process: seconds
def test_the_docs_caching_sample_prints_what_its_comments_say() -> None:
    """The runnable sample of the prompt-caching section, over a stand-in transport."""
    samples = [s for s in _caching_samples() if "MockTransport" in s]
    assert len(samples) == 1
    done = subprocess.run(
        [sys.executable, "-c", samples[0]], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    expected = re.findall(r"^\s*print\(.*\)  # (.*)$", samples[0], flags=re.MULTILINE)
    assert expected
    assert done.stdout.splitlines() == expected
