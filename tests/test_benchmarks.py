"""The benchmarks run (in their quick mode), so they cannot rot unnoticed."""

from __future__ import annotations

import json
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


def test_peer_comparison_quick_mode_runs_without_the_peers(tmp_path: Path) -> None:
    """bench_peers.py's harness runs the floor and operative (no peer packages needed)."""
    out = tmp_path / "peers.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_peers.py"),
            "--quick",
            "--systems",
            "floor",
            "operative",
            "--no-postgres",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "peers.md"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "µs/step" in done.stdout
    figures = json.loads(out.read_text())
    assert figures["systems"] == ["floor", "operative"]
    for system in ("floor", "operative"):
        assert figures["parallel"][system]["parallel"], figures["parallel"][system]
        assert figures["per_step"][system]["tool_calls"] > 0
    assert "sqlite" in figures["durable"]["operative"]["per_step"]
    assert "| operative |" in (tmp_path / "peers.md").read_text()
