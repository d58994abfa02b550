"""Durable operative runs on Temporal.

::

    from operative.temporal import TemporalEngine, serve_temporal_worker

    async with TemporalEngine("127.0.0.1:7233") as engine:
        # a worker process:
        await serve_temporal_worker(engine, agents={"weather": agent})
        # anywhere:
        run_id = await engine.start_run("weather", "Porto?")
        result = await engine.result(run_id)

One small deterministic workflow per run holds the run's journal and dispatches one
long-running, heartbeating activity; the activity drives the real operative loop in a
Trio worker, and its journal writes are the workflow's updates (fenced by the attempt,
so a stale attempt cannot write). No user code runs in the workflow sandbox. See the
"Temporal" page of the docs.
"""

from ._engine import TemporalEngine
from ._history import RunHistory, TemporalRunError
from ._worker import serve_temporal_worker

__all__ = ["RunHistory", "TemporalEngine", "TemporalRunError", "serve_temporal_worker"]
