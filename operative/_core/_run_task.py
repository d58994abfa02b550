"""The loop task of one run: the run scope around the step loop, and the run's end.

::

    loop task (drive)
    ├── start      liveness, ``run.started``, the transcript repaired, deadlines set
    ├── run scope  the tool sources read; the step loop with its ``on_run_start``
    │              hooks, wrapped by ``wrap_run`` extensions; a failure goes to
    │              ``on_error``
    └── end        the step cut short repaired; shielded and bounded by
                   ``cleanup_timeout``: the ``on_run_end`` hooks, then each
                   ``run_ending`` extension; the result recorded, the terminal event
                   sent, the event hub closed

Whoever cancels the run scope first records why (``RunScope``), so the finish reason is
exact. The task records the run's result in the run scope, which ends it.

These are functions of the run (``RunControl``), not a part of their own: the loop task
keeps nothing of its own but locals, and reads the parts the run is composed of.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..conversation import cancelled_result, repair_dangling_tool_calls, tool_result_message
from ..hooks import call_hook
from ..liveness import terminal_status
from ._errors import CleanupError, HookError
from ._events import (
    RunAborted,
    RunCompleted,
    RunError,
    RunStarted,
    SteeringAccepted,
    SteeringFailed,
    SteeringRejected,
    SteeringSuperseded,
    StepAborted,
)
from ._extension import Loop
from ._final_answer import answer_of
from ._results import RunResult, StepResult
from ._run_state import CancelReason, RunState, is_shutdown
from ._types import FinishReason

if TYPE_CHECKING:
    from ..steering import SteeringOutcome
    from ._control import RunControl
    from ._run_scope import RunScope

__all__ = ["drive"]

_UNFINISHED = "its clean-up took over cleanup_timeout={timeout:g}s"
_FAILED = "its clean-up failed ({error})"

logger = logging.getLogger("operative.run")

_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR
_STEERING_EVENTS: dict[str, Any] = {
    "accepted": SteeringAccepted,
    "rejected": SteeringRejected,
    "superseded": SteeringSuperseded,
    "failed": SteeringFailed,
}


async def drive(run: RunControl) -> None:
    """The loop task of ``run``: start, run the steps in the run scope, end. What came
    from outside the run (its caller cancelled, Ctrl-C) is raised again after the end.
    The parts of a run never keep it (it is passed down), so a run that has ended is
    freed by reference counting, with no reference cycle."""
    state = run.state
    finish: FinishReason | None = None
    error: BaseException | None = None
    escaping: BaseException | None = None
    remove_steering_listener = _start(run)
    try:
        with run.scope.cancel_scope:
            try:
                if state.config.tool_sources:
                    await _read_tool_sources(run)
                loop: Loop = functools.partial(run.loop.run, run)
                for extension in state.ext.wrap_run:
                    loop = extension.wrap_run(run, loop)
                finish = await loop()
            except Exception as exc:
                finish, error = await _recover(state, exc)
    except Exception as exc:
        # A failure that met a cancellation of the run scope (e.g. a tool task that
        # raised while an abort was landing): the scope took the Cancelled out of the
        # group; what is left is the run's error, not the caller's.
        finish, error = _ERROR, exc
    except BaseException as exc:  # cancelled from outside the run, KeyboardInterrupt
        escaping = exc
    if remove_steering_listener is not None:
        remove_steering_listener()
    await _finish(run, finish, error, escaping)
    if escaping is not None:
        raise escaping


async def _read_tool_sources(run: RunControl) -> None:
    """Read each tool source of ``tools=`` (an MCP server) once, before any feature
    wraps the run, so the run's toolbox holds their tools before anything else looks at
    it (guardrails, tracing, a durable run's fingerprint and journal)."""
    config = run.state.config
    tools = []
    for source in config.tool_sources:
        tools.extend(await source.list_tools())
    run.reconfigure(msgspec.structs.replace(config, toolbox=config.toolbox.extended(tools)))


def _start(run: RunControl) -> Callable[[], None] | None:
    """The run starts (in the loop task, before the run scope): its clock and liveness,
    ``run.started``, the transcript repaired, the request's deadline set. Returns what
    removes the steering listener, if the run listens to steering."""
    state = run.state
    started_at = state.started_at = state.now()
    state.liveness._start_at(started_at)
    state.hub.emit_nowait(
        RunStarted(run_id=state.run_id, time=started_at, agent_name=state.config.agent_name)
    )
    for message in state.conversation._messages:
        if message.tool_calls:
            # A call left open by an earlier, cut-short turn is answered before the
            # model sees the transcript (providers reject open calls); the run never
            # leaves one.
            repair_dangling_tool_calls(
                state.conversation, "the turn that made this call ended before it settled"
            )
            # Ids an earlier turn used are taken.
            run.loop.take_call_ids()
            break
    request = state.config.request_context
    if request is not None and request.deadline is not None:
        # The request's deadline is wall-clock time; the run scope's is trio's.
        run.scope.add_deadline(
            state.now() + (request.deadline - time.time()),
            CancelReason(_ABORTED, "the request this run acts for passed its deadline"),
        )
    return None if state.config.steering is None else _listen_to_steering(state)


def _ending(
    scope: RunScope,
    finish: FinishReason | None,
    error: BaseException | None,
    escaping: BaseException | None,
) -> tuple[FinishReason, BaseException | None, str | None, bool]:
    """How the run ends, once its scope has exited: the finish reason, the error, the
    message that says why (``None``: the finish says it all), and whether the process is
    shutting down (then a durable run is left for another worker instead of ending
    here)."""
    reason: str | None = None
    if finish is not None and error is None and scope.reason is not None:
        # Asked to stop (an abort, a stall, a budget) in the tick the loop came back
        # in, with no checkpoint left to raise it: the first recorded reason stands.
        finish, reason = scope.reason.finish_reason, scope.reason.message
    if finish is None:
        cancel = scope.reason
        if escaping is not None:
            finish = _ABORTED
            reason = cancel.message if cancel else "the run's caller was cancelled"
        else:
            if cancel is None:
                cancel = scope.deadline_reason()
                if cancel is not None and cancel.describe is not None:
                    # A feature's deadline (a budget's) says how far past it the run went.
                    cancel = CancelReason(cancel.finish_reason, cancel.describe())
            assert cancel is not None, "the run scope was cancelled without a reason"
            finish, reason = cancel.finish_reason, cancel.message
    # Cancelled from outside with no abort asked for, or interrupted (Ctrl-C): the
    # process is shutting down, and a durable run is left for another worker (or
    # recover()) instead of ending here.
    cancel = scope.reason
    if cancel is not None:
        shutdown = cancel.shutdown  # an abort asked for first still ends the run
    else:
        shutdown = escaping is not None and is_shutdown(escaping)
    return finish, error, reason, shutdown


def _listen_to_steering(state: RunState) -> Callable[[], None] | None:
    """Announce the outcomes of the session's steering commands as run events."""
    add = getattr(state.config.steering, "add_listener", None)
    if add is None:
        return None
    hub = state.hub

    def announce(outcome: SteeringOutcome) -> None:
        event_class = _STEERING_EVENTS.get(outcome.status)
        if event_class is None or not hub.wants(outcome.event_type):
            return
        command = outcome.command
        hub.emit_nowait(
            event_class(
                run_id=state.run_id,
                step=state.step,
                time=state.now(),
                session_id=outcome.session_id,
                command_id=outcome.command_id,
                command=command.__struct_config__.tag,
                config_version=outcome.config_version,
                reason=outcome.reason,
            )
        )

    remove: Callable[[], None] = add(announce)
    return remove


async def _recover(state: RunState, exc: Exception) -> tuple[FinishReason, BaseException | None]:
    """Offer a failure to the ``on_error`` hooks; one may turn it into an answer."""
    hooks = state.config.hooks.on_error
    if not hooks:
        return _ERROR, exc
    context = state.hook_context()
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
            replaced = answer_of(state)
            replaced.content_override = answer
            replaced.recovered_error = f"{type(exc).__name__}: {exc}"
            return FinishReason.STOP_CONDITION, None
    return _ERROR, exc


async def _finish(
    run: RunControl,
    finish: FinishReason | None,
    error: BaseException | None,
    escaping: BaseException | None,
) -> None:
    """Repair, record and announce the end of the run: ``finish`` and ``error`` as the
    loop left them, ``escaping`` what came from outside the run (see ``_ending``).

    Everything here is synchronous except the clean-up (``_cleaned_up``), which runs
    shielded from cancellation and bounded by ``cleanup_timeout``.
    """
    finish, error, reason, shutdown = _ending(run.scope, finish, error, escaping)
    state = run.state
    _settle_cut_step(state, reason, error)
    result = _result(state, finish, error, reason)
    result = await _cleaned_up(run, result, shutdown)
    scope = run.scope
    scope.result = result
    _announce_end(state, result, reason)
    scope.end()
    state.hub.close()


def _settle_cut_step(state: RunState, reason: str | None, error: BaseException | None) -> None:
    """A step cut short gets its record, every call of it a result (``cancelled`` for
    those that had none), and ``step.aborted``. A completed step announced itself
    (emission is all or nothing)."""
    inflight = state.inflight
    state.inflight = None
    if inflight is None or inflight.completed:
        return
    why = reason or (f"{type(error).__name__}: {error}" if error is not None else "")
    if inflight.generated:
        if inflight.settled:
            # The step's results are in the transcript already; what cut it short came
            # after (its journal record, its event).
            results = tuple(r for r in inflight.results if r is not None)
        else:
            results = tuple(
                r if r is not None else cancelled_result(call, why)
                for r, call in zip(
                    inflight.results or [None] * len(inflight.calls), inflight.calls, strict=True
                )
            )
            state.conversation.extend([tool_result_message(r) for r in results])
        state.steps.append(
            StepResult(
                step=inflight.step,
                content=inflight.content,
                tool_calls=inflight.calls,
                results=results,
                usage=inflight.usage,
                run_usage=state.usage,
                aborted=True,
                stop_reason=inflight.stop_reason,
            )
        )
    state.hub.emit_nowait(
        StepAborted(run_id=state.run_id, step=inflight.step, time=state.now(), reason=why)
    )


def _result(
    state: RunState, finish: FinishReason, error: BaseException | None, reason: str | None
) -> RunResult:
    """The run's result as the loop left it (before its clean-up)."""
    answer = state.answer
    steps = tuple(state.steps)
    content = None if answer is None else answer.content_override
    if content is None:
        content = steps[-1].content if steps else ""
    return RunResult(
        conversation=state.conversation,
        steps=steps,
        content=content,
        usage=state.usage,
        finish_reason=finish,
        error=error,
        output=None if answer is None else answer.output,
        schema_validation=None if answer is None else answer.validation,
        run_id=state.run_id,
        abort_reason=reason,
    )


async def _cleaned_up(run: RunControl, result: RunResult, shutdown: bool) -> RunResult:
    """The ``on_run_end`` hooks, then each ``run_ending`` extension (a durable run
    commits its outcome here), shielded and bounded by ``cleanup_timeout``. A clean-up
    that failed or did not finish makes the result an error (``CleanupError``): it is
    never reported as a success."""
    state = run.state
    cfg = state.config
    run_id = state.run_id
    unfinished: str | None = None
    cause: BaseException | None = None
    if cfg.hooks.on_run_end:
        with trio.CancelScope(shield=True), trio.move_on_after(cfg.cleanup_timeout) as cleanup:
            for hook in cfg.hooks.on_run_end:
                try:
                    await call_hook(hook, result)
                except Exception as exc:
                    logger.exception("on_run_end hook %r raised", hook)
                    if result.finish_reason is not _ERROR:
                        result = msgspec.structs.replace(result, finish_reason=_ERROR, error=exc)
        if cleanup.cancelled_caught:
            unfinished = (
                f"its on_run_end hooks did not finish within cleanup_timeout="
                f"{cfg.cleanup_timeout:g}s"
            )
    for extension in state.ext.run_ending:
        failed: BaseException | None = None
        with trio.CancelScope(shield=True), trio.move_on_after(cfg.cleanup_timeout) as cleanup:
            try:
                result = await extension.run_ending(run, result, shutdown=shutdown)
            except Exception as exc:
                failed = exc
        if cleanup.cancelled_caught:
            unfinished = _UNFINISHED.format(timeout=cfg.cleanup_timeout)
        elif failed is not None:
            cause = failed
            unfinished = _FAILED.format(error=f"{type(failed).__name__}: {failed}")
        else:
            continue
        if extension.unfinished:
            unfinished = f"{unfinished}; {extension.unfinished}"
    if unfinished is not None:
        logger.error("run %s ended (%s) but %s", run_id, result.finish_reason, unfinished)
        failure = CleanupError(
            f"run {run_id} ended ({result.finish_reason}) but {unfinished}",
            run_id=run_id,
            result=result,
        )
        failure.__cause__ = cause
        result = msgspec.structs.replace(result, finish_reason=_ERROR, error=failure)
    return result


def _announce_end(state: RunState, result: RunResult, reason: str | None) -> None:
    """The run's liveness ends, and its terminal event goes out."""
    finish = result.finish_reason
    run_id = state.run_id
    steps = result.steps
    content = result.content
    answer = state.answer
    end = state.now()
    step = state.step
    usage = state.usage
    terminal: Any
    if finish is _ERROR:
        terminal = RunError(
            run_id=run_id,
            step=step,
            time=end,
            error=str(result.error),
            error_type=type(result.error).__name__,
            usage=usage,
            steps=len(steps),
        )
    elif finish is _ABORTED:
        terminal = RunAborted(
            run_id=run_id, step=step, time=end, reason=reason or "", usage=usage, steps=len(steps)
        )
    else:
        terminal = RunCompleted(
            run_id=run_id,
            step=step,
            time=end,
            finish_reason=finish,
            content=content,
            usage=usage,
            steps=len(steps),
            recovered_error=None if answer is None else answer.recovered_error,
        )
    state.liveness._end(terminal_status(finish), finish, step, usage, end)
    state.hub.emit_nowait(terminal)
