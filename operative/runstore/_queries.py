"""The run store's methods, written once over a :class:`~operative._sql.Database`.

Every call reads one snapshot of the database (``Database.read``: SQLite ``BEGIN``,
PostgreSQL ``REPEATABLE READ, READ ONLY``), in a worker thread. Both drivers
(``sqlite3``, psycopg 3) offer ``connection.execute(sql, params)``, and the statements
come from :mod:`._sql` in the database's dialect, so ``SqliteRunStore`` and
``PostgresRunStore`` only pick the database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from .._core._errors import InvalidArgument
from .._core._types import ToolCall, Usage
from .._pricing import PriceTable
from .._sql import Database, Dialect, SqlBacked
from ..conversation import Message
from ..durable._records import RunRecord, RunStatus, ToolSettled, ToolStarted
from ..durable._rows import STATUSES, check_run_id, decode_entry, decode_run, statuses
from ._assemble import (
    ModelTally,
    build_detail,
    check_filters,
    corrupt,
    decode_cursor,
    decode_journal,
    encode_cursor,
    price_models,
    summarize,
    tool_call,
    usage_of,
)
from ._records import Page, RunDetail, RunSummary, ToolCallOutcome, ToolCallRecord, UsageTotals
from ._sql import (
    USAGE_FIELDS,
    Runs,
    ToolCalls,
    entry,
    journal,
    run_row,
    runs_page,
    tallies,
    tool_calls_page,
    usage_by_model,
    usage_by_status,
)

__all__ = ["TOOL_CALL_OUTCOMES", "SqlRunStore"]

_T = TypeVar("_T")
_N = len(USAGE_FIELDS)
_CHUNK = 500  # run ids per statement, well under SQLite's parameter limit
TOOL_CALL_OUTCOMES: frozenset[str] = frozenset(
    {"success", "error", "denied", "action-required", "cancelled", "in-flight"}
)
_call_decoder = msgspec.json.Decoder(ToolCall)
_message_decoder = msgspec.json.Decoder(Message)


def _str(raw: Any) -> Any:
    """Text the driver returned as bytes (SQLite here reads bytes, to name bad rows)."""
    if isinstance(raw, memoryview):
        raw = bytes(raw)
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


class SqlRunStore(SqlBacked):
    """The read API of a run store over ``db``, costs at ``prices``."""

    __slots__ = ("_dialect", "_prices")

    _dialect: Dialect
    _prices: PriceTable

    def __init__(self, db: Database, prices: PriceTable) -> None:
        if not isinstance(prices, PriceTable):
            raise InvalidArgument(f"prices= must be a PriceTable, not {type(prices).__name__}")
        self._db = db
        self._dialect = db.dialect
        self._prices = prices

    @property
    def database(self) -> str:
        """Where the runs are read from: the file (absolute), or the DSN without its
        password."""
        return self._db.name

    def _where(self) -> str:
        return self._db.where

    async def _read(self, work: Callable[[Any], _T]) -> _T:
        return await self._db.read(work)

    @property
    def prices(self) -> PriceTable:
        """The price table costs are computed at."""
        return self._prices

    # -- runs ------------------------------------------------------------------------

    async def runs(
        self,
        *,
        status: RunStatus | Sequence[RunStatus] | None = None,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page[RunSummary]:
        """Runs matching every filter given, newest first (by creation time).

        Args:
            status: one status or several.
            agent_name: runs of this agent.
            session_id: runs of this session.
            since: created at or after (epoch seconds).
            until: created before (epoch seconds).
            limit: at most this many per page.
            after: the ``next_cursor`` of the previous page.

        Raises:
            CorruptRecordError: a run row, or a journal entry its summary sums, cannot be
                read (names the run, and the entry's sequence number).
        """
        check_filters(
            limit=limit,
            since=since,
            until=until,
            texts={"agent_name": agent_name, "session_id": session_id},
        )
        cursor: tuple[float, str] | None = None
        if after is not None:
            created, run_id = decode_cursor("runs", after, (float | int, str))
            cursor = (float(created), run_id)
        filters = Runs(
            statuses=statuses(status),
            agent_name=agent_name,
            session_id=session_id,
            since=since,
            until=until,
        )
        dialect, where, prices = self._dialect, self._where(), self._prices

        def work(conn: Any) -> Page[RunSummary]:
            rows = conn.execute(*runs_page(dialect, filters, cursor, limit)).fetchall()
            records = [decode_run(where, row) for row in rows[:limit]]
            counts = self._tallies(conn, [record.run_id for record in records])
            items = tuple(
                summarize(record, counts.get(record.run_id, {}), prices) for record in records
            )
            last = records[-1] if len(rows) > limit else None
            return Page(
                items=items,
                next_cursor=None
                if last is None
                else encode_cursor("runs", last.created_at, last.run_id),
            )

        return await self._read(work)

    def _tallies(self, conn: Any, run_ids: Sequence[str]) -> dict[str, ModelTally]:
        found: dict[str, ModelTally] = {}
        for start in range(0, len(run_ids), _CHUNK):
            chunk = run_ids[start : start + _CHUNK]
            for row in conn.execute(*tallies(self._dialect, chunk)).fetchall():
                run_id, model, steps = _str(row[0]), _str(row[1]), int(row[2])
                bad, bad_seq = row[3 + _N], row[4 + _N]
                if bad:
                    self._raise_unreadable(conn, run_id, bad_seq, "its usage cannot be summed")
                found.setdefault(run_id, {})[model] = (steps, usage_of(row[3 : 3 + _N]))
        return found

    def _raise_unreadable(self, conn: Any, run_id: str, seq: Any, problem: str) -> None:
        """Decode the entry the database could not read (which raises); else say so."""
        where = self._where()
        row = conn.execute(entry(self._dialect), [run_id, seq]).fetchone()
        if row is not None:
            decode_journal(where, run_id, [row])
        raise corrupt(f"journal entry {seq!r} of run {run_id!r} in {where}", problem)

    async def run(self, run_id: str) -> RunDetail | None:
        """One run in full (summary, steps, tool calls, transcript); ``None`` if unknown.

        Raises:
            CorruptRecordError: the run row or a journal entry cannot be read, or the
                journal is not one a run could have written (names run and sequence).
        """
        check_run_id(run_id)
        dialect, where, prices = self._dialect, self._where(), self._prices

        def work(conn: Any) -> RunDetail | None:
            row = conn.execute(run_row(dialect), [run_id]).fetchone()
            if row is None:
                return None
            record: RunRecord = decode_run(where, row)
            entries = decode_journal(
                where, run_id, conn.execute(journal(dialect), [run_id]).fetchall()
            )
            return build_detail(record, entries, prices)

        return await self._read(work)

    # -- tool calls ------------------------------------------------------------------

    async def tool_calls(
        self,
        *,
        run_id: str | None = None,
        tool_name: str | None = None,
        outcome: ToolCallOutcome | Sequence[ToolCallOutcome] | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page[ToolCallRecord]:
        """Executed tool calls across runs, newest first (by start time).

        A call is listed once it started executing (calls refused before that, e.g. by a
        hook, are only in their step's ``results``).

        Args:
            run_id: calls of this run.
            tool_name: calls of this tool.
            outcome: one outcome or several (``"in-flight"`` included).
            since: started at or after (epoch seconds).
            until: started before (epoch seconds).
            limit: at most this many per page.
            after: the ``next_cursor`` of the previous page.

        Raises:
            CorruptRecordError: a journal entry cannot be read (names run and sequence).
        """
        if run_id is not None:
            check_run_id(run_id)
        check_filters(limit=limit, since=since, until=until, texts={"tool_name": tool_name})
        outcomes: list[str] | None = None
        if outcome is not None:
            outcomes = [outcome] if isinstance(outcome, str) else list(outcome)
            for item in outcomes:
                if item not in TOOL_CALL_OUTCOMES:
                    raise InvalidArgument(
                        f"outcome must be one of {sorted(TOOL_CALL_OUTCOMES)}, not {item!r}"
                    )
        cursor: tuple[float, str, int] | None = None
        if after is not None:
            at, cursor_run, seq = decode_cursor("tool_calls", after, (float | int, str, int))
            cursor = (float(at), cursor_run, seq)
        filters = ToolCalls(
            run_id=run_id, tool_name=tool_name, outcomes=outcomes, since=since, until=until
        )
        dialect = self._dialect

        def work(conn: Any) -> Page[ToolCallRecord]:
            rows = conn.execute(*tool_calls_page(dialect, filters, cursor, limit)).fetchall()
            page = rows[:limit]
            items = []
            for row in page:
                item = self._tool_call(conn, row)
                if (tool_name is None or item.tool_name == tool_name) and (
                    outcomes is None or item.outcome in outcomes
                ):
                    items.append(item)
            last = page[-1] if len(rows) > limit else None
            return Page(
                items=tuple(items),
                next_cursor=None
                if last is None
                else encode_cursor("tool_calls", float(last[2]), _str(last[0]), int(last[1])),
            )

        return await self._read(work)

    def _tool_call(self, conn: Any, row: Sequence[Any]) -> ToolCallRecord:
        (raw_run, seq, started_at, started, settled_seq, settled_at, settled, attempts,
         generated_seq, call, finished_seq, finished_at, answer, _) = row  # fmt: skip
        where = self._where()
        run_id = _str(raw_run)
        start = decode_journal(where, run_id, [(seq, b"tool.started", started, started_at)])[0]
        assert isinstance(start.record, ToolStarted)
        settle: ToolSettled | None = None
        if settled_seq is not None:
            decoded = decode_entry(where, run_id, settled_seq, settled, settled_at)
            if not isinstance(decoded.record, ToolSettled):
                raise corrupt(
                    f"journal entry {settled_seq!r} of run {run_id!r} in {where}",
                    f"its kind column says 'tool.settled' but it holds a "
                    f"{type(decoded.record).__name__}",
                )
            settle = decoded.record
        if call is None:
            if generated_seq is not None:  # the step's message may be what cannot be read
                rows = conn.execute(entry(self._dialect), [run_id, generated_seq]).fetchall()
                decode_journal(where, run_id, rows)
            raise corrupt(
                f"journal entry {seq!r} of run {run_id!r} in {where}",
                f"call {start.record.call_id!r} is not in the assistant message of its step "
                f"(the 'generated' entry at seq {generated_seq!r})",
            )
        try:
            requested = _call_decoder.decode(_raw(call))
        except (msgspec.DecodeError, TypeError) as exc:
            raise corrupt(
                f"journal entry {generated_seq!r} of run {run_id!r} in {where}", str(exc)
            ) from None
        message: Message | None = None
        if answer is not None:
            try:
                message = _message_decoder.decode(_raw(answer))
            except (msgspec.DecodeError, TypeError) as exc:
                raise corrupt(
                    f"journal entry {finished_seq!r} of run {run_id!r} in {where}", str(exc)
                ) from None
        return tool_call(
            run_id,
            start.record,
            start.at,
            call=requested,
            attempts=int(attempts),
            settled=settle,
            settled_at=None if settled_at is None else float(settled_at),
            finished_at=None if finished_seq is None else float(finished_at),
            answer=message,
        )

    # -- usage -----------------------------------------------------------------------

    async def usage(
        self,
        *,
        agent_name: str | None = None,
        session_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> UsageTotals:
        """What the runs matching every filter spent (runs selected by creation time).

        Raises:
            CorruptRecordError: a run's outcome or a journal entry that is summed cannot
                be read (names the run, and the entry's sequence number).
        """
        check_filters(
            limit=1,
            since=since,
            until=until,
            texts={"agent_name": agent_name, "session_id": session_id},
        )
        filters = Runs(agent_name=agent_name, session_id=session_id, since=since, until=until)
        dialect, prices = self._dialect, self._prices

        def work(conn: Any) -> UsageTotals:
            by_status = dict.fromkeys(sorted(STATUSES), 0)
            usage = Usage()
            for row in conn.execute(*usage_by_status(dialect, filters)).fetchall():
                status, runs, bad, bad_run = _str(row[0]), int(row[1]), row[2 + _N], row[3 + _N]
                if bad or status not in STATUSES:
                    culprit = _str(bad_run) if bad else None
                    self._raise_bad_run(conn, culprit, status)
                by_status[status] = runs
                if status != "running":
                    usage = usage + usage_of(row[2 : 2 + _N])
            tally: ModelTally = {}
            journaled = Usage()
            for row in conn.execute(*usage_by_model(dialect, filters)).fetchall():
                live, model, steps = bool(row[0]), _str(row[1]), int(row[2])
                bad, bad_run = row[3 + _N], row[4 + _N]
                if bad:
                    self._tallies(conn, [_str(bad_run)])  # raises, naming the entry
                spent = usage_of(row[3 : 3 + _N])
                before = tally.get(model, (0, Usage()))
                tally[model] = (before[0] + steps, before[1] + spent)
                journaled = journaled + spent
                if live:
                    usage = usage + spent
            by_model, cost, unknown = price_models(tally, prices)
            unpriced = cost is None or usage != journaled
            return UsageTotals(
                runs=sum(by_status.values()),
                runs_by_status=by_status,
                steps=sum(steps for steps, _ in tally.values()),
                usage=usage,
                cost_usd=None if unpriced else cost,
                unpriced=unpriced,
                unpriced_models=unknown,
                by_model=by_model,
            )

        return await self._read(work)

    def _raise_bad_run(self, conn: Any, run_id: str | None, status: str) -> None:
        where = self._where()
        if run_id is None:
            rows = conn.execute(
                f"SELECT run_id FROM operative_runs WHERE status = {self._dialect.mark}",
                [status],
            ).fetchall()
            run_id = _str(rows[0][0]) if rows else "?"
        row = conn.execute(run_row(self._dialect), [run_id]).fetchone()
        if row is not None:
            decode_run(where, row)
        raise corrupt(f"run record {run_id!r} in {where}", "its outcome cannot be summed")


def _raw(value: Any) -> str | bytes:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, str | bytes):
        return value
    # psycopg hands back JSON values it parsed itself; encode them for the decoder.
    return msgspec.json.encode(value)
