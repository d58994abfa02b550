"""The step loop: prepare the request → generate → assistant message → tools → stop?

Each step, in order: ``step.started``; context assembly (compaction of what is sent,
never of the stored transcript); ``select_tools`` and ``prepare_step`` hooks; the
generate phase (``_generate_phase``); the assistant message; ``step.generated``, then
what extensions asked about the answer's spend (a budget stops the run here, before the
calls); the tool phase (``_tool_phase``); one tool-result message per call, in call
order; ``step.completed``; ``on_step`` hooks; stop conditions (and structured-output
validation at a stop). The extension boundaries are named where they are called.

The loop owns what only it writes: the ids the transcript's calls hold (a call id names
one call), the run's context manager, and the steering cursor (a paused run parks here,
between steps). The step counter, the steps and the step in flight are the run's
(``RunState``); the final answer's validation is ``FinalAnswer``'s; calling the model
is the generate phase's, running the calls the tool phase's.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..conversation import ConversationHistory, tool_result_message
from ..hooks import call_hook
from ..liveness import DeclaredWait
from ._errors import HookError
from ._events import (
    ContextBudgetWarning,
    ContextCompacted,
    StepCompleted,
    StepGenerated,
    StepStarted,
)
from ._extension import Answered, Step, charge_extensions
from ._final_answer import answer_of
from ._generate_phase import GeneratePhase
from ._model import GenerateRequest, GenerateResponse
from ._results import StepResult
from ._run_state import NO_USAGE, Inflight, RunState
from ._tool_calls import normalize_calls
from ._tool_phase import ToolPhase, select_specs
from ._types import FinishReason, ToolCall, ToolResult

if TYPE_CHECKING:
    from ..context import ContextManager
    from ..steering import SteeringCursor
    from ._control import RunControl
    from ._options import RunConfig

__all__ = ["StepLoop"]


class StepLoop:
    """The loop over one run's steps, driving its generate and tool phases."""

    __slots__ = (
        "_generate",
        "_state",
        "_steering",
        "_steering_wait",
        "_tools",
        "call_ids",
        "context",
    )

    def __init__(self, state: RunState) -> None:
        self._state = state
        self._generate = GeneratePhase(state)
        self._tools = ToolPhase(state)
        self.call_ids: set[str] = set()
        """The ids of the calls in the transcript (see :meth:`take_call_ids`)."""
        config = state.config
        # Optional subsystems are imported only by runs that use them.
        self.context: ContextManager | None = None
        """What assembles each step's request from the transcript (``context_management``)."""
        if config.context_management is not None:
            from ..context import ContextManager

            self.context = ContextManager(config.context_management)
        self._steering_wait: DeclaredWait | None = None
        self._steering: SteeringCursor | None = None
        if config.steering is not None:
            from ..steering import SteeringCursor

            self._steering = SteeringCursor(
                config.steering,
                state.run_id,
                on_park=self._steering_parked,
                on_unpark=self._steering_resumed,
            )

    def take_call_ids(self) -> None:
        """Take the ids of the calls the transcript holds already: a server that says
        ``call_0`` every turn must not produce two calls with one id in the transcript."""
        for message in self._state.conversation.messages:
            self.call_ids.update(call.id for call in message.tool_calls)

    def _steering_parked(self, state: object) -> None:
        self._steering_wait = self._state.liveness.declare_wait("steering")

    def _steering_resumed(self) -> None:
        self._state.liveness.clear_wait(self._steering_wait)
        self._steering_wait = None

    async def run(self, run: RunControl) -> FinishReason:
        """The ``on_run_start`` hooks, then steps until a stop condition holds or
        ``maximum_steps`` have run (a run rebuilt from a journal goes on from where
        ``run.resume`` said). ``run`` is what the extensions and a switch are given
        (passed down, not kept: no reference cycle)."""
        state = self._state
        cfg = state.config
        for hook in cfg.hooks.on_run_start:
            await call_hook(hook, state.hook_context())
        specs = cfg.toolbox.specs()
        inflight = Inflight()  # begun at each step's entry
        # A run rebuilt from a journal goes on from its last recorded step; one that had
        # already met a stop condition when it was cut ends here (unless that step
        # switched agents: the agent that handed off is not consulted).
        resume = state.resume
        cut_after_a_stop = resume is not None and resume.check_stop and bool(state.steps)
        if cut_after_a_stop and await self.stopped(state.steps[-1]):
            return FinishReason.STOP_CONDITION
        # The limit is read once: a switch's new configuration does not move it.
        first = 1 if resume is None else resume.next_step
        for step in range(first, cfg.maximum_steps + 1):
            if state.ext.wrap_step:
                step_result = await self._wrapped(run, step, specs, inflight)
            else:
                step_result = await self._step(run, step, specs, inflight)
            await self._kept(step_result, inflight)
            if state.switch is not None:
                # A tool switched the run's configuration (a handoff to another agent):
                # the run goes on under the new generate, tools and stop conditions from
                # the next step (the old stop conditions are not consulted for this one).
                cfg = await self._switch(run)
                specs = cfg.toolbox.specs()
                continue
            if await self.stopped(step_result):
                return FinishReason.STOP_CONDITION
        if cfg.hooks.on_maximum_steps or cfg.output is not None:
            await self._at_maximum_steps()
        return FinishReason.MAXIMUM_STEPS

    async def _wrapped(
        self, run: RunControl, step: int, specs: Any, inflight: Inflight
    ) -> StepResult:
        """:meth:`_step`, wrapped by the extensions that wrap each step."""
        body: Step = functools.partial(self._step, run, step, specs, inflight)
        for extension in self._state.ext.wrap_step:
            body = extension.wrap_step(run, step, body)
        return await body()

    async def _step(self, run: RunControl, step: int, specs: Any, inflight: Inflight) -> StepResult:
        """One step, from its entry to its record (kept and announced by the caller)."""
        state = self._state
        await self._enter(step, inflight)
        # The step's answer: one a journal recorded before a crash, or the model's.
        response = self._replayed(inflight)
        offered: frozenset[str] | None = None
        if response is None:
            request, offered = await self._request(run, step, specs, inflight)
            response = await self._generate.run(run, request, inflight)
        calls = await self._answered(run, step, response, inflight)
        results: tuple[ToolResult, ...] = ()
        if calls:
            results = await self._tools.run(run, inflight, offered)
            state.conversation._extend_built([tool_result_message(r) for r in results])
            inflight.settled = True
        return StepResult(
            step=step,
            content=response.content,
            tool_calls=calls,
            results=results,
            usage=inflight.usage,
            run_usage=state.usage,
            stop_reason=response.stop_reason,
        )

    async def _enter(self, step: int, inflight: Inflight) -> None:
        """The step begins: a checkpoint, the steering gate (a paused run parks here),
        ``step.started``."""
        state = self._state
        await trio.lowlevel.checkpoint()
        state.step = step
        state.liveness._progress(step, state.usage)
        if self._steering is not None or state.config.selection is not None:
            await self._at_step_entry(step)
        inflight.begin(step)
        state.inflight = inflight
        if "step.started" in state.hub.wanted:
            await state.hub.emit(StepStarted(run_id=state.run_id, step=step, time=state.now()))

    async def _answered(
        self, run: RunControl, step: int, response: GenerateResponse, inflight: Inflight
    ) -> tuple[ToolCall, ...]:
        """The answer goes into the transcript, its calls with run-unique ids; the
        extensions told, ``step.generated``; what they asked about its spend done (a
        budget crossed here stops the run before the calls). Returns the calls."""
        state = self._state
        calls = normalize_calls(response.tool_calls, self.call_ids)
        inflight.calls = calls
        inflight.content = response.content
        state.conversation.append_assistant_message(
            response.content, calls, metadata=response.metadata
        )
        inflight.generated = True
        inflight.stop_reason = response.stop_reason
        for extension in state.ext.recorded:
            await extension.recorded(run, Answered(step, response, inflight.usage))
        if "step.generated" in state.hub.wanted:
            await state.hub.emit(
                StepGenerated(
                    run_id=state.run_id,
                    step=step,
                    time=state.now(),
                    content=response.content,
                    tool_calls=calls,
                    stop_reason=response.stop_reason,
                )
            )
        await self._settle(run)
        return calls

    async def _kept(self, step_result: StepResult, inflight: Inflight) -> None:
        """The step's record kept, ``step.completed``, the ``on_step`` hooks."""
        state = self._state
        state.steps.append(step_result)
        inflight.completed = True
        if "step.completed" in state.hub.wanted:
            await state.hub.emit(
                StepCompleted(
                    run_id=state.run_id,
                    step=step_result.step,
                    time=state.now(),
                    content=step_result.content,
                    tool_calls=step_result.tool_calls,
                    results=step_result.results,
                    usage=step_result.usage,
                    stop_reason=step_result.stop_reason,
                )
            )
        state.inflight = None
        await self._on_step(step_result)

    def _replayed(self, inflight: Inflight) -> GenerateResponse | None:
        """The answer a journal recorded for the step before a crash, if one did
        (``RunControl.answer_with``)."""
        state = self._state
        recorded = state.recorded_answer
        if recorded is not None:
            state.recorded_answer = None
            inflight.usage = recorded.usage or NO_USAGE
        return recorded

    async def _request(
        self, run: RunControl, step: int, specs: Any, inflight: Inflight
    ) -> tuple[GenerateRequest, frozenset[str] | None]:
        """What the step sends: the transcript (compacted when over the context budget)
        and the tools, as the ``select_tools`` and ``prepare_step`` hooks leave them; and
        the tools offered when not every tool was."""
        state = self._state
        cfg = state.config
        history = state.conversation.current
        if self.context is not None:
            history = await self._assemble_context(run, history, inflight)
        request = GenerateRequest(
            conversation=history,
            tools=specs,
            step=step,
            run_id=state.run_id,
            settings=cfg.settings,
            output_schema=cfg.output_schema,
            output_mode=cfg.output_mode,
        )
        if cfg.hooks.select_tools or cfg.hooks.prepare_step:
            return await self._prepare(request)
        return request, None

    async def _switch(self, run: RunControl) -> RunConfig:
        """Apply the switch a tool asked for; the run's configuration from then on."""
        state = self._state
        switch = state.switch
        assert switch is not None
        state.switch = None
        await switch.apply(run)
        return state.config

    async def _at_step_entry(self, step: int) -> None:
        """Between steps, with nothing in flight: a paused run parks here and steering
        commands apply; a selection pinned by the session is checked."""
        state = self._state
        steering = self._steering
        if steering is not None:
            for applied in await steering.at_step_entry(step):
                await state.hub.emit(applied)
        selection = state.config.selection
        if selection is not None:
            from ..steering import check_selection

            check_selection(selection, step=step)

    async def _settle(self, run: RunControl) -> None:
        """What extensions asked about the step's answer's spend, now that the answer is
        recorded: if it spent past a limit, the step's calls do not run."""
        state = self._state
        settles, state.to_settle = state.to_settle, ()
        for settle in settles:
            await settle(run)

    async def _on_step(self, step_result: StepResult) -> None:
        state = self._state
        if not state.config.hooks.on_step:
            return
        context = state.hook_context()
        for hook in state.config.hooks.on_step:
            await call_hook(hook, step_result, context)

    async def _at_maximum_steps(self) -> None:
        """``maximum_steps`` ran: ``on_maximum_steps`` hooks may replace the answer, and
        a run with an output type validates the answer it ends with."""
        state = self._state
        cfg = state.config
        if cfg.hooks.on_maximum_steps:
            context = state.hook_context()
            for hook in cfg.hooks.on_maximum_steps:
                replacement = await call_hook(hook, context)
                if replacement is not None:
                    if not isinstance(replacement, str):
                        raise HookError(
                            f"on_maximum_steps hook {hook!r} returned "
                            f"{type(replacement).__name__}; return a str or None"
                        )
                    answer_of(state).content_override = replacement
        if cfg.output is not None and state.steps:
            answer = answer_of(state)
            if answer.validation is None:
                answer.validate(state, answer.content_override or state.steps[-1].content)

    async def stopped(self, step_result: StepResult) -> bool:
        """Whether a stop condition holds (and the output validates)."""
        state = self._state
        cfg = state.config
        for condition in cfg.stop_when:
            stop = condition(step_result)
            if inspect.isawaitable(stop):
                stop = await stop
            if stop:
                # With an output type, the answer must validate; if it does not, the
                # model gets another attempt at the output.
                return cfg.output is None or answer_of(state).accept(state, step_result)
        return False

    async def _assemble_context(
        self, run: RunControl, history: ConversationHistory, inflight: Inflight
    ) -> ConversationHistory:
        """What this step sends: the transcript, compacted when over the context budget."""
        manager = self.context
        assert manager is not None
        state = self._state
        hub = state.hub
        prepared = await manager.prepare(history, step=inflight.step)
        if prepared.warned and "context.budget-warning" in hub.wanted:
            await hub.emit(
                ContextBudgetWarning(
                    run_id=state.run_id,
                    step=inflight.step,
                    time=state.now(),
                    tokens=prepared.tokens,
                    budget=prepared.budget,
                    warn_at=manager.options.warn_at,
                )
            )
        compaction = prepared.compaction
        if compaction is not None:
            usage = compaction.usage
            if usage is not None:
                # A summarizing call is a generate call too: the run pays for it.
                inflight.usage = inflight.usage + usage
                state.usage = state.usage + usage
                spending = state.ext.spent
                if spending:
                    step = inflight.step
                    for settle in charge_extensions(run, spending, step, usage, None, "compaction"):
                        await settle(run)
            if "context.compacted" in hub.wanted:
                await hub.emit(
                    ContextCompacted(
                        run_id=state.run_id,
                        step=inflight.step,
                        time=state.now(),
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
        cfg = self._state.config
        hooks = cfg.hooks
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
            if len(names) != len(cfg.toolbox.specs()):
                offered = names
        return request, offered
