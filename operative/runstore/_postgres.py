"""``PostgresRunStore``: the run store over the durable engine's PostgreSQL database.

Records are ``TEXT`` (see :mod:`operative.durable._postgres`), so the store's migration
adds one function, ``operative_store_json(text)``, that parses a record into ``json`` or
yields NULL when it is not JSON: a corrupt row then reaches the decoder (which names it)
instead of failing the whole query. Every call reads one ``REPEATABLE READ, READ ONLY``
snapshot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._pricing import DEFAULT_PRICES, PriceTable
from .._sql import PostgresDatabase
from ..durable._backend import location_of
from ._queries import SqlRunStore
from ._schema import RUN_STORE

if TYPE_CHECKING:
    from ..durable import PostgresDurable

__all__ = ["PostgresRunStore"]


class PostgresRunStore(SqlRunStore):
    """Run state and action history of the durable runs in one PostgreSQL database.

    Open it on the database of a :class:`~operative.durable.PostgresDurable`, from any
    machine: pass the ``PostgresDurable`` itself, or its DSN. It only reads runs, through
    a pool of its own. On first use it adds its function and indexes (a migration
    recorded in the database; the engine's tables are created if missing).

    Args:
        dsn: a libpq connection string or URI, or the ``PostgresDurable`` whose database
            it is.
        prices: the price table costs are computed at (default: ``DEFAULT_PRICES``).
        max_connections: connections (and worker threads) of this store.
    """

    __slots__ = ()

    def __init__(
        self,
        dsn: str | PostgresDurable,
        *,
        prices: PriceTable = DEFAULT_PRICES,
        max_connections: int = 2,
    ) -> None:
        owner = type(self).__name__
        db = PostgresDatabase(
            location_of(dsn, owner=owner, backend="PostgresDurable"),
            owner=owner,
            max_connections=max_connections,
            schemas=[RUN_STORE],
        )
        super().__init__(db, prices)
