"""How the user runs this command, so a hint names a command line that works as it is."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Mapping

__all__ = ["command_line", "invocation"]


def _as_typed(path: str, env: Mapping[str, str]) -> str:
    """``path`` by its bare name when PATH finds this very file, else as a path (relative
    to the working directory when it is under it)."""
    name = os.path.basename(path)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is not None and os.path.abspath(found) == os.path.abspath(path):
        return name
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if not relative.startswith(os.pardir):
        return relative if os.sep in relative else os.path.join(os.curdir, relative)
    return absolute


def invocation(argv0: str | None, env: Mapping[str, str]) -> str:
    """This command as the user typed it: ``operative``, ``.venv/bin/operative``,
    ``python -m operative``, ``.venv/bin/python -m operative``.

    ``argv0`` is ``sys.argv[0]`` (``None``: called as a function, named ``operative``).
    An interpreter is named by its path, not the file it links to: a virtual
    environment's ``python`` is another interpreter than the one it links to.
    """
    if not argv0:
        return "operative"
    if os.path.basename(argv0) == "__main__.py":  # python -m operative
        return f"{shlex.quote(_as_typed(sys.executable, env))} -m operative"
    return shlex.quote(_as_typed(argv0, env))


def command_line(args: argparse.Namespace, words: str) -> str:
    """``words`` (``runs show ID``) as a command line that works as it is: the command
    as it was invoked, and ``--data-dir`` when it was not the default."""
    line = f"{getattr(args, 'invocation', 'operative')} {words}"
    if getattr(args, "data_dir_given", False):
        line += f" --data-dir {shlex.quote(str(args.data_dir))}"
    return line
