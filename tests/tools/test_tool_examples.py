"""The approvals example runs as documented."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "approvals.py"


def test_approvals_example_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    """Park, resume in a later request, resolve in place, refuse the replay."""
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out.splitlines()
    assert out == ['{"deleted":"/reports/q3.txt"}', "second resume refused: replayed"]
