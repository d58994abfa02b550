"""What the run store adds to the durable schema: its indexes (and, on PostgreSQL, the
JSON function its queries read records with).

Versions (recorded in ``operative_schema`` under ``"run store"``; the schema requires
``"durable"``, whose tables it indexes, and brings it up to date first):

1. ``operative_store_runs_status`` (runs by status, newest first), and two partial
   indexes over ``tool.started`` entries: ``operative_store_tool_calls`` (by start time)
   and ``operative_store_tool_names`` (by tool name inside the JSON record); on
   PostgreSQL first ``operative_store_json(text)`` (see
   :mod:`operative._sql._postgres_dialect`).
2. Both ``tool.started`` indexes order by when the call started rather than by the
   entry's commit time: a call whose start waited for its step's next commit carries its
   own time in the record (see :func:`._sql.time_expression`).

Version 1 belongs to the baseline (see :mod:`operative._sql._migrate`): it creates only
what a database written before versions were recorded is missing. Version 2 is plain.
"""

from __future__ import annotations

from typing import Any

from .._sql import Dialect, Migration, Schema
from ..durable._schema import DURABLE
from ._sql import time_expression, tool_name_expression

__all__ = ["RUN_STORE", "indexes", "start_time_indexes"]


def indexes(dialect: Dialect) -> tuple[str, ...]:
    """Version 1's indexes (the ``tool.started`` ones by commit time, replaced in 2)."""
    return (
        # runs(status=...), newest first
        "CREATE INDEX IF NOT EXISTS operative_store_runs_status "
        "ON operative_runs (status, created_at, run_id)",
        # tool_calls(), newest first
        "CREATE INDEX IF NOT EXISTS operative_store_tool_calls "
        "ON operative_journal (at, run_id, seq) WHERE kind = 'tool.started'",
        # tool_calls(tool_name=...), newest first
        "CREATE INDEX IF NOT EXISTS operative_store_tool_names "
        f"ON operative_journal (({tool_name_expression(dialect, 'record')}), at, run_id, seq) "
        "WHERE kind = 'tool.started'",
    )


def start_time_indexes(dialect: Dialect) -> tuple[str, ...]:
    """Version 2's ``tool.started`` indexes, by when the call started."""
    started = time_expression(dialect, "record", "at")
    return (
        # tool_calls(), newest first
        "CREATE INDEX operative_store_tool_calls "
        f"ON operative_journal (({started}), run_id, seq) WHERE kind = 'tool.started'",
        # tool_calls(tool_name=...), newest first
        "CREATE INDEX operative_store_tool_names "
        f"ON operative_journal (({tool_name_expression(dialect, 'record')}), ({started}), "
        "run_id, seq) WHERE kind = 'tool.started'",
    )


def _indexes(conn: Any, dialect: Dialect) -> None:
    for statement in (*dialect.json_setup(), *indexes(dialect)):
        conn.execute(statement)


def _start_times(conn: Any, dialect: Dialect) -> None:
    for name in ("operative_store_tool_calls", "operative_store_tool_names"):
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    for statement in start_time_indexes(dialect):
        conn.execute(statement)


RUN_STORE = Schema(
    name="run store",
    migrations=(
        Migration("the run store's indexes (and PostgreSQL's JSON function)", _indexes),
        Migration("the tool-call indexes order by start time, not commit time", _start_times),
    ),
    requires=(DURABLE,),
)
"""The run store's schema."""
