"""The provider SDKs are optional: ``import operative`` never imports them."""

from __future__ import annotations

import subprocess
import sys

import pytest

import operative.providers


def test_import_operative_imports_no_sdk() -> None:
    """In a fresh interpreter, operative and operative.providers leave the SDKs unloaded
    (the provider SDKs and OpenTelemetry)."""
    code = (
        "import sys, operative, operative.providers; "
        "print(sorted(m for m in ('anthropic', 'openai', 'httpx2', 'opentelemetry') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_providers_all_is_sorted_and_complete() -> None:
    """operative.providers re-exports exactly its sorted __all__."""
    names = operative.providers.__all__
    assert names == sorted(names)
    assert all(hasattr(operative.providers, name) for name in names)


@pytest.mark.heavy  # the provider benchmark's smoke run: seconds
def test_provider_benchmark_quick_mode_runs() -> None:
    """benchmarks/bench_providers.py --quick exits 0 and prints its figures."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_providers.py"
    done = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "µs" in done.stdout
