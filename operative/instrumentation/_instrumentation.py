"""``Instrumentation``: a tracer and two histograms, and the spans of model and tool calls.

Span timestamps come from trio's clock, anchored once to the wall clock, so a run
under ``MockClock`` shows its virtual durations and every duration agrees with the
timeouts and budgets that the run enforces.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import trio
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .._core._errors import InvalidArgument
from .._core._extension import Execute
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from .._core._run_state import only_cancelled
from .._core._types import ToolCall, ToolResult
from . import _semconv as sc

if TYPE_CHECKING:
    from .._agent import Agent
    from ..tools import ExecutionContext
    from ._run_tracer import RunTracer

__all__ = ["Instrumentation", "in_traced_call", "wall_anchor"]

CancelReason = Callable[[], "str | None"]


def _version() -> str:
    try:
        return metadata.version("operative")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0"


def wall_anchor() -> int:
    """Nanoseconds to add to ``trio.current_time()`` to get wall-clock epoch time."""
    return time.time_ns() - int(trio.current_time() * 1e9)


_in_traced_call: ContextVar[bool] = ContextVar("operative_in_traced_call", default=False)
"""Set inside a traced model call, so a traced wrapper within it opens no second span."""


def in_traced_call() -> bool:
    """True inside a model call that an instrumentation already traces."""
    return _in_traced_call.get()


class Instrumentation:
    """OpenTelemetry tracing and metrics for runs, following the GenAI conventions (v1.41).

    Pass one to ``open_run(..., instrumentation=...)`` or ``create_agent(...,
    instrumentation=...)`` to trace those runs, or install one process-wide with
    :func:`~operative.instrumentation.instrument`.

    Args:
        tracer_provider: where spans go (default: OpenTelemetry's global provider).
        meter_provider: where ``gen_ai.client.*`` metrics go (default: the global one).
        capture_content: record messages, tool arguments and results on spans (off by
            default: they may hold personal or secret data).
    """

    __slots__ = ("_duration", "_token_usage", "_tracer", "capture_content", "conventions")

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        if tracer_provider is not None and not isinstance(tracer_provider, trace.TracerProvider):
            raise InvalidArgument(
                "tracer_provider= takes an opentelemetry TracerProvider (e.g. "
                f"opentelemetry.sdk.trace.TracerProvider()), got {type(tracer_provider).__name__}"
            )
        if meter_provider is not None and not isinstance(meter_provider, metrics.MeterProvider):
            raise InvalidArgument(
                "meter_provider= takes an opentelemetry MeterProvider (e.g. "
                f"opentelemetry.sdk.metrics.MeterProvider()), got {type(meter_provider).__name__}"
            )
        if not isinstance(capture_content, bool):
            raise InvalidArgument(f"capture_content= takes a bool, got {capture_content!r}")
        self.capture_content = capture_content
        """Whether message content, tool arguments and results are recorded."""
        self.conventions: sc.Conventions = sc.conventions_from_env()
        """``"latest"`` when ``OTEL_SEMCONV_STABILITY_OPT_IN`` asks for
        ``gen_ai_latest_experimental``, else ``"default"`` (both are v1.41 today)."""
        version = _version()
        self._tracer = trace.get_tracer(
            "operative", version, tracer_provider, schema_url=sc.SCHEMA_URL
        )
        meter = metrics.get_meter("operative", version, meter_provider, schema_url=sc.SCHEMA_URL)
        self._token_usage = meter.create_histogram(
            sc.TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=sc.TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            sc.OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=sc.DURATION_BUCKETS,
        )

    def __repr__(self) -> str:
        return f"Instrumentation(capture_content={self.capture_content})"

    @property
    def tracer(self) -> trace.Tracer:
        """The OpenTelemetry tracer spans are made with."""
        return self._tracer

    option: ClassVar[str] = "instrumentation"

    def extension(self, config: Any) -> RunTracer:
        """A tracer for one run: the run's extension (called by ``open_run``)."""
        from ._run_tracer import RunTracer

        return RunTracer(self, config)

    def instrument_agent(self, agent: Agent) -> Agent:
        """A copy of ``agent`` whose runs are traced by this instrumentation."""
        return attrs.evolve(agent, options={**agent.options, "instrumentation": self})

    # -- spans -----------------------------------------------------------------------

    def _fail(
        self,
        span: trace.Span,
        exc: BaseException,
        cancel_reason: CancelReason | None,
        end: int,
    ) -> str:
        """End ``span`` for a call that raised; returns the ``error.type`` recorded."""
        if only_cancelled(exc):
            error_type = "cancelled"
            reason = cancel_reason() if cancel_reason is not None else None
            description = reason or "cancelled before it finished"
        else:
            error_type = type(exc).__qualname__
            description = f"{error_type}: {exc}"
            span.record_exception(exc, timestamp=end)
        span.set_attribute(sc.ERROR_TYPE, error_type)
        span.set_status(Status(StatusCode.ERROR, description))
        span.end(end_time=end)
        return error_type

    async def traced_chat(
        self,
        generate: GenerateFunction,
        request: GenerateRequest,
        *,
        provider: str,
        model: str | None,
        conversation_id: str | None,
        anchor: int,
        cancel_reason: CancelReason | None = None,
        purpose: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> GenerateResponse:
        """Call ``generate`` inside a ``chat {model}`` CLIENT span, recording metrics.

        ``purpose`` (``operative.chat.purpose``) marks a call made for something other
        than a step's answer, on the span and its metrics; ``extra`` adds span attributes.
        """
        attributes: dict[str, Any] = {sc.OPERATION: "chat", sc.PROVIDER: provider}
        if model is not None:
            attributes[sc.REQUEST_MODEL] = model
        if conversation_id is not None:
            attributes[sc.CONVERSATION_ID] = conversation_id
        attributes.update(sc.request_attributes(request))
        if request.run_id:
            attributes[sc.RUN_ID] = request.run_id
            attributes[sc.STEP] = request.step
            attributes[sc.ATTEMPT] = request.attempt
        if extra:
            attributes.update(extra)
        if self.capture_content:
            attributes[sc.INPUT_MESSAGES] = sc.input_messages(request)
            instructions = sc.system_instructions(request)
            if instructions is not None:
                attributes[sc.SYSTEM_INSTRUCTIONS] = instructions
            if request.tools:
                attributes[sc.TOOL_DEFINITIONS] = sc.tool_definitions(request.tools)
        metric: dict[str, Any] = {sc.OPERATION: "chat", sc.PROVIDER: provider}
        if model is not None:
            metric[sc.REQUEST_MODEL] = model
        if purpose is not None:
            attributes[sc.PURPOSE] = metric[sc.PURPOSE] = purpose
        started = trio.current_time()
        span = self._tracer.start_span(
            f"chat {model}" if model else "chat",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=anchor + int(started * 1e9),
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        marker = _in_traced_call.set(True)
        try:
            response = await generate(request)
        except BaseException as exc:
            ended = trio.current_time()
            metric[sc.ERROR_TYPE] = self._fail(span, exc, cancel_reason, anchor + int(ended * 1e9))
            self._duration.record(ended - started, metric)
            raise
        finally:
            _in_traced_call.reset(marker)
            otel_context.detach(token)
        ended = trio.current_time()
        end = anchor + int(ended * 1e9)
        checked: object = response  # a generate function without type checking returns anything
        if not isinstance(checked, GenerateResponse):
            span.set_attribute(sc.ERROR_TYPE, "InvalidResponseError")
            span.set_status(
                Status(StatusCode.ERROR, f"returned {type(response).__name__}, not a response")
            )
            span.end(end_time=end)
            metric[sc.ERROR_TYPE] = "InvalidResponseError"
            self._duration.record(ended - started, metric)
            return response
        if response.model:
            span.set_attribute(sc.RESPONSE_MODEL, response.model)
            metric[sc.RESPONSE_MODEL] = response.model
        if response.response_id:
            span.set_attribute(sc.RESPONSE_ID, response.response_id)
        if response.stop_reason:
            span.set_attribute(sc.FINISH_REASONS, (response.stop_reason,))
        routed = response.metadata.get("operative.provider") if response.metadata else None
        if isinstance(routed, str):
            span.set_attribute(sc.ROUTE_PROVIDER, routed)
        usage = response.usage
        if usage is not None:
            counts = sc.usage_attributes(usage)
            span.set_attributes(counts)
            self._token_usage.record(counts[sc.INPUT_TOKENS], {**metric, sc.TOKEN_TYPE: "input"})
            self._token_usage.record(counts[sc.OUTPUT_TOKENS], {**metric, sc.TOKEN_TYPE: "output"})
        if self.capture_content:
            span.set_attribute(sc.OUTPUT_MESSAGES, sc.output_messages(response))
        span.end(end_time=end)
        self._duration.record(ended - started, metric)
        return response

    async def traced_tool(
        self,
        execute: Execute,
        call: ToolCall,
        execution: ExecutionContext,
        *,
        description: str | None,
        anchor: int,
        cancel_reason: CancelReason | None = None,
    ) -> ToolResult:
        """Run one tool call inside an ``execute_tool {tool}`` INTERNAL span."""
        attributes: dict[str, Any] = {
            sc.OPERATION: "execute_tool",
            sc.TOOL_NAME: call.name,
            sc.TOOL_CALL_ID: call.id,
            sc.TOOL_TYPE: "function",
            sc.RUN_ID: execution.run_id,
            sc.STEP: execution.step,
        }
        if description:
            attributes[sc.TOOL_DESCRIPTION] = description
        if self.capture_content:
            arguments: Any = call.arguments
            attributes[sc.TOOL_ARGUMENTS] = (
                arguments if isinstance(arguments, str) else sc.json_text(arguments)
            )
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=anchor + int(trio.current_time() * 1e9),
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            result = await execute(call, execution)
        except BaseException as exc:
            self._fail(span, exc, cancel_reason, anchor + int(trio.current_time() * 1e9))
            raise
        finally:
            otel_context.detach(token)
        span.set_attribute(sc.TOOL_OUTCOME, result.outcome)
        if result.outcome in ("error", "cancelled"):
            error_type = "tool_error" if result.outcome == "error" else "cancelled"
            span.set_attribute(sc.ERROR_TYPE, error_type)
            span.set_status(Status(StatusCode.ERROR, result.error or result.outcome))
        elif result.outcome == "success" and self.capture_content:
            span.set_attribute(sc.TOOL_RESULT, sc.json_text(result.value))
        span.end(end_time=anchor + int(trio.current_time() * 1e9))
        return result
