"""``PostgresRunStore``: the run store over the durable engine's PostgreSQL database.

Records are ``TEXT`` (see :mod:`operative.durable._postgres`), so the store's migration
adds one function, ``operative_store_json(text)``, that parses a record into ``json`` or
yields NULL when it is not JSON: a corrupt row then reaches the decoder (which names it)
instead of failing the whole query. Every call reads one ``REPEATABLE READ, READ ONLY``
snapshot.
"""

from __future__ import annotations

from .._pricing import DEFAULT_PRICES, PriceTable
from .._sql import PostgresDatabase
from ._queries import SqlRunStore
from ._schema import RUN_STORE

__all__ = ["PostgresRunStore"]


class PostgresRunStore(SqlRunStore):
    """Run state and action history of the durable runs in one PostgreSQL database.

    Open it on the DSN a :class:`~operative.durable.PostgresEngine` uses, from any
    machine; it only reads runs. On first use it adds its function and indexes (a
    migration recorded in the database; the engine's tables are created if missing).

    Args:
        dsn: a libpq connection string or URI.
        prices: the price table costs are computed at (default: ``DEFAULT_PRICES``).
        max_connections: connections (and worker threads) of this store.
    """

    __slots__ = ()

    def __init__(
        self, dsn: str, *, prices: PriceTable = DEFAULT_PRICES, max_connections: int = 2
    ) -> None:
        db = PostgresDatabase(
            dsn, owner=type(self).__name__, max_connections=max_connections, schemas=[RUN_STORE]
        )
        super().__init__(db, prices)
