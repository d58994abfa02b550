"""``ActiveRun``: one run's handle and its loop task (``open_run`` starts it).

::

    open_run(...)            run nursery (``_open_run``): every child has ended on leaving
    └── loop task            the run scope (a CancelScope): abort, deadline, budgets
        └── step k           generate → assistant message → tools → results → stop?
            └── tool nursery one child task per call (none for a single call)

Whoever cancels the run scope first records why (``_CancelReason``), so the finish
reason is exact. Clean-up after cancellation (repairing the transcript, the terminal
event) runs shielded; what may block in it is bounded by ``cleanup_timeout``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..conversation import (
    cancelled_result,
    repair_dangling_tool_calls,
    tool_result_message,
)
from ..hooks import call_hook
from ..liveness import (
    LivenessSnapshot,
    SnapshotObserver,
    SnapshotStream,
    SnapshotSubscription,
    terminal_status,
)
from ._errors import CleanupError, HookError, InvalidArgument, OutputValidationError
from ._event_hub import EventStream, Listener, Overflow
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
from ._extension import ResumePoint
from ._results import RunResult, StepResult
from ._run_state import CancelReason, is_shutdown
from ._step import StepLoop
from ._types import FinishReason

if TYPE_CHECKING:
    from ..budgets import BudgetStatus
    from ..steering import SteeringOutcome

__all__ = ["ActiveRun"]

_UNFINISHED_DURABLE = (
    "committing its outcome took over cleanup_timeout={timeout:g}s; the stored run stays "
    "claimable, and recover() finishes it from its journal"
)
_UNFINISHED = "the clean-up of {extension!r} took over cleanup_timeout={timeout:g}s"
_FAILED_DURABLE = (
    "its outcome was not committed ({error}); the stored run stays claimable, and recover() "
    "finishes it from its journal"
)
_FAILED = "its clean-up failed ({error})"

logger = logging.getLogger("operative.run")

_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR
_BUDGET_EXCEEDED = FinishReason.BUDGET_EXCEEDED
_STEERING_EVENTS: dict[str, Any] = {
    "accepted": SteeringAccepted,
    "rejected": SteeringRejected,
    "superseded": SteeringSuperseded,
    "failed": SteeringFailed,
}


class ActiveRun(StepLoop):
    """A run in progress, yielded by :func:`open_run` (and ``agent.open_run``).

    Attach listeners or start iterating events right after entering the block: the loop
    starts only once the block first yields control, so nothing is missed.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<ActiveRun {self.run_id} {self._liveness.status} step={self._step}>"

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Ask the run to stop; it ends with ``finish_reason == "aborted"``.

        Synchronous: it takes effect at the run's next checkpoint. Unfinished tool calls
        get ``cancelled`` results. Calling it again, or after the run ended, does nothing.
        """
        self._cancel(CancelReason(_ABORTED, reason or "aborted"))

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

    def once(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for the first event of ``type`` only, then drop it.

        Returns a remover, like :meth:`add_listener`; :meth:`remove_listener` also
        removes it before it fired.
        """
        return self._hub.once(type, listener)

    def remove_listener(self, type: str, listener: Listener) -> None:
        """Remove ``listener`` for ``type`` (one registration, by :meth:`add_listener` or
        :meth:`once`); a listener that is not registered is ignored."""
        self._hub.remove_listener(type, listener)

    def events(self, *types: str, capacity: int = 256, overflow: Overflow = "block") -> EventStream:
        """Iterate the run's events (all, or only ``types``) until the terminal one."""
        return self._hub.stream(types, capacity=capacity, overflow=overflow)

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing now; never blocks, never changes anything."""
        return self._liveness.snapshot()

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change.

        The terminal snapshot is delivered exactly once, then the subscription ends.
        Returns a handle with ``unsubscribe()`` (also usable as a ``with`` block).
        """
        return self._liveness.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one."""
        return self._liveness.snapshots(capacity=capacity)

    @property
    def is_durably_started(self) -> bool:
        """True once this run's durable record is committed (never for in-memory runs)."""
        durable = self._ext.durable
        return durable is not None and durable.is_durably_started()

    async def wait_durably_started(self) -> None:
        """Return once the durable run record is committed (the run id is then safe to
        acknowledge: the run survives any later crash). Raises what stopped the write.

        Raises:
            InvalidArgument: the run is not durable (no ``durable=`` was given).
        """
        durable = self._ext.durable
        if durable is None:
            raise InvalidArgument(
                "this run is not durable: pass durable=Durable(engine=..., "
                "checkpoint_store=...) to open_run to make it so"
            )
        await durable.wait_durably_started()

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: steps so far, listener failures."""
        return {"steps": len(self._steps), "listener_errors": self._hub.listener_errors}

    # -- outcome ---------------------------------------------------------------------

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result (cached).

        Completed, errored and aborted runs all return a result; ``finish_reason`` says
        which (a failing ``on_run_end`` hook, the place where hosts commit the outcome,
        turns it into ``"error"``).

        Raises:
            CleanupError: the run ended but its clean-up did not finish (the durable
                terminal commit failed or timed out, ``on_run_end`` hooks overran
                ``cleanup_timeout``): an uncommitted run never reads as a success.
                Raised again on every call; ``.result`` is the run's own result.
        """
        await self._done.wait()
        result = self._result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error
        return result

    async def closed(self) -> None:
        """Wait for the run's clean-up to finish: the transcript repaired, ``on_run_end``
        hooks run, a durable run's terminal record committed, the terminal event sent.

        The specification's cleanup acknowledgement, apart from ``result()``: it returns
        once the clean-up succeeded. Bound the wait with ``trio.fail_after`` if need be.

        Raises:
            CleanupError: the clean-up did not finish (the acknowledgement failed).
        """
        await self._done.wait()
        result = self._result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error

    async def aclose(self) -> None:
        """Abort the run, end its event streams and wait until it has ended.

        The specification's dispose (``using``): for hosts that want leaving a scope to
        stop a run rather than wait for it, as leaving ``async with`` does. Calling it
        after the run ended only waits. It does not raise for a failed clean-up; call
        :meth:`closed` for that.
        """
        self.abort("the run was closed")
        self.complete()
        await self._done.wait()

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

    async def _drive(self) -> None:
        finish: FinishReason | None = None
        error: BaseException | None = None
        escaping: BaseException | None = None
        self._now = trio.lowlevel.current_clock().current_time
        self._liveness._clock = self._now  # the same clock, one call less per pulse
        started_at = self._now()
        self._liveness.start()
        hub = self._hub
        if hub.wants("run.started"):
            hub.emit_nowait(
                RunStarted(run_id=self.run_id, time=started_at, agent_name=self._cfg.agent_name)
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
            self._add_deadline(
                self._now() + (request.deadline - time.time()),
                CancelReason(_ABORTED, "the request this run acts for passed its deadline"),
            )
        budget = self._budget
        if budget is not None:
            budget.start(started_at)
            if budget.deadline is not None:
                self._add_deadline(
                    budget.deadline, CancelReason(_BUDGET_EXCEEDED, "budget exceeded: duration")
                )
        budget_status: BudgetStatus | None = None
        remove_steering_listener = self._listen_to_steering()
        try:
            with self._scope:
                try:
                    ext = self._ext
                    resume: ResumePoint | None = None
                    for extension in ext.run_started:
                        resume = await extension.run_started(self) or resume
                    for hook in self._cfg.hooks.on_run_start:
                        await call_hook(hook, self._hook_context())
                    if ext.wrap_loop or resume is not None:
                        loop: Callable[[], Awaitable[FinishReason]] = functools.partial(
                            self._loop, resume
                        )
                        for extension in ext.wrap_loop:
                            loop = extension.wrap_loop(self, loop)
                        finish = await loop()
                    else:
                        finish = await self._loop()
                except Exception as exc:
                    finish, error = await self._recover(exc)
        except Exception as exc:
            # A failure that met a cancellation of the run scope (e.g. a tool task that
            # raised while an abort was landing): the scope took the Cancelled out of
            # the group; what is left is the run's error, not the caller's.
            finish, error = _ERROR, exc
        except BaseException as exc:  # cancelled from outside the run, KeyboardInterrupt
            escaping = exc
        reason: str | None = None
        if finish is not None and error is None and self._cancel_reason is not None:
            # Asked to stop (an abort, a stall, a budget) in the tick the loop came back
            # in, with no checkpoint left to raise it: the first recorded reason stands.
            finish, reason = self._cancel_reason.finish_reason, self._cancel_reason.message
        if finish is None:
            cancel = self._cancel_reason
            if escaping is not None:
                finish = _ABORTED
                reason = cancel.message if cancel else "the run's caller was cancelled"
            else:
                if cancel is None:
                    cancel = self._deadline_reason()
                    if cancel is not None and cancel.finish_reason is _BUDGET_EXCEEDED:
                        assert budget is not None
                        budget_status = budget.check_time(self._now())
                        if budget_status.exceeded is not None:
                            cancel = CancelReason(_BUDGET_EXCEEDED, budget_status.exceeded.message)
                assert cancel is not None, "the run scope was cancelled without a reason"
                finish, reason = cancel.finish_reason, cancel.message
        if remove_steering_listener is not None:
            remove_steering_listener()
        # Cancelled from outside with no abort asked for, or interrupted (Ctrl-C): the
        # process is shutting down, and a durable run is left for another worker (or
        # recover()) instead of ending here.
        cancel = self._cancel_reason
        if cancel is not None:
            shutdown = cancel.shutdown  # an abort asked for first still ends the run
        else:
            shutdown = escaping is not None and is_shutdown(escaping)
        await self._finish(finish, error, reason, budget_status, shutdown=shutdown)
        if escaping is not None:
            raise escaping

    def _listen_to_steering(self) -> Callable[[], None] | None:
        """Announce the outcomes of the session's steering commands as run events."""
        add = getattr(self._cfg.steering, "add_listener", None)
        if add is None:
            return None
        hub = self._hub

        def announce(outcome: SteeringOutcome) -> None:
            event_class = _STEERING_EVENTS.get(outcome.status)
            if event_class is None or not hub.wants(outcome.event_type):
                return
            command = outcome.command
            hub.emit_nowait(
                event_class(
                    run_id=self.run_id,
                    step=self._step,
                    time=self._now(),
                    session_id=outcome.session_id,
                    command_id=outcome.command_id,
                    command=command.__struct_config__.tag,
                    config_version=outcome.config_version,
                    reason=outcome.reason,
                )
            )

        remove: Callable[[], None] = add(announce)
        return remove

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

    async def _finish(
        self,
        finish: FinishReason,
        error: BaseException | None,
        reason: str | None,
        budget_status: BudgetStatus | None = None,
        *,
        shutdown: bool = False,
    ) -> None:
        """Repair, record and announce the end of the run.

        Everything here is synchronous except the budget monitor's callbacks for a run
        that ran out of time and the ``on_run_end`` hooks, which run shielded from
        cancellation and bounded by ``cleanup_timeout``.
        """
        cfg = self._cfg
        hub = self._hub
        run_id = self.run_id
        now = self._now()
        inflight = self._inflight
        self._inflight = None
        why = reason or (f"{type(error).__name__}: {error}" if error is not None else "")
        # A completed step announced itself (emission is all or nothing); only a step cut
        # short is settled here.
        if inflight is not None and not inflight.completed:
            if inflight.generated:
                if inflight.settled:
                    # The step's results are in the transcript already; what cut it
                    # short came after (its journal record, its event).
                    results = tuple(r for r in inflight.results if r is not None)
                else:
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
                        stop_reason=inflight.stop_reason,
                    )
                )
            hub.emit_nowait(StepAborted(run_id=run_id, step=inflight.step, time=now, reason=why))

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
        if budget_status is not None:
            for event in self._budget_events(budget_status):
                hub.emit_nowait(event)
        unfinished: str | None = None
        cause: BaseException | None = None
        if cfg.hooks.on_run_end or (budget_status is not None and self._budget is not None):
            with trio.CancelScope(shield=True), trio.move_on_after(cfg.cleanup_timeout) as cleanup:
                if budget_status is not None and self._budget is not None:
                    try:
                        await self._budget.notify(budget_status)
                    except Exception as exc:
                        logger.exception("budget callback of run %s raised", run_id)
                        result = attrs.evolve(result, finish_reason=_ERROR, error=exc)
                for hook in cfg.hooks.on_run_end:
                    try:
                        await call_hook(hook, result)
                    except Exception as exc:
                        logger.exception("on_run_end hook %r raised", hook)
                        if result.finish_reason is not _ERROR:
                            result = attrs.evolve(result, finish_reason=_ERROR, error=exc)
            if cleanup.cancelled_caught:
                unfinished = (
                    f"its on_run_end hooks did not finish within cleanup_timeout="
                    f"{cfg.cleanup_timeout:g}s"
                )
        for extension in self._ext.run_ending:
            failed: BaseException | None = None
            with trio.CancelScope(shield=True), trio.move_on_after(cfg.cleanup_timeout) as cleanup:
                try:
                    result = await extension.run_ending(self, result, shutdown=shutdown)
                except Exception as exc:
                    failed = exc
            if cleanup.cancelled_caught:
                template = _UNFINISHED_DURABLE if extension.durable else _UNFINISHED
                unfinished = template.format(timeout=cfg.cleanup_timeout, extension=extension)
            elif failed is not None:
                cause = failed
                template = _FAILED_DURABLE if extension.durable else _FAILED
                unfinished = template.format(error=f"{type(failed).__name__}: {failed}")
        if unfinished is not None:
            logger.error("run %s ended (%s) but %s", run_id, result.finish_reason, unfinished)
            failure = CleanupError(
                f"run {run_id} ended ({result.finish_reason}) but {unfinished}",
                run_id=run_id,
                result=result,
            )
            failure.__cause__ = cause
            result = attrs.evolve(result, finish_reason=_ERROR, error=failure)
        self._result = result
        finish = result.finish_reason
        end = self._now()
        if finish is _ERROR:
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
            terminal = RunAborted(
                run_id=run_id,
                step=self._step,
                time=end,
                reason=reason or "",
                usage=self._usage,
                steps=len(steps),
            )
        else:
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
        self._liveness._end(terminal_status(finish), finish, self._step, self._usage)
        hub.emit_nowait(terminal)
        self._done.set()
        hub.close()
