"""SQLite's dialect: ``?`` placeholders, no row locks, JSON guarded by ``json_valid``."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from ._dialect import Dialect, Field, Query

__all__ = ["SQLITE", "SqliteDialect"]


class SqliteDialect(Dialect):
    """SQLite 3.24 or newer (upserts). A write transaction (``BEGIN IMMEDIATE``) holds the
    file's write lock, so there are no row locks to take and none to skip."""

    name = "sqlite"
    mark = "?"
    chunk = 500  # well under SQLite's parameter limit
    holds_nul = True
    schema_lock = None  # BEGIN IMMEDIATE already serialises every writer of the file
    words = MappingProxyType(
        {
            "key": "TEXT",
            "int": "INTEGER",
            "real": "REAL",
            "without_rowid": " WITHOUT ROWID",
            "lock": "",
            "skip_locked": "",
            "distinct": "IS NOT",
        }
    )

    def fold(self, name: str) -> str:
        return name.lower()

    def any_of(self, column: str, values: Sequence[Any]) -> Query:
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def _insert_many(
        self,
        conn: Any,
        table: str,
        names: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Any],
    ) -> None:
        marks = ", ".join("?" for _ in columns)
        conn.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)

    @property
    def unique_violation(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.IntegrityError,)

    @property
    def transient(self) -> tuple[type[BaseException], ...]:
        return ()  # a busy file is waited for by the connection's call loop

    def table_exists(self, conn: Any, table: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE",
            (table,),
        ).fetchone()
        return row is not None

    def column_exists(self, conn: Any, table: str, column: str) -> bool:
        names = [row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()]
        return column in (name.decode() if isinstance(name, bytes) else name for name in names)

    # -- JSON ----------------------------------------------------------------------
    # SQLite may evaluate the terms of an AND in any order: only a CASE guarantees that
    # json_valid() is asked before a function that raises on malformed JSON.

    @staticmethod
    def _path(path: Sequence[str]) -> str:
        return "'$" + "".join(f".{key}" for key in path) + "'"

    def _typed(self, doc: str, path: Sequence[str], kind: str) -> str:
        at = self._path(path)
        return (
            f"(CASE WHEN json_valid({doc}) THEN CASE WHEN json_type({doc}, {at}) = '{kind}' "
            f"THEN json_extract({doc}, {at}) END END)"
        )

    def text(self, doc: str, *path: str) -> str:
        return self._typed(doc, path, "text")

    def integer(self, doc: str, *path: str) -> str:
        return self._typed(doc, path, "integer")

    def readable(self, doc: str, fields: Sequence[Field]) -> str:
        kinds = {"integer": ("integer",), "string": ("text", "null"), "object": ("object",)}
        checks = [f"json_type({doc}) = 'object'"]
        for field in fields:
            allowed = ", ".join(f"'{kind}'" for kind in kinds[field.kind])
            found = f"json_type({doc}, {self._path(field.path)})"
            if not field.required:
                found = f"COALESCE({found}, '{kinds[field.kind][0]}')"
            checks.append(f"{found} IN ({allowed})")
        shape = " AND ".join(checks)
        return (
            f"(CASE WHEN json_valid({doc}) THEN CASE WHEN {shape} THEN 1 ELSE 0 END ELSE 0 END = 1)"
        )

    def element(self, doc: str, path: tuple[str, ...], key: str, value: str, wanted: str) -> str:
        at = self._path(path)
        array = (
            f"CASE WHEN json_valid({doc}) THEN CASE WHEN json_type({doc}, {at}) = 'array' "
            f"THEN json_extract({doc}, {at}) END END"
        )

        def member(name: str) -> str:  # e.value is JSON text only for objects
            return (
                f"CASE WHEN e.type = 'object' THEN CASE WHEN json_type(e.value, '$.{name}') "
                f"= 'text' THEN json_extract(e.value, '$.{name}') END END"
            )

        matches = f"({member(key)}) = {wanted}"
        picked = member(value) if value else "e.value"
        return f"(SELECT {picked} FROM json_each({array}) e WHERE {matches} LIMIT 1)"


SQLITE = SqliteDialect()
