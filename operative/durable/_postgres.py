"""The durable engine and checkpoint store in PostgreSQL, shared by workers on many machines.

``PostgresDurable(dsn)`` opens one connection pool and carries both over it;
``PostgresEngine`` and ``PostgresCheckpointStore`` are the two on their own, for code
written against the protocols. The engine and journal of :mod:`._engine` and :mod:`._journal` over a
:class:`~operative._sql.PostgresDatabase`, on the tables of the SQLite backend (run ids
use the ``"C"`` collation, so orderings are code-point order as in SQLite).

Claims take their rows with ``FOR UPDATE SKIP LOCKED``: workers on any number of
machines pass over the rows another claim is taking instead of waiting for it, and a run
is never claimed twice. Every write that names a lease locks the run row (``SELECT ...
FOR UPDATE``) and checks its fence in the same transaction, which also waits for a claim
of that run in flight: a worker whose run was claimed by another can commit nothing.

Journal records and outcomes are stored as ``TEXT`` holding msgspec's JSON, not
``JSONB``: the bytes read back are the bytes written (``JSONB`` re-renders numbers, key
order and whitespace), nothing parses the JSON twice, and ``JSONB`` refuses a ``\\u0000``
escape that message content may legitimately hold. The database never queries inside a
record (the run store does, through a function of its own).

Times are ``DOUBLE PRECISION`` epoch seconds from the ``clock`` argument (default
:func:`time.time`), not the server's ``now()``: machines sharing one database must keep
their clocks in step (NTP) to within a small part of ``lease_seconds``.

Connections, worker threads and cancellation (``cancel_safe()``) are those of every
PostgreSQL-backed object (:mod:`operative._sql._postgres`); schema changes are serialised
between processes by an advisory lock (:mod:`operative._sql._migrate`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .._sql import PostgresDatabase
from ._backend import SqlBackend
from ._engine import SqlEngine
from ._journal import SqlCheckpointStore
from ._schema import DURABLE

__all__ = ["PostgresCheckpointStore", "PostgresDurable", "PostgresEngine"]


def _database(owner: str, dsn: str, max_connections: int) -> PostgresDatabase:
    return PostgresDatabase(dsn, owner=owner, max_connections=max_connections, schemas=[DURABLE])


class PostgresCheckpointStore(SqlCheckpointStore):
    """The journal of durable runs in PostgreSQL (share the DSN with a :class:`PostgresEngine`).

    :class:`PostgresDurable` carries one, with its engine: use it unless code of yours
    takes the two apart.

    Args:
        dsn: a libpq connection string or URI; the tables are created in the first schema
            of its ``search_path``.
        max_connections: connections (and worker threads) per object.
        clock: epoch seconds for the entries' timestamps.
    """

    __slots__ = ()

    def __init__(
        self, dsn: str, *, max_connections: int = 4, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(_database(type(self).__name__, dsn, max_connections), clock=clock)


class PostgresEngine(SqlEngine):
    """Durable run records and leases in PostgreSQL, for workers on many machines.

    :class:`PostgresDurable` carries one, with its checkpoint store: use it unless code
    of yours takes the two apart.

    Leases are wall-clock times (``clock``, default :func:`time.time`) of the worker that
    writes them, so the machines sharing the database must agree on the time.

    Args:
        dsn: a libpq connection string or URI; the tables are created in the first schema
            of its ``search_path``.
        max_connections: connections (and worker threads) per object.
        clock: epoch seconds, for leases and timestamps.
    """

    __slots__ = ()

    def __init__(
        self, dsn: str, *, max_connections: int = 4, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(_database(type(self).__name__, dsn, max_connections), clock=clock)


class PostgresDurable(SqlBackend[PostgresEngine, PostgresCheckpointStore]):
    """Durable runs in PostgreSQL: the engine and the checkpoint store, one object.

    ::

        async with PostgresDurable("postgresql://app@db/app") as durable:
            await serve_durable_runs(durable, agents={"weather": agent})

    Pass it wherever durability is asked for: ``Durable(durable, run_id=...)``,
    ``recover(durable, agents=...)``, ``serve_durable_runs(durable, agents=...)``,
    ``open_session(..., durable=durable)``, ``PostgresRunStore(durable)``. Its
    :attr:`engine` (a :class:`PostgresEngine`) and :attr:`checkpoint_store` (a
    :class:`PostgresCheckpointStore`) share one connection pool. Workers on any number
    of machines may open the same database; within a process, open it once and share it.

    Opened with ``async with``, the engine and the journal commit in groups (see the
    "Durable runs" page of the docs); leaving the block closes the pool. Without it,
    each write commits alone, and :meth:`aclose` closes the pool. Needs the ``postgres``
    extra (``pip install 'operative[postgres]'``).

    Args:
        dsn: a libpq connection string or URI; the tables are created in the first schema
            of its ``search_path``.
        max_connections: connections (and worker threads) of the pool, shared by the
            engine and the journal.
        clock: epoch seconds, for leases and timestamps.
    """

    __slots__ = ()

    def __init__(
        self, dsn: str, *, max_connections: int = 8, clock: Callable[[], float] = time.time
    ) -> None:
        db = _database(type(self).__name__, dsn, max_connections)
        engine = PostgresEngine._sharing(db, clock=clock)
        store = PostgresCheckpointStore._sharing(db, clock=clock)
        self._share(db, dsn, engine, store)
