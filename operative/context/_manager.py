"""The context manager: what each step sends, fitted to the budget (:mod:`operative.context`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import msgspec

from .._core._errors import InvalidArgument
from .._core._model import GenerateFunction
from ..conversation import ConversationHistory, Message
from ._compaction import (
    DEFAULT_SUMMARY_INSTRUCTIONS as DEFAULT_SUMMARY_INSTRUCTIONS,
)
from ._compaction import (
    Compaction,
    CompactionStrategy,
    Summarize,
    drop_oldest,
)
from ._tokens import (
    ApproximateTokenCounter,
    TokenCounter,
    as_token_counter,
    context_window,
)

__all__ = ["ContextManagement", "ContextManager", "ContextStatistics", "Prepared"]


def _check_max_tokens(instance: Any, attribute: Any, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise InvalidArgument(f"max_tokens must be an int >= 1 or None, not {value!r}")


def _as_windows(value: Mapping[str, int]) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise InvalidArgument(
            f"context_windows= takes a mapping of model-name prefixes to windows, not {value!r}"
        )
    return dict(value)


def _check_strategy(instance: Any, attribute: Any, value: Any) -> None:
    if not callable(getattr(value, "compact", None)):
        raise InvalidArgument(
            "strategy= takes a compaction strategy (drop_oldest(), keep_last(turns=N), "
            f"summarize(generate) or any object with an async compact()), not {value!r}"
        )


@attrs.frozen(kw_only=True)
class ContextManagement:
    """How a run keeps its requests within a context window.

    The budget for what is sent is ``max_tokens`` (or, without it, the context window of
    ``model`` from :data:`CONTEXT_WINDOWS` and ``context_windows``) less ``reserve``,
    the room left for the answer (by default an eighth of the window, at most 4,096
    tokens). Everything is validated here, eagerly.

    >>> ContextManagement(max_tokens=8000).budget  # an eighth kept for the answer
    7000
    >>> ContextManagement(model="gpt-4o").budget  # 128,000 less 4,096
    123904
    >>> ContextManagement(max_tokens=8000, reserve=0).budget
    8000
    """

    max_tokens: int | None = attrs.field(default=None, validator=_check_max_tokens)
    """The context window to stay within (prompt and answer); overrides ``model``'s."""
    model: str | None = None
    """A model name whose context window gives the budget when ``max_tokens`` is unset."""
    warn_at: float = 0.8
    """Fraction of the budget at which ``Prepared.warned`` is raised (once per crossing)."""
    strategy: CompactionStrategy = attrs.field(factory=drop_oldest, validator=_check_strategy)
    """How to shorten what is sent once it is over budget."""
    counter: TokenCounter = attrs.field(factory=ApproximateTokenCounter, converter=as_token_counter)
    """Estimates tokens: a ``TokenCounter`` or any callable ``Message -> int``."""
    reserve: int | None = None
    """Tokens kept free for the model's answer; ``None``: an eighth of the window, at most
    4,096."""
    context_windows: Mapping[str, int] = attrs.field(factory=dict, converter=_as_windows)
    """Extra or overriding context windows, by model-name prefix."""

    def __attrs_post_init__(self) -> None:
        warn_at = self.warn_at
        if not isinstance(warn_at, int | float) or isinstance(warn_at, bool):
            raise InvalidArgument(f"warn_at must be a number, not {type(warn_at).__name__}")
        if not 0 < warn_at <= 1:
            raise InvalidArgument(f"warn_at is a fraction of the budget in (0, 1], not {warn_at}")
        reserve = self.reserve
        if reserve is not None and (
            not isinstance(reserve, int) or isinstance(reserve, bool) or reserve < 0
        ):
            raise InvalidArgument(f"reserve must be an int >= 0 or None, not {reserve!r}")
        for prefix, window in self.context_windows.items():
            if not isinstance(prefix, str) or not isinstance(window, int) or window < 1:
                raise InvalidArgument(
                    "context_windows maps model-name prefixes (str) to windows (int >= 1), "
                    f"not {prefix!r}: {window!r}"
                )
        if self.max_tokens is None and self.model is None:
            raise InvalidArgument(
                "ContextManagement needs max_tokens= (the context window to stay within) "
                "or model= (a model whose window is known)"
            )
        if self.budget < 1:
            raise InvalidArgument(
                f"reserve={reserve} leaves no room in a window of {self.window} tokens: "
                "lower reserve= or raise max_tokens="
            )

    @property
    def answer_reserve(self) -> int:
        """The tokens actually kept free for the answer (``reserve``, or its default)."""
        if self.reserve is not None:
            return self.reserve
        return min(4096, self.window // 8)

    @property
    def window(self) -> int:
        """The context window in use: ``max_tokens``, or the model's.

        Raises:
            InvalidArgument: the model's window is not known.
        """
        if self.max_tokens is not None:
            return self.max_tokens
        assert self.model is not None
        window = context_window(self.model, overrides=self.context_windows)
        if window is None:
            raise InvalidArgument(
                f"the context window of model {self.model!r} is not known: pass "
                f"max_tokens=, or context_windows={{{self.model!r}: <tokens>}}"
            )
        return window

    @property
    def budget(self) -> int:
        """The most tokens a request may hold: ``window - answer_reserve``."""
        return self.window - self.answer_reserve


class Prepared(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`ContextManager.prepare` decided for one step."""

    history: ConversationHistory
    """The history to send this step (the given one itself when nothing was cut)."""
    tokens: int
    """Estimated tokens of ``history``."""
    budget: int
    """The budget it was measured against."""
    warned: bool = False
    """The transcript crossed ``warn_at`` of the budget at this step (emit a warning)."""
    compaction: Compaction | None = None
    """Set when the strategy cut something at this step (emit ``context.compacted``)."""

    @property
    def over_budget(self) -> bool:
        """Still over budget: even the messages a strategy always keeps do not fit."""
        return self.tokens > self.budget


class ContextStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """Counters of a :class:`ContextManager` (for tests and dashboards)."""

    prepared: int
    """Calls to ``prepare``."""
    compactions: int
    """Steps at which the strategy cut something."""
    summaries: int
    """Compactions that wrote a summary."""
    recounts: int
    """Times the transcript changed other than by appending and was counted afresh."""
    transcript_tokens: int
    """Estimated tokens of the whole transcript last seen."""
    sent_tokens: int
    """Estimated tokens of what was last sent."""
    removed_messages: int
    """Transcript messages currently left out of what is sent."""


class ContextManager:
    """Prepares each step's request history for one run.

    Transcripts only grow by appending, so the manager keeps a running token count of
    what it has seen and counts only new messages; a transcript whose earlier messages
    changed (compared by identity, then by value) is counted again. Once messages were
    dropped or summarized, later steps reuse that decision, sending the same shortened
    prefix plus whatever was appended since, and the strategy runs again only when that
    is over budget again. So ``summarize`` calls its ``generate`` only when needed.

    Not safe for concurrent ``prepare`` calls (a run calls it once per step). A
    ``prepare`` cancelled during a summarization changes nothing.
    """

    __slots__ = (
        "_above",
        "_budget",
        "_compactions",
        "_counter",
        "_options",
        "_prepared",
        "_recounts",
        "_removed_ids",
        "_seen",
        "_sent",
        "_sent_history",
        "_sent_tokens",
        "_strategy",
        "_summaries",
        "_summary",
        "_threshold",
        "_tokens",
    )

    def __init__(self, options: ContextManagement) -> None:
        if not isinstance(options, ContextManagement):
            raise InvalidArgument(
                f"ContextManager() takes a ContextManagement, not {type(options).__name__}"
            )
        self._options = options
        self._budget = options.budget
        self._threshold = options.warn_at * self._budget
        self._counter = options.counter
        self._strategy = options.strategy
        self._seen: tuple[Message, ...] = ()
        self._tokens = 0
        """Tokens of ``_seen`` (the whole transcript)."""
        self._removed_ids: set[str] | None = None
        """Ids of transcript messages not sent; ``None`` until a compaction happened."""
        self._summary: Message | None = None
        self._sent: list[Message] = []
        """What is sent, once a compaction happened (the transcript itself before)."""
        self._sent_tokens = 0
        self._sent_history: ConversationHistory | None = None
        self._above = False
        self._prepared = 0
        self._compactions = 0
        self._summaries = 0
        self._recounts = 0

    def wrap_summary_model(self, wrap: Callable[[GenerateFunction], GenerateFunction]) -> None:
        """Wrap the model a summarizing strategy calls (``Summarize.generate``), for this
        manager only (the agent's ``ContextManagement`` is left as it is): tracing marks
        those calls as a compaction's. Other strategies call no model: nothing to wrap."""
        strategy = self._strategy
        if isinstance(strategy, Summarize):
            self._strategy = attrs.evolve(strategy, generate=wrap(strategy.generate))

    @property
    def options(self) -> ContextManagement:
        """The options this manager applies."""
        return self._options

    @property
    def budget(self) -> int:
        """The token budget of each request."""
        return self._budget

    def statistics(self) -> ContextStatistics:
        """What the manager has done so far."""
        return ContextStatistics(
            prepared=self._prepared,
            compactions=self._compactions,
            summaries=self._summaries,
            recounts=self._recounts,
            transcript_tokens=self._tokens,
            sent_tokens=self._sent_tokens if self._removed_ids is not None else self._tokens,
            removed_messages=len(self._removed_ids or ()),
        )

    async def prepare(self, history: ConversationHistory, *, step: int) -> Prepared:
        """The history to send at ``step``, compacted if it is over budget.

        ``history`` is never changed. Under budget this costs a comparison of the
        transcript with the one last seen and a count of the new messages; it awaits only
        when the strategy does (``summarize`` calls ``generate``).
        """
        self._prepared += 1
        messages = history.messages
        if messages is not self._seen:
            self._update(messages)
        compacted = self._removed_ids is not None
        tokens = self._sent_tokens if compacted else self._tokens
        threshold = self._threshold
        warned = tokens >= threshold and not self._above
        compaction: Compaction | None = None
        if tokens > self._budget:
            compaction = await self._strategy.compact(
                tuple(self._sent) if compacted else messages,
                budget=self._budget,
                counter=self._counter,
            )
            if compaction.removed or compaction.summary is not None:
                self._commit(compaction)
                compacted = True
                tokens = compaction.tokens_after
            else:
                compaction = None
        self._above = tokens >= threshold
        if not compacted:
            return Prepared(history=history, tokens=tokens, budget=self._budget, warned=warned)
        sent = self._sent_history
        if sent is None or sent.metadata is not history.metadata:
            sent = self._sent_history = msgspec.structs.replace(history, messages=tuple(self._sent))
        return Prepared(
            history=sent,
            tokens=tokens,
            budget=self._budget,
            warned=warned,
            compaction=compaction,
        )

    def _update(self, messages: tuple[Message, ...]) -> None:
        seen = self._seen
        known = len(seen)
        if len(messages) >= known and (known == 0 or messages[:known] == seen):
            new: Sequence[Message] = messages[known:] if known else messages
            added = self._counter.count_messages(new)
            self._tokens += added
            if self._removed_ids is not None and new:
                self._sent.extend(new)
                self._sent_tokens += added
                self._sent_history = None
        else:  # an earlier message changed: count again, keep the decision by id
            self._recounts += 1
            self._tokens = self._counter.count_messages(messages)
            removed = self._removed_ids
            if removed is not None:
                sent = [m for m in messages if m.id not in removed]
                if self._summary is not None:
                    head = 0
                    while head < len(sent) and sent[head].role == "system":
                        head += 1
                    sent.insert(head, self._summary)
                self._sent = sent
                self._sent_tokens = self._counter.count_messages(sent)
                self._sent_history = None
        self._seen = messages

    def _commit(self, compaction: Compaction) -> None:
        kept = {id(m) for m in compaction.messages}
        removed = self._removed_ids if self._removed_ids is not None else set()
        previous = self._sent if self._removed_ids is not None else self._seen
        summary = self._summary
        for message in previous:
            if id(message) not in kept and message is not summary:
                removed.add(message.id)
        if compaction.summary is not None:
            self._summary = compaction.summary
            self._summaries += 1
        elif summary is not None and id(summary) not in kept:
            self._summary = None
        self._removed_ids = removed
        self._sent = list(compaction.messages)
        self._sent_tokens = compaction.tokens_after
        self._sent_history = None
        self._compactions += 1
