"""The README's flow as a newcomer follows it: its chat_session example leaves nothing in
the working directory, and the command's hints run as printed, whether the command was
started as ``.venv/bin/operative``, ``python -m operative`` or ``operative`` on PATH."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ._process import ROOT, clean_env

SCRIPT = Path(sys.executable).parent / "operative"


def readme_lines(needle: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```sh\n(.*?)^```", readme, flags=re.DOTALL | re.MULTILINE)
    return [line.strip() for block in blocks for line in block.splitlines() if needle in line]


def shell(line: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        line, shell=True, capture_output=True, text=True, cwd=cwd, env=env, timeout=120, check=False
    )


def test_the_chat_session_example_writes_under_the_data_directory(tmp_path: Path) -> None:
    """Run as the README says, from a working directory, it leaves that directory alone."""
    lines = readme_lines("examples/chat_session.py")
    assert len(lines) == 2
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    data = tmp_path / "data"
    env = clean_env(OPERATIVE_DATA_DIR=str(data))
    outputs = []
    for line in lines:
        done = shell(
            line.replace(".venv/bin/python", shlex.quote(sys.executable)), cwd=work, env=env
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert "Your name is Ada." in outputs[1]
    assert sorted(os.listdir(work)) == ["examples"]
    assert (data / "chat_session.db").is_file()
    assert f"(the session is kept in {data / 'chat_session.db'})" in outputs[1]


def hint(output: str) -> str:
    found = re.search(r"\(see it with: (.*)\)$", output, flags=re.MULTILINE)
    assert found is not None, output
    return found.group(1)


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no console script {SCRIPT}")
@pytest.mark.parametrize("on_path", [False, True])
def test_the_run_hint_is_a_command_that_works_as_printed(tmp_path: Path, on_path: bool) -> None:
    """``VENV/bin/operative demo``'s hint runs in the same shell, the venv on PATH or not."""
    venv = SCRIPT.parent.parent
    system = "/usr/local/bin:/usr/bin:/bin"
    env = clean_env(
        OPERATIVE_DATA_DIR=str(tmp_path), PATH=f"{SCRIPT.parent}:{system}" if on_path else system
    )
    typed = "operative" if on_path else f"{venv.name}/bin/operative"
    done = shell(f"{typed} demo --offline", cwd=venv.parent, env=env)
    assert done.returncode == 0, done.stderr
    command = hint(done.stdout)
    assert command.startswith(f"{typed} runs show run_")
    shown = shell(command, cwd=venv.parent, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("run run_")


def test_the_hint_of_python_dash_m_names_the_interpreter_and_the_data_dir(tmp_path: Path) -> None:
    """``python -m operative demo --data-dir X`` hints at that interpreter and that X."""
    env = clean_env(PATH="/usr/local/bin:/usr/bin:/bin")
    data = tmp_path / "my data"
    done = subprocess.run(
        [sys.executable, "-m", "operative", "demo", "--offline", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    command = hint(done.stdout)
    assert " -m operative runs show run_" in command
    assert command.endswith(f"--data-dir {shlex.quote(str(data))}")
    shown = shell(command, cwd=ROOT, env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("run run_")
