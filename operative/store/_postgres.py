"""``PostgresRunStore``: the run store over the durable engine's PostgreSQL database.

Records are ``TEXT`` (see :mod:`operative.durable._postgres`), so the store adds one
function, ``operative_store_json(text)``, that parses a record into ``json`` or yields
NULL when it is not JSON: a corrupt row then reaches the decoder (which names it) instead
of failing the whole query. The function and the store's indexes are created once, under
the advisory lock the engine's tables are created with; a connection that finds them
creates nothing (``CREATE INDEX IF NOT EXISTS`` would lock the journal even then).

Every call reads one ``REPEATABLE READ, READ ONLY`` snapshot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core._errors import InvalidArgument
from .._pricing import DEFAULT_PRICES, PriceTable
from ..durable._postgres import _SCHEMA as DURABLE_SCHEMA
from ..durable._postgres import _without_password
from ..storage._postgres import PostgresPooled
from ._queries import RunStoreQueries
from ._sql import JSON_FUNCTION, PostgresDialect, indexes

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresRunStore"]

_T = TypeVar("_T")
_DIALECT = PostgresDialect()

FUNCTION = f"""CREATE OR REPLACE FUNCTION {JSON_FUNCTION}(raw text) RETURNS json
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
    BEGIN
        RETURN raw::json;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END
    $$"""

_READY = (
    f"SELECT to_regprocedure('{JSON_FUNCTION}(text)') IS NOT NULL "
    "AND to_regclass('operative_store_runs_status') IS NOT NULL "
    "AND to_regclass('operative_store_tool_calls') IS NOT NULL "
    "AND to_regclass('operative_store_tool_names') IS NOT NULL"
)


class PostgresRunStore(RunStoreQueries, PostgresPooled):
    """Run state and action history of the durable runs in one PostgreSQL database.

    Open it on the DSN a :class:`~operative.durable.PostgresEngine` uses, from any
    machine; it only reads runs. On first use it adds its function and indexes (the
    engine's tables are created if missing).

    Args:
        dsn: a libpq connection string or URI.
        prices: the price table costs are computed at (default: ``DEFAULT_PRICES``).
        max_connections: connections (and worker threads) of this store.
    """

    __slots__ = ("_database", "_dialect", "_prices")

    def __init__(
        self, dsn: str, *, prices: PriceTable = DEFAULT_PRICES, max_connections: int = 2
    ) -> None:
        if not isinstance(prices, PriceTable):
            raise InvalidArgument(f"prices= must be a PriceTable, not {type(prices).__name__}")
        super().__init__(dsn, max_connections=max_connections)
        self._database = _without_password(self._psycopg, dsn)
        self._dialect = _DIALECT
        self._prices = prices

    def __repr__(self) -> str:
        return f"<PostgresRunStore {self._database!r}{' closed' if self._closed else ''}>"

    @property
    def database(self) -> str:
        """The DSN without its password (libpq's canonical ``key=value`` form)."""
        return self._database

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        (ready,) = conn.execute(_READY).fetchone()  # type: ignore[misc]
        if not ready:
            self._create_tables(conn, (*DURABLE_SCHEMA, FUNCTION, *indexes(_DIALECT)))

    def _where(self) -> str:
        return f"PostgreSQL database {self._database!r}"

    async def _read(self, work: Callable[[Any], _T]) -> _T:
        def snapshot(conn: psycopg.Connection[Any]) -> _T:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return work(conn)

        return await self._call(snapshot)
