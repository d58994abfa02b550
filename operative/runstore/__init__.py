"""The run store: run state and action history of durable runs, for people and dashboards.

::

    from operative.runstore import SqliteRunStore

    async with SqliteRunStore("runs.db") as store:
        page = await store.runs(status="running", agent_name="support")
        detail = await store.run(page.items[0].run_id)
        failed = await store.tool_calls(outcome="error", since=time.time() - 3600)
        spent = await store.usage(session_id="s-42")

It reads the durable engine's own tables (``operative_runs`` and ``operative_journal``):
a durable run is visible as soon as it is committed, with no extra writes. Open it on the
file (or DSN), or on the backend the runs are written through:
``SqliteRunStore(backend)`` for a ``SqliteDurable``, ``PostgresRunStore(backend)`` for a
``PostgresDurable``; it opens connections of its own either way.

One store class per database (``SqliteRunStore(path)``, ``PostgresRunStore(dsn)``) rather
than one ``RunStore`` wrapped around an engine, because the reader is usually somewhere
else: an operator's dashboard or a command-line tool, in a process that runs no engine.
Its own small connection pool also keeps long listing queries off the engine's
connections, which renew leases: a busy dashboard never delays a lease renewal. Both
classes satisfy the :class:`RunStore` protocol.
"""

from ._postgres import PostgresRunStore as PostgresRunStore
from ._protocol import RunStore as RunStore
from ._records import ModelUsage as ModelUsage
from ._records import Page as Page
from ._records import RunDetail as RunDetail
from ._records import RunSummary as RunSummary
from ._records import StepRecord as StepRecord
from ._records import StepState as StepState
from ._records import ToolCallOutcome as ToolCallOutcome
from ._records import ToolCallRecord as ToolCallRecord
from ._records import UsageTotals as UsageTotals
from ._sqlite import SqliteRunStore as SqliteRunStore

__all__ = [
    "ModelUsage",
    "Page",
    "PostgresRunStore",
    "RunDetail",
    "RunStore",
    "RunSummary",
    "SqliteRunStore",
    "StepRecord",
    "StepState",
    "ToolCallOutcome",
    "ToolCallRecord",
    "UsageTotals",
]
