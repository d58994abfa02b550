"""Elicitation: a tool asks the host for structured input through its ToolContext."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from operative._core._events import ElicitationRequested, ElicitationResolved, Event
from operative._core._types import ToolCall, ToolResult
from operative.tools import (
    ElicitationRequest,
    ElicitationResponse,
    ExecutionContext,
    OnElicitation,
    Toolbox,
    ToolContext,
    tool,
)


class Confirm(msgspec.Struct, frozen=True, kw_only=True):
    """A person's confirmation."""

    approved: bool
    note: str = ""


@tool
async def confirm_delete(path: str, ctx: ToolContext) -> str:
    """Delete after asking."""
    answer = await ctx.elicit(f"Delete {path}?", Confirm)
    if answer is None:
        return "declined"
    return f"approved={answer.approved} note={answer.note}"


async def run(handler: OnElicitation | None, events: list[Event] | None = None) -> ToolResult:
    async def emit(event: Event) -> None:
        if events is not None:
            events.append(event)

    context = ExecutionContext(run_id="r", step=2, on_elicitation=handler, emit=emit)
    return await Toolbox([confirm_delete]).execute(
        ToolCall(id="call-1", name="confirm_delete", arguments={"path": "/tmp/x"}), context
    )


async def test_happy_path_validates_and_emits() -> None:
    """The handler's data is validated into the type; both events are emitted."""
    seen: list[ElicitationRequest] = []
    events: list[Event] = []

    async def handler(request: ElicitationRequest) -> ElicitationResponse:
        seen.append(request)
        return ElicitationResponse(
            request_id=request.request_id,
            tool_call_id=request.tool_call_id,
            data={"approved": True, "note": "ok"},
        )

    result = await run(handler, events)
    assert result.value == "approved=True note=ok"
    (request,) = seen
    assert request.tool_call_id == "call-1"
    assert request.message == "Delete /tmp/x?"
    assert request.schema["type"] == "object"
    assert request.schema["required"] == ["approved"]
    requested, resolved = events
    assert isinstance(requested, ElicitationRequested)
    assert (requested.request_id, requested.tool_call_id, requested.step) == (
        request.request_id,
        "call-1",
        2,
    )
    assert requested.schema == request.schema
    assert isinstance(resolved, ElicitationResolved)
    assert resolved.request_id == request.request_id
    assert not resolved.declined


async def test_decline_returns_none() -> None:
    """A handler returning None declines; elicit returns None."""
    events: list[Event] = []

    async def handler(request: ElicitationRequest) -> None:
        return None

    result = await run(handler, events)
    assert result.value == "declined"
    resolved = events[-1]
    assert isinstance(resolved, ElicitationResolved)
    assert resolved.declined


async def test_mismatched_identity_is_an_error() -> None:
    """A response for another request fails with ElicitationError (an error result)."""

    async def handler(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse(
            request_id="someone-else", tool_call_id=request.tool_call_id, data={"approved": True}
        )

    result = await run(handler)
    assert result.outcome == "error"
    assert result.error is not None
    assert "ElicitationError" in result.error
    assert "echo the request's identity" in result.error


async def test_mismatched_tool_call_id_is_an_error() -> None:
    """The tool call id must be echoed too."""

    async def handler(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse(
            request_id=request.request_id, tool_call_id="other", data={"approved": True}
        )

    result = await run(handler)
    assert result.outcome == "error"


async def test_invalid_data_is_an_error_with_a_path() -> None:
    """Data that does not fit the type fails with the JSON path."""

    async def handler(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse(
            request_id=request.request_id,
            tool_call_id=request.tool_call_id,
            data={"approved": "yes"},
        )

    result = await run(handler)
    assert result.outcome == "error"
    assert result.error is not None
    assert "$.approved" in result.error


async def test_wrong_response_type_is_an_error() -> None:
    """The handler must return an ElicitationResponse or None."""

    async def handler(request: ElicitationRequest) -> Any:
        return {"approved": True}

    result = await run(handler)
    assert result.outcome == "error"
    assert result.error is not None
    assert "ElicitationResponse" in result.error


async def test_no_handler_says_what_to_pass() -> None:
    """Without on_elicitation the tool fails, telling the host what to pass."""
    result = await run(None)
    assert result.outcome == "error"
    assert result.error is not None
    assert "on_elicitation=" in result.error


@attrs.frozen
class Left:
    """One shape."""

    left: int


@attrs.frozen
class Right:
    """Another shape."""

    right: int


async def test_types_msgspec_cannot_validate_go_through_the_converter() -> None:
    """Scalars and cattrs-only types can be elicited too."""
    answers: list[Any] = [{"right": 2}, {"oops": 1}]

    async def handler(request: ElicitationRequest) -> ElicitationResponse:
        return ElicitationResponse(
            request_id=request.request_id,
            tool_call_id=request.tool_call_id,
            data=answers.pop(0),
        )

    @tool
    async def pick(ctx: ToolContext) -> str:
        """Pick a side."""
        side = await ctx.elicit("Which side?", Left | Right)  # type: ignore[arg-type]
        return repr(side)

    box = Toolbox([pick])
    context = ExecutionContext(on_elicitation=handler)
    first = await box.execute(ToolCall(id="a", name="pick"), context)
    assert first.value == "Right(right=2)"
    second = await box.execute(ToolCall(id="b", name="pick"), context)
    assert second.outcome == "error"
