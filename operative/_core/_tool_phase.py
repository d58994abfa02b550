"""The tool phase of a step: the calls the model asked for, run as child tasks.

::

    step k
    └── tool nursery   one child task per call (a single call runs in the step's task),
        └── tool task  bounded by tool_concurrency; the toolbox applies each tool's limits

Results reach the transcript in the order the model asked for them, whatever order they
finish in; every call gets exactly one result, including calls filtered by a hook, not
offered at this step, or cut short (those are settled by clean-up as ``cancelled``).

Nothing a model or a tool returns reaches the transcript or storage unchecked: a call
whose fields have the wrong types fails the step with ``InvalidResponseError``; a call
whose arguments JSON cannot hold, or that nest deeper than ``MAX_JSON_DEPTH``, is
recorded with its arguments replaced (``{"operative.refused": why}``) and answered with
an ``error`` result without running; a tool value JSON cannot hold (``10**5000``, a
tuple-keyed dict, a list that contains itself, too deep a value) becomes an ``error``
result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import msgspec
import trio

from ..hooks import HookContext, call_hook
from ..tools import ExecutionContext
from ._codec import MAX_JSON_DEPTH, json_problem, json_too_deep
from ._errors import ApprovalError, HookError, InvalidResponseError
from ._events import ToolResultValidated, ToolsExecuted, ToolsExecuting
from ._model import call_problem
from ._options import _NO_HOOKS as NO_HOOKS
from ._run_state import Inflight, RunState
from ._types import ToolCall, ToolResult

if TYPE_CHECKING:
    from ._run import ActiveRun

__all__ = ["REFUSED_ARGUMENTS", "ToolPhase", "select_specs"]

REFUSED_ARGUMENTS = "operative.refused"
"""The key of the arguments recorded in place of arguments the loop refused to store."""

_PLAIN_VALUES = (str, bool, float, type(None))
_SMALL_INT = 2**64
_SHALLOW = 2 * MAX_JSON_DEPTH + 1


class ToolPhase(RunState):
    """Running a step's tool calls."""

    __slots__ = ()

    def _normalize_calls(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """Check the calls' fields and give every call a run-unique id.

        Some servers reuse ids (``call_0`` every turn) or send none; a call id must name
        exactly one call in the transcript, so repeats and blanks get fresh ids. A field
        of the wrong type raises :class:`InvalidResponseError`. Arguments that cannot be
        stored (not JSON, or nested deeper than ``MAX_JSON_DEPTH``) are replaced by
        ``{"operative.refused": why}``; the tuple returned then carries the refusals
        (``_RefusedCalls``), and the tool phase answers those calls with ``error``
        results instead of running them. A replayed call recorded that way is refused
        again, never run.
        """
        if type(calls) is not tuple:
            calls = tuple(calls)
        seen = self._seen_call_ids
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
                seen.add(call_id)
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
                    replaced = msgspec.structs.replace(
                        replaced, arguments={REFUSED_ARGUMENTS: refusal}
                    )
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
            seen.add(new_id)
        checked = tuple(fixed) if fixed is not None else calls
        if refused is not None:
            return _RefusedCalls(checked, refused)
        return checked

    async def _run_tools(
        self, inflight: Inflight, offered: frozenset[str] | None
    ) -> tuple[ToolResult, ...]:
        cfg = self._cfg
        hub = self._hub
        hooks = cfg.hooks
        hooked = hooks is not NO_HOOKS  # one test instead of three for a run without hooks
        run_id = self.run_id
        step = inflight.step
        calls = inflight.calls
        results: list[ToolResult | None] = [None] * len(calls)
        inflight.results = results
        context: HookContext | None = None
        to_run: list[tuple[int, ToolCall]] = list(enumerate(calls))
        if offered is not None or calls.__class__ is _RefusedCalls:
            refused: dict[str, str] | None = getattr(calls, "refused", None)
            for index, call in to_run:
                if refused is not None and call.id in refused:
                    results[index] = _refused(call, refused[call.id])
                elif offered is not None and call.name not in offered:
                    results[index] = ToolResult(
                        call_id=call.id,
                        tool_name=call.name,
                        outcome="error",
                        error=f"The tool {call.name!r} is not available at this step. "
                        f"Available: {', '.join(sorted(offered)) or '(none)'}.",
                    )
            to_run = [(i, c) for i, c in to_run if results[i] is None]
        if hooked and hooks.before_tool_execution:
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
        wrappers = self._ext.wrap_tool
        if wrappers:
            # What guardrails see, traces show and the journal stores is already sendable.
            execute = _sendable_execute(execute)
            for extension in wrappers:
                execute = extension.wrap_tool(cast("ActiveRun", self), execute, step)
        if len(to_run) == 1:
            index, call = to_run[0]
            try:
                result = await execute(call, execution)
            except RecursionError as exc:
                result = _unsendable(call, exc)
            value = result.value
            kind = value.__class__
            if kind not in _PLAIN_VALUES and not (kind is int and -_SMALL_INT < value < _SMALL_INT):
                result = _sendable(result)  # a container, or a big int: is it JSON?
            results[index] = result
        elif to_run:
            limiter = trio.CapacityLimiter(cfg.tool_concurrency) if cfg.tool_concurrency else None

            async def run_one(index: int, call: ToolCall) -> None:
                try:
                    if limiter is None:
                        results[index] = _sendable(await execute(call, execution))
                    else:
                        async with limiter:
                            results[index] = _sendable(await execute(call, execution))
                except RecursionError as exc:
                    results[index] = _unsendable(call, exc)

            async with trio.open_nursery() as nursery:
                for index, call in to_run:
                    nursery.start_soon(run_one, index, call, name=f"tool {call.name} {call.id}")
        self._liveness._progress(step, self._usage)
        settled: list[ToolResult] = results  # type: ignore[assignment]
        if hooked and hooks.validate_tool_result:
            context = context or self._hook_context()
            for index, result in enumerate(settled):
                for hook in hooks.validate_tool_result:
                    replacement = await call_hook(hook, result, context)
                    if replacement is not None:
                        result = _sendable(_checked_result(replacement, result, hook))
                settled[index] = result
        if "tool-result.validated" in hub.wanted:
            for result in settled:
                await hub.emit(
                    ToolResultValidated(run_id=run_id, step=step, time=self._now(), result=result)
                )
        if hooked and hooks.after_tool_execution:
            context = context or self._hook_context()
            for hook in hooks.after_tool_execution:
                replacement = await call_hook(hook, tuple(settled), context)
                if replacement is not None:
                    settled = [_sendable(r) for r in _checked_results(replacement, settled, hook)]
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
        parking = self._ext.tool_parked
        for extension in parking:
            # A durable journal records it as not running: a process stopped at the
            # prompt has not run it, so whoever recovers the run asks again.
            await extension.tool_parked(cast("ActiveRun", self), execution.step, call, parked=True)
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
                for extension in parking:
                    await extension.tool_parked(
                        cast("ActiveRun", self), execution.step, call, parked=False
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


class _RefusedCalls(tuple):  # type: ignore[type-arg]
    """A step's calls, some of whose arguments were refused (``refused``: id -> why)."""

    refused: dict[str, str]

    def __new__(cls, calls: tuple[ToolCall, ...], refused: dict[str, str]) -> _RefusedCalls:
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


def _refused(call: ToolCall, why: object) -> ToolResult:
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


def _sendable(result: ToolResult) -> ToolResult:
    """``result``, or an ``error`` result when its value cannot be stored or sent."""
    if result.outcome != "success":
        return result
    value = result.value
    value_class = value.__class__
    if value_class in _PLAIN_VALUES or (value_class is int and -_SMALL_INT < value < _SMALL_INT):
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


def _unsendable(call: ToolCall, exc: RecursionError) -> ToolResult:
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


def _sendable_execute(
    execute: Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]],
) -> Callable[[ToolCall, ExecutionContext], Awaitable[ToolResult]]:
    """``execute`` whose results are sendable (the innermost layer under wrappers)."""

    async def execute_sendable(call: ToolCall, context: ExecutionContext) -> ToolResult:
        try:
            return _sendable(await execute(call, context))
        except RecursionError as exc:
            return _unsendable(call, exc)

    return execute_sendable
