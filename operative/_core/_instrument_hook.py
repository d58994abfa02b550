"""The seam between the loop and an instrumentation (OpenTelemetry itself lives elsewhere).

A run asks its instrumentation once, when it opens, for an extension (see
:mod:`._extension`); with none installed the loop does no per-step work for tracing.
This module imports nothing optional: ``import operative`` stays free of OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, Protocol

__all__ = [
    "RunInstrumentation",
    "conversation_id",
    "current_conversation_id",
    "install",
    "installed",
    "reset_conversation_id",
    "set_conversation_id",
    "uninstall",
]


class RunInstrumentation(Protocol):
    """What ``open_run(..., instrumentation=...)`` accepts: a feature whose extension
    traces the run (see :mod:`._extension`)."""

    def extension(self, config: Any) -> Any:
        """The run's tracing extension, given its validated ``RunConfig``."""
        ...


_installed: list[RunInstrumentation] = []
"""The process-wide instrumentation (at most one), used by runs that name none."""


def installed() -> RunInstrumentation | None:
    """The process-wide instrumentation, or None."""
    return _installed[0] if _installed else None


def install(instrumentation: RunInstrumentation) -> None:
    if _installed:
        from ._errors import InvalidArgument

        raise InvalidArgument(
            "an instrumentation is already installed process-wide: call uninstrument() on "
            "its handle first (or pass instrumentation= to the runs that need another)"
        )
    _installed.append(instrumentation)


def uninstall(instrumentation: RunInstrumentation) -> bool:
    """Remove ``instrumentation`` if it is the installed one; True when it was."""
    if _installed and _installed[0] is instrumentation:
        _installed.clear()
        return True
    return False


_conversation: ContextVar[str | None] = ContextVar("operative_conversation_id", default=None)


def current_conversation_id() -> str | None:
    """The conversation (session, thread) id set around the current code, if any."""
    return _conversation.get()


def set_conversation_id(id: str | None) -> Token[str | None]:
    """Set the current conversation id; undo with :func:`reset_conversation_id`."""
    return _conversation.set(id)


def reset_conversation_id(token: Token[str | None]) -> None:
    _conversation.reset(token)


@contextmanager
def conversation_id(id: str | None) -> Iterator[None]:
    """Name the conversation that runs opened inside the block belong to.

    Instrumentation records it as ``gen_ai.conversation.id``; runs opened inside the
    block (and their child tasks) inherit it through the context.
    """
    token = _conversation.set(id)
    try:
        yield
    finally:
        _conversation.reset(token)
