"""The README's quick start example runs and prints what the README says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs_offline() -> None:
    """examples/quickstart.py exits 0 and prints the echo and the tool-using run."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["Echo: Hello, agent!", "stop-condition"]
    assert "  [tools.executed] step=1" in lines
    assert lines[-1] == "2 steps, 143 tokens, stop-condition"


def test_import_is_light() -> None:
    """import operative loads no provider SDK."""
    code = (
        "import sys, operative; "
        "print(sorted(m for m in ('anthropic', 'openai', 'hypothesis', 'psycopg') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
