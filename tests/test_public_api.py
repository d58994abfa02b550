"""operative's public namespaces: sorted, complete, and nothing defined in them."""

from __future__ import annotations

import importlib
import pkgutil
import re
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
    "operative.errors",
    "operative.extending",
    "operative.tools",
    "operative.kvstore",
    "operative.testing",
    "operative.sessions",
    "operative.runstore",
    "operative.guardrails",
    "operative.multiagent",
]
"""Namespaces whose every public attribute is in ``__all__`` (a re-exporting package)."""


def _public_namespaces() -> list[types.ModuleType]:
    """Every public module of operative with an ``__all__`` (one whose optional
    dependency is not installed is left out)."""
    import operative

    found = pkgutil.walk_packages(operative.__path__, "operative.")
    names = ["operative"] + [
        m.name for m in found if not any(p.startswith("_") for p in m.name.split("."))
    ]
    modules = []
    for name in sorted(names):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not exc.name.startswith("operative"):
                continue  # an optional dependency (temporalio, mcp, ...)
            raise
        if hasattr(module, "__all__"):
            modules.append(module)
    return modules


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


def test_every_public_namespace_resolves_its_all() -> None:
    """Each name every public module exports resolves (lazy ones load)."""
    for module in _public_namespaces():
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == [], module.__name__


def test_the_top_level_is_small() -> None:
    """``operative`` holds what a program needs in its first hour: at most 50 names."""
    import operative

    assert len(operative.__all__) <= 50, len(operative.__all__)
    assert "__version__" not in operative.__all__
    for gone in ("storage", "store"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"operative.{gone}")


def test_stop_when_namespace() -> None:
    """operative.stop_when is the conditions module."""
    import operative
    from operative import conditions

    assert operative.stop_when is conditions
    assert callable(operative.stop_when.no_tool_calls)


def test_every_error_is_in_operative_errors_and_derives_from_operative_error() -> None:
    """operative.errors holds every error a public namespace exports, the very class,
    and each one derives from OperativeError."""
    import operative.errors

    errors = operative.errors
    for name in errors.__all__:
        value = getattr(errors, name)
        assert isinstance(value, type), name
        assert issubclass(value, errors.OperativeError), name
    for module in _public_namespaces():
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, Exception):
                if issubclass(value, Warning):
                    continue
                assert name in errors.__all__, f"{module.__name__}.{name}"
                assert getattr(errors, name) is value, f"{module.__name__}.{name}"


def test_the_error_tree_draws_every_error_once() -> None:
    """The docstring of operative.errors draws each error of its ``__all__``, once, under
    the base it derives from."""
    import operative.errors

    drawn: dict[str, int] = {}
    for line in (operative.errors.__doc__ or "").splitlines():
        match = re.match(r"^ {4}((?:[│ ] {3})*)[├└]── (\w+)", line)
        if match is None:
            continue
        depth = len(match.group(1)) // 4 + 1
        drawn[match.group(2)] = depth
        value = getattr(operative.errors, match.group(2))
        assert depth == 1 or len(value.__mro__) > 3, match.group(2)
    assert sorted(drawn) == sorted(set(operative.errors.__all__) - {"OperativeError"})


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
