"""The Temporal dev server for ``bench_temporal.py`` (operative.testing's, with its process
CPU read from ``/proc``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from operative.testing import TemporalDevServer, temporal_binary, temporal_dev_server

__all__ = ["DevServer", "dev_server", "process_cpu_seconds", "temporal_binary"]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from ``/proc``."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # Fields after the command: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DevServer:
    """A running dev server, and the CPU time its process used so far."""

    def __init__(self, server: TemporalDevServer) -> None:
        self.target = server.target
        self.binary = server.binary
        self.process = server.process
        self.cli = server.cli

    def cpu_seconds(self) -> float:
        return process_cpu_seconds(self.process.pid)


@contextmanager
def dev_server(binary: str, log: Path) -> Iterator[DevServer]:
    """Start a dev server on free loopback ports; stop it on the way out."""
    with temporal_dev_server(binary=binary, log=log) as server:
        yield DevServer(server)
