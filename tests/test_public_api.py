"""operative's public namespaces: sorted, complete, and nothing defined in them."""

from __future__ import annotations

import importlib
import types

import pytest


def _isort_key(name: str) -> tuple[int, str]:
    """CONSTANTS, then Classes, then functions (ruff's RUF022 order)."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


PUBLIC = [
    "operative",
    "operative.conversation",
    "operative.tools",
    "operative.kvstore",
    "operative.testing",
    "operative.sessions",
    "operative.runstore",
    "operative.guardrails",
    "operative.multiagent",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_all_is_sorted_and_complete(name: str) -> None:
    """__all__ is sorted, names only what exists, and lists every public attribute."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=_isort_key)
    for attribute in exported:
        assert hasattr(module, attribute), attribute
    public = {
        attribute
        for attribute, value in vars(module).items()
        if not attribute.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(exported) == set(), "public but not in __all__"


def test_stop_when_namespace() -> None:
    """operative.stop_when is the conditions module."""
    import operative
    from operative import conditions

    assert operative.stop_when is conditions
    assert callable(operative.stop_when.no_tool_calls)


def test_every_error_derives_from_operative_error() -> None:
    """Every exported exception class derives from OperativeError."""
    import operative

    for attribute in operative.__all__:
        value = getattr(operative, attribute)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, operative.OperativeError), attribute


def test_run_options_loads_on_first_use_and_names_every_option() -> None:
    """``RunOptions`` (a TypedDict, for type checkers) is built only when asked for; the
    option names a run accepts are exactly its keys."""
    import subprocess
    import sys

    import operative
    from operative._core._options import _OPTION_NAMES
    from operative._core._run_options import RunOptions

    assert frozenset(RunOptions.__annotations__) == _OPTION_NAMES
    assert operative.RunOptions is RunOptions
    code = (
        "import sys, operative; print('operative._core._run_options' in sys.modules); "
        "operative.RunOptions; print('operative._core._run_options' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_the_version_is_the_packages() -> None:
    """``operative.__version__`` and ``operative --version`` say the version pyproject.toml
    gives the package."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    import operative

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    version = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert operative.__version__ == version
    done = subprocess.run(
        [sys.executable, "-m", "operative", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"operative {version}"
