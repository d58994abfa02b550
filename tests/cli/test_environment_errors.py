"""A data directory or database the command cannot use is one line on standard error and
exit code 2, found before anything is written: tried in a real process, on real paths.

The tests may run as root, where permission bits stop nothing: the paths here fail for
everyone (a file used as a directory, a path through a file, ``/proc``), and the
permission cases drop root's override capabilities in the child process.
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ._process import operative, snapshot

WRITING = ("demo", "--offline")
"""A command that creates the data directory and writes to its database."""
READING = (
    ("runs", "list"),
    ("runs", "show", "run_x"),
    ("sessions", "list"),
    ("sessions", "show", "s"),
    ("sessions", "delete", "s"),
)
"""Commands that only read (and never create) the data directory."""


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2, no traceback, one ``operative: error:`` line naming ``needles``."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("operative: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def database_of(path: Path) -> Path:
    """A real data directory's database, written by the command and checkpointed."""
    done = operative(*WRITING, "--data-dir", str(path))
    assert done.returncode == 0, done.stderr
    return path / "operative.db"


@pytest.mark.parametrize("args", [WRITING, *READING])
def test_a_file_as_the_data_directory(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A regular file given as --data-dir is named, and left as it was."""
    file = tmp_path / "notes.txt"
    file.write_text("my notes\n")
    before = snapshot(tmp_path)
    done = operative(*args, "--data-dir", str(file))
    assert_one_line_error(done, str(file), "is a file, not a directory", "--data-dir")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [WRITING, *READING])
def test_a_path_through_a_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``FILE/sub`` can never be a directory: the file in the way is named."""
    file = tmp_path / "notes.txt"
    file.write_text("my notes\n")
    before = snapshot(tmp_path)
    done = operative(*args, "--data-dir", str(file / "sub"))
    assert_one_line_error(done, f"{file} is a file, not a directory", "--data-dir")
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_directory_nobody_can_create_or_write() -> None:
    """``/proc/nope`` cannot be created and ``/proc/self`` cannot hold a file, even for root."""
    done = operative(*WRITING, "--data-dir", "/proc/nope")
    assert_one_line_error(done, "/proc/nope", "cannot create the directory", "--data-dir")
    assert not os.path.exists("/proc/nope")
    done = operative(*WRITING, "--data-dir", "/proc/self")
    line = assert_one_line_error(done, "/proc/self", "--data-dir")
    assert "cannot write" in line or "cannot open the database" in line


@pytest.mark.parametrize("args", [WRITING, *READING])
def test_a_directory_where_the_database_should_be(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``DATA_DIR/operative.db`` that is a directory is named, and what to do."""
    (tmp_path / "operative.db").mkdir()
    before = snapshot(tmp_path)
    done = operative(*args, "--data-dir", str(tmp_path))
    assert_one_line_error(done, str(tmp_path / "operative.db"), "not a database file", "move it")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [WRITING, *READING])
def test_a_text_file_as_the_database(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A database that is text is named as not a database, and stays byte for byte."""
    (tmp_path / "operative.db").write_text("these are not the rows you are looking for\n")
    before = snapshot(tmp_path)
    done = operative(*args, "--data-dir", str(tmp_path))
    assert_one_line_error(done, "operative.db", "is not an SQLite database", "--data-dir")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("args", [WRITING, *READING])
def test_a_truncated_database(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A database cut short is named as damaged, with how to recover it, and not touched."""
    whole = database_of(tmp_path / "whole")
    with sqlite3.connect(whole) as connection:  # everything in the main file
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    data = tmp_path / "data"
    data.mkdir()
    (data / "operative.db").write_bytes(whole.read_bytes()[:5000])
    before = snapshot(data)
    done = operative(*args, "--data-dir", str(data))
    assert_one_line_error(done, "operative.db", "damaged", ".recover", "--data-dir")
    assert snapshot(data) == before


# -- permissions, which root's capabilities override ---------------------------------------

_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _drop_override() -> None:
    """In the child, before exec: lose root's license to ignore permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def as_a_user(code: str) -> Callable[[], None] | None:
    """What makes permission bits apply to the child (nothing unless we are root);
    ``code`` is Python that must then fail."""
    if os.geteuid() != 0:
        return None
    probe = [sys.executable, "-c", code]
    try:
        done = subprocess.run(probe, preexec_fn=_drop_override, capture_output=True, check=False)
    except subprocess.SubprocessError:
        pytest.skip("root here cannot drop CAP_DAC_OVERRIDE (no CAP_SETPCAP)")
    if done.returncode == 0:
        pytest.skip("permission bits do not apply to this process, even without overrides")
    return _drop_override


@pytest.mark.parametrize("args", READING)
def test_an_unreadable_data_directory(tmp_path: Path, args: tuple[str, ...]) -> None:
    """A data directory that cannot be read is an error, not an empty listing."""
    database_of(tmp_path / "data")
    locked = tmp_path / "data"
    locked.chmod(0)
    try:
        done = operative(
            *args,
            "--data-dir",
            str(locked),
            preexec_fn=as_a_user(f"import os; os.listdir({str(locked)!r})"),
        )
        assert_one_line_error(done, str(locked), "cannot read", "--data-dir")
        assert done.stdout == ""
    finally:
        locked.chmod(0o755)


def test_an_unwritable_data_directory(tmp_path: Path) -> None:
    """demo in a directory it may not write to (or create a directory in) says so."""
    parent = tmp_path / "read-only"
    parent.mkdir()
    database_of(parent / "existing")
    parent.chmod(0o555)
    (parent / "existing").chmod(0o555)
    try:
        user = as_a_user(f"open({str(parent / 'probe')!r}, 'w')")
        before = snapshot(parent)
        done = operative(*WRITING, "--data-dir", str(parent / "new"), preexec_fn=user)
        assert_one_line_error(done, str(parent / "new"), "cannot create the directory")
        done = operative(*WRITING, "--data-dir", str(parent / "existing"), preexec_fn=user)
        assert_one_line_error(done, str(parent / "existing"), "cannot write", "--data-dir")
        assert snapshot(parent) == before
    finally:
        (parent / "existing").chmod(0o755)
        parent.chmod(0o755)


def test_a_missing_directory_is_empty_and_recover_agrees(tmp_path: Path) -> None:
    """Nothing there yet is not an error for a listing, and names where it looked."""
    done = operative("runs", "list", "--data-dir", str(tmp_path / "new"))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"no runs in {tmp_path / 'new' / 'operative.db'}\n"
    file = tmp_path / "file"
    file.write_text("x")
    done = operative("recover", "--offline", "--data-dir", str(file))
    assert_one_line_error(done, str(file), "is a file, not a directory")
    assert not (tmp_path / "new").exists()
