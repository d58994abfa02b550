"""ISO-8601 durations (``"PT30S"``, ``"P1DT2H"``) as seconds."""

from __future__ import annotations

import datetime
import re

from .._core._errors import InvalidArgument

__all__ = ["Duration", "parse_duration"]

Duration = float | int | str | datetime.timedelta
"""Seconds, an ISO-8601 duration string, or a ``timedelta``."""

_PATTERN = re.compile(
    r"P(?:(?P<weeks>\d+(?:[.,]\d+)?)W)?"
    r"(?:(?P<days>\d+(?:[.,]\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:[.,]\d+)?)H)?"
    r"(?:(?P<minutes>\d+(?:[.,]\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:[.,]\d+)?)S)?)?"
)
_SECONDS = {"weeks": 604800.0, "days": 86400.0, "hours": 3600.0, "minutes": 60.0, "seconds": 1.0}


def parse_duration(value: Duration) -> float:
    """``value`` in seconds.

    Strings follow ISO 8601's duration format with weeks, days, hours, minutes and
    seconds (``"PT30S"``, ``"PT1.5H"``, ``"P1DT12H"``, ``"P2W"``). Years and months are
    refused: their length depends on the calendar date.

    Raises:
        InvalidArgument: not a duration, or a negative one.
    """
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise InvalidArgument(
            f"a duration is seconds, an ISO-8601 string or a timedelta, not {value!r}"
        )
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().upper()
        match = _PATTERN.fullmatch(text)
        if match is None or text in ("P", "PT") or text.endswith("T"):
            hint = (
                " (years and months are not supported: use days)"
                if "Y" in text or ("M" in text.split("T")[0])
                else ""
            )
            raise InvalidArgument(
                f"{value!r} is not an ISO-8601 duration such as 'PT30S' or 'P1DT2H'{hint}"
            )
        seconds = sum(
            float(amount.replace(",", ".")) * _SECONDS[unit]
            for unit, amount in match.groupdict().items()
            if amount is not None
        )
    else:
        raise InvalidArgument(
            f"a duration is seconds, an ISO-8601 string or a timedelta, not {type(value).__name__}"
        )
    if not seconds >= 0:
        raise InvalidArgument(f"a duration must be >= 0 seconds, got {value!r}")
    return seconds
