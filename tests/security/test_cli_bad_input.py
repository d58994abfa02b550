"""Bad input to the command is one line on standard error and exit code 2, never a
traceback: dates out of range, control characters in ids, and a disk that fills up.

Every test runs the real command (``python -m operative``) on real files. The full disk
is real too: standard output sent to ``/dev/full`` (every write fails with ENOSPC), and
a data directory on a tmpfs a few pages large, mounted in a user and mount namespace of
the command's own (``unshare``), so no root is needed and nothing outside the test sees
it; those tests skip where the kernel allows no such namespace.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio
from cli._process import ROOT, clean_env, operative, snapshot

from operative.cli import main

from ._command import start, stop

TRACEBACK_MARKS = ("Traceback", "Exception ignored", "ExceptionGroup")


def assert_one_line(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit code 2 and exactly one ``operative: error:`` line naming ``needles``."""
    both = (done.stdout or "") + done.stderr
    assert done.returncode == 2, both
    for mark in TRACEBACK_MARKS:
        assert mark not in both, both
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("operative: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding one finished demo run."""
    path = tmp_path_factory.mktemp("data")
    done = operative("demo", "--offline", "--data-dir", str(path))
    assert done.returncode == 0, done.stderr
    return path


# -- dates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "problem"),
    [
        ("0001-01-01", "is before 1970-01-01, out of range"),
        ("0001-01-01T00:00+14:00", "is before 1970-01-01, out of range"),
        ("1969-12-31", "is before 1970-01-01, out of range"),
        ("99999999d", "reaches back before 1970-01-01, out of range"),
        ("9" * 400 + "w", "reaches back before 1970-01-01, out of range"),
        ("PT" + "9" * 40 + "H", "reaches back before 1970-01-01, out of range"),
        ("9999-12-31", "is in the future, so no run can match"),
        ("9999-12-31T23:59:59.999999-12:00", "is in the future, so no run can match"),
        ("yesterday", "give a duration"),
        ("P1Y", "give a duration"),
    ],
)
def test_a_date_out_of_range_is_one_line(data_dir: Path, since: str, problem: str) -> None:
    done = operative("runs", "list", "--since", since, "--data-dir", str(data_dir))
    line = assert_one_line(done, "--since", problem)
    assert len(line) < 400  # a long value is shortened, not echoed whole


def test_a_date_in_range_still_lists(data_dir: Path) -> None:
    for since in ("1h", "PT1H", "1970-01-02", "2000-01-01T00:00+00:00"):
        done = operative("runs", "list", "--since", since, "--json", "--data-dir", str(data_dir))
        assert done.returncode == 0, done.stderr
        assert '"run_id":"run_' in done.stdout


async def test_the_viewer_answers_a_date_out_of_range_with_a_400(tmp_path: Path) -> None:
    """The run viewer of ``operative serve`` reads ``since=`` with the same parser: a
    400 naming the problem, not an empty 500."""
    child = await start("serve", "--offline", "--port", "0", data_dir=tmp_path / "data")
    try:
        with trio.fail_after(60):
            url = (await child.read_until(r"serving the chat page at (\S+)/ ")).group(1)
            async with httpx.AsyncClient(timeout=30) as client:
                for since, problem in (
                    ("0001-01-01", "is before 1970-01-01, out of range"),
                    ("9999-12-31", "is in the future"),
                    ("99999999d", "reaches back before 1970-01-01"),
                ):
                    for path in ("/runs", "/api/runs"):
                        answer = await client.get(url + path, params={"since": since})
                        assert answer.status_code == 400, answer.text
                        assert problem in answer.json()["error"]
                ok = await client.get(url + "/api/runs", params={"since": "1h"})
                assert ok.status_code == 200, ok.text
    finally:
        await stop(child, terminate=True)


# -- control characters in ids ----------------------------------------------------------

CONTROL = ["ab\x01c", "run\nx", "\x1b[31mred", "del\x7f", "c1\x85"]


@pytest.mark.parametrize("text", CONTROL)
@pytest.mark.parametrize(
    "args",
    [
        ("runs", "show", "{}"),
        ("runs", "cancel", "{}"),
        ("sessions", "show", "{}"),
        ("sessions", "delete", "{}"),
        ("runs", "list", "--session", "{}"),
        ("runs", "list", "--agent", "{}"),
        ("sessions", "list", "--agent", "{}"),
        ("demo", "--offline", "--session", "{}"),
    ],
)
def test_a_control_character_in_an_id_is_one_line(
    data_dir: Path, args: tuple[str, ...], text: str
) -> None:
    """Refused before anything is opened: the data directory is left as it was."""
    before = snapshot(data_dir)
    done = operative(*(text if a == "{}" else a for a in args), "--data-dir", str(data_dir))
    assert_one_line(done, "holds a control character", repr(text[-1] if text else text)[1:-1])
    assert snapshot(data_dir) == before


@pytest.mark.parametrize(
    "args",
    [("runs", "show", "run\x00x"), ("sessions", "show", "a\x00b"), ("sessions", "delete", "\x00")],
)
def test_a_nul_in_an_id_is_one_line(data_dir: Path, args: tuple[str, ...]) -> None:
    """NUL cannot reach a process through its arguments (execve takes C strings), so
    :func:`main` is called with them in this process, on the same real files."""
    before = snapshot(data_dir)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main([*args, "--data-dir", str(data_dir)], stdout=stdout, stderr=stderr, env={})
    done = subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())
    assert_one_line(done, "holds a control character ('\\x00')")
    assert snapshot(data_dir) == before


# -- a full disk ------------------------------------------------------------------------

FULL = "the disk is full"


def into_dev_full(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output on ``/dev/full``: every write fails, ENOSPC."""
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "operative", *args],
            stdin=subprocess.DEVNULL,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=clean_env(),
            cwd=ROOT,
            check=False,
        )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ("runs", "list"),
        ("runs", "list", "--json"),
        ("sessions", "list"),
        ("sessions", "show", "demo"),
        ("demo", "--offline"),
    ],
)
def test_output_to_a_full_disk_is_one_line(data_dir: Path, args: tuple[str, ...]) -> None:
    done = into_dev_full(*args, "--data-dir", str(data_dir))
    assert_one_line(done, FULL, "No space left on device", "free some space")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_page_written_to_a_full_disk_is_one_line(data_dir: Path) -> None:
    listed = operative("runs", "list", "--json", "--data-dir", str(data_dir))
    run_id = listed.stdout.split('"run_id":"', 1)[1].split('"', 1)[0]
    done = operative("runs", "show", run_id, "--html", "/dev/full", "--data-dir", str(data_dir))
    assert_one_line(done, "--html /dev/full", "No space left on device")


_IN_NAMESPACE = """
set -u
mnt=$1; size=$2; shift 2
mount -t tmpfs -o "size=$size" tmpfs "$mnt" || exit 99
"$@"
"""


def on_small_tmpfs(
    tmp_path: Path, size: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """The command with ``--data-dir`` on a fresh tmpfs of ``size`` bytes, in a user and
    mount namespace of its own; skips the test where no such namespace can be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    mnt = tmp_path / f"tmpfs-{size}"
    mnt.mkdir()
    namespace = [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", _IN_NAMESPACE]
    command = [sys.executable, "-m", "operative", *args, "--data-dir", str(mnt / "data")]
    done = subprocess.run(
        [*namespace, "sh", str(mnt), size, *command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=ROOT,
        check=False,
    )
    if done.returncode == 99 or "unshare: " in done.stderr:
        pytest.skip(f"no private tmpfs here: {done.stderr.strip()}")
    return done


SIZES = [f"{kib}k" for kib in range(48, 240, 16)]
"""From a tmpfs too small for the new database's schema to one that holds the whole
turn: the disk fills while the schema is made, while the journal and the run store are
written, and while the session stores the outcome."""


@pytest.mark.heavy  # real command processes on a filling disk: seconds
def test_a_demo_on_a_filling_disk_is_one_line_or_succeeds(tmp_path: Path) -> None:
    """Wherever the disk fills, the command says so in one line with exit code 2 (the
    library's log records of it folded into that line); once it has room, it succeeds."""
    outcomes = []
    for size in SIZES:
        done = on_small_tmpfs(tmp_path, size, "demo", "--offline")
        if done.returncode == 0:
            assert "answer: " in done.stdout, done.stdout
            assert done.stderr == ""
        else:
            assert_one_line(done, FULL, "database or disk is full", "free some space", "recover")
        outcomes.append(done.returncode)
    assert outcomes[0] == 2, "the smallest tmpfs did not fill"
    assert outcomes[-1] == 0, "the largest tmpfs did not hold the turn"


def test_a_chat_on_a_full_disk_ends_in_one_line(tmp_path: Path) -> None:
    """A chat whose turn cannot be stored stops (every later turn would fail too)."""
    failed = 0
    for size in ("96k", "128k", "160k"):
        done = on_small_tmpfs(
            tmp_path, size, "chat", "--offline", stdin="what is 6 * 7\nwhat is 2 + 2\n"
        )
        if done.returncode != 0:
            assert_one_line(done, FULL, "database or disk is full")
            failed += 1
    assert failed, "no tmpfs filled"
