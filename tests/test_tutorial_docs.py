"""The tutorial's samples run in order, offline, and print what the page says they print."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio.testing

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"
DATA_DIR = "/tmp/operative-tutorial"


def _blocks(language: str) -> list[str]:
    pattern = rf"^```{language}\n(.*?)^```"
    return re.findall(pattern, PAGE.read_text(), flags=re.DOTALL | re.MULTILINE)


async def test_tutorial_python_samples_run(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python sample runs in one namespace; each printed line matches its comment.

    Virtual time jumps only after 20 ms of real idleness: the durable sample waits on
    SQLite in worker threads, and a jump while a thread works would fire its timeouts.
    """
    autojump_clock.autojump_threshold = max(autojump_clock.autojump_threshold, 0.02)
    blocks = _blocks("python")
    assert len(blocks) >= 8
    namespace: dict[str, Any] = {"__name__": "docs.tutorial"}
    expected: list[str] = []
    for index, block in enumerate(blocks):
        code = compile(
            block, f"docs/tutorial.md sample {index + 1}", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        pending = eval(code, namespace)
        if pending is not None:
            await pending
        expected += re.findall(r"^ *print\(.*\)  # (.*)$", block, flags=re.MULTILINE)
    assert capsys.readouterr().out.splitlines() == expected


def test_tutorial_in_process_approvals_need_no_secret() -> None:
    """The approvals step declares the tool's need and passes on_approval=, nothing more:
    no Toolbox, policy or approval_secret (those are for approvals resumed later)."""
    text = PAGE.read_text()
    step = text[text.index("## 3. Approvals") : text.index("## 4.")]
    (sample,) = re.findall(r"^```python\n(.*?)^```", step, flags=re.DOTALL | re.MULTILINE)
    assert "@tool(needs_approval=True)" in sample
    assert "on_approval=" in sample
    for needless in ("approval_secret", "ApprovalPolicy", "Toolbox("):
        assert needless not in sample


def test_tutorial_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command step's lines run offline against a fresh data directory and exit 0."""
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPERATIVE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    (block,) = _blocks("sh")
    lines = [line for line in block.splitlines() if line.strip()]
    assert [line.split()[:2] for line in lines] == [
        ["operative", "demo"],
        ["operative", "runs"],
        ["operative", "sessions"],
    ]
    outputs = []
    for line in lines:
        argv = [str(tmp_path) if arg == DATA_DIR else arg for arg in shlex.split(line)]
        done = subprocess.run(
            [sys.executable, "-m", *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "OFFLINE scripted model" in outputs[0]
    assert "answer:" in outputs[0]
    assert "demo" in outputs[2]


def test_reference_pages_cover_every_public_namespace() -> None:
    """Each reference page documents exactly its module's ``__all__`` (submodules linked)."""
    import importlib
    import types

    pages = sorted((ROOT / "docs" / "reference").glob("*.md"))
    assert len(pages) >= 25
    for page in pages:
        module_name = (
            "operative" if page.stem == "index" else "operative." + page.stem.replace("-", ".")
        )
        module = importlib.import_module(module_name)
        listed = re.findall(r"^        - (\w+)$", page.read_text(), flags=re.MULTILINE)
        public = [
            name
            for name in module.__all__
            if not isinstance(getattr(module, name), types.ModuleType)
        ]
        assert listed == public, page.name
        assert f"::: {module_name}\n" in page.read_text()
