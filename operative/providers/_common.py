"""What the provider adapters share (no SDK imports): deltas, client ownership, parts."""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar

import msgspec
import trio

from .._core._errors import InvalidArgument
from .._core._model import GenerateRequest, GenerateResponse
from .._core._types import ToolOutcome, Usage
from ..conversation import ImagePart

__all__ = [
    "ClientAdapter",
    "Delta",
    "DeltaCallback",
    "ProviderUsageWarning",
    "cached_within",
    "count_of",
    "data_url",
    "estimate_usage",
    "image_base64",
    "is_error_outcome",
    "merge_settings",
    "output_schema_hint",
    "parse_arguments",
    "split_known",
]

ClientT = TypeVar("ClientT")


class Delta(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One piece of a streamed answer, handed to an ``on_delta`` callback as it arrives."""

    kind: Literal["text", "tool_arguments", "thinking"]
    """``"text"`` for answer text, ``"tool_arguments"`` for a slice of a tool call's JSON
    arguments, ``"thinking"`` for reasoning text the provider streams."""
    text: str
    """The new characters (a JSON fragment for ``"tool_arguments"``)."""
    index: int = 0
    """The content block (Anthropic) or tool-call slot (OpenAI) the delta belongs to."""
    call_id: str | None = None
    """For ``"tool_arguments"``: the id of the tool call being written."""
    tool_name: str | None = None
    """For ``"tool_arguments"``: the tool being called."""


DeltaCallback = Callable[[Delta], None]
"""A plain (sync) callable told about every streamed delta; it must not block."""


class ProviderUsageWarning(UserWarning):
    """A server reported token usage that cannot be right: a negative count, or more
    cached tokens than prompt tokens. The adapter counted it clamped (the negative
    count as 0, the cached tokens as the prompt's), so that no budget or rate limit is
    credited; the message names the provider and the field."""


def count_of(provider: str, field: str, value: int) -> int:
    """``value``, a count the server reported as ``field``; 0, with a
    :class:`ProviderUsageWarning`, when it is negative."""
    if value >= 0:
        return value
    warnings.warn(
        f"{provider} reported {field}={value}, a negative token count: counted as 0. The "
        "server over-reports; budgets and rate limits count the clamped value",
        ProviderUsageWarning,
        stacklevel=3,
    )
    return 0


def cached_within(provider: str, field: str, cached: int, prompt_field: str, prompt: int) -> int:
    """``cached``, the cached prompt tokens the server reported as ``field``; at most
    ``prompt`` (its ``prompt_field``, which includes them), with a
    :class:`ProviderUsageWarning` when it was more."""
    if cached <= prompt:
        return cached
    warnings.warn(
        f"{provider} reported {field}={cached}, more than {prompt_field}={prompt} (which "
        f"includes them): counted as {prompt}. The server over-reports; budgets and rate "
        "limits count the clamped value",
        ProviderUsageWarning,
        stacklevel=3,
    )
    return prompt


def is_error_outcome(outcome: ToolOutcome | None) -> bool:
    """Whether a tool message reports a failure to the model."""
    return outcome in ("error", "denied", "cancelled")


def image_base64(part: ImagePart) -> str:
    """An inline image's bytes, base64-encoded (ASCII)."""
    assert part.data is not None
    return base64.b64encode(part.data).decode("ascii")


def data_url(part: ImagePart) -> str:
    """An image's URL, or a ``data:`` URL for inline bytes."""
    if part.url is not None:
        return part.url
    return f"data:{part.media_type};base64,{image_base64(part)}"


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """A tool call's JSON arguments as a dict; the raw string when it is not a JSON object.

    The loop validates arguments at execution, so a malformed string reaches the model
    as a tool error instead of failing the step here.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # nested too deep: the loop refuses the raw text
        return raw
    return value if isinstance(value, dict) else raw


def output_schema_hint(schema: Mapping[str, Any]) -> str:
    """The instruction added when a request carries an ``output_schema``."""
    return (
        "When you give your final answer, reply with only a JSON value (no prose, no code "
        "fence) that validates against this JSON Schema:\n"
        + json.dumps(schema, separators=(",", ":"), sort_keys=True)
    )


def merge_settings(
    defaults: Mapping[str, Any], request: GenerateRequest
) -> tuple[dict[str, Any], bool | None]:
    """The factory's settings overridden by the request's; ``stream`` is taken out."""
    merged = {**defaults, **request.settings}
    stream = merged.pop("stream", None)
    if stream is not None and not isinstance(stream, bool):
        raise InvalidArgument(f"settings['stream'] must be a bool, got {stream!r}")
    return merged, stream


def split_known(params: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """Move parameters the SDK method does not declare into its ``extra_body``.

    SDKs drop or rename parameters between versions (and OpenAI-compatible servers take
    their own); anything the installed SDK does not know still reaches the wire.
    """
    extra = {key: params.pop(key) for key in [k for k in params if k not in known]}
    if extra:
        params["extra_body"] = {**extra, **(params.get("extra_body") or {})}
    return params


class ClientAdapter(Generic[ClientT]):
    """A ``GenerateFunction`` bound to one SDK client, which it may own.

    Pass ``client=`` to keep ownership (you close it). Otherwise the adapter creates
    the client on its first call and closes it in :meth:`aclose` (or when an
    ``async with`` block around it ends).
    """

    provider: str = ""

    def __init__(
        self, *, client: ClientT | None, make_client: Callable[[], ClientT] | None
    ) -> None:
        self._client = client
        self._make_client = make_client
        self._owns_client = client is None
        self._closed = False

    @property
    def client(self) -> ClientT:
        """The SDK client (created now if the adapter owns it and has not made it yet)."""
        if self._closed:
            raise InvalidArgument(f"this {self.provider} generate function has been closed")
        client = self._client
        if client is None:
            assert self._make_client is not None
            client = self._client = self._make_client()
        return client

    @property
    def owns_client(self) -> bool:
        """Whether :meth:`aclose` closes the client (True when no ``client=`` was given)."""
        return self._owns_client

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        raise NotImplementedError

    async def _close_client(self, client: ClientT) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the client if this adapter created it; calling again does nothing.

        Clean-up runs shielded for at most a second, so an abort cannot leak sockets.
        """
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        client, self._client = self._client, None
        if client is None or not self._owns_client:
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await self._close_client(client)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def estimate_usage(request: GenerateRequest, response: GenerateResponse) -> GenerateResponse:
    """``response`` with an estimated :class:`~operative.Usage` when the server reported
    none, so a run's tokens, the command's totals and token budgets never read a silent
    zero. The estimate (``estimated=True``) counts the conversation and the offered tools
    sent, and the answer received, with the approximate token counter."""
    if response.usage is not None:
        return response
    from ..context._tokens import ApproximateTokenCounter
    from ..conversation import Message

    counter = ApproximateTokenCounter()
    prompt = counter.count_messages(request.conversation.messages)
    if request.tools:
        prompt += counter.count(
            Message(
                id="tools",
                role="system",
                content=msgspec.json.encode(request.tools).decode(),
            )
        )
    answer = Message(
        id="answer",
        role="assistant",
        content=response.content if isinstance(response.content, str) else "",
        tool_calls=response.tool_calls,
    )
    completion = counter.count(answer)
    usage = Usage(prompt=prompt, completion=completion, total=prompt + completion, estimated=True)
    return msgspec.structs.replace(response, usage=usage)
