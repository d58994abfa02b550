"""The command's exit codes, the error that carries one, and how a write that found no
room (a full disk) is recognised."""

from __future__ import annotations

import errno
import os

from .._core._errors import OperativeError

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "NO_ROOM_WORDS",
    "UsageError",
    "no_room",
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


_NO_ROOM = frozenset({errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)})
"""A write found no room: the disk is full, a quota is used up, a file reached its limit."""
_SQLITE_FULL = 13  # "database or disk is full"
NO_ROOM_WORDS = ("database or disk is full", *map(os.strerror, sorted(_NO_ROOM)))
"""How a record logged without its exception (its text only) says a write found no room."""


def no_room(error: BaseException) -> BaseException | None:
    """The error in ``error`` (its group, cause or context) saying a write found no room
    (an OSError ENOSPC, EDQUOT or EFBIG; SQLite's SQLITE_FULL), or ``None``.

    An error raised ``from None`` in its place is not looked through: it was replaced by
    one that says what happened in the command's own terms.
    """
    seen: set[int] = set()
    pending = [error]
    while pending:
        found = pending.pop()
        if id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, OSError) and found.errno in _NO_ROOM:
            return found
        code = getattr(found, "sqlite_errorcode", None)  # sqlite3.Error's, not imported
        if isinstance(code, int) and code & 0xFF == _SQLITE_FULL:  # (the parser stays light)
            return found
        if isinstance(found, BaseExceptionGroup):
            pending.extend(found.exceptions)
        if found.__cause__ is not None:
            pending.append(found.__cause__)
        if found.__context__ is not None and not found.__suppress_context__:
            pending.append(found.__context__)  # not one replaced ``from None``: it said why
    return None
