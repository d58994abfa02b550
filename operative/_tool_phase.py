"""The tool phase of a step: the calls the model asked for, run as child tasks.

::

    step k
    └── tool nursery   one child task per call (a single call runs in the step's task),
        └── tool task  bounded by tool_concurrency; the toolbox applies each tool's limits

Results reach the transcript in the order the model asked for them, whatever order they
finish in; every call gets exactly one result, including calls filtered by a hook, not
offered at this step, or cut short (those are settled by clean-up as ``cancelled``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio

from ._errors import ApprovalError, HookError, InvalidResponseError
from ._events import ToolResultValidated, ToolsExecuted, ToolsExecuting
from ._run_state import Inflight, RunState
from ._types import ToolCall, ToolResult
from .hooks import HookContext, call_hook
from .tools import ExecutionContext

__all__ = ["ToolPhase", "select_specs"]

_ARGUMENT_TYPES = (dict, str)


class ToolPhase(RunState):
    """Running a step's tool calls."""

    __slots__ = ()

    def _normalize_calls(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """Check the calls' shape and give every call a run-unique id.

        Some servers reuse ids (``call_0`` every turn) or send none; a call id must name
        exactly one call in the transcript, so repeats and blanks get fresh ids.
        """
        if type(calls) is not tuple:
            calls = tuple(calls)
        seen = self._seen_call_ids
        fixed: list[ToolCall] | None = None
        for index, call in enumerate(calls):
            if (
                call.__class__ is ToolCall
                and call.id
                and call.id not in seen
                and call.arguments.__class__ in _ARGUMENT_TYPES
            ):
                if fixed is not None:
                    fixed.append(call)
                seen.add(call.id)
                continue
            if not isinstance(call, ToolCall):
                raise InvalidResponseError(
                    f"tool_calls[{index}] is {type(call).__name__}, not a ToolCall: build "
                    "ToolCall(id=..., name=..., arguments=...)"
                )
            if not isinstance(call.name, str) or not isinstance(call.arguments, dict | str):
                raise InvalidResponseError(
                    f"tool_calls[{index}] has name {call.name!r} and arguments of type "
                    f"{type(call.arguments).__name__}: a name is a str, arguments a "
                    "mapping or a JSON string"
                )
            call_id = call.id
            if not call_id or not isinstance(call_id, str) or call_id in seen:
                new_id = f"{call_id or 'call'}~{os.urandom(4).hex()}"
                call = msgspec.structs.replace(call, id=new_id)
                if fixed is None:
                    fixed = list(calls[:index])
                call_id = new_id
            if fixed is not None:
                fixed.append(call)
            seen.add(call_id)
        return tuple(fixed) if fixed is not None else calls

    async def _run_tools(
        self, inflight: Inflight, offered: frozenset[str] | None
    ) -> tuple[ToolResult, ...]:
        cfg = self._cfg
        hub = self._hub
        hooks = cfg.hooks
        run_id = self.run_id
        step = inflight.step
        calls = inflight.calls
        results: list[ToolResult | None] = [None] * len(calls)
        inflight.results = results
        context: HookContext | None = None
        to_run: list[tuple[int, ToolCall]] = list(enumerate(calls))
        if offered is not None:
            for index, call in enumerate(calls):
                if call.name not in offered:
                    results[index] = ToolResult(
                        call_id=call.id,
                        tool_name=call.name,
                        outcome="error",
                        error=f"The tool {call.name!r} is not available at this step. "
                        f"Available: {', '.join(sorted(offered)) or '(none)'}.",
                    )
            to_run = [(i, c) for i, c in to_run if results[i] is None]
        if hooks.before_tool_execution:
            context = self._hook_context()
            to_run = await self._before_tools(to_run, results, context)
        if self._budget is not None and to_run:
            # All or nothing: when the step's calls would pass max_tool_calls, none runs.
            await self._enforce_budget(self._budget.charge_tool_calls(len(to_run)))
        if "tools.executing" in hub.wanted:
            await hub.emit(ToolsExecuting(run_id=run_id, step=step, time=self._now(), calls=calls))
        execution = ExecutionContext(
            run_id=run_id,
            step=step,
            agent_id=cfg.agent_name,
            request_context=cfg.request_context,
            on_elicitation=self._elicit,
            emit=hub.emit,
            run=self,
        )
        execute: Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]] = (
            cfg.toolbox.execute if cfg.on_approval is None else self._execute_or_park
        )
        if self._guardrails is not None:
            execute = self._guardrails.wrap_execute(self, execute)
        if self._tracer is not None:
            execute = self._tracer.wrap_execute(execute)
        if self._durable is not None:
            execute = self._durable.journaled(execute, step, cfg.toolbox)
        if len(to_run) == 1:
            index, call = to_run[0]
            results[index] = await execute(call, execution)
        elif to_run:
            limiter = trio.CapacityLimiter(cfg.tool_concurrency) if cfg.tool_concurrency else None

            async def run_one(index: int, call: ToolCall) -> None:
                if limiter is None:
                    results[index] = await execute(call, execution)
                else:
                    async with limiter:
                        results[index] = await execute(call, execution)

            async with trio.open_nursery() as nursery:
                for index, call in to_run:
                    nursery.start_soon(run_one, index, call, name=f"tool {call.name} {call.id}")
        self._liveness._progress(step, self._usage)
        settled: list[ToolResult] = results  # type: ignore[assignment]
        if hooks.validate_tool_result:
            context = context or self._hook_context()
            for index, result in enumerate(settled):
                for hook in hooks.validate_tool_result:
                    replacement = await call_hook(hook, result, context)
                    if replacement is not None:
                        result = _checked_result(replacement, result, hook)
                settled[index] = result
        if "tool-result.validated" in hub.wanted:
            for result in settled:
                await hub.emit(
                    ToolResultValidated(run_id=run_id, step=step, time=self._now(), result=result)
                )
        if hooks.after_tool_execution:
            context = context or self._hook_context()
            for hook in hooks.after_tool_execution:
                replacement = await call_hook(hook, tuple(settled), context)
                if replacement is not None:
                    settled = _checked_results(replacement, settled, hook)
                    inflight.results = list(settled)
        final = tuple(settled)
        if "tools.executed" in hub.wanted:
            await hub.emit(ToolsExecuted(run_id=run_id, step=step, time=self._now(), results=final))
        return final

    async def _execute_or_park(self, call: ToolCall, execution: ExecutionContext) -> ToolResult:
        """Execute a call; one that needs approval parks its task until a person decides.

        The run stays alive meanwhile: it reports ``waiting`` (an ``approval`` declared
        wait, so the stall watchdog is paused), other tool calls carry on, and an abort
        cancels the wait like any other. With ``approval_timeout`` a missing decision
        becomes a ``denied`` result.
        """
        cfg = self._cfg
        toolbox = cfg.toolbox
        result = await toolbox.execute(call, execution)
        pending = result.pending_approval
        if result.outcome != "action-required" or pending is None or cfg.on_approval is None:
            return result
        durable = self._durable
        if durable is not None:
            # Journaled as not running: a process stopped at the prompt has not run it,
            # so whoever recovers the run asks again instead of calling it unknown.
            await durable.parked(execution.step, call, parked=True)
        timeout = cfg.approval_timeout
        deadline = self._now() + timeout if timeout is not None else None
        wait = self._liveness.declare_wait(
            "approval", deadline=deadline, detail=f"{pending.tool_name} ({pending.approval_id})"
        )
        try:
            with trio.move_on_at(deadline if deadline is not None else math.inf) as scope:
                decision = await call_hook(cfg.on_approval, pending)
        finally:
            self._liveness.clear_wait(wait)
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
                if durable is not None:
                    await durable.parked(execution.step, call, parked=False)
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
        for hook in self._cfg.hooks.before_tool_execution:
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
