"""The run store's queries, written once for SQLite and PostgreSQL.

A :class:`~operative._sql.Dialect` knows how its database reads JSON; the builders here
compose the statements from it. Filters, ordering and pagination are SQL; so are the sums. JSON
that the database cannot read never silently drops out of a result:

- a value extracted from an unreadable record is ``NULL``, and a ``NULL`` passes the
  filters on JSON values (tool name, outcome), so the row reaches the decoder, which
  raises :class:`~operative.errors.CorruptRecordError` naming its run and sequence;
- the sums count the rows they could not read, and the backend then decodes the first
  of them, which raises the same error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .._sql import JSON_FUNCTION, Dialect, Field, Query
from ..durable._rows import RUN_COLUMNS

__all__ = [
    "USAGE_FIELDS",
    "Runs",
    "ToolCalls",
    "time_expression",
    "tool_name_expression",
]

USAGE_FIELDS = ("prompt", "completion", "total", "cache_read", "cache_write", "reasoning")


_USAGE = tuple(Field(("usage", name), "integer") for name in USAGE_FIELDS)
_GENERATED = (
    Field(("step",), "integer", required=True),
    Field(("message",), "object", required=True),
    Field(("usage",), "object"),
    *_USAGE,
    Field(("model",), "string"),
)
_OUTCOME = (
    Field(("finish_reason",), "string", required=True),
    Field(("usage",), "object"),
    *_USAGE,
)


# -- runs ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Runs:
    """The run filters every run query shares (``r`` is ``operative_runs``)."""

    statuses: Sequence[str] | None = None
    agent_name: str | None = None
    session_id: str | None = None
    since: float | None = None
    until: float | None = None

    def where(self, dialect: Dialect) -> Query:
        mark = dialect.mark
        sql = ["1 = 1"]
        params: list[Any] = []
        if self.statuses is not None:
            clause, values = dialect.any_of("r.status", self.statuses)
            sql.append(clause)
            params.extend(values)
        for column, value in (("agent_name", self.agent_name), ("session_id", self.session_id)):
            if value is not None:
                sql.append(f"r.{column} = {mark}")
                params.append(value)
        if self.since is not None:
            sql.append(f"r.created_at >= {mark}")
            params.append(float(self.since))
        if self.until is not None:
            sql.append(f"r.created_at < {mark}")
            params.append(float(self.until))
        return " AND ".join(sql), params


_COLUMNS = ", ".join(f"r.{column.strip()}" for column in RUN_COLUMNS.split(","))


def runs_page(dialect: Dialect, runs: Runs, after: tuple[float, str] | None, limit: int) -> Query:
    """Run rows newest first (``RUN_COLUMNS``), one more than ``limit`` to see a next page."""
    mark = dialect.mark
    where, params = runs.where(dialect)
    if after is not None:
        where += f" AND (r.created_at < {mark} OR (r.created_at = {mark} AND r.run_id < {mark}))"
        params.extend([after[0], after[0], after[1]])
    params.append(limit + 1)
    return (
        f"SELECT {_COLUMNS} FROM operative_runs r WHERE {where} "
        f"ORDER BY r.created_at DESC, r.run_id DESC LIMIT {mark}",
        params,
    )


def run_row(dialect: Dialect) -> str:
    return f"SELECT {_COLUMNS} FROM operative_runs r WHERE r.run_id = {dialect.mark}"


def journal(dialect: Dialect) -> str:
    return (
        "SELECT seq, kind, record, at FROM operative_journal "
        f"WHERE run_id = {dialect.mark} ORDER BY seq"
    )


def entry(dialect: Dialect) -> str:
    mark = dialect.mark
    return (
        "SELECT seq, kind, record, at FROM operative_journal "
        f"WHERE run_id = {mark} AND seq = {mark}"
    )


# -- usage -----------------------------------------------------------------------------


def _generated_columns(dialect: Dialect, doc: str) -> tuple[str, str, str]:
    """(model, the usage sums and the unreadable count, the readable predicate)."""
    ok = dialect.readable(doc, _GENERATED)
    sums = ", ".join(f"SUM({dialect.integer(doc, 'usage', name)})" for name in USAGE_FIELDS)
    return dialect.text(doc, "model"), f"{sums}, SUM(CASE WHEN {ok} THEN 0 ELSE 1 END)", ok


def tallies(dialect: Dialect, run_ids: Sequence[str]) -> Query:
    """Per run and model: steps, usage sums, unreadable rows and the first one's seq."""
    model, sums, ok = _generated_columns(dialect, "j.record")
    clause, params = dialect.any_of("j.run_id", run_ids)
    return (
        f"SELECT j.run_id, {model}, COUNT(*), {sums}, MIN(CASE WHEN {ok} THEN NULL ELSE j.seq END) "
        f"FROM operative_journal j WHERE j.kind = 'generated' AND {clause} "
        f"GROUP BY j.run_id, {model}",
        params,
    )


def usage_by_model(dialect: Dialect, runs: Runs) -> Query:
    """Per (run still running?, model): steps, usage sums, unreadable rows, one such run."""
    model, sums, ok = _generated_columns(dialect, "j.record")
    where, params = runs.where(dialect)
    live = "CASE WHEN r.status = 'running' THEN 1 ELSE 0 END"
    return (
        f"SELECT {live}, {model}, COUNT(*), {sums}, "
        f"MIN(CASE WHEN {ok} THEN NULL ELSE j.run_id END) "
        "FROM operative_runs r JOIN operative_journal j ON j.run_id = r.run_id "
        f"WHERE j.kind = 'generated' AND {where} GROUP BY {live}, {model}",
        params,
    )


def usage_by_status(dialect: Dialect, runs: Runs) -> Query:
    """Per status: runs, their outcomes' usage sums, unreadable outcomes, one such run."""
    where, params = runs.where(dialect)
    doc = "r.outcome"
    ok = dialect.readable(doc, _OUTCOME)
    sums = ", ".join(f"SUM({dialect.integer(doc, 'usage', name)})" for name in USAGE_FIELDS)
    bad = f"r.outcome IS NOT NULL AND NOT {ok}"
    return (
        f"SELECT r.status, COUNT(*), {sums}, SUM(CASE WHEN {bad} THEN 1 ELSE 0 END), "
        f"MIN(CASE WHEN {bad} THEN r.run_id END) "
        f"FROM operative_runs r WHERE {where} GROUP BY r.status",
        params,
    )


# -- tool calls ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ToolCalls:
    """The filters of a tool-call listing."""

    run_id: str | None = None
    tool_name: str | None = None
    outcomes: Sequence[str] | None = None
    since: float | None = None
    until: float | None = None


def tool_name_expression(dialect: Dialect, column: str) -> str:
    """The indexed expression: a ``tool.started`` record's tool name."""
    return dialect.text(column, "tool_name")


# A JSON number PostgreSQL casts to DOUBLE PRECISION without an out-of-range error (at
# most 1e119 in size, none below 1e-119): any time msgspec writes, where a bigger
# exponent could only be a damaged record.
_PG_NUMBER = r"'^-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,2})?$'"


def time_expression(dialect: Dialect, record: str, at: str) -> str:
    """The indexed expression: when a journal entry's event happened.

    A record that waited for a later commit carries its own time (``at``, epoch seconds);
    the row's ``at`` column is its commit time, which is the event's time for a record
    committed as it happened. A record whose own ``at`` cannot be read as a number (a
    damaged row) falls back on its commit time, so it is still listed and reaches the
    decoder, which names it.
    """
    if dialect.name == "postgres":
        own = f"({JSON_FUNCTION}({record}) -> 'at')::text"
        number = f"(CASE WHEN {own} ~ {_PG_NUMBER} THEN ({own})::double precision END)"
    else:
        number = (
            f"(CASE WHEN json_valid({record}) THEN CASE WHEN json_type({record}, '$.at') "
            f"IN ('integer', 'real') THEN json_extract({record}, '$.at') END END)"
        )
    return f"COALESCE({number}, {at})"


def tool_calls_page(
    dialect: Dialect, calls: ToolCalls, after: tuple[float, str, int] | None, limit: int
) -> Query:
    """Executed calls newest first, one more than ``limit``.

    One row per call: its first ``tool.started`` entry ``s``, the ``tool.settled``
    entry ``t`` that answers it, the run's ``finished`` entry ``f`` (if the journal
    ends with one) and the call as its step's ``generated`` entry ``g`` holds it.
    Filtered, ordered and paged by when the call started (:func:`time_expression`),
    which is what the listing reports as ``started_at``.
    """
    mark = dialect.mark
    started = time_expression(dialect, "s.record", "s.at")
    call = dialect.text("s.record", "call_id")
    settled_call = dialect.text("x.record", "result", "call_id")
    answer_outcome = dialect.element("f.record", ("messages",), "tool_call_id", "outcome", call)
    outcome = (  # NULL when a record it depends on cannot be read
        f"CASE WHEN {call} IS NULL THEN NULL "
        f"WHEN t.seq IS NOT NULL THEN {dialect.text('t.record', 'result', 'outcome')} "
        f"WHEN f.seq IS NOT NULL THEN COALESCE({answer_outcome}, 'cancelled') "
        "ELSE 'in-flight' END"
    )
    core_where = ["s.kind = 'tool.started'"]
    params: list[Any] = []
    if calls.run_id is not None:
        core_where.append(f"s.run_id = {mark}")
        params.append(calls.run_id)
    if calls.since is not None:
        core_where.append(f"{started} >= {mark}")
        params.append(float(calls.since))
    if calls.until is not None:
        core_where.append(f"{started} < {mark}")
        params.append(float(calls.until))
    if after is not None:
        core_where.append(
            f"({started} < {mark} OR ({started} = {mark} AND (s.run_id < {mark} "
            f"OR (s.run_id = {mark} AND s.seq < {mark}))))"
        )
        params.extend([after[0], after[0], after[1], after[1], after[2]])
    core_where.append(
        "NOT EXISTS (SELECT 1 FROM operative_journal p WHERE p.run_id = s.run_id "
        f"AND p.seq < s.seq AND p.kind = 'tool.started' "
        f"AND {dialect.text('p.record', 'call_id')} = {call})"
    )
    core = (
        f"SELECT s.run_id AS run_id, s.seq AS seq, {started} AS started_at, "
        "s.record AS started, "
        "t.seq AS settled_seq, t.at AS settled_at, t.record AS settled, "
        "(SELECT COUNT(*) FROM operative_journal a WHERE a.run_id = s.run_id "
        "AND a.seq >= s.seq AND a.kind = 'tool.started' "
        f"AND {dialect.text('a.record', 'call_id')} = {call}) AS attempts, "
        "g.seq AS generated_seq, "
        f"{dialect.element('g.record', ('message', 'tool_calls'), 'id', '', call)} AS call, "
        "f.seq AS finished_seq, f.at AS finished_at, "
        f"{dialect.element('f.record', ('messages',), 'tool_call_id', '', call)} AS answer, "
        f"{outcome} AS outcome "
        "FROM operative_journal s "
        "LEFT JOIN operative_journal t ON t.run_id = s.run_id AND t.seq = ("
        "SELECT MIN(x.seq) FROM operative_journal x WHERE x.run_id = s.run_id "
        f"AND x.seq > s.seq AND x.kind = 'tool.settled' AND {settled_call} = {call}) "
        "LEFT JOIN operative_journal g ON g.run_id = s.run_id AND g.seq = ("
        "SELECT MAX(y.seq) FROM operative_journal y WHERE y.run_id = s.run_id "
        "AND y.seq < s.seq AND y.kind = 'generated') "
        "LEFT JOIN operative_journal f ON f.run_id = s.run_id AND f.kind = 'finished' "
        "AND f.seq = (SELECT MAX(z.seq) FROM operative_journal z WHERE z.run_id = s.run_id) "
        "WHERE "
    )

    def branch(name_clause: str | None, name_params: list[Any]) -> Query:
        where = [*core_where]
        if name_clause is not None:
            where.append(name_clause)
        sql = f"SELECT * FROM ({core}{' AND '.join(where)}) c"
        branch_params = [*params, *name_params]
        if calls.outcomes is not None:
            clause, values = dialect.any_of("c.outcome", calls.outcomes)
            sql += f" WHERE ({clause} OR c.outcome IS NULL)"
            branch_params.extend(values)
        sql += f" ORDER BY c.started_at DESC, c.run_id DESC, c.seq DESC LIMIT {mark}"
        branch_params.append(limit + 1)
        return sql, branch_params

    if calls.tool_name is None:
        return branch(None, [])
    # The index serves each branch in order; a record whose name cannot be read has a
    # NULL name and comes along, so the decoder sees it.
    name = tool_name_expression(dialect, "s.record")
    named, named_params = branch(f"{name} = {mark}", [calls.tool_name])
    unnamed, unnamed_params = branch(f"{name} IS NULL", [])
    return (
        f"SELECT * FROM ({named}) n UNION ALL SELECT * FROM ({unnamed}) u "
        f"ORDER BY started_at DESC, run_id DESC, seq DESC LIMIT {mark}",
        [*named_params, *unnamed_params, limit + 1],
    )
