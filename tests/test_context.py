"""Context management: token estimates, model windows, compaction and the per-run manager."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operative import (
    Conversation,
    ConversationHistory,
    FilePart,
    GenerateRequest,
    GenerateResponse,
    ImagePart,
    InvalidArgument,
    Message,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
    open_run,
)
from operative.context import (
    CONTEXT_WINDOWS,
    ApproximateTokenCounter,
    Compaction,
    CompactionStrategy,
    ContextManagement,
    ContextManager,
    TokenCounter,
    as_token_counter,
    context_window,
    drop_oldest,
    is_summary,
    keep_last,
    render,
    summarize,
)
from operative.conversation import new_message_id, resolve_tool_result, tool_result_message
from operative.errors import InvalidResponseError
from operative.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]


def _message(role: str, content: str = "", **fields: Any) -> Message:
    return Message(id=new_message_id(), role=role, content=content, **fields)  # type: ignore[arg-type]


def _call(name: str = "search", **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{new_message_id()}", name=name, arguments=arguments)


def _result(call: ToolCall, value: str = "ok") -> Message:
    return tool_result_message(
        ToolResult(call_id=call.id, tool_name=call.name, outcome="success", value=value)
    )


def _turn(text: str, steps: int = 1, size: int = 400) -> list[Message]:
    """A user message, ``steps`` tool steps, then a plain answer."""
    out = [_message("user", text)]
    for _ in range(steps):
        call = _call(q=text)
        out += [_message("assistant", "looking", tool_calls=(call,)), _result(call, "r" * size)]
    out.append(_message("assistant", f"answer to {text}"))
    return out


def _transcript(turns: int = 5, steps: int = 1) -> tuple[Message, ...]:
    messages = [_message("system", "You are careful.")]
    for index in range(turns):
        messages += _turn(f"question {index}", steps)
    return tuple(messages)


def _compact(
    strategy: CompactionStrategy,
    messages: Sequence[Message],
    budget: int,
    counter: TokenCounter | None = None,
) -> Compaction:
    async def run() -> Compaction:
        return await strategy.compact(
            messages, budget=budget, counter=counter or ApproximateTokenCounter()
        )

    return trio.run(run)


COUNTER = ApproximateTokenCounter()


# -- counting -------------------------------------------------------------------------------


def test_counts_text_in_quarters_plus_overhead() -> None:
    """Text costs a token per four characters, rounded up, plus the per-message overhead."""
    assert COUNTER.count(_message("user", "")) == 4
    assert COUNTER.count(_message("user", "abcd")) == 5
    assert COUNTER.count(_message("user", "abcde")) == 6
    assert COUNTER.count_messages([_message("user", "abcd")] * 3) == 15


def test_counts_tool_calls_results_and_parts() -> None:
    """Tool-call JSON and tool names count as text; images and files cost a fixed amount."""
    call = ToolCall(id="c1", name="search", arguments={"q": "weather in Lisbon"})
    with_call = _message("assistant", "", tool_calls=(call,))
    encoded = len(msgspec.json.encode(call.arguments))
    assert COUNTER.count(with_call) == 4 + -(-(2 + 6 + encoded) // 4)
    raw = ToolCall(id="c1", name="search", arguments='{"q": "x"}')
    assert COUNTER.count(_message("assistant", "", tool_calls=(raw,))) == 4 + -(-(2 + 6 + 10) // 4)
    result = _result(call, "sunny")
    assert COUNTER.count(result) == 4 + -(-(5 + 6) // 4)
    parts = (
        TextPart(text="abcd"),
        ImagePart(url="https://example.com/a.png"),
        FilePart(file_id="f"),
    )
    custom = ApproximateTokenCounter(image_tokens=100, file_tokens=7, message_overhead=0)
    assert custom.count(_message("user", parts)) == 1 + 100 + 7  # type: ignore[arg-type]


def test_chars_per_token_is_adjustable() -> None:
    """A denser ratio gives a higher estimate."""
    dense = ApproximateTokenCounter(chars_per_token=2, message_overhead=0)
    assert dense.count(_message("user", "abcdef")) == 3


def test_cached_counts_follow_the_message_object() -> None:
    """A message replaced under the same id (resolve_tool_result) is counted afresh."""
    counter = ApproximateTokenCounter()
    call = _call(q="x")
    first = _message("assistant", "", tool_calls=(call,))
    again = msgspec.structs.replace(first, content="a much longer text than before")
    assert counter.count(first) < counter.count(again)
    assert counter.count(first) == ApproximateTokenCounter().count(first)


def test_the_cache_is_bounded() -> None:
    """The cache never holds more than cache_size messages."""
    counter = ApproximateTokenCounter(cache_size=3)
    for _ in range(10):
        counter.count(_message("assistant", "", tool_calls=(_call(q="x"),)))
    assert len(counter._cache) == 3
    uncached = ApproximateTokenCounter(cache_size=0)
    uncached.count(_message("assistant", "", tool_calls=(_call(q="x"),)))
    assert not uncached._cache


def test_any_callable_is_a_counter() -> None:
    """A plain Message -> int callable becomes a TokenCounter; other things are refused."""
    counter = as_token_counter(lambda m: len(m.text))
    assert isinstance(counter, TokenCounter)
    assert counter.count_messages([_message("user", "ab"), _message("user", "abc")]) == 5
    assert as_token_counter(COUNTER) is COUNTER
    with pytest.raises(InvalidArgument):
        as_token_counter(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        ApproximateTokenCounter(chars_per_token=0)
    with pytest.raises(InvalidArgument):
        ApproximateTokenCounter(image_tokens=-1)


# -- model windows ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("claude-sonnet-4-5-20250929", 200_000),
        ("claude-3-5-haiku-latest", 200_000),
        ("claude-instant-1.2", 100_000),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", 200_000),
        ("us.anthropic.claude-opus-4-1-20250805-v1:0", 200_000),
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1-nano", 1_047_576),
        ("gpt-4", 8_192),
        ("gpt-4-turbo-2024-04-09", 128_000),
        ("gpt-5-mini", 400_000),
        ("o3-mini", 200_000),
        ("o1-mini-2024-09-12", 128_000),
        ("openai/gpt-4o", 128_000),
        ("gemini-2.5-flash", 1_048_576),
        ("models/gemini-1.5-pro-002", 2_097_152),
        ("Gemini-2.0-Flash", 1_048_576),
        ("llama3.1:8b", None),
    ],
)
def test_context_windows_by_prefix(model: str, window: int | None) -> None:
    """The longest known prefix gives a model's window, vendor prefixes aside."""
    assert context_window(model) == window


def test_context_windows_can_be_overridden() -> None:
    """Overrides are consulted first; the default table cannot be changed in place."""
    assert context_window("llama3.1:8b", overrides={"llama3": 131_072}) == 131_072
    assert context_window("gpt-4o", overrides={"gpt-4o": 64_000}) == 64_000
    assert context_window("gpt-4o-mini", overrides={"gpt-4": 1}) == 128_000
    with pytest.raises(TypeError):
        CONTEXT_WINDOWS["x"] = 1  # type: ignore[index]


# -- options --------------------------------------------------------------------------------


def test_the_budget_is_the_window_less_the_reserve() -> None:
    """max_tokens, or the model's window, less reserve."""
    assert ContextManagement(max_tokens=8000).budget == 7000
    assert ContextManagement(max_tokens=10**6).budget == 10**6 - 4096
    assert ContextManagement(max_tokens=8000, reserve=0).budget == 8000
    assert ContextManagement(model="gpt-4o", reserve=4096).budget == 128_000 - 4096
    assert ContextManagement(model="gpt-4o", max_tokens=9000, reserve=0).budget == 9000
    local = ContextManagement(model="qwen2.5", context_windows={"qwen": 32_768})
    assert local.window == 32_768


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"model": "an-unknown-model"},
        {"max_tokens": 0},
        {"max_tokens": 100, "reserve": 100},
        {"max_tokens": 100, "reserve": -1},
        {"max_tokens": 100, "warn_at": 0},
        {"max_tokens": 100, "warn_at": 1.5},
        {"max_tokens": 100, "warn_at": "high"},
        {"max_tokens": 100, "strategy": "drop"},
        {"max_tokens": 100, "counter": 3},
        {"model": "gpt-4o", "context_windows": {"x": 0}},
    ],
)
def test_bad_options_are_refused_eagerly(options: dict[str, Any]) -> None:
    """Every misuse raises InvalidArgument when the options are built."""
    with pytest.raises(InvalidArgument):
        ContextManagement(**options)


def test_a_callable_counter_is_accepted() -> None:
    """counter= takes any Message -> int callable."""
    options = ContextManagement(max_tokens=100, reserve=0, counter=lambda m: 1)
    assert options.counter.count_messages([_message("user", "x" * 99)]) == 1


# -- strategies -----------------------------------------------------------------------------


def test_under_budget_nothing_is_dropped() -> None:
    """Within budget, drop_oldest returns the input as it is."""
    messages = _transcript()
    compaction = _compact(drop_oldest(), messages, budget=10**6)
    assert compaction.messages == messages
    assert compaction.removed == 0
    assert compaction.tokens_before == compaction.tokens_after == COUNTER.count_messages(messages)


def test_drop_oldest_drops_whole_turns_first() -> None:
    """The oldest turns go first, whole, until the rest fits."""
    messages = _transcript(turns=5)
    per_turn = COUNTER.count_messages(messages[1:5])
    budget = COUNTER.count_messages(messages) - 2 * per_turn
    compaction = _compact(drop_oldest(), messages, budget=budget)
    assert compaction.messages == messages[:1] + messages[9:]
    assert compaction.removed == 8
    assert compaction.tokens_after == budget
    assert compaction.tokens_before == COUNTER.count_messages(messages)


def test_drop_oldest_cuts_a_long_single_turn_by_steps() -> None:
    """In one long turn, the oldest tool steps go; the user message and last step stay."""
    messages = (_message("system", "s"), *_turn("do it all", steps=6))
    compaction = _compact(drop_oldest(), messages, budget=300)
    kept = compaction.messages
    assert kept[:2] == messages[:2]
    assert kept[-3:] == messages[-3:]
    assert compaction.tokens_after <= 300
    assert compaction.removed == len(messages) - len(kept) > 0


def test_drop_oldest_may_stay_over_budget() -> None:
    """When the protected messages alone are too big, the rest is dropped and that is all."""
    messages = _transcript(turns=3)
    compaction = _compact(drop_oldest(), messages, budget=1)
    assert compaction.messages == (messages[0], messages[-4], messages[-1])
    assert compaction.tokens_after > 1


def test_keep_last_keeps_the_system_prompt_and_last_turns() -> None:
    """keep_last(turns=2) keeps the system prompt and the last two turns."""
    messages = _transcript(turns=5)
    compaction = _compact(keep_last(turns=2), messages, budget=10**6)
    assert compaction.messages == messages[:1] + messages[-8:]
    assert compaction.removed == 12
    with pytest.raises(InvalidArgument):
        keep_last(turns=0)


def test_keep_last_cuts_further_when_still_over_budget() -> None:
    """If the last turns do not fit, their oldest steps go too."""
    messages = (_message("system", "s"), *_turn("first"), *_turn("second", steps=5))
    compaction = _compact(keep_last(turns=3), messages, budget=400)
    assert compaction.tokens_after <= 400
    assert messages[5] in compaction.messages  # the latest user message
    assert messages[1] not in compaction.messages


async def test_summarize_condenses_older_turns_through_generate() -> None:
    """Older turns become one user-role summary after the system prompt."""
    model = ScriptedModel(
        [GenerateResponse(content="They asked 3 questions.", usage=Usage.of(50, 9))]
    )
    strategy = summarize(model, keep_last=2, settings={"max_tokens": 300})
    messages = _transcript(turns=5)
    compaction = await strategy.compact(messages, budget=10**6, counter=COUNTER)
    summary = compaction.summary
    assert summary is not None
    assert compaction.messages == (messages[0], summary, *messages[-8:])
    assert compaction.removed == 12
    assert summary.role == "user"
    assert is_summary(summary)
    assert not any(is_summary(m) for m in messages)
    assert summary.text.startswith("[Summary of the earlier conversation, condensed from 12")
    assert summary.text.endswith("They asked 3 questions.")
    assert compaction.usage == Usage.of(50, 9)
    assert compaction.tokens_after == COUNTER.count_messages(compaction.messages)
    (request,) = model.requests
    system, user = request.conversation.messages
    assert system.role == "system"
    assert "summary" in system.text.lower()
    assert "[user]\nquestion 0" in user.text
    assert "[tool call: search(" in user.text
    assert "[tool result: search (success)]" in user.text
    assert "question 4" not in user.text
    assert request.settings == {"max_tokens": 300}
    assert request.tools == ()


async def test_summarize_calls_nothing_when_there_is_nothing_to_condense() -> None:
    """With no older turns and room to spare, generate is not called."""
    model = ScriptedModel([])
    messages = _transcript(turns=2)
    compaction = await summarize(model, keep_last=2).compact(
        messages, budget=10**6, counter=COUNTER
    )
    assert compaction.messages == messages
    assert compaction.summary is None
    assert not model.requests


async def test_summarize_condenses_old_steps_of_one_long_turn() -> None:
    """An over-budget single turn has its oldest steps condensed."""
    model = ScriptedModel(["Searched five times."])
    messages = (_message("system", "s"), *_turn("do it all", steps=8))
    compaction = await summarize(model).compact(messages, budget=800, counter=COUNTER)
    assert compaction.summary is not None
    assert compaction.messages[:2] == (messages[0], compaction.summary)
    assert messages[1] in compaction.messages
    assert compaction.tokens_after <= 800


async def test_an_empty_summary_is_an_error() -> None:
    """A summarizer that says nothing raises InvalidResponseError."""
    with pytest.raises(InvalidResponseError):
        await summarize(ScriptedModel(["  "]), keep_last=1).compact(
            _transcript(), budget=10**6, counter=COUNTER
        )
    with pytest.raises(InvalidArgument):
        summarize("not a function")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        summarize(ScriptedModel([]), keep_last=-1)


def test_render_shows_every_kind_of_content() -> None:
    """The summarizer's transcript names roles, tools, outcomes, images and files."""
    call = ToolCall(id="c1", name="fetch", arguments='{"url": "u"}')
    parts = (TextPart(text="see"), ImagePart(url="https://x.test/a.png"), FilePart(file_id="f1"))
    text = render(
        [
            _message("user", parts),  # type: ignore[arg-type]
            _message("assistant", "", tool_calls=(call,)),
            _message("tool", "page", tool_call_id="c1"),
        ]
    )
    assert text == (
        "[user]\nsee\n[image]\n[file f1]\n\n[assistant]\n\n"
        '[tool call: fetch({"url": "u"})]\n\n[tool result: c1]\npage'
    )


# -- the manager ----------------------------------------------------------------------------


async def test_under_budget_the_history_is_sent_as_it_is() -> None:
    """Under budget, prepare returns the very history it was given."""
    history = ConversationHistory(messages=_transcript())
    manager = ContextManager(ContextManagement(max_tokens=10**6))
    prepared = await manager.prepare(history, step=1)
    assert prepared.history is history
    assert prepared.tokens == COUNTER.count_messages(history.messages)
    assert prepared.budget == 10**6 - 4096
    assert prepared.compaction is None
    assert not prepared.warned
    assert not prepared.over_budget


async def test_only_new_messages_are_counted() -> None:
    """A growing transcript is counted incrementally; a changed one is counted again."""
    counted: list[str] = []

    def counter(message: Message) -> int:
        counted.append(message.id)
        return 1

    conversation = Conversation()
    conversation.append_user_message("go")
    call = ToolCall(id="c1", name="search", arguments={})
    conversation.append_assistant_message("", [call])
    conversation.append_tool_result(
        ToolResult(call_id="c1", tool_name="search", outcome="action-required")
    )
    manager = ContextManager(ContextManagement(max_tokens=1000, reserve=0, counter=counter))
    assert (await manager.prepare(conversation.current, step=1)).tokens == 3
    await manager.prepare(conversation.current, step=1)
    assert len(counted) == 3
    conversation.append_assistant_message("waiting")
    assert (await manager.prepare(conversation.current, step=2)).tokens == 4
    assert len(counted) == 4
    resolved = resolve_tool_result(
        conversation, "c1", ToolResult(call_id="c1", tool_name="search", outcome="success")
    )
    assert (await manager.prepare(resolved, step=3)).tokens == 4
    assert len(counted) == 8
    assert manager.statistics().recounts == 1


async def test_summarize_runs_once_while_under_budget() -> None:
    """After one summary, later steps reuse it; generate runs again only when over again."""
    model = ScriptedModel(["first summary", "second summary"])
    options = ContextManagement(max_tokens=800, reserve=0, strategy=summarize(model, keep_last=1))
    manager = ContextManager(options)
    conversation = Conversation()
    conversation.append_system_message("You are careful.")
    original_lengths: list[int] = []
    sent: list[ConversationHistory] = []
    for index in range(12):
        for message in _turn(f"question {index}"):
            conversation.append(message)
        before = conversation.current
        prepared = await manager.prepare(before, step=index + 1)
        assert conversation.current is before  # the transcript itself is untouched
        original_lengths.append(len(before.messages))
        assert prepared.tokens <= options.budget
        assert prepared.tokens == COUNTER.count_messages(prepared.history.messages)
        sent.append(prepared.history)
    assert len(model.requests) == 2
    stats = manager.statistics()
    assert stats.summaries == stats.compactions == 2
    assert stats.removed_messages > 0
    assert len(conversation.messages) == original_lengths[-1] == 1 + 12 * 4
    summaries = {m.id for h in sent for m in h.messages if is_summary(m)}
    assert len(summaries) == 2
    last = sent[-1].messages
    assert last[0].role == "system"
    assert is_summary(last[1])
    assert last[-4:] == conversation.messages[-4:]


async def test_a_compaction_is_reported_once() -> None:
    """Prepared.compaction is set at the step that cut, and not at the next ones."""
    manager = ContextManager(ContextManagement(max_tokens=1000, reserve=0))
    messages = _transcript(turns=8)
    first = await manager.prepare(ConversationHistory(messages=messages), step=1)
    assert first.compaction is not None
    assert first.compaction.tokens_before == COUNTER.count_messages(messages)
    assert first.compaction.tokens_after == first.tokens <= 1000
    assert first.compaction.removed == len(messages) - len(first.history.messages)
    again = await manager.prepare(ConversationHistory(messages=messages), step=2)
    assert again.compaction is None
    assert again.history.messages == first.history.messages


async def test_the_warning_fires_once_per_crossing() -> None:
    """warned is raised when tokens reach warn_at x budget, and again only after falling back."""
    options = ContextManagement(
        max_tokens=100,
        reserve=0,
        warn_at=0.5,
        counter=lambda m: 10,
        strategy=keep_last(turns=2),
    )
    manager = ContextManager(options)
    conversation = Conversation()
    conversation.append_system_message("s")
    warned: list[bool] = []
    compacted: list[bool] = []
    for _ in range(14):
        conversation.append_user_message("u")
        prepared = await manager.prepare(conversation.current, step=1)
        warned.append(prepared.warned)
        compacted.append(prepared.compaction is not None)
    # 20, 30, 40, 50 (warn), ..., 100, 110 -> kept 30: rearmed, 40, 50 (warn), 60, 70
    assert [i for i, w in enumerate(warned) if w] == [3, 11]
    assert [i for i, c in enumerate(compacted) if c] == [9]


async def test_a_changed_prefix_keeps_the_compaction_decision() -> None:
    """Messages replaced in place after a compaction stay dropped; their new counts apply."""
    messages = list(_transcript(turns=8))
    manager = ContextManager(ContextManagement(max_tokens=1000, reserve=0))
    first = await manager.prepare(ConversationHistory(messages=tuple(messages)), step=1)
    kept = first.history.messages
    messages[-2] = msgspec.structs.replace(messages[-2], content="short")
    second = await manager.prepare(ConversationHistory(messages=tuple(messages)), step=2)
    assert second.history.messages == (*kept[:-2], messages[-2], kept[-1])
    assert second.tokens == COUNTER.count_messages(second.history.messages)
    assert manager.statistics().recounts == 1


async def test_any_object_with_compact_is_a_strategy() -> None:
    """A custom strategy is called with the sent messages, the budget and the counter."""
    seen: list[tuple[int, int]] = []

    class Newest:
        async def compact(
            self, messages: Sequence[Message], *, budget: int, counter: Any
        ) -> Compaction:
            seen.append((len(messages), budget))
            kept = (messages[0], *messages[-2:])
            return Compaction(
                messages=kept,
                removed=len(messages) - 3,
                tokens_before=counter.count_messages(messages),
                tokens_after=counter.count_messages(kept),
            )

    manager = ContextManager(ContextManagement(max_tokens=300, reserve=0, strategy=Newest()))
    prepared = await manager.prepare(ConversationHistory(messages=_transcript()), step=1)
    assert seen == [(21, 300)]
    assert len(prepared.history.messages) == 3


async def test_a_cancelled_summary_changes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """Cancelling prepare during the summarization leaves the manager as it was."""
    model = ScriptedModel(["summary"], delay=10)
    manager = ContextManager(
        ContextManagement(max_tokens=1000, reserve=0, strategy=summarize(model, keep_last=1))
    )
    history = ConversationHistory(messages=_transcript(turns=8))
    with trio.move_on_after(1):
        await manager.prepare(history, step=1)
    assert manager.statistics().compactions == 0
    with pytest.raises(InvalidArgument):
        ContextManager("options")  # type: ignore[arg-type]


# -- properties -----------------------------------------------------------------------------

_text = st.text(alphabet="abc xyz", max_size=300)


@st.composite
def _transcripts(draw: st.DrawFn) -> tuple[Message, ...]:
    """Valid transcripts: a system prompt, turns, and calls each answered exactly once."""
    messages = [_message("system", draw(_text)) for _ in range(draw(st.integers(0, 2)))]
    if draw(st.integers(0, 9)) == 0:
        messages.append(_message("assistant", draw(_text)))  # a greeting before any user
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 9)) == 0:
            content: Any = (TextPart(text=draw(_text)), ImagePart(url="https://x.test/a.png"))
        else:
            content = draw(_text)
        messages.append(_message("user", content))
        for _ in range(draw(st.integers(0, 3))):
            calls = [_call(q=draw(_text)) for _ in range(draw(st.integers(0, 3)))]
            messages.append(_message("assistant", draw(_text), tool_calls=tuple(calls)))
            messages += [_result(c, draw(_text)) for c in draw(st.permutations(calls))]
        if draw(st.integers(0, 9)) == 0:
            messages.append(_message("system", draw(_text)))  # a mid-transcript instruction
    return tuple(messages)


def _summarizer() -> CompactionStrategy:
    async def generate(request: GenerateRequest) -> GenerateResponse:
        return GenerateResponse(content="summary of " + request.conversation.messages[1].text[:20])

    return summarize(generate, keep_last=1)


STRATEGIES: list[Callable[[], CompactionStrategy]] = [
    drop_oldest,
    lambda: keep_last(turns=1),
    lambda: keep_last(turns=3),
    _summarizer,
]


def _check_shape(before: Sequence[Message], after: Sequence[Message]) -> None:
    """The promises every strategy keeps, for any input."""
    head = 0
    while head < len(before) and before[head].role == "system":
        head += 1
    assert tuple(after[:head]) == tuple(before[:head]), "the system prompt is kept"
    users = [m for m in before if m.role == "user"]
    if users:
        assert any(m is users[-1] for m in after), "the latest user message is kept"
    summaries = [m for m in after if is_summary(m) and not any(m is b for b in before)]
    assert len(summaries) <= 1, "at most one new summary"
    originals = [m for m in after if not any(m is s for s in summaries)]
    position = 0
    for message in originals:  # an order-preserving subsequence, by identity
        while before[position] is not message:
            position += 1
        position += 1
    calls = {c.id for m in after for c in m.tool_calls}
    results = {m.tool_call_id for m in after if m.role == "tool"}
    assert calls == results, "calls and results stay together"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), messages=_transcripts(), which=st.sampled_from(range(len(STRATEGIES))))
def test_every_strategy_keeps_its_promises(
    data: st.DataObject, messages: tuple[Message, ...], which: int
) -> None:
    """For any transcript and budget, a strategy keeps the system prompt, the latest user
    message and call/result pairs, preserves order, and leaves its input alone."""
    history = ConversationHistory(messages=messages)
    encoded = msgspec.json.encode(history)
    total = COUNTER.count_messages(messages)
    budget = data.draw(st.integers(0, total + 50), label="budget")
    compaction = _compact(STRATEGIES[which](), history.messages, budget)
    assert msgspec.json.encode(history) == encoded
    assert history.messages == messages
    _check_shape(messages, compaction.messages)
    summary = 1 if compaction.summary is not None else 0
    assert compaction.removed == len(messages) - len(compaction.messages) + summary
    assert compaction.tokens_before == total
    assert compaction.tokens_after == COUNTER.count_messages(compaction.messages)
    if which == 0 and total <= budget:
        assert compaction.messages == messages


def _step_prefixes(messages: tuple[Message, ...]) -> list[tuple[Message, ...]]:
    """The transcript as a run sees it: after each message, but never mid-results."""
    cuts = [
        i + 1
        for i in range(len(messages))
        if i + 1 == len(messages) or messages[i + 1].role != "tool"
    ]
    return [messages[:cut] for cut in cuts]


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), messages=_transcripts(), which=st.sampled_from(range(len(STRATEGIES))))
def test_the_manager_keeps_the_promises_at_every_step(
    data: st.DataObject, messages: tuple[Message, ...], which: int
) -> None:
    """Step after step, what the manager sends keeps every strategy promise, is counted
    exactly, and the transcripts it is given are never changed."""
    budget = data.draw(st.integers(1, COUNTER.count_messages(messages) + 50), label="budget")
    options = ContextManagement(max_tokens=budget, reserve=0, strategy=STRATEGIES[which]())

    async def run() -> None:
        manager = ContextManager(options)
        for step, prefix in enumerate(_step_prefixes(messages), 1):
            history = ConversationHistory(messages=prefix)
            encoded = msgspec.json.encode(history)
            prepared = await manager.prepare(history, step=step)
            assert msgspec.json.encode(history) == encoded
            sent = prepared.history.messages
            _check_shape(prefix, sent)
            assert prepared.tokens == COUNTER.count_messages(sent)
            if manager.statistics().compactions == 0:
                assert prepared.history is history
            if prepared.over_budget and which < 3:  # only what is always kept is left
                again = await drop_oldest().compact(sent, budget=options.budget, counter=COUNTER)
                assert again.removed == 0

    trio.run(run)


# -- the guide ------------------------------------------------------------------------------


async def test_the_guide_samples_run() -> None:
    """Every Python sample of docs/context.md runs, top to bottom, in one namespace."""
    page = (ROOT / "docs" / "context.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, flags=re.DOTALL | re.MULTILINE)
    assert blocks
    namespace: dict[str, Any] = {"__name__": "docs.context"}
    import ast

    for index, block in enumerate(blocks):
        code = compile(
            block,
            f"docs/context.md sample {index + 1}",
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
        pending = eval(code, namespace)
        if pending is not None:
            await pending


async def test_a_summarizing_step_pays_for_its_summary() -> None:
    """The summary's usage counts toward the step's usage as well as the run's."""
    summarizer = ScriptedModel([GenerateResponse(content="earlier: hellos", usage=Usage.of(50, 9))])
    model = ScriptedModel([GenerateResponse(content="done", usage=Usage.of(300, 20))])
    conversation = Conversation()
    conversation.append_system_message("You are careful.")
    for index in range(12):
        for message in _turn(f"question {index}"):
            conversation.append(message)
    async with open_run(
        generate=model,
        conversation=conversation,
        maximum_steps=1,
        context_management=ContextManagement(
            max_tokens=800, reserve=0, strategy=summarize(summarizer, keep_last=1)
        ),
    ) as run:
        pass
    result = await run.unwrap()
    assert len(summarizer.requests) == 1
    (step,) = result.steps
    assert step.usage == Usage.of(350, 29) == result.usage
