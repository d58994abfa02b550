"""``PostgresStore``: the conditional text-value store in a PostgreSQL table.

The store is :class:`~operative.kvstore._sql.SqlStore` over a
:class:`~operative._sql.PostgresDatabase`: sync psycopg 3 driven from worker threads, a
cancelled call stopping its query with ``cancel_safe()``.

A batch first takes a transaction-scoped advisory lock for each of its keys
(``pg_advisory_xact_lock`` on a 64-bit hash of table and key, in ascending order, so
batches never deadlock on them), then reads and checks the versions. Every batch that
touches one of the same keys, including a key that does not exist yet, waits for it:
batches are linearizable, not merely row-locked. Without these locks two batches, each
requiring absent the key the other creates, would both find nothing to lock under READ
COMMITTED and both commit (write skew). A hash collision between two keys only makes
their batches wait for each other. The rows read are also locked (``SELECT ... FOR
UPDATE``) and a batch starts over when its insert finds a key created in between or the
server reports a deadlock, which only writers that skip the advisory locks cause.

psycopg is the optional extra ``postgres`` and is imported only when a store is created.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .._sql import POSTGRES, PostgresDatabase
from ._sql import SqlStore, check_table, kv_schema

__all__ = ["PostgresStore"]

# One statement takes a batch's locks, in the order given: a few as columns (evaluated
# left to right; cheaper to plan than an array), many as the rows of an array. Were the
# server ever to take them in another order, a deadlock would be detected and the batch
# run again, never a wrong answer.
_LOCK_COLUMNS = {
    count: "SELECT " + ", ".join(["pg_advisory_xact_lock(%s::bigint)"] * count)
    for count in range(1, 65)
}
_LOCK_ROWS = "SELECT pg_advisory_xact_lock(id) FROM unnest(%s::bigint[]) AS id"


def lock_id(table: str, key: str) -> int:
    """The advisory lock (a signed 64-bit int) of ``key`` in ``table``."""
    digest = hashlib.blake2b(
        f"{table}\x00{key}".encode(), digest_size=8, person=b"operative.kv"
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


class PostgresStore(SqlStore):
    """A :class:`~operative.kvstore.ConditionalTextValueStore` in a PostgreSQL table.

    For many processes on many machines sharing one database. Connections open lazily.

    Args:
        dsn: a libpq connection string or URI.
        max_connections: connections (and worker threads) per store.
        table: the table holding the values (created if missing, in the first schema of
            the DSN's ``search_path``).
    """

    __slots__ = ()

    def __init__(self, dsn: str, *, max_connections: int = 4, table: str = "operative_kv") -> None:
        check_table(table)
        db = PostgresDatabase(
            dsn,
            owner=type(self).__name__,
            max_connections=max_connections,
            schemas=[kv_schema(table, POSTGRES)],
        )
        super().__init__(db, table)

    def _lock_keys(self, conn: Any, keys: Sequence[str]) -> None:
        ids = sorted({lock_id(self._table, key) for key in keys})
        columns = _LOCK_COLUMNS.get(len(ids))
        if columns is not None:
            conn.execute(columns, ids)
        else:
            conn.execute(_LOCK_ROWS, [ids])
