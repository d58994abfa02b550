"""``SqliteStore``: the conditional text-value store in one SQLite file, shared by processes.

The store is :class:`~operative.kvstore._sql.SqlStore` over a
:class:`~operative._sql.SqliteDatabase`: a small pool of connections to one file in WAL
mode, used from worker threads, interrupted when the caller is cancelled. A batch runs in
one ``BEGIN IMMEDIATE`` transaction, which takes the file's write lock.
"""

from __future__ import annotations

import os

from .._sql import SQLITE, SqliteDatabase, check_path
from ._sql import SqlStore, check_table, kv_schema

__all__ = ["SqliteStore"]


class SqliteStore(SqlStore):
    """A :class:`~operative.kvstore.ConditionalTextValueStore` in one SQLite file.

    The embedded default: no server, one file, safe for many tasks and many processes.
    The file is put in WAL mode with ``synchronous=NORMAL`` (a crash of the machine may
    lose the last commits, never corrupt the file; a killed process loses nothing it
    committed). Writers wait up to ``busy_timeout`` seconds for each other.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per store and process.
        busy_timeout: seconds a statement waits for another writer's lock.
        table: the table holding the values (created if missing).
    """

    __slots__ = ("_path",)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 4,
        busy_timeout: float = 10.0,
        table: str = "operative_kv",
    ) -> None:
        text = check_path(path, owner="SqliteStore", hint="use MemoryStore for memory")
        check_table(table)
        db = SqliteDatabase(
            text,
            owner=type(self).__name__,
            max_connections=max_connections,
            busy_timeout=busy_timeout,
            schemas=[kv_schema(table, SQLITE)],
        )
        super().__init__(db, table)
        self._path = text

    @property
    def path(self) -> str:
        """The database file."""
        return self._path
