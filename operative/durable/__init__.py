"""Durable runs: an acknowledged run survives any later crash, and any worker finishes it.

::

    from operative.durable import Durable, SqliteDurable

    async with SqliteDurable("runs.db") as backend:   # the engine and the journal, one file
        async with agent.open_run("hi", durable=Durable(backend)) as run:
            await run.wait_durably_started()   # now the run id is safe to hand out
            result = await run.result()

After a crash, ``await recover(backend, agents={name: agent})`` (or the worker loop
``serve_durable_runs``) claims every run whose lease expired and continues it from its
journal. ``PostgresDurable(dsn)`` is the same over PostgreSQL. An engine of your own
(the :class:`DurableEngine` and :class:`CheckpointStore` protocols) goes as
``engine=`` and ``checkpoint_store=`` instead. See the "Durable runs" page of the docs.
"""

from __future__ import annotations

from ._errors import LeaseLostError, RunNotFoundError
from ._postgres import PostgresCheckpointStore, PostgresDurable, PostgresEngine
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
from ._sqlite import SqliteCheckpointStore, SqliteDurable, SqliteEngine

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
    "PostgresDurable",
    "PostgresEngine",
    "Replay",
    "RunNotFoundError",
    "RunOutcome",
    "RunRecord",
    "RunStatus",
    "SqliteCheckpointStore",
    "SqliteDurable",
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
