"""ISO-8601 durations for session timers."""

from __future__ import annotations

import datetime

import pytest

from operative import InvalidArgument
from operative.sessions import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("PT30S", 30.0),
        ("PT0.5S", 0.5),
        ("PT1M", 60.0),
        ("PT1H30M", 5400.0),
        ("P1D", 86400.0),
        ("P1DT2H", 93600.0),
        ("P2W", 1209600.0),
        ("PT1,5H", 5400.0),
        ("pt10s", 10.0),
    ],
)
def test_iso_durations(text: str, seconds: float) -> None:
    """ISO-8601 durations with weeks, days, hours, minutes and seconds parse to seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


def test_numbers_and_timedeltas() -> None:
    """Seconds and timedeltas pass through."""
    assert parse_duration(3) == 3.0
    assert parse_duration(datetime.timedelta(minutes=2)) == 120.0


@pytest.mark.parametrize(
    "bad", ["P", "PT", "P1Y", "P1M", "30S", "PT-1S", "P1DT", "", True, -1, None]
)
def test_bad_durations(bad: object) -> None:
    """Anything else, including calendar units, is refused with a clear error."""
    with pytest.raises(InvalidArgument):
        parse_duration(bad)  # type: ignore[arg-type]
