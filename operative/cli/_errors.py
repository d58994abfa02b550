"""The command's exit codes and the error that carries one."""

from __future__ import annotations

from .._core._errors import OperativeError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "UsageError",
]

EXIT_OK = 0
EXIT_FAILED = 1
"""A run failed (an error, an abort, a budget or step limit), or storing it did."""
EXIT_USAGE = 2
"""Bad arguments or input: an unknown id, a model the environment cannot serve."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): durable runs in flight are left for ``operative recover``."""
EXIT_TERMINATED = 143
"""SIGTERM (a process manager stopping the command): as for Ctrl-C."""


class UsageError(OperativeError):
    """Bad input to the command; the message says what to do instead (exit code 2)."""
