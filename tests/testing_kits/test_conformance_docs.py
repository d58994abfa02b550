"""docs/testing.md, "Test your own store": its samples are test files that pass, run by
pytest as a user would run them, and its tables name every check of the kits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from operative.testing.conformance import EngineConformance, StoreConformance

pytest_plugins = ["pytester"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("\n## Test your own store\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _samples() -> list[str]:
    return re.findall(r"^```py\n(.*?)^```", _section(), flags=re.DOTALL | re.MULTILINE)


def _checks(kit: type) -> set[str]:
    return {name for name in dir(kit) if name.startswith("test_")}


def test_the_tables_name_every_check() -> None:
    """Each check of both kits has its row, and no row names a check that does not exist."""
    named = set(re.findall(r"`(test_\w+)`", _section()))
    assert named == _checks(StoreConformance) | _checks(EngineConformance)


def test_the_samples_pass_as_a_users_test_files(pytester: pytest.Pytester) -> None:
    """The samples, each a test file, run under plain pytest: every check passes, and
    the full samples skip nothing."""
    samples = _samples()
    assert len(samples) == 3
    pytester.makepyfile(**{f"test_sample_{index}": code for index, code in enumerate(samples)})
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    outcomes = result.parseoutcomes()
    store_checks, engine_checks = len(_checks(StoreConformance)), len(_checks(EngineConformance))
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    # The first sample has no hooks: its process and corruption checks skip; the engine
    # sample has no corrupt_journal.
    assert outcomes["skipped"] == 3, result.stdout.str()
    assert outcomes["passed"] == 2 * store_checks - 2 + engine_checks - 1, result.stdout.str()
