"""The ``operative`` command (``python -m operative``); ``import operative`` never imports it.

::

    operative demo                     # a tool-using agent, offline unless a key is set
    operative chat --session notes     # one durable session turn per line
    operative runs list --json         # the run store, for scripts
    operative recover                  # finish interrupted durable runs
"""

import typing

if typing.TYPE_CHECKING:
    from ._main import main as main

__all__ = ["main"]


def __getattr__(name: str) -> object:
    # The parser (argparse and the command modules) loads when the command runs, not
    # when a library module (operative.ui's chat host) imports a piece of this package.
    if name != "main":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ._main import main

    globals()["main"] = main
    return main
