"""The ``operative`` command (``python -m operative``); ``import operative`` never imports it.

::

    operative demo                     # a tool-using agent, offline unless a key is set
    operative chat --session notes     # one durable session turn per line
    operative runs list --json         # the run store, for scripts
    operative recover                  # finish interrupted durable runs
"""

from ._main import main as main

__all__ = ["main"]
