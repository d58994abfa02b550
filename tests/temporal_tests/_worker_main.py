"""A Temporal worker process for the crash tests: ``python _worker_main.py TARGET QUEUE``.

Serves the agents of ``_agents.py`` until killed; prints ``ready`` once it polls.
"""

from __future__ import annotations

import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from operative.temporal import TemporalEngine, serve_temporal_worker
from temporal_tests._agents import AGENTS


async def main(target: str, queue: str) -> None:
    async with TemporalEngine(target, task_queue=queue) as engine, trio.open_nursery() as nursery:
        agents = {name: make() for name, make in AGENTS.items()}
        await nursery.start(lambda task_status: serve_temporal_worker(
            engine, agents=agents, task_status=task_status
        ))  # fmt: skip
        print("ready", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
