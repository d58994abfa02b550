"""Running ``python -m operative`` as a user does, and what a directory holds before and after."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["ROOT", "clean_env", "operative", "snapshot"]

ROOT = Path(__file__).resolve().parents[2]
_KEYS = ("ANTHROPIC_", "OPENAI_", "OPERATIVE_", "GEMINI_", "GOOGLE_API_KEY", "OLLAMA_")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without model keys or operative settings, plain output, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_KEYS)}
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", **extra)
    return env


def operative(
    *args: str,
    env: Mapping[str, str] | None = None,
    stdin: str = "",
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m operative ARGS`` in a process of its own; its exit code and output."""
    return subprocess.run(
        [sys.executable, "-m", "operative", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(clean_env() if env is None else env),
        cwd=cwd or ROOT,
        preexec_fn=preexec_fn,
        check=False,
    )


def snapshot(path: Path) -> dict[str, bytes | str | None]:
    """Every entry under ``path`` (itself included): a file's bytes, ``"dir"`` for a
    directory, ``"other"`` for anything else, ``None`` for a path that is not there."""
    found: dict[str, bytes | str | None] = {}

    def visit(entry: Path, name: str) -> None:
        if entry.is_symlink() or not entry.exists():
            found[name] = None if not entry.is_symlink() else "link"
        elif entry.is_dir():
            found[name] = "dir"
            for child in sorted(entry.iterdir()):
                visit(child, f"{name}/{child.name}")
        elif entry.is_file():
            found[name] = entry.read_bytes()
        else:
            found[name] = "other"

    visit(path, ".")
    return found
