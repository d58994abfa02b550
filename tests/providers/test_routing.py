"""routing(): per-request choice by predicate, model name, tool need and estimated cost."""

from __future__ import annotations

import pytest

from operative import (
    Conversation,
    GenerateRequest,
    InvalidArgument,
    OperativeError,
    create_agent,
    tool,
)
from operative._core._errors import RunFailed
from operative.providers import (
    NoRouteError,
    Route,
    by_model,
    estimate_tokens,
    fallover,
    fits_tokens,
    needs_tools,
    per_token_cost,
    routing,
)
from operative.providers.test import MockProvider, provider_error
from operative.retry import RetryOptions
from operative.tools import ToolSpec

SPEC = ToolSpec(name="lookup", description="Look something up.", input_schema={"type": "object"})


def request_of(
    text: str = "hi", *, tools: tuple[ToolSpec, ...] = (), model: str | None = None
) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message(text)
    settings = {} if model is None else {"model": model}
    return GenerateRequest(conversation=conversation.current, tools=tools, settings=settings)


def named(name: str) -> MockProvider:
    return MockProvider(lambda request: f"from {name}", name=name)


async def test_the_first_matching_route_answers_and_is_named_in_the_metadata() -> None:
    claude, gpt, other = named("claude"), named("gpt"), named("other")
    generate = routing(
        [
            Route(when=by_model("claude-"), generate=claude),
            Route(when=by_model("gpt-", "o3"), generate=gpt, name="openai"),
        ],
        default=other,
    )
    response = await generate(request_of(model="claude-sonnet-4-5"))
    assert (response.content, response.metadata["operative.route"]) == ("from claude", "claude")
    response = await generate(request_of(model="o3-mini"))
    assert (response.content, response.metadata["operative.route"]) == ("from gpt", "openai")
    response = await generate(request_of(model="llama3"))
    assert (response.content, response.metadata["operative.route"]) == ("from other", "default")
    response = await generate(request_of())  # no model setting at all
    assert response.metadata["operative.route"] == "default"


async def test_by_tool_need_through_an_agent() -> None:
    @tool
    async def lookup(key: str) -> str:
        """Look something up."""
        return key

    with_tools, plain = named("tools"), named("plain")
    generate = routing(
        [
            Route(when=needs_tools(), generate=with_tools),
            Route(when=needs_tools(False), generate=plain),
        ]
    )
    agent = create_agent(generate=generate, tools=[lookup], retry=RetryOptions(max_attempts=1))
    result = await agent.run("hi")
    assert result.content == "from tools"
    assert result.conversation.messages[-1].metadata["operative.route"] == "tools"
    result = await create_agent(generate=generate).run("hi")
    assert result.content == "from plain"
    assert (with_tools.calls, plain.calls) == (1, 1)


async def test_a_plain_predicate_routes_too() -> None:
    long, short = named("long"), named("short")
    generate = routing(
        [Route(when=lambda r: len(r.conversation.messages) > 1, generate=long)], default=short
    )
    assert (await generate(request_of())).content == "from short"


async def test_cheapest_route_within_max_cost_wins() -> None:
    big, small, medium = named("big"), named("small"), named("medium")
    generate = routing(
        [
            Route(generate=big, cost=per_token_cost(15.0)),
            Route(generate=small, cost=per_token_cost(0.25), when=fits_tokens(100)),
            Route(generate=medium, cost=per_token_cost(3.0)),
        ],
        prefer="cheapest",
        max_cost=0.01,
    )
    short = request_of("x" * 40)  # ~10 tokens: every route fits; small is cheapest
    assert (await generate(short)).metadata["operative.route"] == "small"
    longer = request_of("x" * 4000)  # ~1000 tokens: too big for small; medium is next
    assert (await generate(longer)).metadata["operative.route"] == "medium"
    huge = request_of("x" * 40_000)  # ~10k tokens: medium costs 0.03 > max_cost
    with pytest.raises(NoRouteError, match=r"max_cost=0\.01") as caught:
        await generate(huge)
    assert caught.value.routes == ("big", "small", "medium")


async def test_cheapest_ties_go_to_the_earlier_route() -> None:
    a, b = named("a"), named("b")
    generate = routing(
        [Route(generate=a, cost=lambda r: 1.0), Route(generate=b, cost=lambda r: 1.0)],
        prefer="cheapest",
    )
    assert (await generate(request_of())).metadata["operative.route"] == "a"


async def test_no_match_without_default_is_a_clear_operative_error() -> None:
    generate = routing([Route(when=by_model("claude-"), generate=named("claude"))])
    with pytest.raises(OperativeError, match=r"no route accepts this request.*'gpt-5'"):
        await generate(request_of(model="gpt-5"))
    with pytest.raises(RunFailed) as failed:
        await create_agent(generate=generate, settings={"model": "gpt-5"}).run("hi")
    result = failed.value.result
    assert result.finish_reason == "error"
    assert isinstance(result.error, NoRouteError)


async def test_routing_and_fallover_compose() -> None:
    down = MockProvider(lambda r: provider_error(529), name="down")
    generate = routing([Route(when=by_model("claude-"), generate=fallover([down, named("up")]))])
    response = await generate(request_of(model="claude-x"))
    assert response.content == "from up"
    assert response.metadata["operative.route"] == "fallover(down, up)"
    assert response.metadata["operative.provider"] == "up"


def test_estimate_tokens_counts_messages_and_tool_specs() -> None:
    assert estimate_tokens(request_of("x" * 400)) == 100
    assert estimate_tokens(request_of("x" * 400, tools=(SPEC,))) > 100


def test_bad_routes_are_rejected_at_construction() -> None:
    g = named("g")
    with pytest.raises(InvalidArgument):
        routing([])
    with pytest.raises(InvalidArgument):
        routing([g])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument):
        Route(generate="nope")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Route(generate=g, when="model")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Route(generate=g, name="")
    with pytest.raises(InvalidArgument, match="two routes are named"):
        routing([Route(generate=g, name="a"), Route(generate=g, name="a")])
    with pytest.raises(InvalidArgument, match="no cost estimate"):
        routing([Route(generate=g)], prefer="cheapest")
    with pytest.raises(InvalidArgument):
        routing([Route(generate=g)], max_cost=1.0)
    with pytest.raises(InvalidArgument):
        routing([Route(generate=g)], prefer="fastest")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        by_model()
    with pytest.raises(InvalidArgument):
        fits_tokens(0)
    with pytest.raises(InvalidArgument):
        per_token_cost(-1)


def test_unnamed_routes_take_unique_names_from_their_generate_functions() -> None:
    a, b = named("same"), named("same")
    router = routing([Route(generate=a), Route(generate=b), Route(generate=a, name="x")])
    assert [name for name, _ in router.routes] == ["same", "same#2", "x"]
