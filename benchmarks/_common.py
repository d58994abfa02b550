"""Helpers shared by the stand-alone benchmarks: machine facts, memory, statistics, tables.

Nothing here imports operative, so a benchmark can describe the machine before (or
without) importing the library.
"""

from __future__ import annotations

import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "machine",
    "median",
    "print_table",
    "ratio_spread",
    "read_status_kib",
    "spread",
    "write_json",
]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_count() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def machine() -> dict[str, Any]:
    """CPU model, usable cores, Python, trio and msgspec versions, platform."""
    facts: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": _cpu_count(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }
    for name in ("trio", "msgspec", "attrs", "operative"):
        try:
            module = __import__(name)
        except ImportError:
            continue
        facts[name] = getattr(module, "__version__", "?")
    return facts


def read_status_kib(*fields: str) -> dict[str, int]:
    """Fields of ``/proc/self/status`` given in kB (``VmRSS``, ``VmHWM``), as ints."""
    wanted = set(fields)
    found: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in wanted:
                found[key] = int(rest.split()[0])
    return found


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def spread(values: Iterable[float]) -> dict[str, float | int]:
    """Median, min and max of samples (one per round), and how many there were.

    This is the shape every ``{median, min, max, rounds}`` figure in the benchmarks' JSON
    takes; ``benchmarks/report.py`` reads it (and a plain number) anywhere a figure goes.
    """
    found = list(values)
    if not found:
        raise ValueError("spread() of no samples")
    return {
        "median": statistics.median(found),
        "min": min(found),
        "max": max(found),
        "rounds": len(found),
    }


def ratio_spread(values: Sequence[float], floors: Sequence[float]) -> dict[str, float | int]:
    """The spread of per-round ratios ``values[i] / floors[i]``: each round's figure over
    the floor measured in the same round, so a slow stretch of the machine cancels out."""
    if len(values) != len(floors):
        raise ValueError(f"{len(values)} rounds against {len(floors)} floor rounds")
    return spread(v / f for v, f in zip(values, floors, strict=True))


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A plain fixed-width table (first column left-aligned, the rest right-aligned)."""
    text_rows = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in header]
    for row in text_rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join(
            [first.ljust(widths[0])] + [c.rjust(w) for c, w in zip(rest, widths[1:], strict=True)]
        )

    print(f"\n{title}")
    print(line(list(header)))
    print("  ".join("-" * w for w in widths))
    for row in text_rows:
        print(line(row))


def write_json(path: str | Path, data: Any) -> None:
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


async def interleaved(
    cases: Mapping[str, Callable[[], Awaitable[Any]]], warmup: int, repetitions: int
) -> dict[str, list[int]]:
    """Nanoseconds of each case's runs: ``warmup`` untimed rounds of every case, a
    collection, then ``repetitions`` timed rounds, the cases interleaved in each so that
    drift (frequency scaling, neighbours) hits them alike."""
    samples: dict[str, list[int]] = {name: [] for name in cases}
    for _ in range(warmup):
        for fn in cases.values():
            await fn()
    gc.collect()
    for _ in range(repetitions):
        for name, fn in cases.items():
            start = time.perf_counter_ns()
            await fn()
            samples[name].append(time.perf_counter_ns() - start)
    return samples
