"""Fixtures shared by every test directory: a throwaway PostgreSQL cluster.

The cluster is started once per test session with ``initdb`` + ``pg_ctl`` in a temporary
directory, listening on 127.0.0.1 on a free port (its unix socket in the same directory),
and stopped at the end. Without the binaries or psycopg the PostgreSQL tests skip, unless
``OPERATIVE_REQUIRE_POSTGRES=1`` makes that a failure. ``OPERATIVE_POSTGRES_DSN`` points
the tests at an existing server instead.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

# -- PostgreSQL ---------------------------------------------------------------------------


if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A suite started in the background by a shell without job control (``cmd &`` in a
    # script) inherits SIGINT ignored, and so would every process it starts: the Ctrl-C
    # tests (the command line, the MCP server, the Temporal worker) would see their
    # SIGINT ignored. Python's own handler, as a terminal would give: a child then
    # starts with SIGINT at its default.
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _require_postgres() -> bool:
    return os.environ.get("OPERATIVE_REQUIRE_POSTGRES", "") not in ("", "0")


def _unavailable(reason: str) -> None:
    if _require_postgres():
        pytest.fail(f"PostgreSQL is required (OPERATIVE_REQUIRE_POSTGRES=1) but {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


def _find_bin() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.frozen
class _Cluster:
    bin: Path
    directory: Path
    user: str | None

    def run(self, *args: str) -> None:
        prefix = ["runuser", "-u", self.user, "--"] if self.user else []
        done = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A DSN of a fresh database in a throwaway cluster (or OPERATIVE_POSTGRES_DSN)."""
    if importlib.util.find_spec("psycopg") is None:
        _unavailable("psycopg is not installed (pip install 'operative[postgres]')")
    existing = os.environ.get("OPERATIVE_POSTGRES_DSN")
    if existing:
        yield existing
        return
    bin_dir = _find_bin()
    if bin_dir is None:
        _unavailable(
            "no initdb on PATH or under /usr/lib/postgresql/*/bin (apt install postgresql)"
        )
        return
    user: str | None = None
    if os.geteuid() == 0:  # initdb refuses to run as root
        for candidate in ("postgres", "nobody"):
            try:
                pwd.getpwnam(candidate)
            except KeyError:
                continue
            if shutil.which("runuser"):
                user = candidate
                break
        if user is None:
            _unavailable("running as root with no unprivileged user to run initdb as")
    directory = Path(tempfile.mkdtemp(prefix="operative-pg-"))
    directory.chmod(0o755)
    data = directory / "data"
    data.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(data, entry.pw_uid, entry.pw_gid)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    cluster = _Cluster(bin_dir, directory, user)
    port = _free_port()
    started = False
    try:
        cluster.run(
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "operative",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        )
        options = (
            f"-p {port} -k {directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        cluster.run(
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(directory / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        started = True
        import psycopg

        # pg_ctl -w returned once the server accepts connections: no polling needed.
        admin = f"host=127.0.0.1 port={port} user=operative dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE DATABASE operative_test")
        yield f"host=127.0.0.1 port={port} user=operative dbname=operative_test"
    finally:
        if started:
            cluster.run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(directory, ignore_errors=True)


# -- the second CI step --------------------------------------------------------------
# Tests marked ``realserver`` start a real server too slow for the default run (the
# llama-cpp-python server, the Temporal crash and property tests, the MCP conformance
# suite's authorization scenarios); tests marked ``heavy`` are other slow checks (the
# benchmarks' smoke runs). Both are deselected (not skipped) unless ``-m`` selects them
# or ``OPERATIVE_REALSERVER`` is set; ``.ci/run`` runs them as its second step.

_SECOND_STEP = ("realserver", "heavy")


def realserver_requested(config: pytest.Config) -> bool:
    """``OPERATIVE_REALSERVER`` is set (and not ``0``), or ``-m`` selects ``realserver``
    or ``heavy``."""
    if os.environ.get("OPERATIVE_REALSERVER", "0") not in ("", "0"):
        return True
    expression = str(config.getoption("markexpr", "") or "")
    return re.search(r"(?<!not )\b(realserver|heavy)\b", expression) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if realserver_requested(config):
        return
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        second = any(item.get_closest_marker(name) for name in _SECOND_STEP)
        (left_out if second else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
