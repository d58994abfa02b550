"""Usage is validated: no budget or rate limit is ever credited tokens.

A model that reported negative token usage used to switch off ``Budget(max_tokens)``,
``Budget(max_cost_usd)`` and ``GenerateLimiter`` for the rest of the run, and a server
that over-reported cached tokens made ``prompt_tokens - cached`` negative. Now:

- a response whose usage has a negative count, or more cached tokens than its total,
  is an ``InvalidResponseError`` at the seam (where the response is built, and again
  where the loop receives it): the run ends in error and nothing of it is counted;
- the provider adapters clamp what a server over-reports (a negative count to 0, cached
  tokens to the prompt's), with a ``ProviderUsageWarning`` naming provider and field;
- a budget tracker and the limiter refuse a negative charge made by hand.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from providers import _anthropic_wire as anthropic_wire
from providers import _gemini_wire as gemini_wire
from providers import _ollama_wire as ollama_wire
from providers import _openai_responses_wire as responses_wire
from providers import _openai_wire as openai_wire
from providers._server import JsonReply, SseReply, WireServer

import operative
import operative.retry
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    Usage,
    open_run,
    stop_when,
    tool,
)
from operative._core._model import usage_problem
from operative.backpressure import GenerateLimiter
from operative.budgets import Budget, BudgetSpent, BudgetTracker
from operative.conversation import ConversationHistory
from operative.errors import InvalidResponseError
from operative.providers import ProviderError, ProviderUsageWarning
from operative.providers.gemini._generate import usage_from as gemini_usage
from operative.testing import ScriptedModel, check_run_invariants

FIELDS = ("prompt", "completion", "total", "cache_read", "cache_write", "reasoning")


@tool
async def step_tool(n: int) -> int:
    """Echo a number."""
    return n


def first_step() -> GenerateResponse:
    call = ToolCall(id="a", name="step_tool", arguments={"n": 1})
    return GenerateResponse(tool_calls=(call,), usage=Usage.of(40, 10), model="gpt-4o")


async def run_once(
    generate: Any, **options: Any
) -> tuple[operative.RunResult, list[Any], BudgetSpent]:
    conversation = Conversation()
    conversation.append_user_message("go")
    events: list[Any] = []
    async with open_run(
        generate=generate,
        conversation=conversation,
        tools=[step_tool],
        stop_when=stop_when.no_tool_calls(),
        **options,
    ) as run:
        run.add_listener("*", events.append)
    result = await run.result()
    check_run_invariants(result, events)
    spent = run._control.query("budget_spent")
    assert isinstance(spent, BudgetSpent)
    return result, events, spent


# -- the seam ------------------------------------------------------------------------------


def negative(name: str) -> Callable[[], Usage]:
    counts: dict[str, Any] = {name: -1000}
    return lambda: Usage(**counts)


BAD_USAGE: dict[str, tuple[Callable[[], Usage], str]] = {
    **{
        f"negative {name}": (
            negative(name),
            rf"usage\.{name} is -1000; token counts are never negative",
        )
        for name in FIELDS
    },
    "negative prompt, total of the rest": (
        lambda: Usage(prompt=-1000, completion=10, total=-990),
        r"usage\.prompt is -1000",
    ),
    "cached tokens above the total": (
        lambda: Usage(prompt=0, completion=5, total=15, cache_read=50),
        r"usage\.cache_read \+ usage\.cache_write is 50, more than usage\.total \(15\)",
    ),
    "cache writes above the total": (
        lambda: Usage(prompt=0, completion=5, total=15, cache_read=10, cache_write=10),
        r"usage\.cache_read \+ usage\.cache_write is 20, more than usage\.total \(15\)",
    ),
}


@pytest.mark.parametrize(("build", "message"), BAD_USAGE.values(), ids=BAD_USAGE.keys())
async def test_a_response_with_bad_usage_ends_the_run_and_is_not_counted(
    build: Callable[[], Usage], message: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The second step's answer reports bad usage: the run ends in error with an
    InvalidResponseError naming the field, and the budget and the limiter keep what the
    first step spent (the budget would otherwise have been credited)."""
    steps = iter([first_step])

    async def generate(request: GenerateRequest) -> GenerateResponse:
        # Built here: the response refuses bad usage where it is built.
        answer = next(steps, None)
        return answer() if answer else GenerateResponse(content="done", usage=build())

    limiter = GenerateLimiter(tokens_per_minute=1_000_000, estimate=lambda request: 1)
    result, events, spent = await run_once(
        generate, budget=Budget(max_tokens=100, max_cost_usd=1.0), backpressure=limiter
    )
    assert result.finish_reason == "error"
    assert isinstance(result.error, InvalidResponseError), repr(result.error)
    error = str(result.error)
    assert re.search(message, error), error
    assert "Fix the generate function" in error
    assert result.usage == Usage.of(40, 10)
    assert spent.tokens == 50
    assert spent.cost_usd > 0
    # The first attempt's 50 tokens replaced its estimate; the refused one keeps its 1.
    assert limiter.statistics().tokens_in_window == 51
    (failure,) = [event for event in events if event.type == "generate.error"]
    assert failure.error_type == "InvalidResponseError"


async def test_a_response_that_skips_the_checks_of_construction_is_refused_at_the_seam() -> None:
    """A GenerateResponse subclass without the construction checks is checked where the
    loop receives it."""

    class Lenient(GenerateResponse, frozen=True, kw_only=True):
        def __post_init__(self) -> None:
            pass

    model = ScriptedModel([first_step(), Lenient(content="x", usage=Usage(total=-(10**9)))])
    result, _, spent = await run_once(model, budget=Budget(max_tokens=100))
    assert isinstance(result.error, InvalidResponseError)
    assert "usage.total is -1000000000" in str(result.error)
    assert spent.tokens == 50


class Paid(ProviderError):
    """A provider failure that reports what the attempt cost."""

    def __init__(self, message: str, usage: Usage) -> None:
        super().__init__(message, retryable=True)
        self.usage = usage


async def test_a_failed_attempt_reporting_bad_usage_ends_the_run_uncounted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The usage a failed attempt reports is checked too: the run ends with an
    InvalidResponseError whose cause is the attempt's own error."""
    model = ScriptedModel([first_step(), Paid("cut off", Usage(prompt=-500, total=-500))])
    result, _, spent = await run_once(
        model, budget=Budget(max_tokens=100), retry=operative.retry.RetryOptions()
    )
    assert isinstance(result.error, InvalidResponseError)
    assert isinstance(result.error.__cause__, Paid)
    assert "usage.prompt is -500" in str(result.error)
    assert result.usage == Usage.of(40, 10)
    assert spent.tokens == 50


def test_the_check_accepts_what_adapters_build() -> None:
    """Valid usage: counts >= 0; cached tokens within the total (or a total of 0, which
    leaves the parts to count)."""
    for usage in (
        Usage(),
        Usage.of(3, 4),
        Usage(prompt=30, completion=30, total=180, cache_read=100, cache_write=20),
        Usage(prompt=1000, completion=100, cache_read=1000, cache_write=10),
    ):
        assert usage_problem(usage) is None
        GenerateResponse(content="x", usage=usage)


# -- budgets and the limiter refuse a credit -------------------------------------------------


@pytest.mark.parametrize("name", FIELDS)
def test_a_budget_tracker_refuses_usage_with_a_negative_count(name: str) -> None:
    tracker = BudgetTracker(Budget(max_tokens=100, max_cost_usd=1.0), model="gpt-4o")
    tracker.charge_usage(Usage.of(40, 10))
    before = tracker.spent
    with pytest.raises(InvalidArgument, match=rf"{name}=-7: token counts are never negative"):
        tracker.charge_usage(Usage(**{name: -7}))  # type: ignore[arg-type]
    assert tracker.spent == before


def test_a_budget_tracker_refuses_a_negative_cost_or_child_spend() -> None:
    tracker = BudgetTracker(Budget(max_tokens=100, max_cost_usd=1.0))
    with pytest.raises(InvalidArgument, match=r"cost_usd=-0\.5"):
        tracker.charge_usage(Usage.of(1, 1), cost_usd=-0.5)
    for field in ("tokens", "cost_usd", "requests", "tool_calls", "unpriced_tokens"):
        with pytest.raises(InvalidArgument, match=f"{field}=-1"):
            tracker.charge_child(BudgetSpent(**{field: -1}))
    assert tracker.spent == BudgetSpent()


async def test_the_limiter_refuses_a_negative_record() -> None:
    limiter = GenerateLimiter(tokens_per_minute=1000, estimate=lambda request: 100)
    request = GenerateRequest(conversation=ConversationHistory())

    class Quiet:
        async def applied(self, delay: float | None, reason: str) -> None:
            pass

        async def released(self, waited: float) -> None:
            pass

    async with limiter.slot(request, Quiet()) as slot:
        with pytest.raises(
            InvalidArgument, match="GenerateLimiter was given usage with total=-900"
        ):
            slot.record(Usage(total=-900))
    assert limiter.statistics().tokens_in_window == 100


# -- the adapters clamp what a server over-reports ---------------------------------------------


@pytest.fixture
async def wire_server(nursery: trio.Nursery) -> WireServer:
    server = WireServer()
    await server.start(nursery)
    return server


def request(stream: bool) -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message("hello")
    return GenerateRequest(conversation=conversation.current, settings={"stream": stream})


async def answer(generate: Any, stream: bool, warning: str) -> Usage:
    """The usage of ``generate``'s answer, which must warn ``warning`` (a regex)."""
    with pytest.warns(ProviderUsageWarning, match=warning):
        response: GenerateResponse = await generate(request(stream))
    assert response.usage is not None
    assert usage_problem(response.usage) is None
    return response.usage


@pytest.fixture
async def openai_chat(wire_server: WireServer) -> AsyncIterator[Any]:
    pytest.importorskip("openai")
    from operative.providers.openai import openai_generate

    async with openai_generate(
        model="gpt-test", api_key="k", base_url=f"{wire_server.base_url}/v1"
    ) as generate:
        yield generate


def openai_reply(server: WireServer, usage: dict[str, Any], stream: bool) -> None:
    body = openai_wire.completion("hi", usage=usage)
    if stream:
        server.reply(SseReply(events=openai_wire.stream_chunks(body)))
    else:
        server.reply(JsonReply(body=body))


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_chat_clamps_cached_tokens_above_the_prompt(
    wire_server: WireServer, openai_chat: Any, stream: bool
) -> None:
    openai_reply(wire_server, openai_wire.usage_of(10, 5, cached=50), stream)
    usage = await answer(
        openai_chat,
        stream,
        r"openai \(Chat Completions\) reported usage\.prompt_tokens_details\.cached_tokens=50, "
        r"more than usage\.prompt_tokens=10 \(which includes them\): counted as 10",
    )
    assert (usage.prompt, usage.cache_read, usage.completion, usage.total) == (0, 10, 5, 15)


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_chat_clamps_negative_counts(
    wire_server: WireServer, openai_chat: Any, stream: bool
) -> None:
    openai_reply(wire_server, openai_wire.usage_of(-100, 5), stream)
    usage = await answer(
        openai_chat,
        stream,
        r"openai \(Chat Completions\) reported usage\.prompt_tokens=-100, a negative token "
        r"count: counted as 0",
    )
    assert usage == Usage(prompt=0, completion=5, total=5)


@pytest.fixture
async def openai_responses(wire_server: WireServer) -> AsyncIterator[Any]:
    pytest.importorskip("openai")
    from operative.providers.openai import openai_generate

    async with openai_generate(
        model="gpt-test", api="responses", api_key="k", base_url=f"{wire_server.base_url}/v1"
    ) as generate:
        yield generate


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("counts", "warning", "expected"),
    [
        (
            {"input": 10, "output": 5, "cached": 50},
            r"openai \(Responses\) reported usage\.input_tokens_details\.cached_tokens=50, more "
            r"than usage\.input_tokens=10",
            Usage(prompt=0, completion=5, total=15, cache_read=10),
        ),
        (
            {"input": 10, "output": 5, "cached": 6, "cache_write": 6},
            r"openai \(Responses\) reported usage\.input_tokens_details\.cache_write_tokens=6, "
            r"more than usage\.input_tokens less its cached_tokens=4",
            Usage(prompt=0, completion=5, total=15, cache_read=6, cache_write=4),
        ),
        (
            {"input": 10, "output": -5},
            r"openai \(Responses\) reported usage\.output_tokens=-5, a negative token count",
            Usage(prompt=10, completion=0, total=10),
        ),
    ],
)
async def test_openai_responses_clamps(
    wire_server: WireServer,
    openai_responses: Any,
    stream: bool,
    counts: dict[str, int],
    warning: str,
    expected: Usage,
) -> None:
    body = responses_wire.response_body(
        responses_wire.message_item("hi"), usage=responses_wire.usage_of(**counts)
    )
    if stream:
        wire_server.reply(SseReply(events=responses_wire.stream_events(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    assert await answer(openai_responses, stream, warning) == expected


@pytest.fixture
async def anthropic(wire_server: WireServer) -> AsyncIterator[Any]:
    pytest.importorskip("anthropic")
    from operative.providers.anthropic import anthropic_generate

    async with anthropic_generate(
        model="claude-test-1", api_key="k", base_url=wire_server.base_url
    ) as generate:
        yield generate


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("counts", "field", "expected"),
    [
        (
            {"input_tokens": -10, "output_tokens": 5},
            "usage.input_tokens=-10",
            Usage(prompt=0, completion=5, total=5),
        ),
        (
            {"input_tokens": 10, "output_tokens": 5, "cache_read": -3000},
            "usage.cache_read_input_tokens=-3000",
            Usage(prompt=10, completion=5, total=15),
        ),
        (
            {"input_tokens": 10, "output_tokens": 5, "cache_write": -40},
            "usage.cache_creation_input_tokens=-40",
            Usage(prompt=10, completion=5, total=15),
        ),
    ],
)
async def test_anthropic_clamps_negative_counts(
    wire_server: WireServer,
    anthropic: Any,
    stream: bool,
    counts: dict[str, int],
    field: str,
    expected: Usage,
) -> None:
    body = anthropic_wire.message(
        [anthropic_wire.text_block("hi")], usage=anthropic_wire.usage_of(**counts)
    )
    if stream:
        wire_server.reply(SseReply(events=anthropic_wire.stream_events(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    warning = f"anthropic reported {re.escape(field)}, a negative token count"
    assert await answer(anthropic, stream, warning) == expected


def test_anthropic_clamps_negative_thinking_tokens() -> None:
    anthropic_usage = pytest.importorskip("operative.providers.anthropic._convert").usage_from
    with pytest.warns(ProviderUsageWarning, match=r"thinking_tokens=-4"):
        usage = anthropic_usage(10, 5, None, None, thinking=-4)
    assert usage == Usage(prompt=10, completion=5, total=15)


@pytest.fixture
async def gemini(wire_server: WireServer) -> AsyncIterator[Any]:
    from operative.providers.gemini import gemini_generate

    async with gemini_generate(
        model="gemini-test", api_key="k", base_url=wire_server.base_url
    ) as generate:
        yield generate


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("usage", "warning", "expected"),
    [
        (
            gemini_wire.usage_of(10, 5, cached=50),
            r"gemini reported usageMetadata\.cachedContentTokenCount=50, more than "
            r"usageMetadata\.promptTokenCount=10",
            Usage(prompt=0, completion=5, total=15, cache_read=10),
        ),
        (
            gemini_wire.usage_of(10, -5),
            r"gemini reported usageMetadata\.candidatesTokenCount=-5, a negative token count",
            Usage(prompt=10, completion=0, total=10),
        ),
    ],
)
async def test_gemini_clamps(
    wire_server: WireServer,
    gemini: Any,
    stream: bool,
    usage: dict[str, Any],
    warning: str,
    expected: Usage,
) -> None:
    body = gemini_wire.reply_body([{"text": "hi"}], usage=usage)
    if stream:
        wire_server.reply(SseReply(events=gemini_wire.stream_events(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    assert await answer(gemini, stream, warning) == expected


@pytest.fixture
async def ollama(wire_server: WireServer) -> AsyncIterator[Any]:
    from operative.providers.ollama import ollama_generate

    async with ollama_generate(model="llama-test", base_url=wire_server.base_url) as generate:
        yield generate


@pytest.mark.parametrize("stream", [False, True])
async def test_ollama_clamps_negative_counts(
    wire_server: WireServer, ollama: Any, stream: bool
) -> None:
    body = ollama_wire.chat("hi", prompt_eval_count=-10, eval_count=5)
    if stream:
        wire_server.reply(SseReply(events=ollama_wire.ndjson_lines(body)))
    else:
        wire_server.reply(JsonReply(body=body))
    usage = await answer(
        ollama, stream, r"ollama reported prompt_eval_count=-10, a negative token count"
    )
    assert usage == Usage(prompt=0, completion=5, total=5)


# -- a budget's spend never decreases ---------------------------------------------------------

COUNT = st.integers(min_value=-(10**6), max_value=10**6)
RAW_OPENAI = st.fixed_dictionaries(
    {
        "prompt_tokens": COUNT,
        "completion_tokens": COUNT,
        "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": COUNT}),
        "completion_tokens_details": st.fixed_dictionaries({"reasoning_tokens": COUNT}),
    }
).map(lambda raw: ("openai", raw))
RAW_GEMINI = st.fixed_dictionaries(
    {
        "promptTokenCount": COUNT,
        "cachedContentTokenCount": COUNT,
        "toolUsePromptTokenCount": COUNT,
        "thoughtsTokenCount": COUNT,
        "candidatesTokenCount": COUNT,
    }
).map(lambda raw: ("gemini", raw))
RAW_ANTHROPIC = st.tuples(COUNT, COUNT, COUNT, COUNT, COUNT).map(lambda raw: ("anthropic", raw))
HAND_BUILT = st.builds(Usage, **dict.fromkeys(FIELDS, COUNT)).map(lambda u: ("usage", u))
SPENDING = st.lists(
    st.one_of(RAW_OPENAI, RAW_GEMINI, RAW_ANTHROPIC, HAND_BUILT), min_size=1, max_size=20
)


def usage_of(kind: str, raw: Any) -> Usage:
    """What an adapter makes of ``raw`` (clamped, with a warning), or a hand-built Usage."""
    usage: Usage | None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProviderUsageWarning)
        if kind == "openai":
            usage = pytest.importorskip("operative.providers.openai._convert").usage_from_dict(raw)
        elif kind == "gemini":
            usage = gemini_usage(raw)
        elif kind == "anthropic":
            convert = pytest.importorskip("operative.providers.anthropic._convert")
            usage = convert.usage_from(*raw[:4], thinking=raw[4])
        else:
            hand_built: Usage = raw
            return hand_built
    assert usage is not None
    assert usage_problem(usage) is None, (raw, usage)
    return usage


@settings(max_examples=300, deadline=None)
@given(spending=SPENDING, model=st.sampled_from(["gpt-4o", "gemini-2.5-flash", None]))
def test_a_budgets_spend_never_decreases(
    spending: list[tuple[str, Any]], model: str | None
) -> None:
    """Over any usage, clamped by an adapter or built by hand, the tracker's tokens and
    cost never go down: what an adapter clamped is always valid, and what has a negative
    count is refused (and the seam refuses it before a run charges it)."""
    tracker = BudgetTracker(Budget(max_tokens=10**9, max_cost_usd=10**6), model=model)
    for kind, raw in spending:
        usage = usage_of(kind, raw)
        before = tracker.spent
        try:
            tracker.charge_usage(usage)
        except InvalidArgument:
            assert kind == "usage"
            assert min(getattr(usage, name) for name in FIELDS) < 0
        after = tracker.spent
        assert after.tokens >= before.tokens
        assert after.cost_usd >= before.cost_usd
        assert after.unpriced_tokens >= before.unpriced_tokens


async def test_run_charge_refuses_negative_usage_and_charges_nothing() -> None:
    from operative import InvalidArgument, create_agent
    from operative.testing import ScriptedModel

    agent = create_agent(generate=ScriptedModel(["done"]))
    async with agent.open_run("hi") as run:
        before = run.snapshot()
        with pytest.raises(InvalidArgument, match="negative"):
            run._control.charge(Usage(prompt=-5, total=-5))
        assert run.snapshot().usage == before.usage
