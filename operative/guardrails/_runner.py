"""How a run applies its guardrails: one ``GuardrailRunner`` per run.

::

    loop task
    └── guardrail scope          cancelled by the first guardrail that trips
        ├── input guardrails     sequential, before step 1 (may rewrite the input)
        ├── parallel guardrails  a nursery: they race step 1's generate call
        │   └── the step loop    its tools wait at the gate until they all passed
        └── output guardrails    on the final answer, once the loop returned

A trip is recorded first and then cancels the guardrail scope (synchronously, in the
same tick), so nothing inside the scope — a generate call, a tool waiting at the gate,
a sibling tool's guardrail — gets past its next checkpoint. Every tool call passes
through :meth:`GuardrailRunner.wrap_execute`, which waits for the parallel input
guardrails, runs the call's guardrails, and only then executes it. It is the run's
extension for ``guardrails=`` (``wrap_run`` and ``wrap_tool``, see ``_core._extension``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from .._core._errors import HookError
from .._core._events import GuardrailPassed, GuardrailRewrote, GuardrailTrip
from .._core._extension import Execute, Extension, Loop
from .._core._types import FinishReason, ToolCall, ToolResult
from ..conversation import TextPart, cancelled_result
from ..hooks import call_hook
from ._define import Guardrails, GuardrailTripped, Verdict

if TYPE_CHECKING:
    from .._core._control import RunControl
    from ..tools import ExecutionContext

__all__ = ["GuardrailRunner"]

_ACCEPTED = (FinishReason.STOP_CONDITION, FinishReason.MAXIMUM_STEPS)


class GuardrailRunner(Extension):
    """One run's guardrails at work: the trip scope, the gate, the checks."""

    __slots__ = ("_ended", "_gate", "_guards", "_run", "_scope")

    def __init__(self, guardrails: Guardrails) -> None:
        self._guards = guardrails
        self._ended: BaseException | None = None
        """The first trip (or guardrail failure); it ends the run."""
        self._scope: trio.CancelScope | None = None
        self._gate: trio.Event | None = None
        """Set once every parallel input guardrail passed (None: nothing to wait for)."""
        self._run: RunControl | None = None

    # -- the extension's boundaries ----------------------------------------------------

    def wrap_run(self, run: RunControl, loop: Loop) -> Loop:
        return functools.partial(self.drive, run, loop)

    async def wrap_tool(
        self, run: RunControl, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        return self.wrap_execute(run, execute)

    # -- the run ---------------------------------------------------------------------

    async def drive(
        self, run: RunControl, loop: Callable[[], Awaitable[FinishReason]]
    ) -> FinishReason:
        """Run the step loop under the guardrails; raise what tripped, if anything did."""
        self._run = run
        guards = self._guards
        # A run rebuilt from its journal passed its input guardrails before the crash.
        fresh = not run.resumed
        finish = FinishReason.ERROR
        failure: Exception | None = None
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                if fresh and guards.input:
                    await self._check_input()
                if fresh and guards.parallel_input:
                    self._gate = trio.Event()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._race_input, name="operative input guardrails")
                        try:
                            finish = await loop()
                        except Exception as exc:
                            # Raised after the nursery, so it is not wrapped in a group.
                            failure = exc
                            nursery.cancel_scope.cancel()
                else:
                    finish = await loop()
                accepted = finish in _ACCEPTED and failure is None and self._ended is None
                if accepted and guards.output and run.steps:
                    await self._check_output()
            except Exception as exc:
                failure = exc
        if self._ended is not None:
            raise self._ended
        if failure is not None:
            raise failure
        return finish

    def _stop(self, error: BaseException) -> None:
        """Record what ends the run (the first one wins) and cancel the guardrail scope."""
        if self._ended is None:
            self._ended = error
        if self._scope is not None:
            self._scope.cancel()

    def _tripped(self, name: str, kind: str, reason: str, call_id: str | None = None) -> None:
        """Announce a trip and stop the run, in one tick (no checkpoint in between)."""
        run = self._run
        assert run is not None
        if run.wants("guardrail.tripped"):
            run.emit_nowait(
                GuardrailTrip(
                    run_id=run.run_id,
                    step=run.current_step,
                    time=run.now(),
                    guardrail=name,
                    kind=kind,
                    call_id=call_id,
                    reason=reason,
                )
            )
        self._stop(GuardrailTripped(name, kind, reason, call_id=call_id))

    async def _verdict(
        self, name: str, kind: str, check: Callable[..., Any], *args: Any, call_id: str | None
    ) -> Verdict | None:
        """Call a check; announce a pass or a rewrite. None: allowed."""
        run = self._run
        assert run is not None
        verdict = await call_hook(check, *args)
        if verdict is None or (verdict.__class__ is Verdict and verdict.action == "allow"):
            if run.wants("guardrail.passed"):
                await run.emit(
                    GuardrailPassed(
                        run_id=run.run_id,
                        step=run.current_step,
                        time=run.now(),
                        guardrail=name,
                        kind=kind,
                        call_id=call_id,
                    )
                )
            return None
        if not isinstance(verdict, Verdict):
            raise HookError(
                f"{kind} guardrail {name!r} returned {verdict!r}; return allow(), "
                "rewrite(value), trip(reason) or None (from operative.guardrails)"
            )
        return verdict

    async def _rewrote(self, name: str, kind: str, verdict: Verdict, call_id: str | None) -> None:
        run = self._run
        assert run is not None
        if run.wants("guardrail.rewrote"):
            await run.emit(
                GuardrailRewrote(
                    run_id=run.run_id,
                    step=run.current_step,
                    time=run.now(),
                    guardrail=name,
                    kind=kind,
                    call_id=call_id,
                    reason=verdict.reason,
                )
            )

    # -- input -----------------------------------------------------------------------

    async def _check_input(self) -> None:
        run = self._run
        assert run is not None
        for guard in self._guards.input:
            text = _input_text(run)
            verdict = await self._verdict(
                guard.name, "input", guard.check, text, run.hook_context(), call_id=None
            )
            if verdict is None:
                continue
            if verdict.action == "trip":
                self._tripped(guard.name, "input", verdict.reason)
                await trio.lowlevel.checkpoint()  # the cancelled scope stops the run here
                return
            if not isinstance(verdict.value, str):
                raise HookError(
                    f"input guardrail {guard.name!r} rewrote the input to "
                    f"{type(verdict.value).__name__}; rewrite(value) takes the new text (a str)"
                )
            _replace_input(run, verdict.value, guard.name)
            await self._rewrote(guard.name, "input", verdict, None)

    async def _race_input(self) -> None:
        """Run the parallel input guardrails side by side; open the gate if all pass."""
        run = self._run
        assert run is not None
        assert self._gate is not None
        text = _input_text(run)
        context = run.hook_context()
        async with trio.open_nursery() as nursery:
            for guard in self._guards.parallel_input:
                nursery.start_soon(
                    self._race_one, guard.name, guard.check, text, context, name=guard.name
                )
        if self._ended is None:
            self._gate.set()

    async def _race_one(
        self, name: str, check: Callable[..., Any], text: str, context: Any
    ) -> None:
        try:
            verdict = await self._verdict(name, "input", check, text, context, call_id=None)
        except Exception as exc:
            self._stop(exc)  # a guardrail that fails closes the gate: the run ends with it
            return
        if verdict is None:
            return
        if verdict.action == "trip":
            self._tripped(name, "input", verdict.reason)
        else:
            self._stop(
                HookError(
                    f"input guardrail {name!r} runs in parallel with generation and cannot "
                    "rewrite the input (the model has seen it): pass run_in_parallel=False"
                )
            )

    # -- tools -----------------------------------------------------------------------

    def wrap_execute(self, run: RunControl, execute: Execute) -> Execute:
        """``execute`` behind the gate and the tool guardrails (unchanged if none apply)."""
        guards = self._guards
        if not guards.tool_call and not guards.tool_result and self._gate is None:
            return execute

        async def guarded(call: ToolCall, execution: ExecutionContext) -> ToolResult:
            gate = self._gate
            if gate is not None and not gate.is_set():
                await gate.wait()  # a trip cancels this wait with the rest of the run
            try:
                checked = await self._check_call(run, call)
            except Exception as exc:
                self._stop(exc)
                return cancelled_result(call, "a guardrail failed before this call ran")
            if checked is None:
                return _denied(call, self._ended)
            if self._ended is not None:
                # Another guardrail tripped while this call's were running.
                return cancelled_result(call, "a guardrail stopped the run before this call ran")
            result = await execute(checked, execution)
            if not guards.tool_result:
                return result
            try:
                return await self._check_result(run, checked, result)
            except Exception as exc:
                self._stop(exc)
                return _withheld(call, exc)

        return guarded

    async def _check_call(self, run: RunControl, call: ToolCall) -> ToolCall | None:
        """The call as its guardrails let it through; None when one tripped."""
        for guard in self._guards.tool_call:
            if not guard.applies_to(call.name):
                continue
            assert guard.on_call is not None
            verdict = await self._verdict(
                guard.name, "tool-call", guard.on_call, call, run.hook_context(), call_id=call.id
            )
            if verdict is None:
                continue
            if verdict.action == "trip":
                self._tripped(guard.name, "tool-call", verdict.reason, call.id)
                return None
            call = _rewritten_call(call, verdict.value, guard.name)
            await self._rewrote(guard.name, "tool-call", verdict, call.id)
        return call

    async def _check_result(
        self, run: RunControl, call: ToolCall, result: ToolResult
    ) -> ToolResult:
        for guard in self._guards.tool_result:
            if not guard.applies_to(call.name):
                continue
            assert guard.on_result is not None
            verdict = await self._verdict(
                guard.name,
                "tool-result",
                guard.on_result,
                call,
                result,
                run.hook_context(),
                call_id=call.id,
            )
            if verdict is None:
                continue
            if verdict.action == "trip":
                self._tripped(guard.name, "tool-result", verdict.reason, call.id)
                return _withheld(call, self._ended)
            replacement = verdict.value
            if not isinstance(replacement, ToolResult) or replacement.call_id != call.id:
                raise HookError(
                    f"tool guardrail {guard.name!r} rewrote a result to {replacement!r}; "
                    f"rewrite(value) takes a ToolResult for call {call.id!r} "
                    "(msgspec.structs.replace(result, ...))"
                )
            result = replacement
            await self._rewrote(guard.name, "tool-result", verdict, call.id)
        return result

    # -- output ----------------------------------------------------------------------

    async def _check_output(self) -> None:
        run = self._run
        assert run is not None
        for guard in self._guards.output:
            content = run.answer
            verdict = await self._verdict(
                guard.name, "output", guard.check, content, run.hook_context(), call_id=None
            )
            if verdict is None:
                continue
            if verdict.action == "trip":
                self._tripped(guard.name, "output", verdict.reason)
                await trio.lowlevel.checkpoint()
                return
            if not isinstance(verdict.value, str):
                raise HookError(
                    f"output guardrail {guard.name!r} rewrote the answer to "
                    f"{type(verdict.value).__name__}; rewrite(value) takes the new text (a str)"
                )
            _replace_answer(run, content, verdict.value)
            await self._rewrote(guard.name, "output", verdict, None)


def _input_text(run: RunControl) -> str:
    """The text of the conversation's last user message ("" when there is none)."""
    for message in reversed(run.conversation.messages):
        if message.role == "user":
            content = message.content
            if isinstance(content, str):
                return content
            return "".join(part.text for part in content if isinstance(part, TextPart))
    return ""


def _replace_input(run: RunControl, text: str, name: str) -> None:
    messages = list(run.conversation.messages)
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            messages[index] = msgspec.structs.replace(messages[index], content=text)
            run.conversation.replace_messages(messages)
            return
    raise HookError(
        f"input guardrail {name!r} rewrote the input, but the conversation has no user "
        "message to replace; trip or allow instead"
    )


def _replace_answer(run: RunControl, old: str, new: str) -> None:
    """The run's answer becomes ``new``, in the result and in the transcript."""
    run.replace_answer(new)
    messages = list(run.conversation.messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            if message.content == old:
                messages[index] = msgspec.structs.replace(message, content=new)
                run.conversation.replace_messages(messages)
            return


def _rewritten_call(call: ToolCall, value: Any, name: str) -> ToolCall:
    if isinstance(value, Mapping):
        return msgspec.structs.replace(call, arguments=dict(value))
    if isinstance(value, ToolCall) and value.id == call.id and value.name == call.name:
        return value
    raise HookError(
        f"tool guardrail {name!r} rewrote call {call.id!r} to {value!r}; rewrite(value) "
        "takes the new arguments (a mapping) or a ToolCall with the same id and name"
    )


def _denied(call: ToolCall, why: BaseException | None) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome="denied",
        error=f"The call to {call.name!r} was stopped before it ran: {why}.",
    )


def _withheld(call: ToolCall, why: BaseException | None) -> ToolResult:
    return ToolResult(
        call_id=call.id,
        tool_name=call.name,
        outcome="error",
        error=f"The result of {call.name!r} was withheld: {why}.",
    )
