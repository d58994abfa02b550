"""Hooks: each kind, sync and async, lists, the registry's order, and bad return values."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio

import operative
import operative.errors
from operative import (
    Conversation,
    GenerateRequest,
    GenerateResponse,
    ToolCall,
    ToolResult,
    open_run,
    stop_when,
    tool,
)
from operative.hooks import HookContext, HookRegistry
from operative.testing import ScriptedModel


@tool
async def read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


@tool
async def write(path: str) -> str:
    """Write a file."""
    return f"wrote {path}"


def _conversation() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("go")
    return conversation


def _calls(*calls: ToolCall) -> GenerateResponse:
    return GenerateResponse(tool_calls=calls)


async def _run(model: Any, **options: Any) -> operative.RunResult:
    options.setdefault("stop_when", stop_when.no_tool_calls())
    async with open_run(
        generate=model, conversation=_conversation(), tools=[read, write], **options
    ) as run:
        pass
    return await run.result()


async def test_prepare_step_replaces_the_request_sync_and_async() -> None:
    """prepare_step hooks (a list, sync then async) change what generate receives."""

    def cooler(request: GenerateRequest) -> GenerateRequest:
        return msgspec.structs.replace(request, settings={"temperature": 0.0})

    async def tag(request: GenerateRequest) -> GenerateRequest:
        await trio.lowlevel.checkpoint()
        return msgspec.structs.replace(request, settings={**request.settings, "tag": "x"})

    model = ScriptedModel(["ok"])
    await _run(model, prepare_step=[cooler, tag])
    assert model.requests[0].settings == {"temperature": 0.0, "tag": "x"}


async def test_select_tools_filters_what_is_offered_and_callable() -> None:
    """select_tools limits the offered tools; a call to another tool gets an error result."""
    model = ScriptedModel(
        [
            _calls(
                ToolCall(id="a", name="read", arguments={"path": "x"}),
                ToolCall(id="b", name="write", arguments={"path": "x"}),
            ),
            "done",
        ]
    )
    result = await _run(model, select_tools=lambda specs, request: ["read"])
    assert [spec.name for spec in model.requests[0].tools] == ["read"]
    outcomes = [r.outcome for r in result.steps[0].results]
    assert outcomes == ["success", "error"]
    assert "not available" in (result.steps[0].results[1].error or "")


async def test_before_tool_execution_filters_and_rewrites_calls() -> None:
    """before_tool_execution may drop calls (denied) or change their arguments."""

    def policy(calls: tuple[ToolCall, ...], ctx: HookContext) -> list[ToolCall]:
        assert ctx.step == 1
        return [
            msgspec.structs.replace(call, arguments={"path": "/safe"})
            for call in calls
            if call.name == "read"
        ]

    model = ScriptedModel(
        [
            _calls(
                ToolCall(id="a", name="read", arguments={"path": "/etc/passwd"}),
                ToolCall(id="b", name="write", arguments={"path": "/etc/passwd"}),
            ),
            "done",
        ]
    )
    result = await _run(model, before_tool_execution=policy)
    first, second = result.steps[0].results
    assert first.value == "contents of /safe"
    assert second.outcome == "denied"


async def test_validate_and_after_tool_hooks_replace_results() -> None:
    """validate_tool_result and after_tool_execution may replace results (same call ids)."""

    def redact(result: ToolResult, ctx: HookContext) -> ToolResult:
        return msgspec.structs.replace(result, value="[redacted]")

    seen: list[tuple[ToolResult, ...]] = []

    def audit(results: tuple[ToolResult, ...], ctx: HookContext) -> None:
        seen.append(results)

    model = ScriptedModel([_calls(ToolCall(id="a", name="read", arguments={"path": "x"})), "ok"])
    result = await _run(model, validate_tool_result=redact, after_tool_execution=audit)
    assert result.steps[0].results[0].value == "[redacted]"
    assert seen[0][0].value == "[redacted]"
    assert model.requests[1].conversation.messages[-1].content == "[redacted]"


async def test_validate_response_may_replace_or_reject() -> None:
    """validate_response may replace a response; raising ends the run with an error."""
    model = ScriptedModel(["raw"])
    result = await _run(
        model, validate_response=lambda response, request: GenerateResponse(content="clean")
    )
    assert result.content == "clean"

    def reject(response: GenerateResponse, request: GenerateRequest) -> None:
        raise ValueError("the model said something it must not")

    result = await _run(ScriptedModel(["raw"]), validate_response=reject)
    assert result.finish_reason == "error"
    assert isinstance(result.error, ValueError)


async def test_lifecycle_hooks_run_in_order() -> None:
    """on_run_start, on_step and on_run_end see the run's start, steps and result."""
    log: list[str] = []
    model = ScriptedModel([_calls(ToolCall(id="a", name="read", arguments={"path": "x"})), "ok"])
    result = await _run(
        model,
        on_run_start=lambda ctx: log.append(f"start {ctx.run_id == ctx.run_id}"),
        on_step=lambda step, ctx: log.append(f"step {step.step}"),
        on_run_end=lambda result: log.append(f"end {result.finish_reason}"),
    )
    assert result.finish_reason == "stop-condition"
    assert log == ["start True", "step 1", "step 2", "end stop-condition"]


async def test_on_run_end_failure_fails_the_run() -> None:
    """A failing on_run_end hook turns the outcome into an error (it did not commit)."""

    def broken(result: operative.RunResult) -> None:
        raise OSError("disk full")

    result = await _run(ScriptedModel(["ok"]), on_run_end=broken)
    assert result.finish_reason == "error"
    assert isinstance(result.error, OSError)


async def test_on_run_end_is_bounded_by_cleanup_timeout(autojump_clock: Any) -> None:
    """A hanging on_run_end hook is cut off after cleanup_timeout seconds, and result()
    raises CleanupError instead of reporting the unfinished clean-up as a success."""

    async def hang(result: operative.RunResult) -> None:
        await trio.sleep_forever()

    start = trio.current_time()
    with pytest.raises(operative.CleanupError, match="cleanup_timeout=5s") as caught:
        await _run(ScriptedModel(["ok"]), on_run_end=hang, cleanup_timeout=5)
    assert trio.current_time() - start == pytest.approx(5)
    # The clean-up did not finish, so the run does not read as a success; the run's
    # own result (what it would have been) rides on the error.
    assert isinstance(caught.value.result, operative.RunResult)
    assert caught.value.result.finish_reason == "stop-condition"


async def test_registry_orders_by_priority_then_registration() -> None:
    """Higher priority first; equal priority in registration order; removers work."""
    order: list[str] = []
    registry = HookRegistry()
    registry.add("on_step", lambda step, ctx: order.append("low"), priority=-1)
    registry.add("on_step", lambda step, ctx: order.append("first"), priority=5)
    registry.add("on_step", lambda step, ctx: order.append("second"), priority=5)
    remove = registry.add("on_step", lambda step, ctx: order.append("removed"))
    remove()
    await _run(ScriptedModel(["ok"]), hooks=registry, on_step=lambda s, c: order.append("opt"))
    assert order == ["first", "second", "opt", "low"]


async def test_registry_rejects_unknown_hooks() -> None:
    """An unknown hook name or a non-callable fails where it is registered."""
    registry = HookRegistry()
    with pytest.raises(operative.InvalidArgument, match="unknown hook"):
        registry.add("on_stepp", print)  # type: ignore[call-overload]
    with pytest.raises(operative.InvalidArgument, match="callable"):
        registry.add("on_step", 42)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("option", "hook"),
    [
        ("prepare_step", lambda request: "not a request"),
        ("select_tools", lambda specs, request: ["no_such_tool"]),
        ("before_tool_execution", lambda calls, ctx: [ToolCall(id="zz", name="read")]),
        ("validate_tool_result", lambda result, ctx: "nope"),
        ("after_tool_execution", lambda results, ctx: []),
        ("on_error", lambda exc, ctx: 42),
    ],
)
async def test_hooks_returning_the_wrong_shape_fail_with_hook_error(option: str, hook: Any) -> None:
    """A hook returning something the loop cannot use ends the run with HookError."""
    model = ScriptedModel(
        [_calls(ToolCall(id="a", name="read", arguments={"path": "x"})), "ok"]
        if option != "on_error"
        else [RuntimeError("first failure")]
    )
    result = await _run(model, **{option: hook})
    assert result.finish_reason == "error"
    assert isinstance(result.error, operative.errors.HookError)
    assert option.split("_")[0] in str(result.error)


async def test_hook_raising_ends_the_run_with_that_error() -> None:
    """A hook that raises ends the run with finish_reason error and that exception."""

    def explode(step: operative.StepResult, ctx: HookContext) -> None:
        raise LookupError("hook bug")

    result = await _run(ScriptedModel(["ok"]), on_step=explode)
    assert result.finish_reason == "error"
    assert isinstance(result.error, LookupError)
