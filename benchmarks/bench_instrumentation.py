"""What OpenTelemetry instrumentation costs the step loop, and what it costs when off.

The run is bench_loop.py's per-step run: 20 steps, one ``add(a, b)`` tool call on each of
the first 19 (arguments as a raw JSON string), then a final answer, with a model that
returns prebuilt responses, so what is timed is the loop. Each configuration is timed
the same way (median µs per step over many interleaved runs, run set-up amortised in):

- **off**: no instrumentation (``instrumentation=`` not given, nothing installed). The
  loop then does no tracing work: one ``None`` check per run and one per step with tool
  calls.
- **API only**: an ``Instrumentation`` on OpenTelemetry's default (no-op) providers, as
  when a library is instrumented but the application installed no SDK.
- **SDK, sampled out**: the SDK's ``TracerProvider`` with the ``ALWAYS_OFF`` sampler
  (spans are made but not recorded), metrics to an in-memory reader.
- **SDK, recorded**: every span recorded and handed to an in-memory exporter through a
  ``SimpleSpanProcessor`` (cleared between runs), metrics to an in-memory reader.

Usage::

    .venv/bin/python benchmarks/bench_instrumentation.py            # full run
    .venv/bin/python benchmarks/bench_instrumentation.py --quick    # smoke run
    .venv/bin/python benchmarks/bench_instrumentation.py --json out.json
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median, print_table, write_json
from bench_loop import STEPS, operative_model, operative_run

CONFIGURATIONS = ("off", "api_only", "sdk_sampled_out", "sdk_recorded")
LABELS = {
    "off": "off (no instrumentation)",
    "api_only": "OTel API only (no SDK)",
    "sdk_sampled_out": "SDK, sampled out",
    "sdk_recorded": "SDK, every span recorded",
}


def _instrumentations() -> tuple[dict[str, Any], Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from operative.instrumentation import Instrumentation

    exporter = InMemorySpanExporter()
    recorded = TracerProvider()
    recorded.add_span_processor(SimpleSpanProcessor(exporter))
    return {
        "off": None,
        "api_only": Instrumentation(),
        "sdk_sampled_out": Instrumentation(
            tracer_provider=TracerProvider(sampler=ALWAYS_OFF),
            meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        ),
        "sdk_recorded": Instrumentation(
            tracer_provider=recorded,
            meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
        ),
    }, exporter


async def _run(generate: Any, instrumentation: Any) -> None:
    options = {} if instrumentation is None else {"instrumentation": instrumentation}
    await operative_run(generate, **options)


async def measure(repetitions: int, warmup: int) -> dict[str, Any]:
    instrumentations, exporter = _instrumentations()
    generate = operative_model(STEPS)
    samples: dict[str, list[int]] = {name: [] for name in CONFIGURATIONS}
    for _ in range(warmup):
        for name in CONFIGURATIONS:
            await _run(generate, instrumentations[name])
    exporter.clear()
    spans_per_run = 0
    gc.collect()
    for _ in range(repetitions):
        for name in CONFIGURATIONS:  # interleaved: drift hits every configuration alike
            start = time.perf_counter_ns()
            await _run(generate, instrumentations[name])
            samples[name].append(time.perf_counter_ns() - start)
            if name == "sdk_recorded":
                spans_per_run = len(exporter.get_finished_spans())
                exporter.clear()
    out: dict[str, Any] = {"steps": STEPS, "repetitions": repetitions, "spans": spans_per_run}
    for name, values in samples.items():
        ordered = sorted(values)
        out[name] = {
            "us_per_step": median(values) / 1000 / STEPS,
            "us_per_step_p10": ordered[len(ordered) // 10] / 1000 / STEPS,
            "us_per_run": median(values) / 1000,
        }
    return out


def report(results: dict[str, Any]) -> None:
    m = results["machine"]
    print(f"machine: {m['cpu']} ({m['cores']} cores), Python {m['python']}, trio {m.get('trio')}")
    per = results["per_step"]
    off = per["off"]["us_per_step"]
    rows = []
    for name in CONFIGURATIONS:
        row = per[name]
        rows.append(
            [
                LABELS[name],
                f"{row['us_per_step']:.1f}",
                f"{row['us_per_step_p10']:.1f}",
                f"{row['us_per_step'] - off:+.1f}",
                f"{row['us_per_step'] / off:.2f}x",
            ]
        )
    print_table(
        f"instrumentation cost: {per['steps']}-step run, 1 tool call/step, median of "
        f"{per['repetitions']} runs ({per['spans']} spans per recorded run)",
        ["", "us/step", "p10", "vs off", "x off"],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--repetitions", type=int, default=None, help="timed runs (300)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    repetitions = args.repetitions or (20 if args.quick else 300)
    warmup = 3 if args.quick else 30
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick}
    results["per_step"] = trio.run(measure, repetitions, warmup)
    report(results)
    if args.json:
        write_json(args.json, results)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
