"""An OpenTelemetry SDK pipeline per test: in-memory spans and metrics, nothing global."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from operative.instrumentation import Instrumentation


class Telemetry:
    """What one test's instrumentation recorded."""

    __test__ = False

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrumentation(self, *, capture_content: bool = False) -> Instrumentation:
        return Instrumentation(
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            capture_content=capture_content,
        )

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.spans]
        return found[0]

    def parent_of(self, span: ReadableSpan) -> ReadableSpan | None:
        if span.parent is None:
            return None
        for candidate in self.spans:
            if candidate.context.span_id == span.parent.span_id:
                return candidate
        return None

    def tree(self) -> list[str]:
        """Span names indented by depth, children in start order."""
        spans = self.spans
        children: dict[int | None, list[ReadableSpan]] = {}
        ids = {span.context.span_id for span in spans}
        for span in spans:
            parent = span.parent.span_id if span.parent and span.parent.span_id in ids else None
            children.setdefault(parent, []).append(span)
        lines: list[str] = []

        def walk(parent: int | None, depth: int) -> None:
            for span in sorted(children.get(parent, []), key=lambda s: s.start_time or 0):
                lines.append("  " * depth + span.name)
                walk(span.context.span_id, depth + 1)

        walk(None, 0)
        return lines

    def metric_points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        points: list[Any] = []
        if data is None:
            return points
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    telemetry = Telemetry()
    yield telemetry
    telemetry.tracer_provider.shutdown()
    telemetry.meter_provider.shutdown()
