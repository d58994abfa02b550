"""A Temporal worker process for the crash tests: ``python _worker_main.py TARGET QUEUE``.

Serves the agents of ``_agents.py`` until killed; prints ``ready`` once it polls.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operative.temporal import TemporalEngine, serve_temporal_worker
from temporal_tests._agents import AGENTS


class _DiesAfterFinishing(TemporalEngine):
    """``OPERATIVE_TEST_DIE_AFTER_FINISH``: SIGKILL this process right after a run's
    outcome is journaled (before its activity can report that it completed)."""

    async def _update(self, run_id: str, name: str, payload: bytes) -> bytes | None:
        reply = await super()._update(run_id, name, payload)
        if b'"type":"finished"' in payload:
            os.kill(os.getpid(), signal.SIGKILL)
        return reply


async def main(target: str, queue: str) -> None:
    kind = (
        _DiesAfterFinishing if os.environ.get("OPERATIVE_TEST_DIE_AFTER_FINISH") else TemporalEngine
    )
    async with kind(target, task_queue=queue) as engine, trio.open_nursery() as nursery:
        agents = {name: make() for name, make in AGENTS.items()}
        await nursery.start(lambda task_status: serve_temporal_worker(
            engine, agents=agents, task_status=task_status
        ))  # fmt: skip
        print("ready", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
