"""Compaction strategies: shorter transcripts that still make sense to a model.

Every strategy is a pure function of a tuple of messages (it never changes them) and
keeps three promises whatever it is given:

- the system prompt (the leading system messages) is kept;
- the latest user message is kept;
- an assistant tool call is never separated from its tool results: both go, or both stay.

The kept messages keep their order; ``summarize`` adds one summary message after the
system prompt.

How a transcript is cut up. After the system prompt, each message starts a *step*,
except tool results, which belong to the step of the call they answer (an assistant
message and its results are one step). A *turn* is a user message and the steps that
follow it, up to the next user message. The latest turn is often long (an agent run
is typically one user message and many tool steps), so strategies cut it too: after
the earlier turns, its oldest steps go, one by one. The latest user message and the
latest step (what the model needs to see to go on) always stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
import msgspec

from .._core._errors import InvalidArgument, InvalidResponseError
from .._core._model import GenerateFunction, GenerateRequest
from .._core._types import Usage
from ..conversation import ConversationHistory, ImagePart, Message, TextPart, new_message_id
from ._tokens import TokenCounter, TokenCounterLike, as_token_counter

__all__ = [
    "SUMMARY_METADATA_KEY",
    "Compaction",
    "CompactionStrategy",
    "DropOldest",
    "KeepLast",
    "Summarize",
    "drop_oldest",
    "is_summary",
    "keep_last",
    "summarize",
]

SUMMARY_METADATA_KEY = "operative.summary"
"""Metadata key set on a summary message; its value is the number of messages condensed."""


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """What a compaction strategy did."""

    messages: tuple[Message, ...]
    """The compacted transcript, to send in place of the input."""
    removed: int
    """How many input messages are not in ``messages``."""
    tokens_before: int
    """Estimated tokens of the input."""
    tokens_after: int
    """Estimated tokens of ``messages`` (may still exceed the budget: nothing left to cut)."""
    summary: Message | None = None
    """The summary message that replaced the removed ones, if the strategy wrote one."""
    usage: Usage | None = None
    """Usage of the summarization call, if one was made (a run's budget should count it)."""


class CompactionStrategy(Protocol):
    """Shortens a transcript to fit a token budget."""

    async def compact(
        self, messages: Sequence[Message], *, budget: int, counter: TokenCounterLike
    ) -> Compaction:
        """A compacted copy of ``messages`` within ``budget`` tokens, if it can be done."""
        ...


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary written by :func:`summarize`."""
    return SUMMARY_METADATA_KEY in message.metadata


# -- cutting a transcript into steps and turns -------------------------------------------


class _Layout:
    """Where a transcript may be cut: ``units`` are removable ranges, oldest first."""

    __slots__ = ("head", "turns", "units")

    def __init__(self, messages: Sequence[Message]) -> None:
        n = len(messages)
        head = 0
        while head < n and messages[head].role == "system":
            head += 1
        self.head = head
        blocks = _steps(messages, head)
        latest_user = next(
            (i for i in range(n - 1, head - 1, -1) if messages[i].role == "user"), None
        )
        turns: list[tuple[int, int]] = []
        steps: list[tuple[int, int]] = []
        if blocks:
            if latest_user is None:
                steps = blocks[:-1]
            else:
                at = next(k for k, (a, b) in enumerate(blocks) if a <= latest_user < b)
                for a, b in blocks[:at]:
                    if not turns or messages[a].role == "user":
                        turns.append((a, b))
                    else:
                        turns[-1] = (turns[-1][0], b)
                steps = blocks[at + 1 : -1]
        self.turns = len(turns)
        """How many whole turns come before the latest one (the first ``units``)."""
        self.units = turns + steps


def _steps(messages: Sequence[Message], start: int) -> list[tuple[int, int]]:
    """Contiguous ranges that are never split: a message with the tool results after it.

    A result that is not right after its call (or comes before it) merges every step
    between the two into one, so no cut can separate them.
    """
    bounds: list[list[int]] = []
    owner: dict[str, int] = {}  # call id -> index of the step holding the call or result

    def merge(first: int) -> None:
        last = len(bounds) - 1
        if first >= last:
            return
        bounds[first][1] = bounds[last][1]
        del bounds[first + 1 :]
        for key, index in owner.items():
            if index > first:
                owner[key] = first

    for i in range(start, len(messages)):
        message = messages[i]
        if message.role == "tool" and bounds:
            bounds[-1][1] = i + 1
            call_id = message.tool_call_id
            if call_id is not None:
                if call_id in owner:
                    merge(owner[call_id])
                else:
                    owner[call_id] = len(bounds) - 1
            continue
        bounds.append([i, i + 1])
        if message.role == "tool" and message.tool_call_id is not None:
            owner.setdefault(message.tool_call_id, len(bounds) - 1)
        for call in message.tool_calls:
            if call.id in owner:  # its result came first
                merge(owner[call.id])
            owner.setdefault(call.id, len(bounds) - 1)
    return [(a, b) for a, b in bounds]


def _plan(
    layout: _Layout, counts: Sequence[int], budget: int, *, at_least: int, reserve: int = 0
) -> tuple[list[tuple[int, int]], int]:
    """Units to remove: the first ``at_least``, then more until within the budget."""
    total = sum(counts)
    removed: list[tuple[int, int]] = []
    for index, (a, b) in enumerate(layout.units):
        if index >= at_least and total + reserve <= budget:
            break
        removed.append((a, b))
        total -= sum(counts[a:b])
    return removed, total


def _without(messages: Sequence[Message], removed: Sequence[tuple[int, int]]) -> list[Message]:
    kept: list[Message] = []
    position = 0
    for a, b in removed:
        kept.extend(messages[position:a])
        position = b
    kept.extend(messages[position:])
    return kept


def _removed_messages(
    messages: Sequence[Message], removed: Sequence[tuple[int, int]]
) -> list[Message]:
    return [m for a, b in removed for m in messages[a:b]]


def _check_budget(budget: int) -> None:
    if not isinstance(budget, int) or isinstance(budget, bool):
        raise InvalidArgument(f"budget must be an int (tokens), not {type(budget).__name__}")


def _counted(
    messages: Sequence[Message], counter: TokenCounterLike
) -> tuple[tuple[Message, ...], list[int], TokenCounter]:
    messages = tuple(messages)
    counting = as_token_counter(counter)
    return messages, [counting.count(m) for m in messages], counting


def _result(
    messages: tuple[Message, ...],
    counts: list[int],
    removed: list[tuple[int, int]],
    tokens_after: int,
) -> Compaction:
    before = sum(counts)
    if not removed:
        return Compaction(messages=messages, removed=0, tokens_before=before, tokens_after=before)
    kept = _without(messages, removed)
    return Compaction(
        messages=tuple(kept),
        removed=len(messages) - len(kept),
        tokens_before=before,
        tokens_after=tokens_after,
    )


# -- the strategies -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class DropOldest:
    """Drop the oldest turns, then the oldest steps of the latest turn, until within budget.

    Build it with :func:`drop_oldest`. It never blocks (it is async only to share the
    strategies' interface).
    """

    async def compact(
        self, messages: Sequence[Message], *, budget: int, counter: TokenCounterLike
    ) -> Compaction:
        """``messages`` without their oldest turns and steps, within ``budget`` if possible."""
        _check_budget(budget)
        messages, counts, _ = _counted(messages, counter)
        removed, after = _plan(_Layout(messages), counts, budget, at_least=0)
        return _result(messages, counts, removed, after)


@attrs.frozen(kw_only=True)
class KeepLast:
    """Keep the system prompt and the last ``turns`` turns (then cut as ``drop_oldest``).

    The latest turn counts as one. If what is kept is still over budget, the oldest steps
    of the latest turn go next, as with :func:`drop_oldest`. Build it with
    :func:`keep_last`; it never blocks.
    """

    turns: int = attrs.field(default=4)

    @turns.validator
    def _check_turns(self, attribute: object, value: int) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgument(f"keep_last(turns=...) takes an int >= 1, not {value!r}")

    async def compact(
        self, messages: Sequence[Message], *, budget: int, counter: TokenCounterLike
    ) -> Compaction:
        """The system prompt and the last ``turns`` turns of ``messages``."""
        _check_budget(budget)
        messages, counts, _ = _counted(messages, counter)
        layout = _Layout(messages)
        older = max(0, layout.turns - (self.turns - 1))
        removed, after = _plan(layout, counts, budget, at_least=older)
        return _result(messages, counts, removed, after)


DEFAULT_SUMMARY_INSTRUCTIONS = (
    "You condense conversations. You are given the earlier part of a conversation "
    "between a user and an AI assistant that uses tools. Write a summary that lets the "
    "assistant carry on without the original: the user's goals, requests and "
    "constraints; decisions made; facts learned, including tool results that still "
    "matter (names, ids, numbers, paths); what was done and what remains to do. Be "
    "concise and factual. Write only the summary, in plain text, without addressing the "
    "user."
)

SUMMARY_PREFIX = "[Summary of the earlier conversation, condensed from {count} messages]"


def _as_settings(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


@attrs.frozen(kw_only=True)
class Summarize:
    """Replace older turns with one summary written by a ``generate`` call.

    Build it with :func:`summarize`. The summary is a *user* message (see
    :func:`summarize` for why) placed right after the system prompt.
    """

    generate: GenerateFunction
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS
    keep_last: int = 2
    summary_tokens: int = 1024
    settings: Mapping[str, Any] = attrs.field(factory=dict, converter=_as_settings)

    async def compact(
        self, messages: Sequence[Message], *, budget: int, counter: TokenCounterLike
    ) -> Compaction:
        """``messages`` with their older turns condensed into one summary message.

        Calls ``generate`` once when there is something to condense, never otherwise.
        Errors from ``generate`` propagate.

        Raises:
            InvalidResponseError: the summarization call returned no text.
        """
        _check_budget(budget)
        messages, counts, counting = _counted(messages, counter)
        layout = _Layout(messages)
        older = max(0, layout.turns - max(0, self.keep_last - 1))
        reserve = min(self.summary_tokens, max(0, budget // 4))
        removed, _ = _plan(layout, counts, budget, at_least=older, reserve=reserve)
        if not removed:
            return _result(messages, counts, removed, 0)
        condensed = _removed_messages(messages, removed)
        request = GenerateRequest(
            conversation=ConversationHistory(
                messages=(
                    Message(id=new_message_id(), role="system", content=self.instructions),
                    Message(id=new_message_id(), role="user", content=render(condensed)),
                )
            ),
            settings=dict(self.settings),
        )
        response = await self.generate(request)
        text = response.content.strip()
        if not text:
            raise InvalidResponseError(
                "the summarization call returned no text: check the generate function "
                "given to summarize(), or use drop_oldest() instead"
            )
        summary = Message(
            id=new_message_id(),
            role="user",
            content=f"{SUMMARY_PREFIX.format(count=len(condensed))}\n\n{text}",
            metadata={SUMMARY_METADATA_KEY: len(condensed)},
        )
        kept = _without(messages, removed)
        kept.insert(layout.head, summary)
        return Compaction(
            messages=tuple(kept),
            removed=len(condensed),
            tokens_before=sum(counts),
            tokens_after=counting.count_messages(kept),
            summary=summary,
            usage=response.usage,
        )


def drop_oldest() -> DropOldest:
    """Drop the oldest turns, then the oldest steps of the latest turn, until within budget.

    The system prompt, the latest user message and the latest step always stay, so the
    result can still be over budget when they alone are too large.
    """
    return DropOldest()


def keep_last(*, turns: int) -> KeepLast:
    """Keep the system prompt and the last ``turns`` turns (the latest one counts as one).

    If that is still over budget, the oldest steps of the latest turn go next.

    Raises:
        InvalidArgument: ``turns`` is not an int >= 1.
    """
    return KeepLast(turns=turns)


def summarize(
    generate: GenerateFunction,
    *,
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS,
    keep_last: int = 2,
    summary_tokens: int = 1024,
    settings: Mapping[str, Any] | None = None,
) -> Summarize:
    """Condense everything but the last ``keep_last`` turns into one summary message.

    The older messages are rendered as a plain-text transcript and sent, after
    ``instructions`` as a system message, through ``generate`` (any
    :data:`~operative.GenerateFunction`: often a cheaper model than the run's), with
    ``settings`` as the request's settings. A transcript rather than the raw messages,
    because providers refuse tool calls in a request that offers no tools.

    If keeping the last ``keep_last`` turns leaves the transcript over budget (less
    ``summary_tokens`` of room for the summary), the oldest steps of the latest turn are
    condensed too.

    The summary is a **user** message marked as a summary (its text starts with
    ``[Summary of the earlier conversation ...]`` and its metadata holds
    ``"operative.summary"``), not a system message: it is written from tool output and
    user text, which must not gain the authority of the system prompt.

    Raises:
        InvalidArgument: an argument has the wrong type or range.
    """
    if not callable(generate):
        raise InvalidArgument(
            f"summarize() takes a generate function first, not {type(generate).__name__}"
        )
    if not isinstance(instructions, str) or not instructions.strip():
        raise InvalidArgument("summarize(instructions=...) takes a non-empty str")
    for name, value in (("keep_last", keep_last), ("summary_tokens", summary_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgument(f"summarize({name}=...) takes an int >= 0, not {value!r}")
    return Summarize(
        generate=generate,
        instructions=instructions,
        keep_last=keep_last,
        summary_tokens=summary_tokens,
        settings=settings or {},
    )


def render(messages: Sequence[Message]) -> str:
    """A plain-text transcript of ``messages``, as a summarizer reads it."""
    blocks: list[str] = []
    for message in messages:
        if message.role == "tool":
            label = f"[tool result: {message.tool_name or message.tool_call_id}"
            label += f" ({message.outcome})]" if message.outcome else "]"
        else:
            label = f"[{message.role}]"
        text = _plain(message)
        blocks.append(f"{label}\n{text}" if text else label)
        for call in message.tool_calls:
            arguments = call.arguments
            shown = arguments if isinstance(arguments, str) else _encode(arguments).decode()
            blocks.append(f"[tool call: {call.name}({shown})]")
    return "\n\n".join(blocks)


_encode = msgspec.json.Encoder().encode


def _plain(message: Message) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ImagePart):
            pieces.append("[image]")
        else:
            pieces.append(f"[file {part.name or part.file_id}]")
    return "\n".join(pieces)
