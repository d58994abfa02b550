"""The conditional text-value store over SQL, written once for SQLite and PostgreSQL.

One table of ``(key, value, version)``, its key compared by code point (PostgreSQL: the
``"C"`` collation), so listing order is the same in every store. A batch runs in one
write transaction that first serialises it with every other batch touching one of its
keys, existing or not: on SQLite the transaction holds the file's write lock (``BEGIN
IMMEDIATE``), on PostgreSQL one advisory lock per key (:mod:`._postgres`). Then the rows
that exist are read (on PostgreSQL also locked, ``SELECT ... FOR UPDATE``, in key
order), their versions compared, and rows updated, deleted, or inserted with ``ON
CONFLICT DO NOTHING``. On PostgreSQL a key created in between by a writer that skipped
the advisory locks (the insert finds it), a deadlock or a serialisation failure makes
the batch start over, and the next attempt reports the conflict. Listing uses a key
range (``key >= prefix AND key < next(prefix)``), not ``LIKE``, so it rides the primary
key index.

Connections, worker threads and cancellation are those of the database
(:mod:`operative._sql`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from .._core._errors import InvalidArgument
from .._sql import Database, Dialect, Migration, Schema, SqlBacked, ddl
from ._protocol import Delete, Operation, Versioned
from ._rows import (
    check_limit,
    check_operations,
    check_text,
    check_versions,
    decode_row,
    decode_text,
    decode_version,
    prefix_upper_bound,
)

__all__ = ["SqlStore", "check_table", "kv_schema"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_ATTEMPTS = 20  # batch restarts after a deadlock or a concurrent insert


def check_table(table: object) -> str:
    if not isinstance(table, str) or not _IDENTIFIER.match(table):
        raise InvalidArgument(f"table must be a plain SQL identifier, not {table!r}")
    return table


def kv_schema(table: str, dialect: Dialect) -> Schema:
    """The schema of one key-value table (each table is a schema of its own)."""
    return Schema(
        name=f"kv:{dialect.fold(table)}",
        migrations=(
            Migration(
                "the table of keys, values and versions",
                ddl(
                    f'CREATE TABLE IF NOT EXISTS "{table}" (key {{key}} PRIMARY KEY NOT NULL, '
                    "value TEXT NOT NULL, version {int} NOT NULL){without_rowid}"
                ),
            ),
        ),
    )


class _Restart(Exception):
    """A concurrent writer created a key this batch meant to create: start over."""


class SqlStore(SqlBacked):
    """A :class:`~operative.kvstore.ConditionalTextValueStore` in one table of ``db``.

    The backend classes (:class:`~operative.kvstore.SqliteStore`,
    :class:`~operative.kvstore.PostgresStore`) only pick the database.
    """

    __slots__ = ("_forbid_nul", "_quoted", "_table", "_where")

    def __init__(self, db: Database, table: str) -> None:
        self._db = db
        self._table = table
        self._quoted = f'"{table}"'
        self._where = f"table {table!r} of {db.where}"
        self._forbid_nul = not db.dialect.holds_nul

    # -- the protocol ---------------------------------------------------------------

    async def get(self, key: str) -> Versioned | None:
        """The value stored under ``key``, or ``None``.

        Raises:
            CorruptRecordError: the stored row cannot be read (names the key).
        """
        check_text("key", key, forbid_nul=self._forbid_nul)
        sql = f"SELECT key, value, version FROM {self._quoted} WHERE key = {self._db.dialect.mark}"

        def work(conn: Any) -> Versioned | None:
            row = conn.execute(sql, (key,)).fetchone()
            return None if row is None else decode_row(self._where, row)

        return await self._db.call(work)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Versioned]:
        """The values stored under ``keys``; missing keys are absent from the mapping.

        The values are read from one snapshot of the database.
        """
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            check_text("key", key, forbid_nul=self._forbid_nul)
        dialect = self._db.dialect
        chunks = [wanted[at : at + dialect.chunk] for at in range(0, len(wanted), dialect.chunk)]

        def work(conn: Any) -> dict[str, Versioned]:
            found: dict[str, Versioned] = {}
            for chunk in chunks:
                clause, params = dialect.any_of("key", chunk)
                rows = conn.execute(
                    f"SELECT key, value, version FROM {self._quoted} WHERE {clause}", params
                ).fetchall()  # all rows first: a bad one ends no snapshot early
                for row in rows:
                    item = decode_row(self._where, row)
                    found[item.key] = item
            return found

        if len(chunks) > 1:
            return await self._db.read(work)  # one snapshot across the statements
        return await self._db.call(work)

    async def list(
        self, prefix: str = "", *, limit: int | None = None, after: str | None = None
    ) -> Sequence[Versioned]:
        """Values whose key starts with ``prefix``, sorted by key, after ``after``."""
        check_text("prefix", prefix, forbid_nul=self._forbid_nul)
        if after is not None:
            check_text("after", after, forbid_nul=self._forbid_nul)
        check_limit(limit)
        mark = self._db.dialect.mark
        sql = [f"SELECT key, value, version FROM {self._quoted} WHERE key >= {mark}"]
        params: list[object] = [prefix]
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            sql.append(f"AND key < {mark}")
            params.append(upper)
        if after is not None:
            sql.append(f"AND key > {mark}")
            params.append(after)
        sql.append("ORDER BY key")
        if limit is not None:
            sql.append(f"LIMIT {mark}")
            params.append(limit)
        statement = " ".join(sql)

        def work(conn: Any) -> list[Versioned]:
            rows = conn.execute(statement, params).fetchall()  # the statement ends here
            return [decode_row(self._where, row) for row in rows]

        return await self._db.call(work)

    async def conditional_batch(self, operations: Sequence[Operation]) -> tuple[int | None, ...]:
        """Apply every operation or none, in one transaction.

        Raises:
            ConflictError: an ``expected_version`` did not hold; nothing was written.
            InvalidArgument: a malformed batch (a key twice, a non-text key or value; on
                PostgreSQL a NUL character, which its text cannot hold).
        """
        ops = list(operations)
        check_operations(ops, forbid_nul=self._forbid_nul)
        if not ops:
            await trio.lowlevel.checkpoint()
            self._db.check_open()
            return ()
        db = self._db
        retryable: tuple[type[BaseException], ...] = (_Restart, *db.dialect.transient)

        def work(conn: Any) -> tuple[int | None, ...]:
            for attempt in range(_ATTEMPTS):
                try:
                    return db.transaction(conn, lambda conn: self._apply(conn, ops))
                except retryable:
                    if attempt == _ATTEMPTS - 1:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

        return await db.call(work)

    def _lock_keys(self, conn: Any, keys: Sequence[str]) -> None:
        """Serialise this batch with every other batch touching one of ``keys``, whether
        the key exists or not; called first in the batch's transaction. Nothing to do
        where the transaction already holds the whole database's write lock (SQLite)."""

    def _apply(self, conn: Any, ops: Sequence[Operation]) -> tuple[int | None, ...]:
        dialect, table, where = self._db.dialect, self._quoted, self._where
        mark = dialect.mark
        current: dict[str, int] = {}
        keys = [op.key for op in ops]
        self._lock_keys(conn, keys)
        for start in range(0, len(keys), dialect.chunk):
            clause, params = dialect.any_of("key", keys[start : start + dialect.chunk])
            rows = conn.execute(
                f"SELECT key, version FROM {table} WHERE {clause} ORDER BY key"
                + dialect.words["lock"],
                params,
            ).fetchall()
            for raw_key, raw_version in rows:
                key = decode_text(where, raw_key, "key", raw_key)
                current[key] = decode_version(where, key, raw_version)
        check_versions(ops, current)
        versions: list[int | None] = []
        for op in ops:
            old = current.get(op.key)
            if isinstance(op, Delete):
                if old is not None:
                    conn.execute(f"DELETE FROM {table} WHERE key = {mark}", (op.key,))
                versions.append(None)
            elif old is not None:
                conn.execute(
                    f"UPDATE {table} SET value = {mark}, version = {mark} WHERE key = {mark}",
                    (op.value, old + 1, op.key),
                )
                versions.append(old + 1)
            else:
                inserted = conn.execute(
                    f"INSERT INTO {table} (key, value, version) VALUES ({mark}, {mark}, 1) "
                    "ON CONFLICT (key) DO NOTHING",
                    (op.key, op.value),
                )
                if inserted.rowcount != 1:  # created since our SELECT: look again
                    raise _Restart(op.key)
                versions.append(1)
        return tuple(versions)
