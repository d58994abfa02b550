"""``SqliteRunStore``: the run store over the durable engine's SQLite file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from .._core._errors import InvalidArgument
from .._pricing import DEFAULT_PRICES, PriceTable
from ..durable._sqlite import _SCHEMA as DURABLE_SCHEMA
from ..storage._sqlite import SqlitePooled
from ._queries import RunStoreQueries
from ._sql import SqliteDialect, indexes

__all__ = ["SqliteRunStore"]

_T = TypeVar("_T")
_DIALECT = SqliteDialect()

INDEXES = indexes(_DIALECT)


class SqliteRunStore(RunStoreQueries, SqlitePooled):
    """Run state and action history of the durable runs in one SQLite file.

    Open it on the file a :class:`~operative.durable.SqliteEngine` uses (in this process
    or any other); it only reads. On first use it adds the indexes its queries need
    (``CREATE INDEX IF NOT EXISTS``; the engine's tables are created if missing).

    Args:
        path: the database file.
        prices: the price table costs are computed at (default: ``DEFAULT_PRICES``).
        max_connections: connections (and worker threads) of this store.
        busy_timeout: seconds a statement waits for the database's lock.
    """

    __slots__ = ("_dialect", "_prices")

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        prices: PriceTable = DEFAULT_PRICES,
        max_connections: int = 2,
        busy_timeout: float = 10.0,
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgument(f"path must be a str or os.PathLike, not {path!r}")
        text = os.fspath(path)
        if not isinstance(text, str) or text in ("", ":memory:") or text.startswith("file:"):
            raise InvalidArgument(f"SqliteRunStore needs a database file path, not {text!r}")
        if not isinstance(prices, PriceTable):
            raise InvalidArgument(f"prices= must be a PriceTable, not {type(prices).__name__}")
        if not isinstance(busy_timeout, int | float) or not busy_timeout >= 0:
            raise InvalidArgument(f"busy_timeout must be seconds >= 0, not {busy_timeout!r}")
        self._init_pool(max_connections)
        self._path = text
        self._busy_timeout = float(busy_timeout)
        self._dialect = _DIALECT
        self._prices = prices

    def __repr__(self) -> str:
        return f"<SqliteRunStore {self._path!r}{' closed' if self._closed else ''}>"

    @property
    def database(self) -> str:
        """The database file (absolute)."""
        return os.path.realpath(self._path)

    def _setup(self, conn: sqlite3.Connection) -> None:
        # Text stays bytes (the pool's default): a row that is not UTF-8 reaches the
        # decoder, which names it, instead of failing the whole query. A busy database
        # makes the pool retry the whole connection.
        for statement in (*DURABLE_SCHEMA, *INDEXES):
            conn.execute(statement)

    def _where(self) -> str:
        return repr(self._path)

    async def _read(self, work: Callable[[Any], _T]) -> _T:
        def snapshot(conn: sqlite3.Connection) -> _T:
            conn.execute("BEGIN")  # one read snapshot for every statement of the call
            try:
                return work(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

        return await self._call(snapshot)
