"""The tool phase of a step: the calls the model asked for, run as child tasks.

::

    step k
    └── tool nursery   one child task per call (one call runs in the step's task)
        └── tool task  bounded by tool_concurrency; the toolbox applies each tool's limits

Results reach the transcript in the order the model asked for them, whatever order they
finish in; every call gets exactly one result, including calls filtered by a hook, not
offered at this step, or cut short (those are settled by clean-up as ``cancelled``).
What the calls and their values must be to be stored is checked in ``_tool_calls``.

A call that needs approval parks its task here until a person decides (a declared
``approval`` wait); the hooks around tools (``before_tool_execution``,
``validate_tool_result``, ``after_tool_execution``) run here too.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..hooks import HookContext, call_hook
from ..tools import ExecutionContext
from ._errors import ApprovalError, HookError
from ._events import ToolResultValidated, ToolsExecuted, ToolsExecuting
from ._extension import Parked
from ._run_state import Inflight, RunState
from ._tool_calls import (
    RefusedCalls,
    refused_result,
    sendable,
    sendable_execute,
    unsendable,
)
from ._types import ToolCall, ToolResult

if TYPE_CHECKING:
    from ._control import RunControl

__all__ = ["ToolPhase", "select_specs"]


class ToolPhase:
    """Running a step's tool calls, for one run."""

    __slots__ = ("_elicit", "_prompts", "_state")

    def __init__(self, state: RunState) -> None:
        self._state = state
        cfg = state.config
        # on_approval is asked one call at a time, unless concurrent_approvals=True.
        self._prompts: Any = (
            trio.Lock()
            if cfg.on_approval is not None and not cfg.concurrent_approvals
            else _UNLIMITED
        )
        self._elicit: Callable[[Any], Awaitable[Any]] | None = (
            self._elicit_while_waiting if state.config.on_elicitation is not None else None
        )

    async def _elicit_while_waiting(self, request: Any) -> Any:
        """The host answers a tool's question: a declared wait, never a stall."""
        handler = self._state.config.on_elicitation
        assert handler is not None
        with self._state.liveness.waiting("elicitation", detail=str(request.request_id)):
            return await handler(request)

    def execution(self, run: RunControl, step: int) -> ExecutionContext:
        """Where the step's calls run: the run and step, and the host's hooks."""
        state = self._state
        cfg = state.config
        return ExecutionContext(
            run_id=state.run_id,
            step=step,
            agent_id=cfg.agent_name,
            request_context=cfg.request_context,
            on_elicitation=self._elicit,
            emit=state.hub.emit,
            run=run,
        )

    async def run(
        self, run: RunControl, inflight: Inflight, offered: frozenset[str] | None
    ) -> tuple[ToolResult, ...]:
        """Run the calls of ``inflight`` (those ``offered``, when not all tools were);
        their results, in call order, also kept in ``inflight.results`` meanwhile.
        ``run`` is what the tools and the extensions are given."""
        state = self._state
        cfg = state.config
        hub = state.hub
        hooks = cfg.hooks
        run_id = state.run_id
        step = inflight.step
        calls = inflight.calls
        results: list[ToolResult | None] = [None] * len(calls)
        inflight.results = results
        context: HookContext | None = None
        to_run: list[tuple[int, ToolCall]] = list(enumerate(calls))
        if offered is not None or calls.__class__ is RefusedCalls:
            to_run = _refused(calls, offered, results)
        if hooks.before_tool_execution:
            context = state.hook_context()
            to_run = await self._before_tools(to_run, results, context)
        execute: Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]] = (
            cfg.toolbox.execute if cfg.on_approval is None else self._execute_or_park
        )
        wrappers = state.ext.wrap_tool
        if wrappers:
            # What guardrails see, traces show and the journal stores is already sendable.
            # All or nothing: an extension that stops the run here (a budget's
            # max_tool_calls) stops every call of the step before any runs.
            about_to_run = (
                calls if len(to_run) == len(calls) else tuple([call for _, call in to_run])
            )
            execute = sendable_execute(execute)
            for extension in wrappers:
                execute = await extension.wrap_tool(run, execute, step, about_to_run)
        if "tools.executing" in hub.wanted:
            await hub.emit(ToolsExecuting(run_id=run_id, step=step, time=state.now(), calls=calls))
        execution = self.execution(run, step)
        limiter: Any = (
            trio.CapacityLimiter(cfg.tool_concurrency) if cfg.tool_concurrency else _UNLIMITED
        )

        async def run_one(index: int, call: ToolCall) -> None:
            async with limiter:
                try:
                    results[index] = sendable(await execute(call, execution))
                except RecursionError as exc:
                    results[index] = unsendable(call, exc)

        if len(to_run) == 1:
            await run_one(*to_run[0])  # one call needs no task of its own
        else:
            async with trio.open_nursery() as nursery:
                for index, call in to_run:
                    nursery.start_soon(run_one, index, call, name=f"tool {call.name} {call.id}")
        state.liveness._progress(step, state.usage)
        settled: list[ToolResult] = results  # type: ignore[assignment]
        return await self._checked(step, settled, inflight, context)

    async def _checked(
        self,
        step: int,
        settled: list[ToolResult],
        inflight: Inflight,
        context: HookContext | None,
    ) -> tuple[ToolResult, ...]:
        """The step's results as the ``validate_tool_result`` and ``after_tool_execution``
        hooks leave them; ``tool-result.validated`` and ``tools.executed`` sent."""
        state = self._state
        hooks = state.config.hooks
        hub = state.hub
        run_id = state.run_id
        if hooks.validate_tool_result:
            context = context or state.hook_context()
            for index, result in enumerate(settled):
                for hook in hooks.validate_tool_result:
                    replacement = await call_hook(hook, result, context)
                    if replacement is not None:
                        result = sendable(_checked_result(replacement, result, hook))
                settled[index] = result
        for result in settled:
            if "tool-result.validated" in hub.wanted:
                await hub.emit(
                    ToolResultValidated(run_id=run_id, step=step, time=state.now(), result=result)
                )
        if hooks.after_tool_execution:
            context = context or state.hook_context()
            for hook in hooks.after_tool_execution:
                replacement = await call_hook(hook, tuple(settled), context)
                if replacement is not None:
                    settled = [sendable(r) for r in _checked_results(replacement, settled, hook)]
                    inflight.results = list(settled)
        final = tuple(settled)
        if "tools.executed" in hub.wanted:
            await hub.emit(ToolsExecuted(run_id=run_id, step=step, time=state.now(), results=final))
        return final

    async def _execute_or_park(self, call: ToolCall, execution: ExecutionContext) -> ToolResult:
        """Execute a call; one that needs approval parks its task until a person decides.

        The run stays alive meanwhile: it reports ``waiting`` (an ``approval`` declared
        wait, so the stall watchdog is paused), other tool calls carry on, and an abort
        cancels the wait like any other. With ``approval_timeout`` a missing decision
        becomes a ``denied`` result.
        """
        state = self._state
        cfg = state.config
        toolbox = cfg.toolbox
        result = await toolbox.execute(call, execution)
        pending = result.pending_approval
        if result.outcome != "action-required" or pending is None or cfg.on_approval is None:
            return result
        parking = state.ext.recorded
        for extension in parking:
            # A durable journal records it as not running: a process stopped at the
            # prompt has not run it, so whoever recovers the run asks again.
            await extension.recorded(execution.run, Parked(execution.step, call, parked=True))
        timeout = cfg.approval_timeout
        deadline = state.now() + timeout if timeout is not None else None
        liveness = state.liveness
        wait = liveness.declare_wait(
            "approval", deadline=deadline, detail=f"{pending.tool_name} ({pending.approval_id})"
        )
        try:
            with trio.move_on_at(deadline if deadline is not None else math.inf) as scope:
                async with self._prompts:
                    decision = await call_hook(cfg.on_approval, pending)
        finally:
            liveness.clear_wait(wait)
        request = cfg.request_context
        try:
            if scope.cancelled_caught:
                return await toolbox.deny_approval(
                    pending,
                    reason=f"nobody decided within {timeout:g} s",
                    request_context=request,
                )
            approved, reason = _approved(decision)
            if approved:
                for extension in parking:
                    await extension.recorded(
                        execution.run, Parked(execution.step, call, parked=False)
                    )
                return await toolbox.resume_approval(
                    pending, request_context=request, context=execution
                )
            return await toolbox.deny_approval(pending, reason=reason, request_context=request)
        except ApprovalError as exc:
            return ToolResult(
                call_id=call.id,
                tool_name=call.name,
                outcome="error",
                error=f"The approval for this call could not be applied: {exc}",
                detail=exc.reason,
            )

    async def _before_tools(
        self,
        to_run: list[tuple[int, ToolCall]],
        results: list[ToolResult | None],
        context: HookContext,
    ) -> list[tuple[int, ToolCall]]:
        by_id = {call.id: index for index, call in to_run}
        current = tuple(call for _, call in to_run)
        for hook in self._state.config.hooks.before_tool_execution:
            replacement = await call_hook(hook, current, context)
            if replacement is None:
                continue
            chosen = tuple(replacement)
            for call in chosen:
                if not isinstance(call, ToolCall) or call.id not in by_id:
                    raise HookError(
                        f"before_tool_execution hook {hook!r} returned {call!r}, which is "
                        "not one of the step's calls: return a subset of the calls "
                        "(arguments may change, ids may not)"
                    )
            current = chosen
        kept = {call.id for call in current}
        for index, call in to_run:
            if call.id not in kept:
                results[index] = ToolResult(
                    call_id=call.id,
                    tool_name=call.name,
                    outcome="denied",
                    error=f"The call to {call.name!r} was skipped by the host before it ran.",
                )
        return [(by_id[call.id], call) for call in current]


class _Unlimited:
    """No ``tool_concurrency``: entering waits for nothing (a ``CapacityLimiter``'s
    acquire is a scheduling point even with tokens to spare)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_UNLIMITED = _Unlimited()


def _approved(decision: Any) -> tuple[bool, str]:
    """Read an ``on_approval`` decision: a bool, or an object with ``approved``/``reason``."""
    if isinstance(decision, bool):
        return decision, ""
    approved = getattr(decision, "approved", None)
    if isinstance(approved, bool):
        return approved, str(getattr(decision, "reason", "") or "")
    raise HookError(
        f"on_approval returned {decision!r}; return True (approve), False (deny) or an "
        "ApprovalDecision(approved=..., reason=...)"
    )


def select_specs(specs: tuple[Any, ...], chosen: Any, hook: Any) -> tuple[Any, ...]:
    by_name = {spec.name: spec for spec in specs}
    selected = []
    for item in chosen:
        name = item if isinstance(item, str) else getattr(item, "name", None)
        if name not in by_name:
            raise HookError(
                f"select_tools hook {hook!r} chose {item!r}, which is not an offered tool; "
                f"offered: {', '.join(sorted(by_name)) or '(none)'}"
            )
        selected.append(by_name[name])
    return tuple(selected)


def _checked_result(replacement: Any, original: ToolResult, hook: Any) -> ToolResult:
    if not isinstance(replacement, ToolResult) or replacement.call_id != original.call_id:
        raise HookError(
            f"validate_tool_result hook {hook!r} returned {replacement!r}; return a "
            f"ToolResult for call {original.call_id!r} (msgspec.structs.replace) or None"
        )
    return replacement


def _checked_results(replacement: Any, original: list[ToolResult], hook: Any) -> list[ToolResult]:
    replaced = list(replacement)
    if len(replaced) != len(original) or any(
        not isinstance(new, ToolResult) or new.call_id != old.call_id
        for new, old in zip(replaced, original, strict=False)
    ):
        raise HookError(
            f"after_tool_execution hook {hook!r} must return one ToolResult per call, in "
            "call order, with the same call ids (or None)"
        )
    return replaced


def _refused(
    calls: tuple[ToolCall, ...], offered: frozenset[str] | None, results: list[ToolResult | None]
) -> list[tuple[int, ToolCall]]:
    """Settle the calls refused when the answer was checked and those of tools not
    offered at this step (in ``results``); the calls left to run, with their index."""
    refused: dict[str, str] | None = getattr(calls, "refused", None)
    for index, call in enumerate(calls):
        if refused is not None and call.id in refused:
            results[index] = refused_result(call, refused[call.id])
        elif offered is not None and call.name not in offered:
            results[index] = ToolResult(
                call_id=call.id,
                tool_name=call.name,
                outcome="error",
                error=f"The tool {call.name!r} is not available at this step. "
                f"Available: {', '.join(sorted(offered)) or '(none)'}.",
            )
    return [(i, c) for i, c in enumerate(calls) if results[i] is None]
