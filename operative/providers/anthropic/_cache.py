"""Prompt-caching breakpoints: where ``cache_control`` goes in a Messages API request.

The API caches the prompt prefix up to each block marked ``cache_control`` (at most four
marks a request), in the order it renders a request: tools, then system, then messages.
A mark with a longer TTL must come before any mark with a shorter one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from ..._core._errors import InvalidArgument

__all__ = [
    "CACHE_CONTROL_KEY",
    "MAX_BREAKPOINTS",
    "CacheSetting",
    "PromptCache",
    "apply_breakpoints",
    "cache_control_of",
    "prompt_cache",
]

CACHE_CONTROL_KEY = "anthropic.cache_control"
"""Message metadata key: a breakpoint on that message's last block. ``True`` or ``"5m"``
(the default TTL), ``"1h"``, or a ``cache_control`` mapping sent as given."""

MAX_BREAKPOINTS = 4
"""How many ``cache_control`` marks the API accepts in one request."""

Ttl: TypeAlias = Literal["5m", "1h"]

_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def _message_count(value: object) -> int:
    if value is None or value is False:
        return 0
    if value == "last":
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BREAKPOINTS:
        raise InvalidArgument(
            "PromptCache.messages takes 'last', None, or how many of the latest user turns "
            f"to mark (0 to {MAX_BREAKPOINTS}), got {value!r}"
        )
    return value


def _check_ttl(instance: Any, attribute: Any, value: Any) -> None:
    if value not in ("5m", "1h"):
        raise InvalidArgument(f"PromptCache.ttl must be '5m' or '1h', got {value!r}")


def _check_flag(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"PromptCache.{attribute.name} must be a bool, got {value!r}")


@attrs.frozen(kw_only=True)
class PromptCache:
    """Where :func:`anthropic_generate` places prompt-caching breakpoints by itself.

    ``system``: on the last system block. ``tools``: on the last tool spec. ``messages``:
    on the last block of the latest user turn (``"last"``, the same as ``1``), of the
    latest ``n`` user turns (an int up to 4), or on none (``None`` or ``0``); a user turn
    holds user messages and tool results. ``ttl``: ``"5m"`` (the API's default, sent
    without a ``ttl``) or ``"1h"``.

    Never more than four breakpoints are sent: a message's own hint
    (``metadata["anthropic.cache_control"]``) is kept first, then the latest user turn,
    the system prompt, earlier user turns, and the tools last (the system breakpoint
    caches the tools in front of it too).
    """

    system: bool = attrs.field(default=True, validator=_check_flag)
    tools: bool = attrs.field(default=True, validator=_check_flag)
    messages: int = attrs.field(default=1, converter=_message_count)
    ttl: Ttl = attrs.field(default="5m", validator=_check_ttl)

    @property
    def control(self) -> dict[str, Any]:
        """The ``cache_control`` object these breakpoints carry."""
        return _control(self.ttl)


CacheSetting: TypeAlias = PromptCache | Literal["auto"] | bool | None
"""What ``cache=`` takes: ``"auto"`` (or ``True``) for ``PromptCache()``, a
:class:`PromptCache`, or ``None`` (or ``False``) for no automatic breakpoints."""


def prompt_cache(value: object) -> PromptCache | None:
    """``cache=`` (or ``settings["cache"]``) as a :class:`PromptCache`, or None."""
    if value is None or value is False:
        return None
    if value is True or value == "auto":
        return PromptCache()
    if isinstance(value, PromptCache):
        return value
    raise InvalidArgument(f"cache= takes 'auto', a PromptCache(...) or None, got {value!r}")


def _control(ttl: str) -> dict[str, Any]:
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def cache_control_of(hint: object) -> dict[str, Any] | None:
    """A message's ``metadata["anthropic.cache_control"]`` as a ``cache_control`` object."""
    if hint is None or hint is False:
        return None
    if hint is True:
        return _control("5m")
    if hint in ("5m", "1h"):
        return _control(str(hint))
    if isinstance(hint, Mapping) and "type" in hint:
        return dict(hint)
    raise InvalidArgument(
        f"metadata[{CACHE_CONTROL_KEY!r}] takes True, '5m', '1h' or a cache_control "
        f"mapping such as {{'type': 'ephemeral'}}, got {hint!r}"
    )


@attrs.define(eq=False)
class _Slot:
    """A block that may carry a breakpoint: where it is, and the mark it would get."""

    container: list[Any]
    block: dict[str, Any]
    position: tuple[int, ...]
    """In the order the API renders a request; the last number is the index in
    ``container``."""
    control: dict[str, Any]


def _last_markable(blocks: Sequence[Any]) -> dict[str, Any] | None:
    for block in reversed(blocks):
        if isinstance(block, dict) and block.get("type") not in _UNMARKABLE:
            return block
    return None


def apply_breakpoints(
    params: dict[str, Any],
    cache: PromptCache | None,
    hints: Sequence[tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """Mark ``params``' blocks with ``cache_control`` (copying each block it marks).

    ``hints`` pairs each block some message asked to cache with its ``cache_control``.
    Marks already in the caller's own ``system`` blocks and ``tools``, and a top-level
    ``cache_control`` (the API's automatic caching), count against the four.
    """
    if cache is None and not hints:
        return
    tools = params.get("tools")
    tools = list(tools) if isinstance(tools, list | tuple) else []
    system = params.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    elif not isinstance(system, list):
        system = []
    turns: list[dict[str, Any]] = params.get("messages") or []

    where: dict[int, tuple[list[Any], tuple[int, ...]]] = {}
    for i, block in enumerate(tools):
        where[id(block)] = (tools, (0, i))
    for i, block in enumerate(system):
        where[id(block)] = (system, (1, i))
    for t, turn in enumerate(turns):
        content = turn.get("content")
        if isinstance(content, list):
            for b, block in enumerate(content):
                where[id(block)] = (content, (2, t, b))

    taken = sum(
        1 for block in (*tools, *system) if isinstance(block, Mapping) and "cache_control" in block
    )
    if params.get("cache_control"):
        taken += 1
    budget = max(0, MAX_BREAKPOINTS - taken)

    explicit: list[_Slot] = []
    for block, control in hints:
        found = where.get(id(block))
        if found is not None:
            explicit.append(_Slot(found[0], block, found[1], control))
    explicit.sort(key=lambda slot: slot.position)
    chosen = explicit[max(0, len(explicit) - budget) :] if budget else []
    marked = {id(slot.block) for slot in chosen}

    if cache is not None:
        control = cache.control
        latest: list[dict[str, Any]] = []  # the latest user turns' last blocks, newest first
        for turn in reversed(turns):
            if len(latest) >= cache.messages:
                break
            if turn.get("role") == "user":
                block = _last_markable(turn.get("content") or ())
                if block is not None:
                    latest.append(block)
        wanted: list[dict[str, Any]] = latest[:1]
        if cache.system and system:
            wanted.append(system[-1])
        wanted.extend(latest[1:])
        if cache.tools and tools:
            wanted.append(tools[-1])
        for block in wanted:
            if len(chosen) >= budget:
                break
            found = where.get(id(block))
            if found is None or id(block) in marked or not isinstance(block, dict):
                continue
            if "cache_control" in block:  # the caller's own mark, already counted
                continue
            chosen.append(_Slot(found[0], block, found[1], control))
            marked.add(id(block))
    if not chosen:
        return

    # The API wants longer TTLs first: a mark in front of a one-hour mark lasts an hour too.
    chosen.sort(key=lambda slot: slot.position)
    longest = False
    for slot in reversed(chosen):
        if slot.control.get("ttl") == "1h":
            longest = True
        elif longest:
            slot.control = {**slot.control, "ttl": "1h"}

    for slot in chosen:
        slot.container[slot.position[-1]] = {**slot.block, "cache_control": slot.control}
    if tools:
        params["tools"] = tools
    if system:
        params["system"] = system
