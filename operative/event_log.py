"""Structured logging: every run event as one JSON line through the ``logging`` module.

::

    import logging
    from operative.event_log import log_events

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))   # exactly one JSON line
    logging.getLogger("operative.events").addHandler(handler)

    async with open_run(...) as run:
        log_events(run)

Each record's message is the event as JSON (its ``type``, ``run_id``, ``step``, ``time``
and fields); the record also carries ``run_id``, ``step`` and ``event_type`` as
attributes, for formatters and filters. Nothing is encoded when the logger would drop
the record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ._core._errors import InvalidArgument
from ._core._event_json import event_json
from ._core._events import EVENT_TYPES

__all__ = ["DEFAULT_LOGGER", "event_logger", "log_events"]

DEFAULT_LOGGER = "operative.events"
"""The logger events go to unless another is given."""

_NOISY = frozenset({"generate.delta"})


def _logger(logger: logging.Logger | str | None) -> logging.Logger:
    if logger is None:
        return logging.getLogger(DEFAULT_LOGGER)
    if isinstance(logger, str):
        return logging.getLogger(logger)
    if isinstance(logger, logging.Logger):
        return logger
    raise InvalidArgument(f"logger= takes a logging.Logger or its name, got {logger!r}")


def _level(level: int | str) -> int:
    if isinstance(level, str):
        number = logging.getLevelName(level.upper())
        if isinstance(number, int):
            return number
    elif isinstance(level, int) and not isinstance(level, bool):
        return level
    raise InvalidArgument(f"level= takes a logging level (logging.INFO or 'INFO'), got {level!r}")


def event_logger(
    logger: logging.Logger | str | None = None, *, level: int | str = logging.INFO
) -> Callable[[Any], None]:
    """A listener that logs each event it is given as one JSON line.

    Attach it with ``run.add_listener(type, listener)`` (or a session handle's), for
    the events you want; :func:`log_events` attaches it for every event.
    """
    target = _logger(logger)
    number = _level(level)

    def log_event(event: Any) -> None:
        if target.isEnabledFor(number):
            target.log(
                number,
                "%s",
                event_json(event).decode(),
                extra={"run_id": event.run_id, "step": event.step, "event_type": event.type},
            )

    return log_event


def log_events(
    run: Any,
    *,
    logger: logging.Logger | str | None = None,
    level: int | str = logging.INFO,
    types: Iterable[str] | None = None,
    exclude: Iterable[str] = _NOISY,
) -> Callable[[], None]:
    """Log ``run``'s events, one JSON line each; returns a remover.

    Args:
        run: an ``ActiveRun`` (or anything with ``add_listener``).
        logger: a logger or its name (default ``"operative.events"``).
        level: the level of every record (default INFO).
        types: the event types to log (default: every type).
        exclude: types left out (default ``generate.delta``: a streaming model sends
            one per token, and listening for them makes the run deliver them).

    Raises:
        InvalidArgument: an unknown event type, or a bad logger or level.
    """
    listener = event_logger(logger, level=level)
    chosen = frozenset(EVENT_TYPES if types is None else types)
    unknown = (chosen | frozenset(exclude)) - EVENT_TYPES
    if unknown:
        raise InvalidArgument(
            f"unknown event type(s) {sorted(unknown)}; known types: "
            f"{', '.join(sorted(EVENT_TYPES))}"
        )
    removers = [run.add_listener(type, listener) for type in sorted(chosen - frozenset(exclude))]

    def remove() -> None:
        for remover in removers:
            remover()

    return remove
