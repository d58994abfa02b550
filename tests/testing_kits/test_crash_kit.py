"""The crash kit: a sound toy agent passes it on SQLite and PostgreSQL, and the kit finds
the seeded bugs of two broken ones (a tool declared idempotent that is not, a tool that
writes twice)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operative import OperativeError
from operative.testing.crash import (
    EFFECTS_ENV,
    CrashKitError,
    CrashReport,
    CrashTestFailure,
    crash_test,
    effect,
)
from operative.testing.crash import __all__ as crash_all

from ._crash_kit_agents import double_writing_agent, falsely_idempotent_agent, sound_agent

pytestmark = pytest.mark.skipif(
    not hasattr(os, "pidfd_open"), reason="the crash kit watches and kills workers by pidfd"
)


def _found(bug: object, **options: object) -> CrashReport:
    with pytest.raises(CrashTestFailure) as failure:
        crash_test(bug, **options)  # type: ignore[arg-type]
    report = failure.value.report
    assert isinstance(failure.value, OperativeError)
    assert f"seed={report.seed}" in str(failure.value)
    assert report.directory is not None
    assert Path(report.directory, "effects.log").exists()
    return report


@pytest.mark.heavy  # real workers, killed: seconds
def test_a_sound_agent_passes_crashes_and_abort_races_on_sqlite(tmp_path: Path) -> None:
    report = crash_test(sound_agent, runs=8, kills=4, aborts=10, seed=1, directory=tmp_path)
    assert report.ok, str(report)
    # A kill that lands before the first worker committed a run's start leaves that run
    # unstarted (never acknowledged, no effects): legitimate on a slow machine.
    ended = report.counts["runs completed"] + report.counts.get("runs never started", 0)
    assert ended == 8, report.counts
    assert report.counts["runs completed"] >= 1, report.counts
    assert report.kills_landed >= 1
    assert sum(n for name, n in report.counts.items() if name.startswith("races fired")) >= 5
    assert "seed 1: passed" in str(report)


@pytest.mark.heavy  # real workers, killed: seconds
def test_a_tool_declared_idempotent_that_is_not_is_found() -> None:
    """Recovery runs a cut ``charge`` again (it is declared idempotent): the card is
    charged twice, and the report says which effect, run and workers."""
    report = _found(falsely_idempotent_agent, runs=8, kills=6, aborts=0, seed=1)
    assert report.problems
    assert all(p.startswith("effect 'charge ") for p in report.problems), report.problems
    assert any("recover" in problem for problem in report.problems), report.problems


def test_a_tool_that_writes_twice_is_found() -> None:
    report = _found(double_writing_agent, runs=2, kills=0, aborts=2, seed=5)
    assert len(report.problems) == 4, report.problems
    assert all("happened 2 times" in problem for problem in report.problems)


def test_a_sound_agent_passes_on_postgresql(postgres_dsn: str) -> None:
    report = crash_test(sound_agent, runs=4, kills=2, aborts=5, seed=3, backend=postgres_dsn)
    assert report.ok, str(report)
    assert report.backend == "postgresql"
    ended = report.counts["runs completed"] + report.counts.get("runs never started", 0)
    assert ended == 4, report.counts


def test_a_factory_the_workers_cannot_import_is_refused() -> None:
    def local() -> None: ...

    with pytest.raises(CrashKitError, match="module-level"):
        crash_test(local, runs=1)
    with pytest.raises(CrashKitError, match="module:function"):
        crash_test("no_colon", runs=1)
    with pytest.raises(CrashKitError, match="backend"):
        crash_test(sound_agent, runs=1, backend="redis://x")


def test_effect_outside_the_kit_does_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(EFFECTS_ENV, raising=False)
    effect("charge 1")  # no file, no error
    log = tmp_path / "effects.log"
    monkeypatch.setenv(EFFECTS_ENV, str(log))
    effect("charge 1", repeatable=True)
    assert '"key": "charge 1"' in log.read_text()
    assert '"repeatable": true' in log.read_text()


def test_public_names() -> None:
    assert crash_all == [
        "EFFECTS_ENV",
        "CrashKitError",
        "CrashReport",
        "CrashTestFailure",
        "crash_test",
        "effect",
    ]


@pytest.mark.realserver
def test_a_sound_agent_passes_a_long_crash_test(tmp_path: Path) -> None:
    report = crash_test(sound_agent, runs=50, kills=10, aborts=40, seed=7, directory=tmp_path)
    assert report.ok, str(report)
    assert report.kills_landed >= 5


@pytest.mark.realserver
def test_a_sound_agent_passes_a_long_crash_test_on_postgresql(postgres_dsn: str) -> None:
    report = crash_test(sound_agent, runs=50, kills=10, aborts=40, seed=8, backend=postgres_dsn)
    assert report.ok, str(report)
    assert report.kills_landed >= 5
