"""The offline model plans in linear time: user text never stalls the event loop.

``operative serve`` and ``operative chat`` without an API key answer with the offline
model, on the event loop. Its planner used three regular expressions that backtracked
quadratically (the note's cubically) on text they partially matched: one 20,000-character
message held the loop for seconds to hours. The scanners that replaced them find exactly
what those patterns found (checked here against the patterns themselves, on short text)
and plan every adversarial message below in well under 100 ms.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operative import Conversation, GenerateRequest
from operative.cli._agents import _cities, _expressions, _note, _plan, offline_generate
from operative.tools import ToolSpec

OFFERED = {"get_weather", "calculate", "save_note"}
SIZE = 20_000
BOUND = 0.1  # seconds: a real CPU bound, not a sleep

# Each pattern, fed repeated characters it partially matches: before the scanners, the
# planner took from 2 s to (extrapolated from 2,000 characters) hours on each of these.
ADVERSARIAL: dict[str, str] = {
    "digits": "1" * SIZE,
    "digits and spaces": "1 " * (SIZE // 2),
    "digits and dots": "1." * (SIZE // 2),
    "open parentheses and digits": "(1" * (SIZE // 2),
    "opening parentheses, one digit": "(" * (SIZE - 1) + "1",
    "minus and parentheses": "-(" * (SIZE // 2),
    "digit pairs": "1 1 " * (SIZE // 4),
    "digits and letters": "1x" * (SIZE // 2),
    "operations": "1+" * (SIZE // 2),
    "operations with parentheses": "1+(" * (SIZE // 3),
    "powers": "1**" * (SIZE // 3),
    "a sum, then spaces": "1+1" + " " * SIZE,
    "weather in, repeated": "weather in " * (SIZE // 11),
    "a city of letters, no end": "weather in " + "a" * SIZE + "#",
    "a city of words, no end": "weather in " + "a " * (SIZE // 2) + "#",
    "a city, then spaces and no end": "weather in x" + " " * SIZE + "#",
    "a city, then spaces and a word": "weather in x" + " " * SIZE + "x",
    "cities, no end": "weather in a " * (SIZE // 13) + "#",
    "cities and and": "weather in a and " * (SIZE // 17),
    "cities and commas": "weather in a, " * (SIZE // 14),
    "weather and spaces": "weather" + " " * SIZE,
    "spaces": " " * SIZE,
    "a note of spaces, two lines": "remember " + " " * SIZE + "\n\n",
    "a note of thats, two lines": "note " + "that " * (SIZE // 5) + "\n\n",
    "a note of spaces and newlines": "note" + " \n" * (SIZE // 2),
}


def plan_seconds(text: str) -> float:
    """The fastest of three plans of ``text`` (a stray collection or context switch
    should not fail the bound; a super-linear planner fails it every time)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        _plan(text, OFFERED, "call")
        best = min(best, time.perf_counter() - started)
    return best


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_an_adversarial_message_is_planned_in_under_100_ms(text: str) -> None:
    assert len(text) >= SIZE - 20
    seconds = plan_seconds(text)
    assert seconds < BOUND, f"{seconds * 1000:.1f} ms to plan {len(text):,} characters"


async def test_the_offline_model_answers_an_adversarial_message_in_under_100_ms() -> None:
    """The whole model call, not only the planner (no delta sink: nothing streams)."""
    conversation = Conversation()
    conversation.append_user_message("weather in x" + " " * SIZE + "#" + "1" * SIZE)
    request = GenerateRequest(
        conversation=conversation.current,
        tools=tuple(
            ToolSpec(name=name, description=name, input_schema={"type": "object"})
            for name in sorted(OFFERED)
        ),
    )
    started = time.perf_counter()
    response = await offline_generate(request)
    seconds = time.perf_counter() - started
    assert seconds < BOUND, f"{seconds * 1000:.1f} ms"
    assert response.tool_calls == ()
    assert response.content.startswith("(offline model) You said: ")


# -- the same plans as the patterns --------------------------------------------------------

WEATHER = re.compile(r"weather\s+(?:in|at|for)\s+([A-Za-z][\w'\- ]*?)\s*(?:[?.,!;]|\band\b|$)")
ARITHMETIC = re.compile(r"[-(]*\d[\d\s.()]*(?:(?:\*\*|//|[-+*/%])[\s(]*[\d.]+[\d\s.()]*)+")
NOTE = re.compile(r"^\s*(?:remember|note|save a note)\s*(?:that|to|:)?\s*(.+)$", re.IGNORECASE)

# Pieces of the three patterns, and characters on the edges of their classes: Unicode
# spaces, digits and letters, and the characters that fold to "s" and "k" ignoring case.
PIECES = (
    *("weather", "in", "at", "for", "and", "And", "Lisbon", "New York", "x", "a", "d"),
    *("remember", "Note", "save a note", "that", "TO", ":"),
    *(" ", "  ", "\t", "\n", "\r", "\x0b", "\x1c", "\u00a0", "\u2003"),
    *("1", "2", "0.5", "\u0663", "(", ")", "*", "**", "/", "//", "+", "-", "%"),
    *("?", ".", ",", "!", ";", "'", "_", "#", "é", "\u017f", "\u212a"),
)
TEXTS = st.lists(st.sampled_from(PIECES), max_size=14).map("".join)


@settings(max_examples=3000, deadline=None)
@given(text=TEXTS, prefix=st.sampled_from(["", "weather in ", "note ", "1+", "what is "]))
def test_the_scanners_find_what_the_patterns_found(text: str, prefix: str) -> None:
    text = prefix + text
    assert _cities(text) == WEATHER.findall(text)
    assert _expressions(text) == ARITHMETIC.findall(text)
    note = NOTE.match(text)
    assert _note(text) == (None if note is None else note.group(1))


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (
            "What is the weather in Lisbon, and what is 17 * 23 + 4?",
            [("get_weather", {"city": "Lisbon"}), ("calculate", {"expression": "17 * 23 + 4"})],
        ),
        (
            "weather in New York and weather for Porto? also (2 + 3) ** 2",
            [
                ("get_weather", {"city": "New York"}),
                ("get_weather", {"city": "Porto"}),
                ("calculate", {"expression": "(2 + 3) ** 2"}),
            ],
        ),
        (
            "weather in Oslo and 2 ** 10?",
            [("get_weather", {"city": "Oslo"}), ("calculate", {"expression": "2 ** 10"})],
        ),
        ("remember to buy milk", [("save_note", {"text": "buy milk"})]),
        (
            "  Note: the keys are under the mat\n",
            [("save_note", {"text": "the keys are under the mat"})],
        ),
        ("save a note that 2 + 2 = 4", [("save_note", {"text": "2 + 2 = 4"})]),
        ("hello there", []),
    ],
)
def test_ordinary_messages_are_planned_as_before(
    text: str, calls: list[tuple[str, dict[str, str]]]
) -> None:
    planned = _plan(text, OFFERED, "call")
    assert [(call.name, call.arguments) for call in planned] == calls
    assert [call.id for call in planned] == [f"call-{n}" for n in range(1, len(calls) + 1)]
