"""The command's agents: their tools, and the offline model that stands in for a real one.

The offline model is deterministic: its answer is a function of the conversation it is
shown (never of how often it was called), so a durable run interrupted in one process
is finished the same way by ``operative recover`` in another.
"""

from __future__ import annotations

import ast
import operator
import os
import re
import zlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from .. import (
    Agent,
    GenerateRequest,
    GenerateResponse,
    Message,
    ToolCall,
    Usage,
    create_agent,
)
from .._core._deltas import current_delta_sink
from ..providers import Delta
from ..tools import ApprovalDecision, ApprovalPolicy, PendingApproval, Tool, Toolbox, tool
from ._defaults import DEMO_PROMPT as DEMO_PROMPT
from ._defaults import OFFLINE_MODEL as OFFLINE_MODEL

__all__ = [
    "CHAT_AGENT",
    "DEMO_AGENT",
    "DEMO_PROMPT",
    "OFFLINE_MODEL",
    "Approver",
    "chat_agent",
    "demo_agent",
    "offline_generate",
]

DEMO_AGENT = "operative-demo"
CHAT_AGENT = "operative-chat"

_INSTRUCTIONS = (
    "You are the operative {kind} agent. Use get_weather for the weather and calculate "
    "for arithmetic{notes}; answer in one or two sentences."
)

Approver = Callable[[PendingApproval], Awaitable[ApprovalDecision]]


# -- tools -------------------------------------------------------------------------------

_SKIES = ("sunny", "partly cloudy", "overcast", "light rain", "windy", "clear")


@tool(idempotent=True, mutates=False)
async def get_weather(city: str) -> str:
    """Today's weather in a city (made-up demo data, not a real forecast)."""
    await trio.lowlevel.checkpoint()
    seed = zlib.crc32(city.strip().lower().encode())
    sky = _SKIES[seed % len(_SKIES)]
    return f"{city.strip()}: {sky}, {8 + seed % 22} °C (demo data)"


_OPERATORS: dict[type[ast.AST], Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


_MAX_EXPRESSION = 200
"""The longest expression the demo calculator reads (characters)."""
_MAX_MAGNITUDE = 10**100
"""No intermediate or final result may exceed a googol: the work stays microseconds."""
_MAX_BITS = _MAX_MAGNITUDE.bit_length()
_TOO_LARGE = "results larger than 10**100 are not supported"


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        if isinstance(node.value, bool):
            raise ValueError("only numbers, + - * / // % ** and parentheses are supported")
        return _bounded(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            if abs(right) > 64:
                raise ValueError("exponents above 64 are not supported")
            # Refused before it is computed: |left| ** right has at least
            # (bits(left) - 1) * right bits, and ints that big take long to build.
            if (
                isinstance(left, int)
                and isinstance(right, int)
                and right > 0
                and (abs(left).bit_length() - 1) * right > _MAX_BITS
            ):
                raise ValueError(_TOO_LARGE)
        result: float | int = _OPERATORS[type(node.op)](left, right)
        return _bounded(result)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        result = _OPERATORS[type(node.op)](_evaluate(node.operand))
        return _bounded(result)
    raise ValueError("only numbers, + - * / // % ** and parentheses are supported")


def _bounded(value: float | int) -> float | int:
    """``value``, when it is a finite number no larger than 10**100 in magnitude."""
    if isinstance(value, complex) or not -_MAX_MAGNITUDE <= value <= _MAX_MAGNITUDE:
        raise ValueError(_TOO_LARGE if not isinstance(value, complex) else "no complex results")
    return value


@tool(idempotent=True, mutates=False)
async def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses;
    results up to 10**100)."""
    await trio.lowlevel.checkpoint()
    if len(expression) > _MAX_EXPRESSION:
        raise ValueError(f"expressions longer than {_MAX_EXPRESSION} characters are not supported")
    try:
        value = _evaluate(ast.parse(expression.strip(), mode="eval"))
    except SyntaxError:
        raise ValueError(f"{expression!r} is not an arithmetic expression") from None
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    except OverflowError:
        raise ValueError(_TOO_LARGE) from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{expression.strip()} = {value}"


def _note_tool(notes: Path) -> Tool:
    @tool(mutates=True, version="1")
    async def save_note(text: str) -> str:
        """Save a note for the user (asks the user's approval first)."""

        def append() -> None:
            # Private: created 0600 (its directory 0700); an existing file keeps its mode.
            notes.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(notes, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with open(fd, "a", encoding="utf-8") as file:
                file.write(text.rstrip("\n") + "\n")

        await trio.to_thread.run_sync(append)
        return f"saved the note {text!r} to {notes}"

    return save_note


# -- agents ------------------------------------------------------------------------------


def demo_agent(generate: Any) -> Agent:
    """The demo: weather and arithmetic, no approvals (it runs unattended)."""
    return create_agent(
        generate=generate,
        tools=[get_weather, calculate],
        instructions=_INSTRUCTIONS.format(kind="demo", notes=""),
        name=DEMO_AGENT,
        maximum_steps=8,
    )


def chat_agent(
    generate: Any, *, approver: Approver | None, notes: Path, name: str = CHAT_AGENT
) -> Agent:
    """The chat agent: the demo's tools and ``save_note``, which needs the user's yes
    (asked of ``approver`` in the run; without one the call parks, and a later request
    answers it, as ``operative serve`` does)."""
    toolbox = Toolbox(
        [get_weather, calculate, _note_tool(notes)],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
    )
    return create_agent(
        generate=generate,
        toolbox=toolbox,
        instructions=_INSTRUCTIONS.format(kind="chat", notes=" and save_note to save notes"),
        name=name,
        maximum_steps=8,
        on_approval=approver,
    )


# -- the offline model -------------------------------------------------------------------
#
# The planner reads the user's text on the event loop, so it does linear work only: no
# pattern below can backtrack over more than one run of characters, and each scanner
# looks at a character a bounded number of times. Together they find exactly what
# these three patterns found, which backtracked quadratically (the note's cubically)
# on text such as "1" * 20_000 or "weather in x" + " " * 20_000 + "#":
#
#   weather:    weather\s+(?:in|at|for)\s+([A-Za-z][\w'\- ]*?)\s*(?:[?.,!;]|\band\b|$)
#   arithmetic: [-(]*\d[\d\s.()]*(?:(?:\*\*|//|[-+*/%])[\s(]*[\d.]+[\d\s.()]*)+
#   note:       ^\s*(?:remember|note|save a note)\s*(?:that|to|:)?\s*(.+)$  (any case)

_SPACES = re.compile(r"\s*")
_WORD = re.compile(r"\w")
_WORDS = re.compile(r"\w*")

_WEATHER_LEAD = re.compile(r"weather\s+(?:in|at|for)\s+(?=[A-Za-z])")
_CITY = re.compile(r"[\w'\- ]*")
_CITY_END = "?.,!;"

_ARITHMETIC_START = re.compile(r"[-(\d]")
_SIGNS = re.compile(r"[-(]*")
_DIGIT = re.compile(r"\d")
_NUMBERS = re.compile(r"[\d\s.()]*")
_OPERATOR = re.compile(r"\*\*|//|[-+*/%]")
_OPENING = re.compile(r"[\s(]*")
_NUMBER = re.compile(r"[\d.]")

_NOTE_LEAD = re.compile(r"\s*(?:remember|note|save a note)", re.IGNORECASE)
_NOTE_JOINER = re.compile(r"that|to|:", re.IGNORECASE)


def _past(run: re.Pattern[str], text: str, start: int, stop: int | None = None) -> int:
    """Where the run of ``run``'s characters (a pattern that matches empty) from ``start``
    ends, looking no further than ``stop``."""
    found = run.match(text, start, len(text) if stop is None else stop)
    assert found is not None
    return found.end()


def _cities(text: str) -> list[str]:
    """The city of every ``weather in <city>`` in ``text``, in order."""
    cities: list[str] = []
    size = len(text)
    dead = 0  # a city starting before this cannot end: an earlier one did not
    position = 0
    while (lead := _WEATHER_LEAD.search(text, position)) is not None:
        start = lead.end()
        if start < dead:
            position = lead.start() + 1
            continue
        # The city is the shortest start[:end] (its characters ``[\w'\- ]``) after which
        # spaces lead to punctuation, a word "and", or the end.
        end, found = start + 1, -1
        while True:
            if _WORD.match(text, end) and _WORD.match(text, end - 1):
                # Inside a word, punctuation, a word "and" or the text's end cannot follow.
                end = _past(_WORDS, text, end)
            after = _past(_SPACES, text, end)
            if after < size and text[after] in _CITY_END:
                found = after + 1
            elif (
                text.startswith("and", after)
                and not _WORD.match(text, after - 1)
                and not _WORD.match(text, after + 3)
            ):
                found = after + 3
            elif after == size or (after == size - 1 and text[after] == "\n"):
                found = after
            if found >= 0:
                break
            # An end among these spaces meets the same character; the next end to try
            # is past it, if the city's characters reach that far.
            reach = _past(_CITY, text, end, after + 1)
            if reach <= after:
                dead = reach
                break
            end = after + 1
        if found < 0:
            position = lead.start() + 1
            continue
        cities.append(text[start:end])
        position = found
    return cities


def _expressions(text: str) -> list[str]:
    """Every arithmetic expression in ``text`` (a number, then operators and numbers)."""
    expressions: list[str] = []
    size = len(text)
    position = 0
    while (first := _ARITHMETIC_START.search(text, position)) is not None:
        start = first.start()
        digit = _past(_SIGNS, text, start)
        if not _DIGIT.match(text, digit):
            position = digit + 1  # every start among these signs stops at the same place
            continue
        end = _past(_NUMBERS, text, digit + 1)
        operations = 0
        while end < size:
            sign = _OPERATOR.match(text, end)
            if sign is None:
                break
            number = _past(_OPENING, text, sign.end())
            if not _NUMBER.match(text, number):
                break
            end = _past(_NUMBERS, text, number)
            operations += 1
        if operations:
            expressions.append(text[start:end])
        # Without an operation, every start before ``end`` reaches the same ``end``.
        position = end
    return expressions


def _note(text: str) -> str | None:
    """The note of ``remember ...``, ``note ...`` or ``save a note ...``, or ``None``."""
    lead = _NOTE_LEAD.match(text)
    if lead is None:
        return None
    # The note is the rest of the text (less one final newline), from the first place
    # tried that leaves it non-empty and on one line: after the spaces and a joiner
    # ("that", "to", ":") and the spaces after it, each space back to the joiner; then
    # after the spaces with no joiner, each space back to the keyword.
    body = len(text) - 1 if text.endswith("\n") else len(text)
    lowest, highest = text.rfind("\n", 0, body) + 1, body - 1
    spaced = _past(_SPACES, text, lead.end())
    ranges = [(spaced, lead.end())]
    joiner = _NOTE_JOINER.match(text, spaced)
    if joiner is not None:
        ranges.insert(0, (_past(_SPACES, text, joiner.end()), joiner.end()))
    for top, bottom in ranges:
        start = min(top, highest)
        if start >= max(bottom, lowest):
            return text[start:body]
    return None


def _plan(text: str, offered: set[str], prefix: str) -> list[ToolCall]:
    calls: list[ToolCall] = []

    def add(name: str, arguments: dict[str, Any]) -> None:
        if name in offered:
            calls.append(ToolCall(id=f"{prefix}-{len(calls) + 1}", name=name, arguments=arguments))

    note = _note(text)
    if note is not None:
        add("save_note", {"text": note.strip()})
        return calls
    for city in _cities(text):
        add("get_weather", {"city": city.strip()})
    for expression in _expressions(text):
        expression = expression.strip().rstrip("(")
        if expression.count("(") == expression.count(")"):
            add("calculate", {"expression": expression})
    return calls


def _summarise(results: Sequence[Message]) -> str:
    sentences = []
    for message in results:
        name, text = message.tool_name or "the tool", message.text
        if message.outcome == "success":
            sentences.append(text.strip("'\"") + ".")
        elif message.outcome == "denied":
            sentences.append(f"I did not run {name}: {text}")
        else:
            sentences.append(f"{name} did not succeed: {text}")
    return " ".join(sentences)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


async def _stream(content: str) -> None:
    """Hand the answer to the run's delta sink word by word, as a streaming model would."""
    sink = current_delta_sink()
    if sink is None:
        return
    for word in re.findall(r"\S+\s*", content):
        sink(Delta(kind="text", text=word))
        await trio.lowlevel.checkpoint()


async def offline_generate(request: GenerateRequest) -> GenerateResponse:
    """A scripted stand-in for a model: tool calls for weather, arithmetic and notes."""
    await trio.lowlevel.checkpoint()
    messages = request.conversation.messages
    users = [index for index, message in enumerate(messages) if message.role == "user"]
    turn = messages[users[-1] :] if users else messages
    results = [message for message in turn if message.role == "tool"]
    asked = any(message.role == "assistant" and message.tool_calls for message in turn)
    user_text = turn[0].text if turn and turn[0].role == "user" else ""
    calls: list[ToolCall] = []
    if results:
        content = _summarise(results)
    elif not asked:
        offered = {spec.name for spec in request.tools}
        calls = _plan(user_text, offered, f"call-{len(users)}-{request.step}")
        if calls:
            content = "Let me use " + ", ".join(dict.fromkeys(c.name for c in calls)) + "."
        else:
            content = (
                f"(offline model) You said: {user_text!r}. I can look up the weather "
                "('weather in Lisbon'), do arithmetic ('what is 6 * 7') and save notes "
                "('remember to buy milk')."
            )
    else:
        content = "I asked for tools, but no results came back."
    if not calls:
        await _stream(content)
    prompt = sum(_tokens(message.text) for message in messages) + 40 * len(request.tools)
    completion = _tokens(content) + 12 * len(calls)
    return GenerateResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=Usage(prompt=prompt, completion=completion, total=prompt + completion),
        model=OFFLINE_MODEL,
    )
