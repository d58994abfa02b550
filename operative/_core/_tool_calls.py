"""What the model and the tools hand the loop, checked before anything is stored.

A call whose fields have the wrong types fails the step with ``InvalidResponseError``;
a call whose arguments JSON cannot hold, or that nest deeper than ``MAX_JSON_DEPTH``, is
recorded with its arguments replaced (``{"operative.refused": why}``) and answered with
an ``error`` result without running; a tool value JSON cannot hold (``10**5000``, a
tuple-keyed dict, a list that contains itself, too deep a value) becomes an ``error``
result. The common case — a plain call, a plain value — is tested first and cheaply.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from ._codec import MAX_JSON_DEPTH, json_problem, json_too_deep
from ._errors import InvalidResponseError
from ._model import call_problem
from ._types import ToolCall, ToolResult

if TYPE_CHECKING:
    from ..tools import ExecutionContext

__all__ = [
    "PLAIN_VALUES",
    "REFUSED_ARGUMENTS",
    "SMALL_INT",
    "SMALL_INT_NEGATED",
    "RefusedCalls",
    "normalize_calls",
    "refused_result",
    "sendable",
    "sendable_execute",
    "unsendable",
]

REFUSED_ARGUMENTS = "operative.refused"
"""The key of the arguments recorded in place of arguments the loop refused to store."""

PLAIN_VALUES = (str, bool, float, type(None))
"""Classes of tool values JSON holds without looking inside (with ints below SMALL_INT)."""
SMALL_INT = 2**64
SMALL_INT_NEGATED = -SMALL_INT
_SHALLOW = 2 * MAX_JSON_DEPTH + 1


def normalize_calls(calls: Sequence[ToolCall], seen: set[str]) -> tuple[ToolCall, ...]:
    """Check the calls' fields and give every call a run-unique id (``seen``: the ids
    the run's transcript holds; the calls' ids are added to it).

    Some servers reuse ids (``call_0`` every turn) or send none; a call id must name
    exactly one call in the transcript, so repeats and blanks get fresh ids. A field
    of the wrong type raises :class:`InvalidResponseError`. Arguments that cannot be
    stored (not JSON, or nested deeper than ``MAX_JSON_DEPTH``) are replaced by
    ``{"operative.refused": why}``; the tuple returned then carries the refusals
    (:class:`RefusedCalls`), and the tool phase answers those calls with ``error``
    results instead of running them. A replayed call recorded that way is refused
    again, never run.
    """
    if type(calls) is not tuple:
        calls = tuple(calls)
    add = seen.add
    fixed: list[ToolCall] | None = None
    refused: dict[str, str] | None = None
    for index, call in enumerate(calls):
        # The calls' field types were checked when the response was built; what is
        # left is the arguments' depth (a JSON text of n characters nests at most
        # n / 2 levels) and whether the id is taken.
        if (
            call.__class__ is ToolCall
            and (call_id := call.id)
            and call_id not in seen
            and (
                ((arguments := call.arguments).__class__ is str and len(arguments) <= _SHALLOW)
                or _storable_arguments(arguments)
            )
        ):
            if fixed is not None:
                fixed.append(call)
            add(call_id)
            continue
        if not isinstance(call, ToolCall):
            raise InvalidResponseError(
                f"tool_calls[{index}] is {type(call).__name__}, not a ToolCall: build "
                "ToolCall(id=..., name=..., arguments=...)"
            )
        problem = call_problem(call)
        if problem is not None:
            raise InvalidResponseError(
                f"tool_calls[{index}] {problem}; the generate function (a provider "
                "adapter or a test double) built the call wrongly, and nothing of the "
                "response was recorded"
            )
        replaced = call
        arguments = call.arguments
        if isinstance(arguments, dict) and REFUSED_ARGUMENTS in arguments:
            refusal: str | None = str(arguments[REFUSED_ARGUMENTS])  # recorded before
        else:
            refusal = _arguments_problem(arguments)
            if refusal is not None:
                replaced = msgspec.structs.replace(replaced, arguments={REFUSED_ARGUMENTS: refusal})
        new_id = call.id
        if not new_id or new_id in seen:
            new_id = f"{new_id or 'call'}~{os.urandom(4).hex()}"
            replaced = msgspec.structs.replace(replaced, id=new_id)
        if refusal is not None:
            if refused is None:
                refused = {}
            refused[new_id] = refusal
        if replaced is not call and fixed is None:
            fixed = list(calls[:index])
        if fixed is not None:
            fixed.append(replaced)
        add(new_id)
    checked = tuple(fixed) if fixed is not None else calls
    if refused is not None:
        return RefusedCalls(checked, refused)
    return checked


class RefusedCalls(tuple):  # type: ignore[type-arg]
    """A step's calls, some of whose arguments were refused (``refused``: id -> why)."""

    refused: dict[str, str]

    def __new__(cls, calls: tuple[ToolCall, ...], refused: dict[str, str]) -> RefusedCalls:
        self = super().__new__(cls, calls)
        self.refused = refused
        return self


def _storable_arguments(arguments: object) -> bool:
    """The test of the common case: a JSON string not too deep, a small plain mapping."""
    if arguments.__class__ is str:
        return not json_too_deep(arguments)
    return (
        arguments.__class__ is dict
        and REFUSED_ARGUMENTS not in arguments
        and json_problem(arguments) is None
    )


def _arguments_problem(arguments: dict[str, Any] | str) -> str | None:
    """Why a call's arguments cannot be stored (and so are not run), or ``None``."""
    if isinstance(arguments, str):
        if json_too_deep(arguments):
            return f"its arguments are nested deeper than {MAX_JSON_DEPTH} levels"
        return None
    problem = json_problem(arguments)
    return None if problem is None else f"its arguments are {problem}"


def refused_result(call: ToolCall, why: object) -> ToolResult:
    """The ``error`` result of a call whose arguments were refused."""
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome="error",
        error=(
            f"The call to {call.name!r} did not run: {why}. Call it again with plain JSON "
            f"arguments nested at most {MAX_JSON_DEPTH} levels deep."
        ),
        detail="arguments refused before the call ran; the transcript keeps only the reason",
    )


def sendable(result: ToolResult) -> ToolResult:
    """``result``, or an ``error`` result when its value cannot be stored or sent."""
    if result.outcome != "success":
        return result
    value = result.value
    value_class = value.__class__
    if value_class is int:
        if SMALL_INT_NEGATED < value < SMALL_INT:
            return result
    elif value_class in PLAIN_VALUES:
        return result
    problem = json_problem(value)
    if problem is None:
        return result
    return ToolResult(
        call_id=result.call_id,
        tool_name=result.tool_name,
        outcome="error",
        error=(
            f"Tool {result.tool_name!r} returned a value that cannot be sent to the model: "
            f"it is {problem}."
        ),
        detail=f"{type(value).__name__} value refused: {problem}",
    )


def unsendable(call: ToolCall, exc: RecursionError) -> ToolResult:
    """The result of a call whose value was too deep (or self-containing) to convert."""
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome="error",
        error=(
            f"Tool {call.name!r} returned a value that cannot be sent to the model: it is "
            f"nested deeper than {MAX_JSON_DEPTH} levels, or contains itself."
        ),
        detail=f"RecursionError: {exc}",
    )


def sendable_execute(
    execute: Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]],
) -> Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]]:
    """``execute`` whose results are sendable (the innermost layer under wrappers)."""

    async def execute_sendable(call: ToolCall, context: ExecutionContext) -> ToolResult:
        try:
            return sendable(await execute(call, context))
        except RecursionError as exc:
            return unsendable(call, exc)

    return execute_sendable
