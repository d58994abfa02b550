"""Token estimation for messages, and the context windows of known models.

Counting is an estimate on purpose: an exact count needs the provider's tokenizer (and
for some providers a network call), while compaction only has to know, cheaply and every
step, whether a transcript is near its budget. Plug in an exact counter when it matters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Protocol, TypeAlias, runtime_checkable

import msgspec

from .._core._errors import InvalidArgument
from ..conversation import ImagePart, Message, TextPart

__all__ = [
    "CONTEXT_WINDOWS",
    "ApproximateTokenCounter",
    "TokenCounter",
    "TokenCounterLike",
    "as_token_counter",
    "context_window",
]


@runtime_checkable
class TokenCounter(Protocol):
    """Estimates how many tokens messages take in a model's context."""

    def count(self, message: Message) -> int:
        """The tokens ``message`` takes, its per-message overhead included."""
        ...

    def count_messages(self, messages: Iterable[Message]) -> int:
        """The tokens all of ``messages`` take together."""
        ...


TokenCounterLike: TypeAlias = TokenCounter | Callable[[Message], int]
"""A :class:`TokenCounter`, or any callable ``Message -> int``."""


class _FunctionTokenCounter:
    """A :class:`TokenCounter` over a plain ``Message -> int`` callable."""

    __slots__ = ("count",)

    def __init__(self, function: Callable[[Message], int]) -> None:
        self.count = function

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(map(self.count, messages))

    def __repr__(self) -> str:
        return f"as_token_counter({self.count!r})"


def as_token_counter(counter: TokenCounterLike) -> TokenCounter:
    """``counter`` as a :class:`TokenCounter` (a plain callable is wrapped).

    Raises:
        InvalidArgument: ``counter`` is neither a ``TokenCounter`` nor callable.
    """
    if isinstance(counter, TokenCounter):
        return counter
    if callable(counter):
        return _FunctionTokenCounter(counter)
    raise InvalidArgument(
        "a token counter is a TokenCounter or a callable Message -> int, not "
        f"{type(counter).__name__}"
    )


_encode_json = msgspec.json.Encoder().encode


class ApproximateTokenCounter:
    """A fast estimate: about ``chars_per_token`` characters of text make one token.

    Counts the text of a message, the name and JSON arguments of each tool call it makes
    and its tool name, rounds up, then adds ``message_overhead`` (role and framing).
    Images cost ``image_tokens`` and file parts ``file_tokens`` each, whatever their size
    (providers charge images by resolution, which a message does not record).

    English prose runs at about four characters per token with the tokenizers of the
    main providers; code and non-Latin scripts run denser, so the estimate errs low
    there: set ``chars_per_token=3`` to be safer.

    Counting a short message takes well under a microsecond. Messages whose tool calls
    carry mapping arguments (which need a JSON encoding) are cached by id, up to
    ``cache_size`` of them, oldest dropped first; a cached count is reused only for the
    very same message object, so a replaced message (same id, new content) is counted
    again.
    """

    __slots__ = (
        "_cache",
        "_cache_size",
        "chars_per_token",
        "file_tokens",
        "image_tokens",
        "message_overhead",
    )

    def __init__(
        self,
        *,
        chars_per_token: float = 4.0,
        message_overhead: int = 4,
        image_tokens: int = 1024,
        file_tokens: int = 1024,
        cache_size: int = 2048,
    ) -> None:
        if not (isinstance(chars_per_token, int | float) and chars_per_token > 0):
            raise InvalidArgument(
                f"chars_per_token must be a positive number, not {chars_per_token!r}"
            )
        for name, value in (
            ("message_overhead", message_overhead),
            ("image_tokens", image_tokens),
            ("file_tokens", file_tokens),
            ("cache_size", cache_size),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidArgument(f"{name} must be an int >= 0, not {value!r}")
        self.chars_per_token = float(chars_per_token)
        self.message_overhead = message_overhead
        self.image_tokens = image_tokens
        self.file_tokens = file_tokens
        self._cache_size = cache_size
        self._cache: dict[str, tuple[Message, int]] = {}

    def __repr__(self) -> str:
        return (
            f"ApproximateTokenCounter(chars_per_token={self.chars_per_token:g}, "
            f"message_overhead={self.message_overhead}, image_tokens={self.image_tokens}, "
            f"file_tokens={self.file_tokens})"
        )

    def count(self, message: Message) -> int:
        """The estimated tokens of ``message``."""
        content = message.content
        calls = message.tool_calls
        if not calls:
            if content.__class__ is str:
                name = message.tool_name
                chars = len(content) + len(name) if name else len(content)
                return self.message_overhead + math.ceil(chars / self.chars_per_token)
            return self._count(message)
        entry = self._cache.get(message.id)
        if entry is not None and entry[0] is message:
            return entry[1]
        tokens = self._count(message)
        if self._cache_size and any(call.arguments.__class__ is not str for call in calls):
            cache = self._cache
            if len(cache) >= self._cache_size:
                del cache[next(iter(cache))]  # oldest first (dicts keep insertion order)
            cache[message.id] = (message, tokens)
        return tokens

    def count_messages(self, messages: Iterable[Message]) -> int:
        """The estimated tokens of all ``messages``."""
        return sum(map(self.count, messages))

    def _count(self, message: Message) -> int:
        content = message.content
        fixed = self.message_overhead
        if isinstance(content, str):
            chars = len(content)
        else:
            chars = 0
            for part in content:
                if isinstance(part, TextPart):
                    chars += len(part.text)
                elif isinstance(part, ImagePart):
                    fixed += self.image_tokens
                else:
                    fixed += self.file_tokens
        for call in message.tool_calls:
            arguments = call.arguments
            encoded = len(arguments) if isinstance(arguments, str) else len(_encode_json(arguments))
            chars += len(call.id) + len(call.name) + encoded
        if message.tool_name:
            chars += len(message.tool_name)
        return fixed + math.ceil(chars / self.chars_per_token)


# Total context windows (prompt and answer together), in tokens, by model-name prefix.
# The longest matching prefix wins, so a specific entry overrides its family's.
_WINDOWS: dict[str, int] = {
    # Anthropic: every Claude 3 and 4 model has a 200K window (1M for some Sonnet models
    # behind a beta header, which a caller opts into explicitly).
    "claude": 200_000,
    "claude-2.0": 100_000,
    "claude-instant": 100_000,
    # OpenAI
    "gpt-5": 400_000,
    "gpt-5-chat": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.5": 128_000,
    "gpt-4o": 128_000,
    "chatgpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4-1106": 128_000,
    "gpt-4-0125": 128_000,
    "gpt-4-32k": 32_768,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o1-preview": 128_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    # Google Gemini
    "gemini": 1_048_576,
    "gemini-1.5-pro": 2_097_152,
    "gemini-1.0-pro": 32_760,
    "gemini-pro": 32_760,
}

CONTEXT_WINDOWS: Mapping[str, int] = MappingProxyType(_WINDOWS)
"""Known context windows (prompt and answer together), in tokens, by model-name prefix."""

# "models/gemini-2.5-pro", "openai/gpt-4o", "anthropic.claude-3-5-sonnet-...-v1:0" (Bedrock,
# with an optional region prefix such as "us."), "claude-sonnet-4@20250514" (Vertex).
_VENDOR_PREFIX = re.compile(r"^(?:.*/)?(?:[a-z]{2,4}\.)?(?:anthropic\.|google\.|openai\.)?")

_SORTED_DEFAULT = tuple(sorted(_WINDOWS.items(), key=lambda item: -len(item[0])))


def context_window(model: str, *, overrides: Mapping[str, int] | None = None) -> int | None:
    """The context window of ``model`` in tokens, or ``None`` when it is not known.

    ``model`` is matched by its longest known prefix, case-insensitively, after a vendor
    prefix such as ``models/`` or ``anthropic.`` is removed. ``overrides`` (model-name
    prefix to window) is merged into the known table first, replacing equal prefixes,
    so an override for ``gpt-4`` does not change ``gpt-4o``.

    >>> context_window("claude-sonnet-4-5-20250929")
    200000
    >>> context_window("gpt-4o-mini")
    128000
    >>> context_window("my-model", overrides={"my-": 32_000})
    32000
    """
    if not isinstance(model, str):
        raise InvalidArgument(f"a model name is a str, not {type(model).__name__}")
    raw = model.strip().lower()
    name = _VENDOR_PREFIX.sub("", raw, count=1)
    table = _SORTED_DEFAULT
    if overrides:
        merged = {**_WINDOWS, **{prefix.lower(): window for prefix, window in overrides.items()}}
        table = tuple(sorted(merged.items(), key=lambda item: -len(item[0])))
    for prefix, window in table:
        if name.startswith(prefix) or raw.startswith(prefix):
            return window
    return None
