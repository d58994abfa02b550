"""After the Quick start's ``pip install -e .``, type checkers run outside the checkout
find ``operative``: the editable install is a plain path in site-packages (a static
``.pth``), not an import hook that only a running interpreter sees."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """\
import operative

agent = operative.create_agent(model="anthropic:claude-haiku-4-5")
reveal_type(agent.run)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding an editable install of a copy of the
    checkout (its dependencies are not needed to resolve the import); its python."""
    base = tmp_path_factory.mktemp("editable")
    project = base / "project"
    project.mkdir()
    shutil.copytree(
        ROOT / "operative", project / "operative", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    environment = base / "venv"
    venv.EnvBuilder(with_pip=False).create(environment)
    done = subprocess.run(
        [
            # --ignore-installed: without it pip first uninstalls the operative of the
            # environment running the tests, --prefix or not.
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--ignore-installed"),
            *("--prefix", str(environment), "-e", str(project)),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return environment / "bin" / "python"


@pytest.mark.heavy  # pip builds the editable wheel (setuptools from the index): seconds
def test_the_editable_install_is_a_path_in_site_packages(installed: Path) -> None:
    (pth,) = installed.parents[1].glob("lib/python*/site-packages/__editable__*operative*.pth")
    lines = pth.read_text().split()
    assert len(lines) == 1
    assert not lines[0].startswith("import")
    assert (Path(lines[0]) / "operative" / "__init__.py").is_file()


@pytest.mark.heavy
def test_mypy_outside_the_checkout_finds_operative(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--python-executable", str(installed)),
            *("--follow-imports=skip", "--no-incremental", "sample.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "import-not-found" not in done.stdout, done.stdout
    assert "Cannot find implementation" not in done.stdout, done.stdout
    assert done.returncode == 0, done.stdout


@pytest.mark.heavy
def test_pyright_outside_the_checkout_finds_operative(installed: Path, tmp_path: Path) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    assert pyright is not None, "pyright is in the dev extra: pip install -e '.[dev]'"
    (tmp_path / "sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [pyright, "--pythonpath", str(installed), "sample.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "could not be resolved" not in done.stdout, done.stdout
    assert 'Type of "agent.run"' in done.stdout, done.stdout
    assert "CoroutineType[Any, Any, RunResult]" in done.stdout, done.stdout
