"""The benchmarks run (in their quick mode), so they cannot rot unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "script",
    [
        "bench_loop.py",
        "bench_codec.py",
        "bench_storage.py",
        "bench_durable.py",
        "bench_instrumentation.py",
    ],
)
def test_benchmark_quick_mode_runs(script: str) -> None:
    """Each benchmark's --quick run exits 0 and prints its figures."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert any(unit in done.stdout for unit in ("µs", "us/step", "writes/s"))
