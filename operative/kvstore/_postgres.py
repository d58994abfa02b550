"""``PostgresStore``: the conditional text-value store in a PostgreSQL table.

The store is :class:`~operative.kvstore._sql.SqlStore` over a
:class:`~operative._sql.PostgresDatabase`: sync psycopg 3 driven from worker threads, a
cancelled call stopping its query with ``cancel_safe()``. A batch locks the rows it
reads (``SELECT ... FOR UPDATE``, in key order) and starts over when a concurrent writer
created one of its keys in between, or the server reports a deadlock.

psycopg is the optional extra ``postgres`` and is imported only when a store is created.
"""

from __future__ import annotations

from .._sql import POSTGRES, PostgresDatabase
from ._sql import SqlStore, check_table, kv_schema

__all__ = ["PostgresStore"]


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
