"""The seam to a model: ``GenerateRequest`` in, ``GenerateResponse`` out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from ..conversation import ContentPart, ConversationHistory
from ._codec import json_problem
from ._errors import InvalidArgument, InvalidResponseError
from ._output import OutputMode
from ._types import ToolCall, ToolSpec, Usage

__all__ = [
    "GenerateFunction",
    "GenerateRequest",
    "GenerateResponse",
    "checked_response",
    "usage_problem",
]


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Everything a model call needs for one step."""

    conversation: ConversationHistory
    """A snapshot of the transcript (shared, never copied per step)."""
    tools: tuple[ToolSpec, ...] = ()
    """The tools offered at this step."""
    step: int = 1
    """1-based step number."""
    run_id: str = ""
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    """Model settings for this step (temperature, max tokens, ...)."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema of the structured output the run expects, when it has one."""
    output_mode: OutputMode | None = None
    """How the output is asked for (the run's ``output_mode=``): ``"native"`` (the
    provider's structured-output format), ``"tool"`` (a final-answer tool to call) or
    ``"prompted"`` (the schema in the system prompt); ``None``: native where the provider
    has it, prompted when a server refuses the native format. The provider adapters
    honour it; a generate function of your own may ignore it."""
    attempt: int = 1
    """1-based attempt number (retries of the same step count up)."""


class GenerateResponse(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the model said: text, the tool calls it asked for, and what it cost.

    Every field is type-checked when the record is built (or decoded, or replaced), so
    a response the loop receives is one it can read, count and store: a provider
    adapter or test double that builds one wrongly (``usage="lots"``,
    ``tool_calls=None``, ``ToolCall(id=123)``, metadata JSON cannot hold) gets an
    :class:`~operative.errors.InvalidResponseError` naming the field, at that line. Lists
    given for ``tool_calls`` or ``content`` are kept as tuples.
    """

    content: str = ""
    """The answer's text (or a tuple of content parts)."""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    model: str | None = None
    """The model that answered, when the provider says."""
    stop_reason: str | None = None
    """The provider's own stop reason, as it sent it."""
    response_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Provider extras a later turn needs (e.g. reasoning items, thinking signatures);
    JSON-encodable, nested at most 100 levels (``MAX_JSON_DEPTH``)."""

    def __post_init__(self) -> None:
        # Runs for every response a provider builds: the well-typed case is a few
        # class comparisons, and anything else gets the full check.
        calls: Any = self.tool_calls
        content: Any = self.content
        if calls.__class__ is list:
            calls = tuple(calls)
            msgspec.structs.force_setattr(self, "tool_calls", calls)
        if content.__class__ is list:
            msgspec.structs.force_setattr(self, "content", tuple(content))
        if content.__class__ is str and calls.__class__ is tuple and not self.metadata:
            usage = self.usage
            if (
                (
                    usage is None
                    or (
                        usage.__class__ is Usage
                        and usage.prompt.__class__ is int
                        and usage.completion.__class__ is int
                        and usage.total.__class__ is int
                        and usage.cache_read.__class__ is int
                        and usage.cache_write.__class__ is int
                        and usage.reasoning.__class__ is int
                        and usage.estimated.__class__ is bool
                        and usage.prompt >= 0
                        and usage.completion >= 0
                        and usage.cache_read >= 0
                        and usage.cache_write >= 0
                        and usage.reasoning >= 0
                        and usage.total >= usage.cache_read + usage.cache_write
                    )
                )
                and self.model.__class__ in _OPTIONAL_STR
                and self.stop_reason.__class__ in _OPTIONAL_STR
                and self.response_id.__class__ in _OPTIONAL_STR
            ):
                for call in calls:
                    if not (
                        call.__class__ is ToolCall
                        and call.id.__class__ in _OPTIONAL_STR
                        and call.name.__class__ is str
                        and call.arguments.__class__ in _ARGUMENT_TYPES
                    ):
                        break
                else:
                    return
        problem = response_problem(self)
        if problem is not None:
            raise InvalidResponseError(
                f"malformed GenerateResponse: {problem}. Fix the generate function (a "
                "provider adapter or a test double) that builds it."
            )
        if self.metadata.__class__ is not dict:
            msgspec.structs.force_setattr(self, "metadata", dict(self.metadata))


GenerateFunction: TypeAlias = Callable[[GenerateRequest], Awaitable[GenerateResponse]]
"""``async def generate(request: GenerateRequest) -> GenerateResponse``."""


_OPTIONAL_STR: tuple[type, ...] = (str, type(None))
_ARGUMENT_TYPES = (dict, str)
_USAGE_FIELDS = ("prompt", "completion", "total", "cache_read", "cache_write", "reasoning")
_CONTENT = msgspec.json.Decoder(tuple[ContentPart, ...])
_encode = msgspec.json.Encoder().encode


def checked_response(response: object) -> GenerateResponse:
    """``response`` when it is a well-formed ``GenerateResponse``; else the error.

    What the loop calls on what ``generate`` returned (and the ``validate_response``
    hooks), before anything reads it. A ``GenerateResponse`` checked its own fields when
    it was built; a subclass (which may have its own ``__post_init__``) is checked
    again here, field by field.

    Raises:
        InvalidResponseError: naming the field and what it must be.
    """
    if response.__class__ is GenerateResponse:
        return response
    if not isinstance(response, GenerateResponse):
        raise InvalidResponseError(
            f"the generate function returned {type(response).__name__}, not a "
            "GenerateResponse: return GenerateResponse(content=..., tool_calls=...)"
        )
    problem = response_problem(response)
    if problem is not None:
        raise InvalidResponseError(
            f"the generate function returned a malformed response: {problem}. Fix the "
            "generate function (a provider adapter or a test double); nothing of this "
            "response was recorded."
        )
    return response


def response_problem(response: object) -> str | None:
    """What is wrong with ``response`` (the first problem found), or ``None``."""
    if not isinstance(response, GenerateResponse):
        return f"{type(response).__name__} is not a GenerateResponse"
    content: object = response.content
    if not isinstance(content, str):
        if not isinstance(content, list | tuple):
            return f"content is of type {type(content).__name__}; it must be a str or content parts"
        try:
            _CONTENT.decode(_encode(content))
        except (msgspec.DecodeError, TypeError, ValueError, RecursionError) as exc:
            return f"content must be a str or TextPart/ImagePart/FilePart records ({exc})"
    calls: object = response.tool_calls
    if not isinstance(calls, list | tuple):
        return f"tool_calls is {calls!r}; it must be a tuple of ToolCall records (or empty)"
    for index, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            return f"tool_calls[{index}] is a {type(call).__name__}, not a ToolCall"
        problem = call_problem(call)
        if problem is not None:
            return f"tool_calls[{index}] {problem}"
    usage: object = response.usage
    if usage is not None:
        if not isinstance(usage, Usage):
            return f"usage is {usage!r}; it must be a Usage record (or None)"
        problem = usage_problem(usage)
        if problem is not None:
            return problem
    for name in ("model", "stop_reason", "response_id"):
        value = getattr(response, name)
        if not isinstance(value, _OPTIONAL_STR):
            return f"{name} is {value!r}; it must be a str or None"
    metadata: object = response.metadata
    if not isinstance(metadata, Mapping) or not all(isinstance(key, str) for key in metadata):
        return "metadata must be a dict with str keys"
    problem = json_problem(metadata)
    return None if problem is None else f"metadata is {problem}"


def usage_problem(usage: Usage) -> str | None:
    """What is wrong with ``usage`` (the first problem found), or ``None``.

    Token counts are ints, never negative (a negative count would credit a budget or a
    rate limit), and the cached tokens (``cache_read + cache_write``), which are part of
    the prompt ``total`` counts, are no more than ``total`` (a ``total`` of 0 leaves the
    sum of the parts to count). A provider adapter clamps what a server over-reports,
    with a warning, before it builds the response.
    """
    for name in _USAGE_FIELDS:
        count = getattr(usage, name)
        if not isinstance(count, int) or isinstance(count, bool):
            return f"usage.{name} is {count!r}; token counts are ints"
        if count < 0:
            return (
                f"usage.{name} is {count}; token counts are never negative (count what the "
                "server reported as 0, or leave usage=None)"
            )
    estimated: object = usage.estimated
    if not isinstance(estimated, bool):
        return f"usage.estimated is {estimated!r}; it is a bool"
    cached = usage.cache_read + usage.cache_write
    if usage.total and cached > usage.total:
        return (
            f"usage.cache_read + usage.cache_write is {cached}, more than usage.total "
            f"({usage.total}); cached tokens are part of the prompt, so count no more of "
            "them than the server's prompt count"
        )
    return None


def call_problem(call: ToolCall) -> str | None:
    """What is wrong with the types of a tool call's fields, or ``None``.

    An id may be empty or ``None`` (the loop gives such a call a fresh one); arguments
    that nest too deeply are not a problem here: the model is answered about them.
    """
    call_id: object = call.id
    if call_id is not None and not isinstance(call_id, str):
        return f"has id {call_id!r}; a call id is a str"
    name: object = call.name
    if not isinstance(name, str):
        return f"has name {name!r}; a tool name is a str"
    arguments: object = call.arguments
    if not isinstance(arguments, dict | str):
        return (
            f"has arguments of type {type(arguments).__name__}; arguments are a mapping or "
            "a JSON string"
        )
    return None


MODEL_ENTRY_POINTS = "operative.models"
"""The entry-point group naming model-string providers: each entry's name is a prefix
(``anthropic`` in ``"anthropic:claude-haiku-4-5"``) and its value a callable that takes
the whole string and returns a generate function (``operative.providers`` registers the
built-in ones; a package may register more)."""


def open_model_string(spec: str) -> GenerateFunction:
    """The generate function a model string names, from the provider registered for its
    prefix (see :data:`MODEL_ENTRY_POINTS`)."""
    from importlib.metadata import entry_points

    if not isinstance(spec, str):
        raise InvalidArgument(
            f"a model string is a str such as 'anthropic:claude-haiku-4-5', got {spec!r}"
        )
    registered = {entry.name: entry for entry in entry_points(group=MODEL_ENTRY_POINTS)}
    prefix = spec.partition(":")[0]
    entry = registered.get(prefix)
    if entry is None:
        if not registered:
            raise InvalidArgument(
                f"model string {spec!r}: no model provider is registered (the "
                f"{MODEL_ENTRY_POINTS!r} entry points are missing): reinstall operative "
                "(pip install operative) or pass generate= instead"
            )
        providers = sorted(registered, key=_builtin_first)
        raise InvalidArgument(
            f"model string {spec!r}: the provider must be one of {', '.join(providers)} "
            f"(as in 'anthropic:claude-haiku-4-5'){did_you_mean_model(spec, providers)}"
        )
    factory: Callable[[str], GenerateFunction] = entry.load()
    return factory(spec)


_MODEL_FAMILIES = (
    ("anthropic", ("claude",)),
    ("openai", ("gpt", "o1", "o3", "o4", "chatgpt", "text-embedding", "davinci")),
    ("gemini", ("gemini",)),
    ("ollama", ("llama", "qwen", "mistral", "mixtral", "phi", "gemma", "deepseek", "smollm")),
)
"""Which provider a bare model name (no ``provider:``) most likely belongs to."""


def did_you_mean_model(spec: str, providers: Sequence[str]) -> str:
    """``"; did you mean 'anthropic:claude-...'?"`` for a model string whose provider is
    misspelled (``antropic:``) or missing (``gpt-4o``), or ``""``."""
    import difflib  # only for the error

    prefix, colon, model = spec.partition(":")
    if colon:
        close = difflib.get_close_matches(prefix.lower(), providers, n=1, cutoff=0.6)
        return f"; did you mean '{close[0]}:{model}'?" if close else ""
    name = spec.strip().lower()
    if name in providers:
        return f"; name the model too, as in '{name}:MODEL'"
    for provider, families in _MODEL_FAMILIES:
        if provider in providers and name.startswith(families):
            return f"; did you mean '{provider}:{spec.strip()}'?"
    close = difflib.get_close_matches(name, providers, n=1, cutoff=0.6)
    if close:
        return f"; name the model too, as in '{close[0]}:MODEL'"
    return ""


_BUILTIN_ORDER = ("anthropic", "openai", "openai-responses", "gemini", "ollama")


def _builtin_first(name: str) -> tuple[int, str]:
    order = _BUILTIN_ORDER.index(name) if name in _BUILTIN_ORDER else len(_BUILTIN_ORDER)
    return order, name
