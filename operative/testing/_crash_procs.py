"""Worker processes for the crash kit: a fork server, and workers watched and killed by pidfd."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import trio

from operative._core._errors import OperativeError


class CrashKitError(OperativeError):
    """The crash kit could not run (no Linux pidfd, a factory that does not import, a
    worker that did not start): fix the setup the message names and run it again."""


class ForkServer:
    """A process that imports everything once, then forks a worker per JSON config it
    reads on stdin and answers with the worker's pid (one line each)."""

    def __init__(
        self,
        argv: list[str],
        directory: Path,
        *,
        ready: bool = True,
        environment: dict[str, str] | None = None,
    ) -> None:
        """Start ``argv``; with ``ready``, wait for its ``ready`` line (its imports done)."""
        self._stderr_path = directory / "fork-server.err"
        with open(self._stderr_path, "wb") as stderr:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=environment,
            )
        self._lock = threading.Lock()
        assert self._process.stdout is not None
        if ready and self._process.stdout.readline() != b"ready\n":
            self.close()
            raise CrashKitError(
                f"the crash kit's fork server did not start: "
                f"{self._stderr_path.read_text(errors='replace')[-3000:]}"
            )

    @classmethod
    def for_factory(cls, factory: str, directory: Path) -> ForkServer:
        """The crash kit's worker, importing ``factory``'s module (with this process's
        ``sys.path``, so what imports here imports there)."""
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(path or os.getcwd() for path in sys.path)
        argv = [sys.executable, "-m", "operative.testing._crash_worker", "--fork-server", factory]
        return cls(argv, directory, environment=environment)

    def fork(self, config: dict[str, Any]) -> int:
        """Start a worker (blocking, for a few milliseconds); returns its pid."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        with self._lock:
            stdin.write(json.dumps(config).encode() + b"\n")
            stdin.flush()
            line = stdout.readline()
        if not line:
            raise CrashKitError(
                f"the crash kit's fork server exited with {self._process.poll()}: "
                f"{self._stderr_path.read_text(errors='replace')[-3000:]}"
            )
        return int(line)

    def close(self) -> None:
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()


class Worker:
    """A worker process: what it reported, whether it exited, and how."""

    def __init__(self, name: str, pid: int, out: Path, stderr: Path) -> None:
        self.name = name
        self.out = out
        self.stderr = stderr
        self.killed = False
        self._exited = trio.Event()
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None
            self._exited.set()

    async def watch(self) -> None:
        """Set ``running`` false once the process exited."""
        if self._pidfd is None:
            return
        try:
            await trio.lowlevel.wait_readable(self._pidfd)  # readable once it exited
        finally:
            self._exited.set()
            os.close(self._pidfd)
            self._pidfd = None

    @property
    def running(self) -> bool:
        return not self._exited.is_set()

    def send(self, signum: int) -> None:
        """Send ``signum`` to the worker if it still runs."""
        if self._pidfd is not None and self.running:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signum)

    def kill(self) -> None:
        if self._pidfd is not None and self.running:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                return  # it exited just now
            self.killed = True

    async def wait(self, seconds: float = 120) -> bool:
        """Wait for the worker to exit; kill it after ``seconds`` (then return False)."""
        with trio.move_on_after(seconds):
            await self._exited.wait()
        if self.running:
            self.kill()
            await self._exited.wait()
            return False
        return True

    def records(self) -> list[dict[str, Any]]:
        """Every complete line reported (a line cut by SIGKILL is left out)."""
        lines = self.out.read_bytes().split(b"\n") if self.out.exists() else [b""]
        return [json.loads(line) for line in lines[:-1] if line.strip()]

    def said(self, key: str) -> bool:
        return any(key in record for record in self.records())

    @property
    def clean(self) -> bool:
        """It ran to its end (it reports ``exit`` last)."""
        return self.said("exit")

    def acked(self) -> set[str]:
        return {record["acked"] for record in self.records() if "acked" in record}

    def results(self) -> dict[str, dict[str, Any]]:
        return {record["run"]: record for record in self.records() if "run" in record}

    def describe(self) -> str:
        output = self.out.read_text(errors="replace") if self.out.exists() else ""
        errors = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        return (
            f"worker {self.name} (killed: {self.killed}, clean: {self.clean})\nreports:\n"
            f"{output[-4000:]}\nstderr:\n{errors[-6000:]}"
        )
