"""The spans of one run: ``invoke_agent`` → ``step k`` → ``chat`` / ``execute_tool``.

The run and step spans follow the run's own events (sync listeners, called in the
run's task), and each is made the current span of that task while it is open. Trio
copies the context into every child task when it is spawned, so tool tasks started in
a step's nursery find the step span as their parent without any plumbing; the model
and tool wrappers make their span current around the call, so spans that a provider's
HTTP client or a tool opens nest under them.

A run whose context management summarizes has its strategy's ``generate`` traced too:
the summarizing call is a ``chat`` span of its step, marked ``operative.chat.purpose``
``compaction``. A durable run carries its session id as its conversation id when none
is set around it, so a run resumed from its journal keeps the original run's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._core._extension import Execute, Extension
from .._core._instrument_hook import current_conversation_id
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from .._core._types import ToolCall, ToolResult
from . import _semconv as sc

if TYPE_CHECKING:
    from .._core._options import RunConfig
    from ..tools import ExecutionContext
    from ._instrumentation import Instrumentation

__all__ = ["RunTracer", "parent_context"]

_TERMINAL = ("run.completed", "run.error", "run.aborted")


def parent_context(trace_context: Any) -> Context | None:
    """A run's ``trace_context=`` as an OpenTelemetry context (None: use the current one).

    Takes a ``Context``, a ``Span``, or a mapping of W3C trace headers (``traceparent``)
    read with the globally configured propagator.
    """
    if trace_context is None:
        return None
    if isinstance(trace_context, Context):
        return trace_context
    if isinstance(trace_context, trace.Span):
        return trace.set_span_in_context(trace_context)
    if isinstance(trace_context, Mapping):
        return propagate.extract(trace_context)
    from .._core._errors import InvalidArgument

    raise InvalidArgument(
        "trace_context= takes an OpenTelemetry Context, a Span, or a mapping of W3C trace "
        f"headers, got {type(trace_context).__name__}"
    )


class RunTracer(Extension):
    """What one instrumented run reports, and the spans it has open: the run's
    extension for an instrumentation (``attach``, ``wrap_generate``, ``wrap_tool``)."""

    __slots__ = (
        "_agent",
        "_anchor",
        "_conversation_id",
        "_descriptions",
        "_instrumentation",
        "_links",
        "_model",
        "_parent",
        "_provider",
        "_resumed_at",
        "_run",
        "_run_id",
        "_run_span",
        "_run_token",
        "_step",
        "_step_span",
        "_step_token",
    )

    def __init__(self, instrumentation: Instrumentation, config: RunConfig) -> None:
        self._instrumentation = instrumentation
        self._provider = sc.provider_of(config.generate)
        self._model = sc.request_model_of(config.generate, config.settings)
        self._agent = config.agent_name
        self._run_id = config.run_id
        self._conversation_id = current_conversation_id()
        self._resumed_at: int | None = None
        self._links: list[trace.Link] = []
        durable = config.feature("durable")
        if durable is not None:
            self._conversation_id, self._resumed_at = _durable_identity(
                durable, self._conversation_id
            )
            self._links = _resumed_from(durable)
        self._parent = parent_context(config.trace_context)
        self._descriptions = {spec.name: spec.description for spec in config.toolbox.specs()}
        self._anchor = time.time_ns()
        self._run: Any = None
        self._run_span: trace.Span | None = None
        self._run_token: object = None
        self._step = 0
        self._step_span: trace.Span | None = None
        self._step_token: object = None

    def traceparent(self, run: Any) -> str | None:
        """The W3C ``traceparent`` of the run's span (journaled by a durable run, which
        asks ``run.query("traceparent")``)."""
        span = self._run_span
        if span is None:
            return None
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"

    def _ns(self, at: float) -> int:
        return self._anchor + int(at * 1e9)

    def _cancel_reason(self) -> str | None:
        run = self._run
        return None if run is None else run.cancel_message

    # -- the extension's boundaries ------------------------------------------------------

    def wrap_generate(self, run: Any, generate: GenerateFunction) -> GenerateFunction:
        return self._traced(generate, self._provider, compaction=False, model=run.config.generate)

    def _traced(
        self,
        generate: GenerateFunction,
        provider: str,
        *,
        compaction: bool,
        model: GenerateFunction | None = None,
    ) -> GenerateFunction:
        """``generate`` with each call a ``chat`` span; a compaction's is marked so.
        ``model`` is the model ``generate`` calls, when it is not ``generate`` itself (a
        run's attempt)."""
        instrumentation = self._instrumentation
        named = generate if model is None else model

        async def traced_generate(request: GenerateRequest) -> GenerateResponse:
            return await instrumentation.traced_chat(
                generate,
                request,
                provider=provider,
                model=sc.request_model_of(named, request.settings),
                conversation_id=self._conversation_id,
                anchor=self._anchor,
                cancel_reason=self._cancel_reason,
                purpose=sc.COMPACTION if compaction else None,
                extra={sc.RUN_ID: self._run_id, sc.STEP: self._step} if compaction else None,
            )

        return traced_generate

    async def wrap_tool(
        self, run: Any, execute: Execute, step: int, calls: tuple[ToolCall, ...]
    ) -> Execute:
        instrumentation = self._instrumentation

        async def traced_execute(call: ToolCall, execution: ExecutionContext) -> ToolResult:
            return await instrumentation.traced_tool(
                execute,
                call,
                execution,
                description=self._descriptions.get(call.name),
                anchor=self._anchor,
                cancel_reason=self._cancel_reason,
            )

        return traced_execute

    def attach(self, run: Any, nursery: Any) -> None:
        self._run = run
        manager = run.context_manager
        if manager is not None:
            manager.wrap_summary_model(
                lambda generate: self._traced(generate, sc.provider_of(generate), compaction=True)
            )
        run.add_listener("run.started", self._run_started)
        run.add_listener("step.started", self._step_started)
        run.add_listener("step.completed", self._step_completed)
        run.add_listener("step.aborted", self._step_aborted)
        run.add_listener("generate.retry", self._retry)
        for type in _TERMINAL:
            run.add_listener(type, self._run_ended)

    # -- listeners (called in the run's task) ----------------------------------------

    def _run_started(self, event: Any) -> None:
        # Anchor trio's clock to the wall clock once; every timestamp of the run follows.
        self._anchor = time.time_ns() - int(event.time * 1e9)
        parent = self._parent if self._parent is not None else otel_context.get_current()
        attributes: dict[str, Any] = {
            sc.OPERATION: "invoke_agent",
            sc.PROVIDER: self._provider,
            sc.AGENT_NAME: self._agent,
            sc.RUN_ID: self._run_id,
        }
        if self._model is not None:
            attributes[sc.REQUEST_MODEL] = self._model
        if self._conversation_id is not None:
            attributes[sc.CONVERSATION_ID] = self._conversation_id
        if self._resumed_at is not None:
            attributes[sc.RESUMED_AT_STEP] = self._resumed_at
        span = self._instrumentation.tracer.start_span(
            f"invoke_agent {self._agent}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=self._links,
            start_time=self._ns(event.time),
        )
        self._run_span = span
        self._run_token = otel_context.attach(trace.set_span_in_context(span, parent))

    def _step_started(self, event: Any) -> None:
        self._end_step(None, event.time)  # defensive: a step span never outlives its step
        self._step = event.step
        span = self._instrumentation.tracer.start_span(
            f"step {event.step}",
            kind=SpanKind.INTERNAL,
            attributes={sc.RUN_ID: self._run_id, sc.STEP: event.step},
            start_time=self._ns(event.time),
        )
        self._step_span = span
        self._step_token = otel_context.attach(trace.set_span_in_context(span))

    def _step_completed(self, event: Any) -> None:
        span = self._step_span
        if span is not None:
            span.set_attribute(sc.TOOL_CALLS, len(event.tool_calls))
            span.set_attributes(sc.usage_attributes(event.usage))
        self._end_step(None, event.time)

    def _step_aborted(self, event: Any) -> None:
        self._end_step(event.reason or "aborted", event.time)

    def _end_step(self, error: str | None, at: float) -> None:
        span, token = self._step_span, self._step_token
        if span is None:
            return
        self._step_span = self._step_token = None
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self._ns(at))
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    def _retry(self, event: Any) -> None:
        span = self._step_span or self._run_span
        if span is not None:
            span.add_event(
                "generate.retry",
                {
                    sc.ATTEMPT: event.attempt,
                    "operative.retry.delay": event.delay,
                    sc.ERROR_TYPE: event.error_type,
                    "operative.error": event.error,
                },
                timestamp=self._ns(event.time),
            )

    def _run_ended(self, event: Any) -> None:
        span, token = self._run_span, self._run_token
        self._end_step("the run ended during this step", event.time)
        if span is None:
            return
        self._run_span = self._run_token = None
        type = event.type
        span.set_attributes(sc.usage_attributes(event.usage))
        span.set_attribute(sc.STEPS, event.steps)
        end = self._ns(event.time)
        if type == "run.completed":
            span.set_attribute(sc.FINISH_REASON, str(event.finish_reason))
        elif type == "run.aborted":
            span.set_attribute(sc.FINISH_REASON, "aborted")
            span.set_attribute(sc.ABORT_REASON, event.reason)
            span.set_attribute(sc.ERROR_TYPE, "aborted")
            span.set_status(Status(StatusCode.ERROR, f"aborted: {event.reason}"))
        else:
            span.set_attribute(sc.FINISH_REASON, "error")
            span.set_attribute(sc.ERROR_TYPE, event.error_type)
            result = getattr(self._run, "ended_result", None)
            error = getattr(result, "error", None)
            if isinstance(error, BaseException):
                span.record_exception(error, timestamp=end)
            span.set_status(Status(StatusCode.ERROR, f"{event.error_type}: {event.error}"))
        span.end(end_time=end)
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]


def _durable_identity(option: Any, current: str | None) -> tuple[str | None, int | None]:
    """A durable run's conversation id, and the step a recovered one goes on from.

    A fresh run keeps the conversation id set around it, else takes its session id; a
    recovered run (``Resumed``: its journal replayed) takes the session id recorded with
    it, else the conversation id journaled when it started, and only then the id set
    around ``recover()`` (which is not the original run's).
    """
    replay = getattr(option, "replay", None)
    if replay is None:
        return (current if current is not None else option.session_id), None
    session_id = option.durable.session_id
    for candidate in (session_id, replay.started.conversation_id, current):
        if candidate is not None:
            return candidate, replay.next_step
    return None, replay.next_step


def _resumed_from(option: Any) -> list[trace.Link]:
    """A recovered run's link to the span of the run it resumes (when that was traced)."""
    replay = getattr(option, "replay", None)
    traceparent = replay.started.trace_parent if replay is not None else None
    if not traceparent:
        return []
    parts = traceparent.split("-")
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except (IndexError, ValueError):
        return []  # not a traceparent this code wrote; a link is not worth an error
    context = trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags)
    )
    if not context.is_valid:
        return []
    return [trace.Link(context, {sc.LINK_KIND: "resumed_from"})]
