"""PostgreSQL's dialect: ``%s`` placeholders, arrays, row locks, JSON through one function.

Text that is a key uses the ``"C"`` collation, so orderings are code-point order as in
SQLite. Records and outcomes are ``TEXT`` holding msgspec's JSON, not ``JSONB``: the
bytes read back are the bytes written, and ``JSONB`` refuses a ``\\u0000`` escape that
message content may legitimately hold. Queries that look inside a record go through
:data:`JSON_FUNCTION`, which the run store creates (:meth:`PostgresDialect.json_setup`).

psycopg is imported only when its exception classes are asked for, which happens only
once a connection exists: importing this module never imports psycopg.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from ._dialect import Dialect, Field, Query

__all__ = ["JSON_FUNCTION", "POSTGRES", "PostgresDialect"]

JSON_FUNCTION = "operative_store_json"
"""``text`` to ``json``, or NULL when it is not JSON."""

_SCHEMA_LOCK = 7279751083373420113  # advisory lock serialising operative's schema changes
_TYPES = {"text": "text", "int": "bigint", "real": "double precision"}
_INTEGER = "'^-?[0-9]+$'"
_FUNCTION = f"""CREATE OR REPLACE FUNCTION {JSON_FUNCTION}(raw text) RETURNS json
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
    BEGIN
        RETURN raw::json;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END
    $$"""


class PostgresDialect(Dialect):
    """PostgreSQL 12 or newer, through psycopg 3."""

    name = "postgres"
    mark = "%s"
    chunk = 1 << 30  # values travel as one array parameter: no limit to mind
    holds_nul = False
    schema_lock = f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})"
    words = MappingProxyType(
        {
            "key": 'TEXT COLLATE "C"',
            "int": "BIGINT",
            "real": "DOUBLE PRECISION",
            "without_rowid": "",
            "lock": " FOR UPDATE",
            "skip_locked": " FOR UPDATE SKIP LOCKED",
            "distinct": "IS DISTINCT FROM",
        }
    )

    def any_of(self, column: str, values: Sequence[Any]) -> Query:
        return f"{column} = ANY(%s)", [list(values)]

    def _insert_many(
        self,
        conn: Any,
        table: str,
        names: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Any],
    ) -> None:
        # One statement, one round trip: a column of each kind as one array parameter.
        arrays = ", ".join(f"%s::{_TYPES[kind]}[]" for _, kind in columns)
        conn.execute(
            f"INSERT INTO {table} ({names}) SELECT * FROM unnest({arrays})",
            [list(column) for column in zip(*rows, strict=True)],
        )

    @property
    def unique_violation(self) -> tuple[type[BaseException], ...]:
        from psycopg import errors

        return (errors.UniqueViolation,)

    @property
    def transient(self) -> tuple[type[BaseException], ...]:
        from psycopg import errors

        return (errors.DeadlockDetected, errors.SerializationFailure)

    def table_exists(self, conn: Any, table: str) -> bool:
        (found,) = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        return bool(found)

    def column_exists(self, conn: Any, table: str, column: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s "
            "AND NOT attisdropped",
            (table, column),
        ).fetchone()
        return row is not None

    def add_column(self, conn: Any, table: str, column: str, kind: str) -> None:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")

    # -- JSON ----------------------------------------------------------------------
    # The records are TEXT that may hold anything; JSON_FUNCTION parses them into json
    # (which, unlike jsonb, accepts every string msgspec writes, \u0000 included) and
    # yields NULL instead of an error for text that is not JSON.

    def json_setup(self) -> tuple[str, ...]:
        return (_FUNCTION,)

    @staticmethod
    def _doc(doc: str) -> str:
        return f"{JSON_FUNCTION}({doc})"

    def _at(self, doc: str, path: Sequence[str]) -> str:
        return f"({self._doc(doc)} #> '{{{','.join(path)}}}')"

    def _get(self, doc: str, path: Sequence[str]) -> str:
        return f"({self._doc(doc)} #>> '{{{','.join(path)}}}')"

    def text(self, doc: str, *path: str) -> str:
        at, get = self._at(doc, path), self._get(doc, path)
        return f"(CASE WHEN json_typeof({at}) = 'string' THEN {get} END)"

    def _is_integer(self, doc: str, path: Sequence[str]) -> str:
        return (
            f"json_typeof({self._at(doc, path)}) = 'number' AND {self._get(doc, path)} ~ {_INTEGER}"
        )

    def integer(self, doc: str, *path: str) -> str:
        return f"(CASE WHEN {self._is_integer(doc, path)} THEN {self._get(doc, path)}::numeric END)"

    def readable(self, doc: str, fields: Sequence[Field]) -> str:
        kinds = {"integer": ("number",), "string": ("string", "null"), "object": ("object",)}
        checks = [f"json_typeof({self._doc(doc)}) = 'object'"]
        for field in fields:
            allowed = ", ".join(f"'{kind}'" for kind in kinds[field.kind])
            found = f"json_typeof({self._at(doc, field.path)})"
            check = f"{found} IN ({allowed})"
            if field.kind == "integer":
                check += f" AND {self._get(doc, field.path)} ~ {_INTEGER}"
            if not field.required:
                check = f"{found} IS NULL OR ({check})"
            checks.append(check)
        return "(" + " AND ".join(f"COALESCE({check}, FALSE)" for check in checks) + ")"

    def element(self, doc: str, path: tuple[str, ...], key: str, value: str, wanted: str) -> str:
        at = self._at(doc, path)
        array = f"CASE WHEN json_typeof({at}) = 'array' THEN {at} END"
        matches = f"json_typeof(e.value -> '{key}') = 'string' AND e.value ->> '{key}' = {wanted}"
        picked = (
            f"CASE WHEN json_typeof(e.value -> '{value}') = 'string' THEN e.value ->> '{value}' END"
            if value
            else "e.value::text"
        )
        return (
            f"(SELECT {picked} FROM json_array_elements({array}) AS e (value) "
            f"WHERE {matches} LIMIT 1)"
        )


POSTGRES = PostgresDialect()
