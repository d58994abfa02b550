"""Fixtures shared by every test directory (a throwaway PostgreSQL cluster, Chromium,
Node), and the suite's two tiers: the fast gate and the full suite (``--full``; see
"the tiers" below).

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
from _chromium import chromium_or_skip

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


# -- the tiers: the fast gate and the full suite ---------------------------------------
# ``python -m pytest`` is the fast gate: no service, a few minutes on two cores. Three
# markers name what it leaves out, deselected (not skipped) unless asked for:
#
# - ``services``: the test needs a service the machine may not have: PostgreSQL, Node and
#   npm (server-everything, the MCP conformance suite, the front ends' npm clients), the
#   Temporal dev server, Chromium, llm-katan (installed from PyPI on first use). Applied
#   here, from the fixtures that bring one (``_SERVICE_FIXTURES``) and from a
#   ``"postgres"`` backend parameter (the backend fixtures of tests/kvstore and
#   tests/durable reach PostgreSQL through ``request.getfixturevalue``).
# - ``heavy``: a slow check on real processes and the real clock (the benchmarks' smoke
#   runs, the docs site built and loaded in Chromium, real servers killed and restarted).
# - ``realserver``: a real server too slow for the gate (the llama-cpp-python server, the
#   Temporal crash and property tests, the MCP conformance suite's authorization
#   scenarios).
#
# ``python -m pytest --full`` runs them all (the full suite, ``.ci/run``'s second step);
# ``-m`` naming one of them (``-m services``, ``-m "realserver or heavy"``) runs those, and
# ``OPERATIVE_REALSERVER=1`` adds the realserver and heavy tests to any run. Under
# ``--full`` a missing service skips its tests unless the ``OPERATIVE_REQUIRE_*``
# variables ``.ci/run`` exports make that a failure.

_FULL_ONLY = ("services", "heavy", "realserver")

_SERVICE_FIXTURES = {
    "postgres_dsn": "PostgreSQL",
    "everything_script": "Node and npm (server-everything)",
    "conformance_suite": "Node (the MCP conformance suite)",
    "ui_node_modules": "Node and npm (the front ends' npm clients)",
    "temporal_server": "the Temporal dev server",
    "katan_path": "llm-katan, an Anthropic-format server pip installs on first use",
    "chromium": "Chromium",
    "node": "Node",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="the full suite: also the tests marked services, heavy or realserver",
    )


@pytest.fixture
def chromium() -> None:
    """Headless Chromium is here: the test skips without it (fails under
    ``OPERATIVE_REQUIRE_CHROMIUM=1``), and is marked ``services``."""
    chromium_or_skip()


@pytest.fixture(scope="session")
def node() -> str:
    """The ``node`` on ``PATH``: the test skips without it (fails under
    ``OPERATIVE_REQUIRE_NODE=1`` or ``CI``), and is marked ``services``."""
    found = shutil.which("node")
    if found is None:
        reason = "Node.js is not on PATH"
        if any(
            os.environ.get(name, "") not in ("", "0") for name in ("CI", "OPERATIVE_REQUIRE_NODE")
        ):
            pytest.fail(f"Node is required but {reason}")
        pytest.skip(reason)
    return found


def _requested(config: pytest.Config) -> set[str]:
    """The full-suite markers this run asked for."""
    if config.getoption("full", False):
        return set(_FULL_ONLY)
    wanted: set[str] = set()
    if os.environ.get("OPERATIVE_REALSERVER", "0") not in ("", "0"):
        wanted |= {"realserver", "heavy"}
    expression = str(config.getoption("markexpr", "") or "")
    wanted |= {name for name in _FULL_ONLY if re.search(rf"(?<!not )\b{name}\b", expression)}
    return wanted


def _needs_service(item: pytest.Item) -> bool:
    if not set(_SERVICE_FIXTURES).isdisjoint(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(
        isinstance(value, str) and value == "postgres" for value in callspec.params.values()
    )


@pytest.hookimpl(tryfirst=True)  # before ``-m`` reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    requested = _requested(config)
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        if _needs_service(item):
            item.add_marker(pytest.mark.services)
        tiers = {name for name in _FULL_ONLY if item.get_closest_marker(name)}
        (left_out if tiers and not tiers & requested else kept).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
