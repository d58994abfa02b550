"""The step loop: prepare the request → generate → assistant message → tools → stop?

Each step, in order: ``step.started``; context assembly (compaction of what is sent,
never of the stored transcript); ``select_tools`` and ``prepare_step`` hooks; the
generate phase (``_generate_phase``); the assistant message; the tool phase
(``_tool_phase``); one tool-result message per call, in call order; ``step.completed``;
``on_step`` hooks; stop conditions (and structured-output validation at a stop).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, cast

import msgspec
import trio

from ..conversation import ConversationHistory, Message, new_message_id, tool_result_message
from ..hooks import call_hook
from ._errors import HookError
from ._events import (
    ContextBudgetWarning,
    ContextCompacted,
    StepCompleted,
    StepGenerated,
    StepStarted,
)
from ._extension import ResumePoint
from ._generate_phase import GeneratePhase
from ._model import GenerateRequest
from ._output import validate_output
from ._results import SchemaValidation, StepResult
from ._run_state import NO_USAGE, Inflight
from ._tool_phase import ToolPhase, select_specs
from ._types import FinishReason, ToolResult

if TYPE_CHECKING:
    from ._run import ActiveRun

__all__ = ["StepLoop"]


class StepLoop(GeneratePhase, ToolPhase):
    """The loop over steps, built from the generate and tool phases."""

    __slots__ = ()

    async def _loop(self, resume: ResumePoint | None = None) -> FinishReason:
        cfg = self._cfg
        hub = self._hub
        conversation = self.conversation
        run_id = self.run_id
        hooks = cfg.hooks
        specs = cfg.toolbox.specs()
        budget = self._budget
        steering = self._steering
        ext = self._ext
        run = cast("ActiveRun", self)  # what extensions are given
        first = 1
        if resume is not None:
            # A run rebuilt from a journal goes on from its last recorded step; one that
            # had already met a stop condition when it was cut ends here (unless that
            # step switched agents: the agent that handed off is not consulted).
            first = resume.next_step
            if resume.check_stop and self._steps:
                stopped = await self._stopped(self._steps[-1])
                if stopped is not None:
                    return stopped
        for step in range(first, cfg.maximum_steps + 1):
            for extension in ext.step_started:
                await extension.step_started(run, step)
            await trio.lowlevel.checkpoint()
            self._step = step
            self._liveness._progress(step, self._usage)
            if steering is not None:
                # A paused run parks here, between steps, with nothing in flight.
                for applied in await steering.at_step_entry(step):
                    if "steering.applied" in hub.wanted:
                        await hub.emit(applied)
            if cfg.selection is not None:
                from ..steering import check_selection

                check_selection(cfg.selection, step=step)
            inflight = self._inflight = Inflight(step)
            if "step.started" in hub.wanted:
                await hub.emit(StepStarted(run_id=run_id, step=step, time=self._now()))
            if budget is not None and budget.budget.max_duration is not None:
                await self._enforce_budget(budget.check_time(self._now()))
            offered: frozenset[str] | None = None
            replayed = None
            for extension in ext.replayed:
                replayed = extension.replayed(run, step)
                if replayed is not None:
                    break
            if replayed is not None:
                # Generated before a crash and journaled: the recorded answer stands.
                response = replayed
                inflight.usage = replayed.usage or NO_USAGE
            else:
                history = conversation.current
                if self._context is not None:
                    history = await self._assemble_context(history, inflight)
                request = GenerateRequest(
                    conversation=history,
                    tools=specs,
                    step=step,
                    run_id=run_id,
                    settings=cfg.settings,
                    output_schema=cfg.output_schema,
                    output_mode=cfg.output_mode,
                )
                if hooks.select_tools or hooks.prepare_step:
                    request, offered = await self._prepare(request)
                response = await self._generate(request, inflight)

            calls = response.tool_calls
            if calls:
                calls = self._normalize_calls(calls)
            inflight.calls = calls
            content = inflight.content = response.content
            if content.__class__ is str:
                metadata = response.metadata
                conversation._extend_built(
                    [
                        Message(
                            id=new_message_id(),
                            role="assistant",
                            content=content,
                            tool_calls=calls,
                            metadata=dict(metadata) if metadata else {},
                        )
                    ]
                )
            else:  # content parts: checked on the way in
                conversation.append_assistant_message(content, calls, metadata=response.metadata)
            inflight.generated = True
            stop_reason = inflight.stop_reason = response.stop_reason
            for extension in ext.generated:
                await extension.generated(run, step, response, inflight.usage)
            if "step.generated" in hub.wanted:
                await hub.emit(
                    StepGenerated(
                        run_id=run_id,
                        step=step,
                        time=self._now(),
                        content=response.content,
                        tool_calls=calls,
                        stop_reason=stop_reason,
                    )
                )
            if self._budget_pending is not None:
                # The answer is recorded; if it spent past a limit, its calls do not run.
                await self._settle_pending_budget()

            results: tuple[ToolResult, ...] = ()
            if calls:
                results = await self._run_tools(inflight, offered)
                conversation._extend_built([tool_result_message(r) for r in results])
                inflight.settled = True
            step_result = StepResult(
                step=step,
                content=response.content,
                tool_calls=calls,
                results=results,
                usage=inflight.usage,
                run_usage=self._usage,
                stop_reason=stop_reason,
            )
            for extension in ext.step_completed:
                await extension.step_completed(run, step_result)
            self._steps.append(step_result)
            inflight.completed = True
            if "step.completed" in hub.wanted:
                await hub.emit(
                    StepCompleted(
                        run_id=run_id,
                        step=step,
                        time=self._now(),
                        content=step_result.content,
                        tool_calls=calls,
                        results=results,
                        usage=step_result.usage,
                        stop_reason=stop_reason,
                    )
                )
            self._inflight = None
            if hooks.on_step:
                context = self._hook_context()
                for hook in hooks.on_step:
                    await call_hook(hook, step_result, context)

            if self._switch is not None:
                # A tool switched the run's configuration (a handoff to another agent):
                # the run goes on under the new generate, tools and stop conditions from
                # the next step (the old stop conditions are not consulted for this one).
                switch, self._switch = self._switch, None
                await switch.apply(self)
                cfg = self._cfg
                hooks = cfg.hooks
                specs = cfg.toolbox.specs()
                continue

            if cfg.stop_when:
                stopped = await self._stopped(step_result)
                if stopped is not None:
                    return stopped

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

    async def _stopped(self, step_result: StepResult) -> FinishReason | None:
        """``STOP_CONDITION`` when a stop condition holds (and the output validates)."""
        for condition in self._cfg.stop_when:
            stop = condition(step_result)
            if stop.__class__ is not bool and inspect.isawaitable(stop):
                stop = await stop
            if stop:
                if self._cfg.output is not None and not self._accept_output(step_result):
                    return None  # the model gets another attempt at the output
                return FinishReason.STOP_CONDITION
        return None

    async def _assemble_context(
        self, history: ConversationHistory, inflight: Inflight
    ) -> ConversationHistory:
        """What this step sends: the transcript, compacted when over the context budget."""
        assert self._context is not None
        hub = self._hub
        prepared = await self._context.prepare(history, step=inflight.step)
        if prepared.warned and "context.budget-warning" in hub.wanted:
            await hub.emit(
                ContextBudgetWarning(
                    run_id=self.run_id,
                    step=inflight.step,
                    time=self._now(),
                    tokens=prepared.tokens,
                    budget=prepared.budget,
                    warn_at=self._context.options.warn_at,
                )
            )
        compaction = prepared.compaction
        if compaction is not None:
            usage = compaction.usage
            if usage is not None:
                # A summarizing call is a generate call too: the run pays for it.
                inflight.usage = inflight.usage + usage
                self._usage = self._usage + usage
                if self._budget is not None:
                    await self._enforce_budget(self._budget.charge_usage(usage))
            if "context.compacted" in hub.wanted:
                await hub.emit(
                    ContextCompacted(
                        run_id=self.run_id,
                        step=inflight.step,
                        time=self._now(),
                        removed=compaction.removed,
                        tokens_before=compaction.tokens_before,
                        tokens_after=compaction.tokens_after,
                        summarized=compaction.summary is not None,
                        usage=usage or NO_USAGE,
                    )
                )
        return prepared.history

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
                    specs = select_specs(specs, chosen, hook)
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
