"""Measure the conversation model's cost: import time and the codec on a transcript.

Prints:
- the time ``import operative.conversation`` takes in a fresh interpreter (best of 7),
  next to ``import msgspec`` alone;
- encode and decode-with-validation times (µs per call, best of 5 rounds of many calls)
  of a 50-message history with mixed roles, multi-modal parts, tool calls (mapping and
  raw-string arguments) and tool results of every outcome: through ``operative._core._codec``,
  through bare msgspec, and through the shared cattrs converter for comparison;
- what a failure costs: decoding a history whose 46th message has a wrong type (the
  error names the JSON path), and validating the same plain data with ``validate``;
- how long ``Conversation.current`` takes when nothing changed and after an append.

Run: ``python benchmarks/bench_codec.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from operative._core._codec import decode, encode
from operative._core._convert import get_converter, validate
from operative._core._errors import CorruptRecordError, DataValidationError
from operative._core._types import ToolCall, ToolResult
from operative.conversation import Conversation, ConversationHistory, ImagePart, TextPart

OUTCOMES = ("success", "error", "denied", "action-required", "cancelled")


def build_history(n: int = 50) -> ConversationHistory:
    """A realistic transcript of ``n`` messages."""
    conversation = Conversation(metadata={"user": "u-42", "channel": "web"})
    conversation.append_system_message("You are a careful research assistant. " * 4)
    turn = 0
    while len(conversation) < n:
        turn += 1
        if turn % 4 == 0:
            conversation.append_user_message(
                [
                    TextPart(text=f"What is in this picture, turn {turn}?"),
                    ImagePart(url=f"https://example.com/images/{turn}.png"),
                ]
            )
        else:
            conversation.append_user_message(f"Question {turn}: summarise section {turn}.")
        calls = [
            ToolCall(id=f"call_{turn}_a", name="search", arguments={"q": f"s{turn}", "k": 5}),
            ToolCall(id=f"call_{turn}_b", name="fetch", arguments='{"url": "https://x.y/z"}'),
        ]
        conversation.append_assistant_message("Let me look that up.", calls)
        for i, call in enumerate(calls):
            outcome = OUTCOMES[(turn + i) % len(OUTCOMES)]
            conversation.append_tool_result(
                ToolResult(
                    call_id=call.id,
                    tool_name=call.name,
                    outcome=outcome,
                    value={"hits": [{"title": "t", "score": 0.9}] * 3}
                    if outcome == "success"
                    else None,
                    error=None if outcome == "success" else f"{outcome} for {call.name}",
                )
            )
        conversation.append_assistant_message(f"Section {turn} says the loop is a nursery.")
    conversation.replace_messages(conversation.messages[:n])
    return conversation.current


def per_call_us(fn: Callable[[], Any], number: int, repeat: int = 5) -> float:
    """Best-of-``repeat`` mean time of ``fn`` in microseconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best * 1e6


def import_ms(module: str, repeat: int = 7) -> float:
    """Best-of-``repeat`` time to import ``module`` in a fresh interpreter, in ms."""
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    return min(runs) * 1e3


def main(quick: bool = False) -> None:
    scale = 0.01 if quick else 1.0
    history = build_history()
    assert len(history.messages) == 50
    data = encode(history)
    assert decode(data, ConversationHistory) == history
    converter = get_converter()
    plain = converter.unstructure(history)
    assert converter.structure(plain, ConversationHistory) == history
    raw_encoder = msgspec.json.Encoder()
    raw_decoder = msgspec.json.Decoder(ConversationHistory)

    repeat = 1 if quick else 7
    print(f"import msgspec                {import_ms('msgspec', repeat):8.1f} ms")
    print(f"import operative.conversation {import_ms('operative.conversation', repeat):8.1f} ms")
    print(f"50-message history: {len(data)} bytes of JSON")
    rows = [
        ("encode (operative._core._codec)", lambda: encode(history), 20_000),
        (
            "decode+validate (operative._core._codec)",
            lambda: decode(data, ConversationHistory),
            5_000,
        ),
        ("encode (bare msgspec)", lambda: raw_encoder.encode(history), 20_000),
        ("decode+validate (bare msgspec)", lambda: raw_decoder.decode(data), 5_000),
        (
            "encode (cattrs unstructure + msgspec)",
            lambda: raw_encoder.encode(converter.unstructure(history)),
            1_000,
        ),
        (
            "decode (msgspec + cattrs structure)",
            lambda: converter.structure(msgspec.json.decode(data), ConversationHistory),
            1_000,
        ),
    ]
    for name, fn, number in rows:
        print(f"{name:40s} {per_call_us(fn, max(1, int(number * scale))):8.2f} µs")

    broken = msgspec.json.decode(data)
    broken["messages"][45]["id"] = 45
    broken_data = msgspec.json.encode(broken)

    def decode_broken() -> str:
        try:
            decode(broken_data, ConversationHistory)
        except CorruptRecordError as exc:
            return str(exc)
        raise AssertionError("the broken history decoded")

    def validate_broken() -> str:
        try:
            validate(broken, ConversationHistory)
        except DataValidationError as exc:
            return exc.path
        raise AssertionError("the broken history validated")

    assert "(at $.messages[45].id)" in decode_broken()
    assert validate_broken() == "$.messages[45].id"
    for name, fn in [
        ("decode, error at $.messages[45].id", decode_broken),
        ("validate, error at $.messages[45].id", validate_broken),
    ]:
        print(f"{name:40s} {per_call_us(fn, max(1, int(1_000 * scale))):8.2f} µs")

    conversation = Conversation.from_history(history)
    conversation.current  # noqa: B018 - warm the cache
    cached = per_call_us(lambda: conversation.current, max(1, int(200_000 * scale)))
    print(f"{'Conversation.current, nothing changed':40s} {cached:8.3f} µs")

    def append_then_read() -> None:
        conversation.append_user_message("one more")
        conversation.current  # noqa: B018
        conversation.replace_messages(history.messages)

    appended = per_call_us(append_then_read, max(1, int(20_000 * scale)))
    print(f"{'append + current (50 messages)':40s} {appended:8.2f} µs")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
