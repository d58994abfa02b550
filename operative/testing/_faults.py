"""Fault injection: tools and generate functions that fail, stall or hang on cue.

A :class:`FaultPlan` lists faults (:class:`Fault`), each saying *what* happens (``fail``,
``delay``, ``hang``, ``timeout``) and *which calls* it hits (by call index, tool call id
or step); it may also say when the run is aborted. :func:`faulty_tool` and
:func:`faulty_generate` wrap a real tool or generate function so it follows the plan.
Every duration is on trio's clock, so under ``MockClock(autojump_threshold=0)`` an
hour-long hang costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs
import trio

from .._core._errors import InvalidArgument, OperativeError
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from ..tools import Tool, ToolContext

__all__ = ["Fault", "FaultHit", "FaultPlan", "InjectedError", "faulty_generate", "faulty_tool"]

FaultAction = Literal["fail", "delay", "hang", "timeout"]


class InjectedError(OperativeError):
    """The default error a ``fail`` fault raises."""


def _seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidArgument(f"{what} must be seconds >= 0, not {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class Fault:
    """One injected fault and the calls it hits.

    Build one with :meth:`fail`, :meth:`delay`, :meth:`hang` or :meth:`timeout`. The
    selectors ``call`` (0-based index of the call to the wrapped function), ``call_id``
    (a tool call's id) and ``step`` (the run's step) must all match when given; a fault
    with no selector hits every call.
    """

    action: FaultAction
    """``fail`` raises ``error``; ``delay`` waits ``seconds`` then calls through;
    ``hang`` never returns (until cancelled); ``timeout`` waits ``seconds`` then raises
    :class:`TimeoutError`, like a client whose request timed out."""
    call: int | None = None
    call_id: str | None = None
    step: int | None = None
    seconds: float = 0.0
    error: BaseException | None = None
    """What ``fail`` raises (default: :class:`InjectedError`)."""

    @classmethod
    def fail(
        cls,
        error: BaseException | None = None,
        *,
        call: int | None = None,
        call_id: str | None = None,
        step: int | None = None,
    ) -> Fault:
        """Raise ``error`` (default :class:`InjectedError`) instead of calling through."""
        if error is not None and not isinstance(error, BaseException):
            raise InvalidArgument(f"error must be an exception instance, not {error!r}")
        return cls(action="fail", error=error, call=call, call_id=call_id, step=step)

    @classmethod
    def delay(
        cls,
        seconds: float,
        *,
        call: int | None = None,
        call_id: str | None = None,
        step: int | None = None,
    ) -> Fault:
        """Wait ``seconds``, then call through."""
        return cls(
            action="delay",
            seconds=_seconds(seconds, "delay"),
            call=call,
            call_id=call_id,
            step=step,
        )

    @classmethod
    def hang(
        cls, *, call: int | None = None, call_id: str | None = None, step: int | None = None
    ) -> Fault:
        """Never return; only cancellation (abort, a timeout, a deadline) ends the call."""
        return cls(action="hang", call=call, call_id=call_id, step=step)

    @classmethod
    def timeout(
        cls,
        after: float = 30.0,
        *,
        call: int | None = None,
        call_id: str | None = None,
        step: int | None = None,
    ) -> Fault:
        """Wait ``after`` seconds, then raise :class:`TimeoutError` (a transient failure)."""
        return cls(
            action="timeout",
            seconds=_seconds(after, "after"),
            call=call,
            call_id=call_id,
            step=step,
        )

    def matches(self, *, call: int, call_id: str | None = None, step: int | None = None) -> bool:
        """Whether this fault hits the ``call``-th call (with that call id and step)."""
        return (
            (self.call is None or self.call == call)
            and (self.call_id is None or self.call_id == call_id)
            and (self.step is None or self.step == step)
        )

    async def inject(self) -> None:
        """Do what the fault says before the wrapped call (``delay`` returns after)."""
        if self.action == "fail":
            raise (
                self.error
                if self.error is not None
                else InjectedError(f"injected failure ({self.describe()})")
            )
        if self.action == "hang":
            await trio.sleep_forever()
        await trio.sleep(self.seconds)
        if self.action == "timeout":
            raise TimeoutError(f"injected timeout after {self.seconds:g} s ({self.describe()})")

    def describe(self) -> str:
        """The selectors, for messages: ``"call=2 step=1"``."""
        parts = [
            f"{name}={value!r}"
            for name, value in (("call", self.call), ("call_id", self.call_id), ("step", self.step))
            if value is not None
        ]
        return " ".join(parts) or "every call"


def _as_faults(faults: Iterable[Fault]) -> tuple[Fault, ...]:
    return tuple(faults)


@attrs.frozen(kw_only=True)
class FaultPlan:
    """Which calls fail, stall, hang or time out, and when the run is aborted.

    ``faults`` are tried in order; the first that matches a call applies (at most one
    per call). ``abort_at`` is when, in seconds after :meth:`abort_when_due` is awaited
    (the top of the ``open_run`` block), the test aborts the run; ``None`` means never.
    """

    faults: tuple[Fault, ...] = attrs.field(default=(), converter=_as_faults)
    abort_at: float | None = None

    def __attrs_post_init__(self) -> None:
        for fault in self.faults:
            if not isinstance(fault, Fault):
                raise InvalidArgument(
                    f"a FaultPlan holds Faults (Fault.fail(...), ...), not {fault!r}"
                )
        if self.abort_at is not None:
            _seconds(self.abort_at, "abort_at")

    def fault_for(
        self, *, call: int, call_id: str | None = None, step: int | None = None
    ) -> Fault | None:
        """The fault that hits this call, if any."""
        for fault in self.faults:
            if fault.matches(call=call, call_id=call_id, step=step):
                return fault
        return None

    async def abort_when_due(self, run: Any, reason: str = "aborted by the fault plan") -> None:
        """Sleep until ``abort_at``, then ``run.abort(reason)``; return at once without one."""
        if self.abort_at is None:
            await trio.lowlevel.checkpoint()
            return
        await trio.sleep(self.abort_at)
        run.abort(reason)


@attrs.frozen(kw_only=True)
class FaultHit:
    """A record that a fault was injected into one call."""

    fault: Fault
    target: str
    """The tool's name, or ``"generate"``."""
    call: int
    call_id: str | None = None
    step: int | None = None


Log = Callable[[FaultHit], object] | list[FaultHit] | None


def _recorder(log: Log) -> Callable[[FaultHit], object]:
    if log is None:
        return lambda hit: None
    if isinstance(log, list):
        return log.append
    if callable(log):
        return log
    raise InvalidArgument(f"log is a list or a callable, not {log!r}")


def faulty_tool(tool: Tool, plan: FaultPlan | Iterable[Fault], *, log: Log = None) -> Tool:
    """``tool`` with faults injected per ``plan`` (same name, schema and options).

    Calls are counted from 0 in the order they reach the tool (calls of one step run
    concurrently, so select those by ``call_id``); a fault's ``call_id`` and ``step``
    match the call's. A failure becomes the error result a failing tool
    gets; a hang ends only when the call is cancelled (by abort, or by the tool's own
    ``timeout``, which the wrapper keeps). Each injected fault is recorded in ``log``
    (a list, or a callable taking a :class:`FaultHit`).
    """
    if not isinstance(tool, Tool):
        raise InvalidArgument(f"faulty_tool wraps a Tool, not {tool!r}")
    checked = plan if isinstance(plan, FaultPlan) else FaultPlan(faults=tuple(plan))
    record = _recorder(log)
    counter = [0]
    invoke = tool._invoke
    pass_context = tool._wants_context

    async def faulty(arguments: Any, ctx: ToolContext) -> Any:
        index = counter[0]
        counter[0] += 1
        fault = checked.fault_for(call=index, call_id=ctx.call_id, step=ctx.step)
        if fault is not None:
            record(
                FaultHit(
                    fault=fault, target=tool.name, call=index, call_id=ctx.call_id, step=ctx.step
                )
            )
            await fault.inject()
        return await invoke(arguments, ctx if pass_context else None)

    faulty.__name__ = tool.name
    return Tool(
        faulty,
        name=tool.name,
        description=tool.description,
        input_type=tool.input_type,
        input_schema=tool.input_schema,
        output_type=tool.output_type,
        version=tool.version,
        mutates=tool.mutates,
        idempotent=tool.idempotent,
        timeout=tool.timeout,
        max_concurrency=tool.max_concurrency,
        needs_approval=tool.needs_approval,
    )


def faulty_generate(
    generate: GenerateFunction, plan: FaultPlan | Iterable[Fault], *, log: Log = None
) -> GenerateFunction:
    """``generate`` with faults injected per ``plan``.

    Calls (every attempt, retries included) are counted from 0; a fault's ``step``
    matches the request's step, and a fault with a ``call_id`` never matches. A
    ``timeout`` raises :class:`TimeoutError`, which ``RetryOptions`` treats as
    transient. Each injected fault is recorded in ``log``.
    """
    if not callable(generate):
        raise InvalidArgument(f"faulty_generate wraps a generate function, not {generate!r}")
    checked = plan if isinstance(plan, FaultPlan) else FaultPlan(faults=tuple(plan))
    record = _recorder(log)
    counter = [0]

    async def faulty(request: GenerateRequest) -> GenerateResponse:
        index = counter[0]
        counter[0] += 1
        fault = checked.fault_for(call=index, step=request.step)
        if fault is not None:
            record(FaultHit(fault=fault, target="generate", call=index, step=request.step))
            await fault.inject()
        return await generate(request)

    return faulty
