"""``SqliteRunStore``: the run store over the durable engine's SQLite file."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._pricing import DEFAULT_PRICES, PriceTable
from .._sql import SqliteDatabase, check_path
from ..durable._backend import location_of
from ._queries import SqlRunStore
from ._schema import RUN_STORE

if TYPE_CHECKING:
    from ..durable import SqliteDurable

__all__ = ["SqliteRunStore"]


class SqliteRunStore(SqlRunStore):
    """Run state and action history of the durable runs in one SQLite file.

    Open it on the file of a :class:`~operative.durable.SqliteDurable` (in this process
    or any other): pass the ``SqliteDurable`` itself, or its file. It only reads runs,
    through connections of its own. On first use it adds the indexes its queries need
    (a migration recorded in the file; the engine's tables are created if missing).

    Args:
        path: the database file, or the ``SqliteDurable`` whose file it is.
        prices: the price table costs are computed at (default: ``DEFAULT_PRICES``).
        max_connections: connections (and worker threads) of this store.
        busy_timeout: seconds a statement waits for the database's lock.
    """

    __slots__ = ()

    def __init__(
        self,
        path: str | os.PathLike[str] | SqliteDurable,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        max_connections: int = 2,
        busy_timeout: float = 10.0,
    ) -> None:
        owner = type(self).__name__
        path = location_of(path, owner=owner, backend="SqliteDurable")
        text = check_path(path, owner=owner, hint="pass the durable runs' SqliteDurable or file")
        # Text stays bytes: a row that is not UTF-8 reaches the decoder, which names it,
        # instead of failing the whole query.
        db = SqliteDatabase(
            text,
            owner=owner,
            max_connections=max_connections,
            busy_timeout=busy_timeout,
            schemas=[RUN_STORE],
        )
        super().__init__(db, prices)
