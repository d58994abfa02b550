"""The durable tables, as migrations: ``operative_runs`` and ``operative_journal``.

``operative_runs`` holds one row per run: its status, the lease a worker holds on it
(owner, expiry, fence, the token of the engine object that took it), its cancel reason
and its outcome. ``operative_journal`` maps ``(run_id, seq)`` to a record. Records and
outcomes are ``TEXT`` holding msgspec's JSON; times are epoch seconds from the engine's
clock (``REAL``/``DOUBLE PRECISION``), not the server's.

Versions (recorded in ``operative_schema`` under ``"durable"``):

1. the two tables and the engine's indexes;
2. ``operative_runs.lease_token`` (a restarted worker takes its own runs back at once).

Both belong to the baseline: databases written before versions were recorded may hold
either shape, so they create only what is missing (see :mod:`operative._sql._migrate`).
"""

from __future__ import annotations

from typing import Any

from .._sql import Dialect, Migration, Schema, ddl

__all__ = ["DURABLE", "JOURNAL_COLUMNS"]

JOURNAL_COLUMNS = (("run_id", "text"), ("seq", "int"), ("kind", "text"), ("record", "text"),
                   ("at", "real"))  # fmt: skip
"""The journal's columns and their kinds, for :meth:`~operative._sql.Dialect.insert_rows`."""

_TABLES = ddl(
    """CREATE TABLE IF NOT EXISTS operative_runs (
        run_id {key} PRIMARY KEY NOT NULL,
        agent_name TEXT NOT NULL,
        session_id TEXT,
        status TEXT NOT NULL,
        created_at {real} NOT NULL,
        updated_at {real} NOT NULL,
        lease_owner TEXT,
        lease_expires_at {real} NOT NULL DEFAULT 0,
        fence {int} NOT NULL DEFAULT 0,
        cancel_reason TEXT,
        outcome TEXT
    ){without_rowid}""",
    "CREATE INDEX IF NOT EXISTS operative_runs_runnable "
    "ON operative_runs (status, lease_expires_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_created ON operative_runs (created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_agent ON operative_runs (agent_name, created_at)",
    "CREATE INDEX IF NOT EXISTS operative_runs_session ON operative_runs (session_id, created_at)",
    """CREATE TABLE IF NOT EXISTS operative_journal (
        run_id {key} NOT NULL,
        seq {int} NOT NULL,
        kind TEXT NOT NULL,
        record TEXT NOT NULL,
        at {real} NOT NULL,
        PRIMARY KEY (run_id, seq)
    ){without_rowid}""",
)


def _lease_token(conn: Any, dialect: Dialect) -> None:
    dialect.add_column(conn, "operative_runs", "lease_token", "TEXT")


DURABLE = Schema(
    name="durable",
    migrations=(
        Migration("operative_runs and operative_journal, with the engine's indexes", _TABLES),
        Migration("operative_runs.lease_token: the engine object holding a lease", _lease_token),
    ),
)
"""The durable engine's schema."""
