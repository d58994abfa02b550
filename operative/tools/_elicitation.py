"""Elicitation: a running tool asks the host (usually a person) for structured input."""

from __future__ import annotations

import functools
import os
import types
import typing
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeAlias, TypeVar, cast

import msgspec
import trio

from .._core._errors import ElicitationError
from .._core._events import ElicitationRequested, ElicitationResolved

__all__ = [
    "ElicitationRequest",
    "ElicitationResponse",
    "OnElicitation",
    "elicitation_schema",
    "run_elicitation",
]

T = TypeVar("T")


class ElicitationRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool asks for: a message for the person and the JSON Schema of the answer.

    The identity (``request_id``, ``tool_call_id``) is fixed; a response must echo it.
    """

    request_id: str
    tool_call_id: str | None = None
    message: str
    schema: dict[str, Any]
    """JSON Schema (draft 2020-12) of the data the tool expects back."""
    url: str | None = None
    """Set when the person must visit a page instead of filling a form (an MCP server's
    URL-mode elicitation): ``schema`` is then empty, and answering (rather than
    declining) says they agreed to go there."""


class ElicitationResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The host's answer: the request's identity and the data, validated by the tool."""

    request_id: str
    tool_call_id: str | None = None
    data: Any = None


OnElicitation: TypeAlias = Callable[[ElicitationRequest], Awaitable[ElicitationResponse | None]]
"""``async def on_elicitation(request) -> ElicitationResponse | None`` (``None`` declines)."""

Emit: TypeAlias = Callable[[Any], Awaitable[None]]


@functools.lru_cache(maxsize=256)
def elicitation_schema(type_: Any) -> dict[str, Any]:
    """The JSON Schema of ``type_`` (cached: a type's schema never changes)."""
    from .._core._errors import ToolDefinitionError
    from ._schema import json_schema  # local: _schema imports the tool context

    try:
        return json_schema(type_, what="elicitation type", object_only=False)
    except ToolDefinitionError as exc:
        members = typing.get_args(type_) if _is_union(type_) else ()
        if not members:
            raise ElicitationError(str(exc)) from None
    # msgspec refuses some unions (e.g. of several attrs classes): describe each member.
    return {"anyOf": [elicitation_schema(member) for member in members]}


def _is_union(type_: Any) -> bool:
    return typing.get_origin(type_) in (typing.Union, types.UnionType)


def _validate(data: Any, type_: Any) -> Any:
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        raise ElicitationError(
            f"the elicitation answer does not match the requested type: {exc}; "
            "the handler must return data shaped like request.schema"
        ) from None
    except TypeError:
        pass  # a type msgspec cannot validate: the shared cattrs converter can
    from .._core._convert import describe_error, get_converter

    try:
        return get_converter().structure(data, type_)
    except Exception as exc:
        raise ElicitationError(
            f"the elicitation answer does not match the requested type: {describe_error(exc)}"
        ) from None


async def run_elicitation(
    *,
    handler: OnElicitation | None,
    emit: Emit | None,
    run_id: str,
    step: int,
    tool_call_id: str,
    message: str,
    type_: type[T],
) -> T | None:
    """Ask ``handler`` for a ``type_`` value; ``None`` when the host declines."""
    if handler is None:
        raise ElicitationError(
            "this tool asked for input, but the run has no elicitation handler: "
            "pass on_elicitation= (an async function returning an ElicitationResponse "
            "or None) to the run or the ExecutionContext"
        )
    schema = elicitation_schema(cast(Hashable, type_))
    request = ElicitationRequest(
        request_id=os.urandom(12).hex(),
        tool_call_id=tool_call_id,
        message=message,
        schema=schema,
    )
    if emit is not None:
        await emit(
            ElicitationRequested(
                run_id=run_id,
                step=step,
                time=trio.current_time(),
                request_id=request.request_id,
                tool_call_id=tool_call_id,
                message=message,
                schema=schema,
            )
        )
    response = await handler(request)
    if response is not None:
        if not isinstance(response, ElicitationResponse):
            raise ElicitationError(
                f"on_elicitation returned {type(response).__name__}; "
                "return an ElicitationResponse, or None to decline"
            )
        if response.request_id != request.request_id or response.tool_call_id != tool_call_id:
            raise ElicitationError(
                f"the elicitation response is for request {response.request_id!r} "
                f"(tool call {response.tool_call_id!r}), not {request.request_id!r} "
                f"(tool call {tool_call_id!r}); echo the request's identity"
            )
        value = cast(T, _validate(response.data, type_))
    else:
        value = None
    if emit is not None:
        await emit(
            ElicitationResolved(
                run_id=run_id,
                step=step,
                time=trio.current_time(),
                request_id=request.request_id,
                tool_call_id=tool_call_id,
                declined=response is None,
            )
        )
    return value
