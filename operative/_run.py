"""``open_run`` and ``ActiveRun``: the task tree of one run and its step loop.

::

    open_run(...)            run nursery: leaving it means every child has ended
    └── loop task            the run scope (a CancelScope): abort, deadline, budgets
        └── step k           generate → assistant message → tools → results → stop?
            └── tool nursery one child task per call (none for a single call)

Whoever cancels the run scope first records why (``_CancelReason``), so the finish
reason is exact. Clean-up after cancellation (repairing the transcript, the terminal
event) runs shielded; what may block in it is bounded by ``cleanup_timeout``.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import msgspec
import trio

from ._errors import HookError, InvalidArgument, InvalidResponseError, OutputValidationError
from ._events import (
    EventHub,
    EventStream,
    GenerateCompleted,
    GenerateError,
    GenerateRetry,
    GenerateStarted,
    Listener,
    Overflow,
    ResponseValidated,
    RunAborted,
    RunCompleted,
    RunError,
    RunStarted,
    StepAborted,
    StepCompleted,
    StepGenerated,
    StepStarted,
    ToolResultValidated,
    ToolsExecuted,
    ToolsExecuting,
    UsageAccumulated,
)
from ._model import GenerateFunction, GenerateRequest, GenerateResponse
from ._options import RunConfig, configure_run
from ._output import validate_output
from ._results import RunResult, SchemaValidation, StepResult
from ._types import FinishReason, ToolCall, ToolResult, Usage
from .conversation import (
    Conversation,
    cancelled_result,
    repair_dangling_tool_calls,
    tool_result_message,
)
from .hooks import HookContext, call_hook
from .liveness import LivenessSnapshot, LivenessStatus
from .tools import ExecutionContext

__all__ = ["ActiveRun", "open_run"]

logger = logging.getLogger("operative.run")

_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR
_NO_USAGE = Usage()
_ARGUMENT_TYPES = (dict, str)


@attrs.frozen
class _CancelReason:
    """Why the run scope was cancelled; the first reason recorded wins."""

    finish_reason: FinishReason
    message: str


class _Inflight:
    """The step in progress: what clean-up needs to repair if the step is cut."""

    __slots__ = ("calls", "completed", "content", "generated", "results", "step", "usage")

    def __init__(self, step: int) -> None:
        self.step = step
        self.generated = False
        self.completed = False
        self.content = ""
        self.calls: tuple[ToolCall, ...] = ()
        self.results: list[ToolResult | None] = []
        self.usage = _NO_USAGE


class ActiveRun:
    """A run in progress, yielded by :func:`open_run` (and ``agent.open_run``).

    Attach listeners or start iterating events right after entering the block: the loop
    starts only once the block first yields control, so nothing is missed.
    """

    __slots__ = (
        "_cancel_reason",
        "_cfg",
        "_content_override",
        "_deadline_reason",
        "_done",
        "_hub",
        "_inflight",
        "_last_activity",
        "_now",
        "_output",
        "_recovered_error",
        "_result",
        "_revision",
        "_schema_attempts",
        "_schema_validation",
        "_scope",
        "_seen_call_ids",
        "_started_at",
        "_status",
        "_step",
        "_steps",
        "_usage",
        "conversation",
        "run_id",
    )

    def __init__(self, config: RunConfig, conversation: Conversation) -> None:
        self._cfg = config
        self.run_id: str = config.run_id
        self.conversation: Conversation = conversation
        """The run's live conversation (shared with the caller when one was passed)."""
        self._hub = EventHub()
        self._scope = trio.CancelScope()
        self._cancel_reason: _CancelReason | None = None
        self._deadline_reason: _CancelReason | None = None
        self._done = trio.Event()
        self._result: RunResult | None = None
        self._steps: list[StepResult] = []
        self._usage = Usage()
        self._step = 0
        self._status: LivenessStatus = "starting"
        self._revision = 0
        self._started_at: float | None = None
        self._last_activity: float | None = None
        self._now = trio.current_time
        self._inflight: _Inflight | None = None
        self._seen_call_ids: set[str] = set()
        self._schema_attempts = 0
        self._schema_validation: SchemaValidation | None = None
        self._output: Any = None
        self._content_override: str | None = None
        self._recovered_error: str | None = None

    def __repr__(self) -> str:
        return f"<ActiveRun {self.run_id} {self._status} step={self._step}>"

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Ask the run to stop; it ends with ``finish_reason == "aborted"``.

        Synchronous: it takes effect at the run's next checkpoint. Unfinished tool calls
        get ``cancelled`` results. Calling it again, or after the run ended, does nothing.
        """
        self._cancel(_CancelReason(_ABORTED, reason or "aborted"))

    def _cancel(self, reason: _CancelReason) -> None:
        if self._done.is_set():
            return
        if self._cancel_reason is None:
            self._cancel_reason = reason
        self._scope.cancel()

    def complete(self) -> None:
        """End every event stream now, without stopping the run (listeners stay)."""
        self._hub.close()

    # -- observing -------------------------------------------------------------------

    def add_listener(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for every event of ``type`` (``"*"``: every event).

        Listeners are plain callables, called in the run's task; one that raises is
        logged and counted, never allowed to break the run. Returns a remover.
        """
        return self._hub.add_listener(type, listener)

    def events(self, *types: str, capacity: int = 256, overflow: Overflow = "block") -> EventStream:
        """Iterate the run's events (all, or only ``types``) until the terminal one."""
        return self._hub.stream(types, capacity=capacity, overflow=overflow)

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing now; never blocks, never changes anything."""
        result = self._result
        return LivenessSnapshot(
            id=self.run_id,
            status=self._status,
            revision=self._revision,
            step=self._step,
            usage=self._usage,
            started_at=self._started_at,
            observed_at=trio.current_time(),
            last_activity_at=self._last_activity,
            finish_reason=result.finish_reason if result is not None else None,
        )

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: steps so far, listener failures."""
        return {"steps": len(self._steps), "listener_errors": self._hub.listener_errors}

    # -- outcome ---------------------------------------------------------------------

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result (cached).

        Completed, errored and aborted runs all return a result; ``finish_reason`` says
        which (a failing ``on_run_end`` hook, the place where hosts commit the outcome,
        turns it into ``"error"``, so an uncommitted run never reads as a success).
        """
        await self._done.wait()
        assert self._result is not None
        return self._result

    async def unwrap(self) -> RunResult:
        """The result, or the run's error raised when it ended with one."""
        result = await self.result()
        if result.finish_reason is _ERROR and result.error is not None:
            raise result.error
        return result

    async def output(self) -> Any:
        """The validated structured output.

        Raises:
            InvalidArgument: the run has no ``output`` type.
            OutputValidationError: the final answer never validated.
        """
        if self._cfg.output is None:
            raise InvalidArgument("this run has no output type: pass output= to get one")
        result = await self.unwrap()
        validation = result.schema_validation
        if validation is None or not validation.success:
            detail = validation.error if validation is not None else "no final answer"
            raise OutputValidationError(
                f"the run's final answer did not match the output type: {detail}. "
                "Raise schema_retries, or inspect result.content."
            )
        return result.output

    # -- the loop --------------------------------------------------------------------

    def _touch(self) -> None:
        """Record progress for liveness (one clock read)."""
        self._last_activity = self._now()
        self._revision += 1

    async def _drive(self) -> None:
        finish: FinishReason | None = None
        error: BaseException | None = None
        escaping: BaseException | None = None
        self._now = trio.lowlevel.current_clock().current_time
        self._started_at = self._now()
        self._status = "running"
        self._touch()
        hub = self._hub
        if hub.wants("run.started"):
            hub.emit_nowait(
                RunStarted(
                    run_id=self.run_id, time=self._started_at, agent_name=self._cfg.agent_name
                )
            )
        # A call left open by an earlier, cut-short turn is answered before the model
        # sees the transcript (providers reject open calls); the run never leaves one.
        repair_dangling_tool_calls(
            self.conversation, "the turn that made this call ended before it settled"
        )
        # Ids an earlier turn used are taken: a server that says "call_0" every turn
        # must not produce two calls with one id in the transcript.
        for message in self.conversation.messages:
            if message.tool_calls:
                self._seen_call_ids.update(call.id for call in message.tool_calls)
        request = self._cfg.request_context
        if request is not None and request.deadline is not None:
            # The request's deadline is wall-clock time; the run scope's is trio's.
            remaining = request.deadline - time.time()
            self._scope.deadline = min(self._scope.deadline, self._now() + remaining)
            self._deadline_reason = _CancelReason(
                _ABORTED, "the request this run acts for passed its deadline"
            )
        try:
            with self._scope:
                try:
                    for hook in self._cfg.hooks.on_run_start:
                        await call_hook(hook, self._hook_context())
                    finish = await self._loop()
                except Exception as exc:
                    finish, error = await self._recover(exc)
        except BaseException as exc:  # cancelled from outside the run, KeyboardInterrupt
            escaping = exc
        reason: str | None = None
        if finish is None:
            cancel = self._cancel_reason
            if escaping is not None:
                finish = _ABORTED
                reason = cancel.message if cancel else "the run's caller was cancelled"
            else:
                cancel = cancel or self._deadline_reason
                assert cancel is not None, "the run scope was cancelled without a reason"
                finish, reason = cancel.finish_reason, cancel.message
        await self._finish(finish, error, reason)
        if escaping is not None:
            raise escaping

    async def _recover(self, exc: Exception) -> tuple[FinishReason, BaseException | None]:
        """Offer a failure to the ``on_error`` hooks; one may turn it into an answer."""
        hooks = self._cfg.hooks.on_error
        if not hooks:
            return _ERROR, exc
        context = self._hook_context()
        for hook in hooks:
            try:
                answer = await call_hook(hook, exc, context)
            except Exception as hook_exc:
                return _ERROR, hook_exc
            if answer is not None:
                if not isinstance(answer, str):
                    return _ERROR, HookError(
                        f"on_error hook {hook!r} returned {type(answer).__name__}; "
                        "return a str (the final answer) or None"
                    )
                self._content_override = answer
                self._recovered_error = f"{type(exc).__name__}: {exc}"
                return FinishReason.STOP_CONDITION, None
        return _ERROR, exc

    def _hook_context(self) -> HookContext:
        cfg = self._cfg
        return HookContext(
            run_id=self.run_id,
            agent_name=cfg.agent_name,
            step=self._step,
            conversation=self.conversation.current,
            request_context=cfg.request_context,
            principal=cfg.principal,
        )

    async def _loop(self) -> FinishReason:
        cfg = self._cfg
        hub = self._hub
        conversation = self.conversation
        run_id = self.run_id
        hooks = cfg.hooks
        specs = cfg.toolbox.specs()
        for step in range(1, cfg.maximum_steps + 1):
            await trio.lowlevel.checkpoint()
            self._step = step
            inflight = self._inflight = _Inflight(step)
            self._touch()
            if hub.wants("step.started"):
                await hub.emit(StepStarted(run_id=run_id, step=step, time=self._now()))
            request = GenerateRequest(
                conversation=conversation.current,
                tools=specs,
                step=step,
                run_id=run_id,
                settings=cfg.settings,
                output_schema=cfg.output_schema,
            )
            offered: frozenset[str] | None = None
            if hooks.select_tools or hooks.prepare_step:
                request, offered = await self._prepare(request)
            response = await self._generate(request, inflight)

            calls = response.tool_calls
            if calls:
                calls = self._normalize_calls(calls)
            inflight.calls = calls
            inflight.content = response.content
            conversation.append_assistant_message(
                response.content, calls, metadata=response.metadata
            )
            inflight.generated = True
            if hub.wants("step.generated"):
                await hub.emit(
                    StepGenerated(
                        run_id=run_id,
                        step=step,
                        time=self._now(),
                        content=response.content,
                        tool_calls=calls,
                    )
                )

            results: tuple[ToolResult, ...] = ()
            if calls:
                results = await self._run_tools(inflight, offered)
                conversation.extend([tool_result_message(r) for r in results])
            step_result = StepResult(
                step=step,
                content=response.content,
                tool_calls=calls,
                results=results,
                usage=inflight.usage,
                run_usage=self._usage,
            )
            self._steps.append(step_result)
            inflight.completed = True
            if hub.wants("step.completed"):
                await hub.emit(
                    StepCompleted(
                        run_id=run_id,
                        step=step,
                        time=self._now(),
                        content=step_result.content,
                        tool_calls=calls,
                        results=results,
                        usage=step_result.usage,
                    )
                )
            self._inflight = None
            if hooks.on_step:
                context = self._hook_context()
                for hook in hooks.on_step:
                    await call_hook(hook, step_result, context)

            for condition in cfg.stop_when:
                stop = condition(step_result)
                if stop.__class__ is not bool and inspect.isawaitable(stop):
                    stop = await stop
                if stop:
                    if cfg.output is not None and not self._accept_output(step_result):
                        break  # the model gets another attempt at the output
                    return FinishReason.STOP_CONDITION

        if hooks.on_maximum_steps:
            context = self._hook_context()
            for hook in hooks.on_maximum_steps:
                replacement = await call_hook(hook, context)
                if replacement is not None:
                    if not isinstance(replacement, str):
                        raise HookError(
                            f"on_maximum_steps hook {hook!r} returned "
                            f"{type(replacement).__name__}; return a str or None"
                        )
                    self._content_override = replacement
        if cfg.output is not None and self._schema_validation is None and self._steps:
            self._validate_final(self._content_override or self._steps[-1].content)
        return FinishReason.MAXIMUM_STEPS

    async def _prepare(
        self, request: GenerateRequest
    ) -> tuple[GenerateRequest, frozenset[str] | None]:
        hooks = self._cfg.hooks
        offered: frozenset[str] | None = None
        if hooks.select_tools:
            specs = request.tools
            for hook in hooks.select_tools:
                chosen = await call_hook(hook, specs, request)
                if chosen is not None:
                    specs = _select(specs, chosen, hook)
            offered = frozenset(spec.name for spec in specs)
            request = msgspec.structs.replace(request, tools=specs)
        for hook in hooks.prepare_step:
            replacement = await call_hook(hook, request)
            if replacement is not None:
                if not isinstance(replacement, GenerateRequest):
                    raise HookError(
                        f"prepare_step hook {hook!r} returned {type(replacement).__name__}; "
                        "return a GenerateRequest (msgspec.structs.replace(request, ...)) "
                        "or None"
                    )
                request = replacement
        if offered is not None:
            offered = frozenset(spec.name for spec in request.tools)
        elif hooks.prepare_step:
            names = frozenset(spec.name for spec in request.tools)
            if len(names) != len(self._cfg.toolbox.specs()):
                offered = names
        return request, offered

    async def _generate(self, request: GenerateRequest, inflight: _Inflight) -> GenerateResponse:
        cfg = self._cfg
        hub = self._hub
        run_id = self.run_id
        step = request.step
        retry = cfg.retry
        attempt = 1
        while True:
            if hub.wants("generate.started"):
                await hub.emit(
                    GenerateStarted(run_id=run_id, step=step, time=self._now(), attempt=attempt)
                )
            try:
                if retry is not None and retry.attempt_timeout is not None:
                    with trio.fail_after(retry.attempt_timeout):
                        response = await cfg.generate(request)
                else:
                    response = await cfg.generate(request)
                if response.__class__ is not GenerateResponse and not isinstance(
                    response, GenerateResponse
                ):
                    raise InvalidResponseError(
                        f"the generate function returned {type(response).__name__}, not a "
                        "GenerateResponse: return GenerateResponse(content=..., tool_calls=...)"
                    )
                break
            except Exception as exc:
                # A failed attempt that reported usage was still paid for.
                spent = getattr(exc, "usage", None)
                if isinstance(spent, Usage):
                    inflight.usage = inflight.usage + spent
                    self._usage = self._usage + spent
                retrying = retry is not None and retry.should_retry(exc, attempt)
                if hub.wants("generate.error"):
                    await hub.emit(
                        GenerateError(
                            run_id=run_id,
                            step=step,
                            time=self._now(),
                            attempt=attempt,
                            error=str(exc),
                            error_type=type(exc).__name__,
                            retryable=retrying,
                            usage=spent if isinstance(spent, Usage) else _NO_USAGE,
                        )
                    )
                if not retrying:
                    raise
                assert retry is not None
                delay = retry.delay(attempt, exc)
                attempt += 1
                if hub.wants("generate.retry"):
                    await hub.emit(
                        GenerateRetry(
                            run_id=run_id,
                            step=step,
                            time=self._now(),
                            attempt=attempt,
                            delay=delay,
                            error=str(exc),
                            error_type=type(exc).__name__,
                        )
                    )
                await trio.sleep(delay)
                request = retry.next_request(request, exc, attempt)
        usage = response.usage
        if usage is not None:
            inflight.usage = inflight.usage + usage if attempt > 1 else usage
            self._usage = total = self._usage + usage
        self._last_activity = self._now()
        if hub.wants("generate.completed"):
            await hub.emit(
                GenerateCompleted(
                    run_id=run_id,
                    step=step,
                    time=self._now(),
                    attempt=attempt,
                    content=response.content,
                    tool_calls=tuple(response.tool_calls),
                    usage=usage or Usage(),
                    model=response.model,
                )
            )
        if usage is not None and hub.wants("usage.accumulated"):
            await hub.emit(
                UsageAccumulated(
                    run_id=run_id, step=step, time=self._now(), usage=usage, total=total
                )
            )
        if cfg.hooks.validate_response:
            for hook in cfg.hooks.validate_response:
                replacement = await call_hook(hook, response, request)
                if replacement is not None:
                    if not isinstance(replacement, GenerateResponse):
                        raise HookError(
                            f"validate_response hook {hook!r} returned "
                            f"{type(replacement).__name__}; return a GenerateResponse or None"
                        )
                    response = replacement
            if hub.wants("response.validated"):
                await hub.emit(ResponseValidated(run_id=run_id, step=step, time=self._now()))
        return response

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
        self, inflight: _Inflight, offered: frozenset[str] | None
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
        if hub.wants("tools.executing"):
            await hub.emit(ToolsExecuting(run_id=run_id, step=step, time=self._now(), calls=calls))
        execution = ExecutionContext(
            run_id=run_id,
            step=step,
            agent_id=cfg.agent_name,
            request_context=cfg.request_context,
            on_elicitation=cfg.on_elicitation,
            emit=hub.emit,
        )
        execute = cfg.toolbox.execute
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
        self._touch()
        settled: list[ToolResult] = results  # type: ignore[assignment]
        if hooks.validate_tool_result:
            context = context or self._hook_context()
            for index, result in enumerate(settled):
                for hook in hooks.validate_tool_result:
                    replacement = await call_hook(hook, result, context)
                    if replacement is not None:
                        result = _checked_result(replacement, result, hook)
                settled[index] = result
        if hub.wants("tool-result.validated"):
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
        if hub.wants("tools.executed"):
            await hub.emit(ToolsExecuted(run_id=run_id, step=step, time=self._now(), results=final))
        return final

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

    def _accept_output(self, step: StepResult) -> bool:
        """Validate a final answer; False means the model gets another attempt."""
        ok, error = self._validate_final(step.content)
        if ok or self._schema_attempts > self._cfg.schema_retries:
            return True
        self.conversation.append_user_message(
            "Your answer did not match the required output format: "
            f"{error}. Reply again with only the corrected JSON."
        )
        return False

    def _validate_final(self, content: str) -> tuple[bool, str | None]:
        self._schema_attempts += 1
        ok, value, error = validate_output(content, self._cfg.output)
        if ok:
            self._output = value
        self._schema_validation = SchemaValidation(
            success=ok, error=error, attempts=self._schema_attempts
        )
        return ok, error

    async def _finish(
        self, finish: FinishReason, error: BaseException | None, reason: str | None
    ) -> None:
        """Repair, record and announce the end of the run.

        Everything here is synchronous except the ``on_run_end`` hooks, which run
        shielded from cancellation and bounded by ``cleanup_timeout``.
        """
        cfg = self._cfg
        hub = self._hub
        run_id = self.run_id
        now = self._now()
        inflight = self._inflight
        self._inflight = None
        why = reason or (f"{type(error).__name__}: {error}" if error is not None else "")
        if inflight is not None:
            if inflight.completed:
                step = self._steps[-1]
                hub.emit_nowait(
                    StepCompleted(
                        run_id=run_id,
                        step=step.step,
                        time=now,
                        content=step.content,
                        tool_calls=step.tool_calls,
                        results=step.results,
                        usage=step.usage,
                    )
                )
            else:
                if inflight.generated:
                    results = tuple(
                        r if r is not None else cancelled_result(call, why)
                        for r, call in zip(
                            inflight.results or [None] * len(inflight.calls),
                            inflight.calls,
                            strict=True,
                        )
                    )
                    self.conversation.extend([tool_result_message(r) for r in results])
                    self._steps.append(
                        StepResult(
                            step=inflight.step,
                            content=inflight.content,
                            tool_calls=inflight.calls,
                            results=results,
                            usage=inflight.usage,
                            run_usage=self._usage,
                            aborted=True,
                        )
                    )
                hub.emit_nowait(
                    StepAborted(run_id=run_id, step=inflight.step, time=now, reason=why)
                )

        steps = tuple(self._steps)
        content = self._content_override
        if content is None:
            content = steps[-1].content if steps else ""
        result = RunResult(
            conversation=self.conversation,
            steps=steps,
            content=content,
            usage=self._usage,
            finish_reason=finish,
            error=error,
            output=self._output,
            schema_validation=self._schema_validation,
            run_id=run_id,
            abort_reason=reason,
        )
        if cfg.hooks.on_run_end:
            with trio.CancelScope(shield=True), trio.move_on_after(cfg.cleanup_timeout) as cleanup:
                for hook in cfg.hooks.on_run_end:
                    try:
                        await call_hook(hook, result)
                    except Exception as exc:
                        logger.exception("on_run_end hook %r raised", hook)
                        if result.finish_reason is not _ERROR:
                            result = attrs.evolve(result, finish_reason=_ERROR, error=exc)
            if cleanup.cancelled_caught:
                logger.error(
                    "on_run_end hooks of run %s did not finish within cleanup_timeout=%ss",
                    run_id,
                    cfg.cleanup_timeout,
                )
        self._result = result
        finish = result.finish_reason
        end = self._now()
        if finish is _ERROR:
            self._status = "failed"
            terminal: Any = RunError(
                run_id=run_id,
                step=self._step,
                time=end,
                error=str(result.error),
                error_type=type(result.error).__name__,
                usage=self._usage,
                steps=len(steps),
            )
        elif finish is _ABORTED:
            self._status = "aborted"
            terminal = RunAborted(
                run_id=run_id,
                step=self._step,
                time=end,
                reason=reason or "",
                usage=self._usage,
                steps=len(steps),
            )
        else:
            self._status = "completed"
            terminal = RunCompleted(
                run_id=run_id,
                step=self._step,
                time=end,
                finish_reason=finish,
                content=content,
                usage=self._usage,
                steps=len(steps),
                recovered_error=self._recovered_error,
            )
        self._revision += 1
        self._last_activity = end
        hub.emit_nowait(terminal)
        self._done.set()
        hub.close()


def _select(specs: tuple[Any, ...], chosen: Any, hook: Any) -> tuple[Any, ...]:
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


@asynccontextmanager
async def open_run(
    *,
    generate: GenerateFunction,
    conversation: Any,
    toolbox: Any = None,
    tools: Any = None,
    stop_when: Any = None,
    maximum_steps: int = 25,
    **options: Any,
) -> AsyncIterator[ActiveRun]:
    """Run the loop in a nursery the caller can see; yields the :class:`ActiveRun`.

    Leaving the block waits for the run to end, like a nursery (call ``run.abort()``
    first to stop it early). An exception raised in the block aborts the run and
    propagates once the run has ended. See :func:`configure_run` for every option.
    """
    config, live = configure_run(
        generate=generate,
        conversation=conversation,
        toolbox=toolbox,
        tools=tools,
        stop_when=stop_when,
        maximum_steps=maximum_steps,
        **options,
    )
    run = ActiveRun(config, live)
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run._drive, name=f"operative run {run.run_id}")
        try:
            yield run
        except BaseException as exc:
            run.abort(f"the block running the run raised {type(exc).__name__}: {exc}")
            body_error = exc
    if body_error is not None:
        raise body_error
