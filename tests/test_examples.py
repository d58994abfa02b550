"""The README's quick start and the durable runs page: their samples run as they say."""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PyCF_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


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


def _readme_command_lines() -> list[str]:
    """The README's shell lines that run the ``operative`` command (serve excluded)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", readme, flags=re.DOTALL | re.MULTILINE)
    return [
        line.split("  #")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if ".venv/bin/operative " in line and ".venv/bin/operative serve" not in line
    ]


def test_the_readme_operative_commands_run_offline(tmp_path: Path) -> None:
    """``operative demo`` and the piped ``operative chat`` of the README run as written
    (with this interpreter), offline, and do what the README says."""
    lines = _readme_command_lines()
    assert [line.split("operative ", 1)[1].split()[0] for line in lines] == ["demo", "chat"]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANTHROPIC_", "OPENAI_", "OPERATIVE_"))
    }
    env.update(NO_COLOR="1", OPERATIVE_DATA_DIR=str(tmp_path))
    outputs = []
    for line in lines:
        command = line.replace(".venv/bin/operative", f"{shlex.quote(sys.executable)} -m operative")
        done = subprocess.run(
            command, shell=True, capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
        outputs.append(done.stdout)
    demo, chat = outputs
    assert "OFFLINE scripted model" in demo
    assert "approve save_note(text='buy milk')? [y/N]" in chat
    assert (tmp_path / "notes.txt").read_text().strip() == "buy milk"


DURABLE_PAGE = ROOT / "docs" / "durable.md"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_durable_page_shows_the_example_file_as_it_is() -> None:
    """The last sample of docs/durable.md is examples/durable_resume.py, verbatim."""
    assert _python_blocks(DURABLE_PAGE)[-1] == (ROOT / "examples" / "durable_resume.py").read_text()


async def test_the_durable_page_samples_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every other sample of docs/durable.md runs, top to bottom, in one namespace."""
    monkeypatch.chdir(tmp_path)  # the samples keep their runs in ./runs.db
    namespace: dict[str, Any] = {"__name__": "docs.durable"}
    blocks = _python_blocks(DURABLE_PAGE)[:-1]
    assert len(blocks) >= 5
    try:
        for index, block in enumerate(blocks):
            code = compile(
                block, f"docs/durable.md sample {index + 1}", "exec", flags=PyCF_TOP_LEVEL_AWAIT
            )
            pending = eval(code, namespace)
            if pending is not None:
                await pending
        assert (await namespace["engine"].get(namespace["braga"])).status == "aborted"
    finally:
        if "backend" in namespace:
            await namespace["backend"].aclose()
