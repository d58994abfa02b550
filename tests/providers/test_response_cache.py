"""The response cache: keys, hits and misses, TTL, bypass, stampedes, corrupt records."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from operative import (
    ConversationHistory,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    Message,
    ToolCall,
    Usage,
    create_agent,
)
from operative.kvstore import ConditionalTextValueStore, MemoryStore, Put, SqliteStore
from operative.providers import ResponseCache, cached, response_cache_key, response_key_material
from operative.testing import ScriptedModel
from operative.tools import ToolSpec

CACHE_CONTROL_KEY = "anthropic.cache_control"  # operative.providers.anthropic's hint key


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ConditionalTextValueStore]:
    kv: ConditionalTextValueStore = (
        MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "cache.db")
    )
    async with kv:
        yield kv


def _request(
    *texts: str, ids: tuple[str, ...] = (), settings: dict[str, Any] | None = None, **kw: Any
) -> GenerateRequest:
    ids = ids or tuple(f"m{i}" for i in range(len(texts)))
    messages = tuple(
        Message(id=i, role="user", content=text) for i, text in zip(ids, texts, strict=True)
    )
    return GenerateRequest(
        conversation=ConversationHistory(messages=messages), settings=settings or {}, **kw
    )


def _model(answer: str = "four", delay: float = 0.0) -> ScriptedModel:
    return ScriptedModel(
        lambda request: GenerateResponse(content=answer, usage=Usage.of(10, 2)), delay=delay
    )


# -- keys -----------------------------------------------------------------------------


def test_message_ids_do_not_change_the_key() -> None:
    """Two runs' transcripts differ only in message ids: same key."""
    a = response_key_material(_request("hi", "there", ids=("a1", "a2")))
    b = response_key_material(_request("hi", "there", ids=("b1", "b2")))
    assert response_cache_key(a) == response_cache_key(b)
    assert response_cache_key(a) != response_cache_key(response_key_material(_request("hi")))


def test_settings_order_and_unkeyed_settings_do_not_change_the_key() -> None:
    """Settings are sorted; prompt-caching, streaming and the cache's switch are left out."""
    one = _request("q", settings={"temperature": 0, "max_tokens": 5})
    two = _request(
        "q",
        settings={"max_tokens": 5, "cache": "auto", "stream": True, "temperature": 0},
    )
    assert response_cache_key(response_key_material(one)) == response_cache_key(
        response_key_material(two)
    )
    other = _request("q", settings={"max_tokens": 6, "temperature": 0})
    assert response_cache_key(response_key_material(one)) != response_cache_key(
        response_key_material(other)
    )


def test_tool_call_ids_are_renumbered_and_hints_ignored() -> None:
    """Provider call ids and prompt-cache hints do not matter; tools and schema do."""

    def history(call_id: str, hint: bool) -> ConversationHistory:
        meta = {CACHE_CONTROL_KEY: True, "operative.cache": "miss"} if hint else {}
        return ConversationHistory(
            messages=(
                Message(id="u", role="user", content="weather?", metadata=meta),
                Message(
                    id="a",
                    role="assistant",
                    tool_calls=(ToolCall(id=call_id, name="weather", arguments={"c": "x"}),),
                ),
                Message(id="t", role="tool", content="sunny", tool_call_id=call_id),
            )
        )

    spec = ToolSpec(name="weather", description="d", input_schema={"type": "object"})
    one = GenerateRequest(conversation=history("toolu_1", False), tools=(spec,))
    two = GenerateRequest(conversation=history("call_9", True), tools=(spec,), step=3)
    key = response_cache_key(response_key_material(one))
    assert key == response_cache_key(response_key_material(two))
    no_tools = GenerateRequest(conversation=history("toolu_1", False))
    schema = GenerateRequest(
        conversation=history("toolu_1", False), tools=(spec,), output_schema={"type": "string"}
    )
    assert key != response_cache_key(response_key_material(no_tools))
    assert key != response_cache_key(response_key_material(schema))
    assert key.startswith("operative.cache/")
    assert len(key) == len("operative.cache/") + 64


def test_the_provider_name_is_part_of_the_key() -> None:
    """Two wrapped providers never share answers."""
    request = _request("q")
    assert response_key_material(request, name="a") != response_key_material(request, name="b")


def test_arguments_are_checked() -> None:
    """Bad options raise InvalidArgument at once."""
    with pytest.raises(InvalidArgument, match="ConditionalTextValueStore"):
        cached(_model(), store=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="ttl"):
        cached(_model(), store=MemoryStore(), ttl=0)
    with pytest.raises(InvalidArgument, match="callable"):
        cached(_model(), store=MemoryStore(), bypass="yes")  # type: ignore[arg-type]


# -- hits and misses --------------------------------------------------------------------


async def test_second_identical_request_is_a_hit(store: ConditionalTextValueStore) -> None:
    """The first call misses and stores; the second is answered from the store."""
    model = _model()
    generate = cached(model, store=store)
    first = await generate(_request("2+2?", ids=("x",)))
    second = await generate(_request("2+2?", ids=("y",)))
    assert first.metadata["operative.cache"] == "miss"
    assert first.usage == Usage.of(10, 2)
    assert second.metadata["operative.cache"] == "hit"
    assert second.content == "four"
    assert second.usage == Usage()
    assert model.calls == 1
    third = await generate(_request("3+3?"))
    assert third.metadata["operative.cache"] == "miss"
    assert model.calls == 2
    assert generate.statistics()["hits"] == 1
    assert generate.statistics()["stored"] == 2


async def test_ttl_expires_on_trios_clock(
    store: ConditionalTextValueStore, autojump_clock: trio.testing.MockClock
) -> None:
    """An answer is fresh for ttl seconds of (virtual) time, then fetched again."""
    model = _model()
    generate = cached(model, store=store, ttl=60)
    await generate(_request("q"))
    await trio.sleep(59)
    assert (await generate(_request("q"))).metadata["operative.cache"] == "hit"
    await trio.sleep(2)
    assert (await generate(_request("q"))).metadata["operative.cache"] == "miss"
    assert model.calls == 2


async def test_bypass_and_refresh(store: ConditionalTextValueStore) -> None:
    """'bypass' neither reads nor writes; 'refresh' calls and overwrites; the setting is
    removed before the provider sees the request; a predicate can bypass too."""
    answers = iter(["old", "new", "other"])
    model = ScriptedModel(lambda request: next(answers))
    generate = cached(model, store=store, bypass=lambda r: r.settings.get("temperature") == 1)
    assert (await generate(_request("q"))).content == "old"
    bypassed = await generate(_request("q", settings={"response_cache": "bypass"}))
    assert bypassed.metadata["operative.cache"] == "bypass"
    assert bypassed.content == "new"
    assert "response_cache" not in model.requests[-1].settings
    assert (await generate(_request("q"))).content == "old"
    refreshed = await generate(_request("q", settings={"response_cache": "refresh"}))
    assert refreshed.content == "other"
    assert refreshed.metadata["operative.cache"] == "refresh"
    assert (await generate(_request("q"))).content == "other"
    model2 = _model("fresh")
    generate2 = cached(model2, store=store, bypass=lambda r: r.settings.get("temperature") == 1)
    await generate2(_request("z", settings={"temperature": 1}))
    await generate2(_request("z", settings={"temperature": 1}))
    assert model2.calls == 2
    with pytest.raises(InvalidArgument, match="response_cache"):
        await generate(_request("q", settings={"response_cache": "sometimes"}))


async def test_concurrent_identical_requests_make_one_call(
    store: ConditionalTextValueStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A stampede of identical requests makes one provider call; the rest share it."""
    model = _model(delay=5)
    generate = cached(model, store=store)
    results: list[GenerateResponse] = []

    async def ask(i: int) -> None:
        results.append(await generate(_request("q", ids=(f"id{i}",))))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(ask, i)
    assert model.calls == 1
    assert sorted(r.metadata["operative.cache"] for r in results) == ["hit"] * 4 + ["miss"]
    assert generate.statistics()["in_flight"] == 0


async def test_a_cancelled_leader_hands_over_to_a_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """If the caller making the call is cancelled, a waiter makes it instead."""
    model = _model(delay=10)
    generate = cached(model, store=MemoryStore())
    got: list[GenerateResponse] = []

    async def follower() -> None:
        got.append(await generate(_request("q")))

    async with trio.open_nursery() as nursery:
        with trio.move_on_after(3):
            nursery.start_soon(follower)
            await generate(_request("q"))
    assert model.calls == 2
    assert got[0].metadata["operative.cache"] == "miss"


async def test_errors_and_empty_answers_are_not_stored(store: ConditionalTextValueStore) -> None:
    """A raised error propagates and is not cached; an empty answer is not stored."""
    model = ScriptedModel([ConnectionError("down"), GenerateResponse(), "fine", "unused"])
    generate = cached(model, store=store)
    with pytest.raises(ConnectionError):
        await generate(_request("q"))
    assert (await generate(_request("q"))).metadata["operative.cache"] == "miss"
    assert (await generate(_request("q"))).content == "fine"
    assert (await generate(_request("q"))).metadata["operative.cache"] == "hit"
    assert model.calls == 3


async def test_corrupt_record_is_a_logged_miss(
    store: ConditionalTextValueStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Garbage under a key is logged and treated as a miss, then overwritten."""
    model = _model()
    generate = cached(model, store=store)
    key = generate.key_for(_request("q"))
    await store.conditional_batch([Put(key=key, value='{"not": "a record"')])
    with caplog.at_level(logging.WARNING, logger="operative.providers.cache"):
        response = await generate(_request("q"))
    assert response.metadata["operative.cache"] == "miss"
    assert "corrupt cache record" in caplog.text
    assert generate.statistics()["corrupt"] == 1
    assert (await generate(_request("q"))).metadata["operative.cache"] == "hit"


async def test_store_failures_never_fail_a_request(caplog: pytest.LogCaptureFixture) -> None:
    """A store that raises is logged around: the provider still answers."""

    class Broken(MemoryStore):
        async def get(self, key: str) -> Any:
            raise OSError("disk gone")

        async def conditional_batch(self, operations: Any) -> Any:
            raise OSError("disk gone")

    model = _model()
    generate = cached(model, store=Broken())
    with caplog.at_level(logging.WARNING, logger="operative.providers.cache"):
        assert (await generate(_request("q"))).content == "four"
    assert "cache read" in caplog.text
    assert "cache write" in caplog.text


async def test_purge_expired(autojump_clock: trio.testing.MockClock) -> None:
    """purge_expired deletes expired and corrupt records and keeps fresh ones."""
    store = MemoryStore()
    generate = cached(_model(), store=store, ttl=10)
    await generate(_request("old"))
    await trio.sleep(11)
    await generate(_request("new"))
    await store.conditional_batch([Put(key="operative.cache/junk", value="{")])
    assert await generate.purge_expired() == 2
    assert len(await store.list("operative.cache/")) == 1


async def test_prompt_cache_hints_pass_through() -> None:
    """settings['cache'] and message hints reach the provider untouched."""
    model = _model()
    generate = cached(model, store=MemoryStore())
    history = ConversationHistory(
        messages=(Message(id="u", role="user", content="q", metadata={CACHE_CONTROL_KEY: "1h"}),)
    )
    await generate(GenerateRequest(conversation=history, settings={"cache": "auto"}))
    seen = model.requests[0]
    assert seen.settings == {"cache": "auto"}
    assert seen.conversation.messages[0].metadata == {CACHE_CONTROL_KEY: "1h"}


async def test_an_agent_run_twice_hits_the_cache() -> None:
    """Through the loop: the second run of the same input never calls the model."""
    model = _model("Paris")
    generate = cached(model, store=MemoryStore())
    assert isinstance(generate, ResponseCache)
    agent = create_agent(generate=generate, instructions="Answer briefly.")
    first = await agent.run("Capital of France?")
    second = await agent.run("Capital of France?")
    assert first.content == second.content == "Paris"
    assert model.calls == 1
    assert second.usage == Usage()
