"""The generate phase of a step: attempts, retries, backpressure and what they cost.

::

    step k
    └── generate attempt(s)   each in its own scope (attempt_timeout); back-off between
        └── backpressure slot held around the call (FixedDelay, a shared GenerateLimiter)

What a step spends is added to the run's (``RunState.usage``) and the step's
(``Inflight.usage``) here, and told to the extensions that count it (``spent``): each
attempt's usage, a failed attempt's too (it was still paid for). Extensions that wrap
the run's generate function (``wrap_generate``) see each attempt, and may stop the run
before the model is called (a budget's request limit); what they ask to be done about a
spend is done once it is recorded: a failed attempt's before the next attempt, the
answer's by ``StepLoop`` once the answer is in the transcript.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from ..hooks import call_hook
from ._deltas import deliver_deltas
from ._errors import HookError, InvalidResponseError
from ._event_hub import DeltaDelivery
from ._events import (
    BackpressureApplied,
    BackpressureReleased,
    GenerateCompleted,
    GenerateDelta,
    GenerateError,
    GenerateRetry,
    GenerateRouted,
    GenerateStarted,
    ResponseValidated,
    UsageAccumulated,
)
from ._extension import Settle, charge_extensions
from ._model import (
    GenerateFunction,
    GenerateRequest,
    GenerateResponse,
    checked_response,
    response_problem,
    usage_problem,
)
from ._run_state import NO_USAGE, Inflight, RunState
from ._types import Usage

if TYPE_CHECKING:
    from ._control import RunControl

__all__ = ["GeneratePhase", "charge_answer"]


class _BackpressureEvents:
    """What a backpressure strategy calls when it makes the run wait."""

    __slots__ = ("_state",)

    def __init__(self, state: RunState) -> None:
        self._state = state

    async def applied(self, delay: float | None, reason: str) -> None:
        state = self._state
        await state.hub.emit(
            BackpressureApplied(
                run_id=state.run_id, step=state.step, time=state.now(), delay=delay, reason=reason
            )
        )

    async def released(self, waited: float) -> None:
        state = self._state
        await state.hub.emit(
            BackpressureReleased(
                run_id=state.run_id, step=state.step, time=state.now(), waited=waited
            )
        )


class _DeltaSink:
    """Where an adapter's streamed deltas go during one attempt: ``generate.delta``
    events. Deltas arrive in a sync callback, so a full ``block`` stream holds them back
    (merged), and the run waits for its consumer once the call has returned; with no
    stream attached there is nothing to hold back (listeners never wait)."""

    __slots__ = ("_attempt", "_delivery", "_state", "_step")

    def __init__(self, state: RunState, request: GenerateRequest) -> None:
        self._state = state
        self._step = request.step
        self._attempt = request.attempt
        self._delivery: DeltaDelivery | None = None

    def __call__(self, delta: Any) -> None:
        state = self._state
        hub = state.hub
        event = GenerateDelta(
            run_id=state.run_id,
            step=self._step,
            time=state.now(),
            attempt=self._attempt,
            kind=str(getattr(delta, "kind", "text")),
            text=str(getattr(delta, "text", "")),
            index=int(getattr(delta, "index", 0)),
            call_id=getattr(delta, "call_id", None),
            tool_name=getattr(delta, "tool_name", None),
        )
        if self._delivery is None:
            if not hub.has_streams:
                hub.emit_nowait(event)
                return
            self._delivery = hub.deltas()
        self._delivery.offer(event)

    def flush_nowait(self) -> None:
        if self._delivery is not None:
            self._delivery.flush_nowait()

    async def flush(self) -> None:
        if self._delivery is not None:
            await self._delivery.flush()


class _NoSlot:
    """No backpressure strategy: an attempt waits for nothing."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_SLOT = _NoSlot()
_NO_TIMEOUT = contextlib.nullcontext()
"""No ``attempt_timeout``: the attempt is bounded by the run's own scope only."""


def _names(entries: Any) -> tuple[str, ...]:
    if not isinstance(entries, list | tuple):
        return ()
    return tuple(
        str(entry.get("provider", "")) if isinstance(entry, dict) else str(entry)
        for entry in entries
    )


def _routed(
    metadata: Mapping[str, Any],
) -> tuple[str | None, str | None, tuple[str, ...], tuple[str, ...]] | None:
    """What a fallover or router recorded in a response's metadata, if anything."""
    route = metadata.get("operative.route")
    provider = metadata.get("operative.provider")
    if route is None and provider is None:
        return None
    fallover = metadata.get("operative.fallover")
    failed: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    if isinstance(fallover, dict):
        failed = _names(fallover.get("failed"))
        cancelled = _names(fallover.get("cancelled"))
    return (
        None if route is None else str(route),
        None if provider is None else str(provider),
        failed,
        cancelled,
    )


class GeneratePhase:
    """Calling the model for the steps of one run."""

    __slots__ = ("_state", "attempt")

    def __init__(self, state: RunState) -> None:
        self._state = state
        self.attempt = 1
        """The number of the attempt in progress (1, then each retry)."""

    async def _attempt(self, request: GenerateRequest) -> GenerateResponse:
        """One attempt (what ``wrap_generate`` extensions wrap): ``generate.started``, the
        backpressure slot, the attempt's timeout, the model's call and the type check of
        its answer, and its streamed deltas delivered as events (asked for only when
        someone listens: an adapter streams only to a sink)."""
        state = self._state
        cfg = state.config
        hub = state.hub
        if "generate.started" in hub.wanted:
            await hub.emit(
                GenerateStarted(
                    run_id=state.run_id, step=request.step, time=state.now(), attempt=self.attempt
                )
            )
        retry = cfg.retry
        timeout = retry.attempt_timeout if retry is not None else None
        strategy = cfg.backpressure
        slots = _NO_SLOT if strategy is None else strategy.slot(request, _BackpressureEvents(state))
        sink = _DeltaSink(state, request) if "generate.delta" in state.hub.wanted else None
        with deliver_deltas(sink):
            try:
                async with slots as slot:
                    with _NO_TIMEOUT if timeout is None else trio.fail_after(timeout):
                        response = checked_response(await cfg.generate(request))
                    if slot is not None:
                        slot.record(response.usage)  # checked first: the slot reads its usage
            except BaseException:
                if sink is not None:
                    sink.flush_nowait()  # what streamed before the failure, first
                raise
        if sink is not None:
            await sink.flush()
        return response

    async def run(
        self, run: RunControl, request: GenerateRequest, inflight: Inflight
    ) -> GenerateResponse:
        """The step's answer: attempts until one succeeds or a failure is not retried;
        what they cost is added to ``inflight`` and the run. ``run`` is what the
        extensions are given."""
        state = self._state
        generate: GenerateFunction = self._attempt
        for extension in state.ext.wrap_generate:
            generate = extension.wrap_generate(run, generate)
        self.attempt = 1
        while True:
            try:
                response = await generate(request)
                break
            except Exception as exc:
                request = await self._retried(run, request, inflight, exc, self.attempt)
                self.attempt += 1
        charge_answer(state, run, response, inflight)
        await self._announce(request, response, self.attempt)
        return await self._validated(request, response)

    async def _retried(
        self,
        run: RunControl,
        request: GenerateRequest,
        inflight: Inflight,
        exc: Exception,
        attempt: int,
    ) -> GenerateRequest:
        """After a failed attempt: what it reported spending charged, ``generate.error``;
        then ``exc`` raised again, or the back-off slept and the next attempt's request
        returned (``generate.retry``)."""
        state = self._state
        hub = state.hub
        retry = state.config.retry
        step = request.step
        # A failed attempt that reported usage was still paid for.
        spent = failed_usage(exc)
        settles: tuple[Settle, ...] = ()
        if spent is not None:
            inflight.usage = inflight.usage + spent
            state.usage = state.usage + spent
            settles = charge_extensions(run, state.ext.spent, step, spent, None, "failed-attempt")
        retrying = retry is not None and retry.should_retry(exc, attempt)
        if "generate.error" in hub.wanted:
            await hub.emit(
                GenerateError(
                    run_id=state.run_id,
                    step=step,
                    time=state.now(),
                    attempt=attempt,
                    error=str(exc),
                    error_type=type(exc).__name__,
                    retryable=retrying,
                    usage=spent if spent is not None else NO_USAGE,
                )
            )
        if not retrying:
            raise exc
        assert retry is not None
        delay = retry.delay(attempt, exc)
        if "generate.retry" in hub.wanted:
            await hub.emit(
                GenerateRetry(
                    run_id=state.run_id,
                    step=step,
                    time=state.now(),
                    attempt=attempt + 1,
                    delay=delay,
                    error=str(exc),
                    error_type=type(exc).__name__,
                )
            )
        await trio.sleep(delay)
        request = retry.next_request(request, exc, attempt + 1)
        for settle in settles:  # the failed attempt's spend, before the next one
            await settle(run)
        return request

    async def _announce(
        self, request: GenerateRequest, response: GenerateResponse, attempt: int
    ) -> None:
        """``generate.completed``, ``generate.routed`` (what a fallover or router
        recorded) and ``usage.accumulated``, to whoever listens."""
        state = self._state
        hub = state.hub
        run_id, step, usage = state.run_id, request.step, response.usage
        if "generate.completed" in hub.wanted:
            await hub.emit(
                GenerateCompleted(
                    run_id=run_id,
                    step=step,
                    time=state.now(),
                    attempt=attempt,
                    content=response.content,
                    tool_calls=tuple(response.tool_calls),
                    usage=usage or NO_USAGE,
                    model=response.model,
                )
            )
        routed = _routed(response.metadata) if response.metadata else None
        if routed is not None and "generate.routed" in hub.wanted:
            route, provider, failed, cancelled = routed
            await hub.emit(
                GenerateRouted(
                    run_id=run_id,
                    step=step,
                    time=state.now(),
                    attempt=attempt,
                    route=route,
                    provider=provider,
                    failed=failed,
                    cancelled=cancelled,
                )
            )
        if usage is not None and "usage.accumulated" in hub.wanted:
            await hub.emit(
                UsageAccumulated(
                    run_id=run_id, step=step, time=state.now(), usage=usage, total=state.usage
                )
            )

    async def _validated(
        self, request: GenerateRequest, response: GenerateResponse
    ) -> GenerateResponse:
        """The response as the ``validate_response`` hooks leave it."""
        state = self._state
        hooks = state.config.hooks.validate_response
        if not hooks:
            return response
        for hook in hooks:
            replacement = await call_hook(hook, response, request)
            if replacement is not None:
                problem = response_problem(replacement)
                if problem is not None:
                    raise HookError(
                        f"validate_response hook {hook!r} returned a response the loop "
                        f"cannot use: {problem}; return a GenerateResponse or None"
                    )
                response = replacement
        if "response.validated" in state.hub.wanted:
            await state.hub.emit(
                ResponseValidated(run_id=state.run_id, step=request.step, time=state.now())
            )
        return response


def failed_usage(exc: Exception) -> Usage | None:
    """What a failed attempt reported spending (its error's ``usage``), if it did.

    Raises:
        InvalidResponseError: the usage has a negative count, or more cached tokens
            than its total (see :func:`usage_problem`); it is not recorded.
    """
    spent = getattr(exc, "usage", None)
    if not isinstance(spent, Usage):
        return None
    problem = usage_problem(spent)
    if problem is not None:
        raise InvalidResponseError(
            f"the generate function failed ({type(exc).__name__}: {exc}) and reported "
            f"usage the loop cannot count: {problem}. Fix the generate function (a "
            "provider adapter or a test double); this usage was not recorded."
        ) from exc
    return spent


def charge_answer(
    state: RunState, run: RunControl, response: GenerateResponse, inflight: Inflight
) -> None:
    """Add what the step's answer cost to the step and the run; a progress pulse."""
    usage = response.usage
    if usage is not None:
        # The step may already have paid for something (a failed attempt, a context
        # compaction's summary); only a step that paid nothing yet skips the sum.
        spent = inflight.usage
        inflight.usage = usage if spent is NO_USAGE else spent + usage
        state.usage = state.usage + usage
        if state.ext.spent:
            # Settled once the answer is in the transcript (``StepLoop``): it was
            # paid for, whatever a limit says.
            state.to_settle = charge_extensions(
                run, state.ext.spent, inflight.step, usage, response.model, "attempt"
            )
    state.liveness._progress(state.step, state.usage)
