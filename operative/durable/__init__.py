"""Durable runs: an acknowledged run survives any later crash, and any worker finishes it.

::

    from operative.durable import Durable, SqliteEngine, SqliteCheckpointStore

    engine, journal = SqliteEngine("runs.db"), SqliteCheckpointStore("runs.db")
    durable = Durable(engine=engine, checkpoint_store=journal)
    async with agent.open_run("hi", durable=durable) as run:
        await run.wait_durably_started()   # now the run id is safe to hand out
        result = await run.result()

After a crash, ``await recover(engine=..., checkpoint_store=..., agents={name: agent})``
(or the worker loop ``serve_durable_runs``) claims every run whose lease expired and
continues it from its journal. See the "Durable runs" page of the docs.
"""

from __future__ import annotations

from ._errors import LeaseLostError, RunNotFoundError
from ._postgres import PostgresCheckpointStore, PostgresEngine
from ._protocols import CheckpointStore, DurableEngine
from ._records import (
    Finished,
    Generated,
    JournalEntry,
    JournalRecord,
    Lease,
    RunOutcome,
    RunRecord,
    RunStatus,
    Started,
    StepDone,
    ToolSettled,
    ToolStarted,
)
from ._recover import recover, serve_durable_runs
from ._replay import Replay, replay_journal, transcript
from ._routing import Durable
from ._sqlite import SqliteCheckpointStore, SqliteEngine

__all__ = [
    "CheckpointStore",
    "Durable",
    "DurableEngine",
    "Finished",
    "Generated",
    "JournalEntry",
    "JournalRecord",
    "Lease",
    "LeaseLostError",
    "PostgresCheckpointStore",
    "PostgresEngine",
    "Replay",
    "RunNotFoundError",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
    "SqliteCheckpointStore",
    "SqliteEngine",
    "Started",
    "StepDone",
    "ToolSettled",
    "ToolStarted",
    "recover",
    "replay_journal",
    "serve_durable_runs",
    "transcript",
]
