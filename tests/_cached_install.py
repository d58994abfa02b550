"""Installing a test's outside counterpart (npm packages, a pip package) once per machine.

Each install goes into a staging folder first and is renamed into place, so concurrent
test runs never see half an install, and a later run on the same machine finds it in
``~/.cache/operative-tests/`` (or ``$XDG_CACHE_HOME``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["cache_root", "install_once"]


def cache_root() -> Path:
    """Where the tests keep what they install."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "operative-tests"


def install_once(
    target: Path,
    command: Callable[[Path], Sequence[str]],
    *,
    what: str,
    unavailable: Callable[[str], None],
    files: Sequence[Path] = (),
) -> None:
    """Run ``command(staging)`` in a fresh staging folder (holding copies of ``files``),
    then move it to ``target``. A failed install is ``unavailable`` (a skip, or a failure
    under CI), with the end of the installer's error output."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f"{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for file in files:
        shutil.copy(file, staging / file.name)
    done = subprocess.run(
        list(command(staging)),
        cwd=staging,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        unavailable(f"could not install {what}: {done.stderr.strip()[-500:]}")
        return
    try:
        staging.rename(target)
    except OSError:  # another run installed it first
        shutil.rmtree(staging, ignore_errors=True)
