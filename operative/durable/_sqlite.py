"""The durable engine and checkpoint store in one SQLite file: ``SqliteDurable(path)``.

``SqliteDurable`` opens the file once and carries both, sharing its connections;
``SqliteEngine`` and ``SqliteCheckpointStore`` are the two on their own (an engine of its
own and a store of its own, each with its connections), for code written against the
protocols. The engine and journal of :mod:`._engine` and :mod:`._journal` over a
:class:`~operative._sql.SqliteDatabase`. Every write that names a lease runs in one
``BEGIN IMMEDIATE`` transaction that first checks the lease's fence, so a worker whose
lease was taken over cannot commit anything. ``BEGIN IMMEDIATE`` also serialises claims
across processes: two workers never claim one run.

Connections, worker threads, busy waits and cancellation are those of every SQLite-backed
object (:mod:`operative._sql._sqlite`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from .._sql import SqliteDatabase, check_path
from ._backend import SqlBackend
from ._engine import SqlEngine
from ._journal import SqlCheckpointStore
from ._schema import DURABLE

__all__ = ["SqliteCheckpointStore", "SqliteDurable", "SqliteEngine"]


def _database(
    owner: str, path: str | os.PathLike[str], max_connections: int, busy_timeout: float
) -> SqliteDatabase:
    hint = "durable runs must outlive the process"
    return SqliteDatabase(
        check_path(path, owner=owner, hint=hint),
        owner=owner,
        max_connections=max_connections,
        busy_timeout=busy_timeout,
        schemas=[DURABLE],
        text_factory=str,
        brief_writes=True,  # the journal's commits run in the Trio thread when they can
    )


class SqliteCheckpointStore(SqlCheckpointStore):
    """The journal of durable runs in one SQLite file (share it with a :class:`SqliteEngine`).

    :class:`SqliteDurable` carries one, with its engine: use it unless code of yours
    takes the two apart.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per process.
        busy_timeout: seconds a write waits for another writer's lock.
        clock: epoch seconds for the entries' timestamps.
    """

    __slots__ = ()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 4,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        db = _database(type(self).__name__, path, max_connections, busy_timeout)
        super().__init__(db, clock=clock)


class SqliteEngine(SqlEngine):
    """Durable run records and leases in one SQLite file, shared by worker processes.

    :class:`SqliteDurable` carries one, with its checkpoint store: use it unless code of
    yours takes the two apart.

    Leases are wall-clock times (``clock``, default :func:`time.time`), so every process
    using the file must agree on the time; on one machine they do.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per process.
        busy_timeout: seconds a write waits for another writer's lock.
        clock: epoch seconds, for leases and timestamps.
    """

    __slots__ = ()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 4,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        db = _database(type(self).__name__, path, max_connections, busy_timeout)
        super().__init__(db, clock=clock)


class SqliteDurable(SqlBackend[SqliteEngine, SqliteCheckpointStore]):
    """Durable runs in one SQLite file: the engine and the checkpoint store, one object.

    ::

        async with SqliteDurable("runs.db") as durable:
            async with agent.open_run("hi", durable=Durable(durable)) as run:
                ...
            await recover(durable, agents={"weather": agent})

    Pass it wherever durability is asked for: ``Durable(durable, run_id=...)``,
    ``recover(durable, agents=...)``, ``serve_durable_runs(durable, agents=...)``,
    ``open_session(..., durable=durable)``, ``SqliteRunStore(durable)``. Its
    :attr:`engine` (a :class:`SqliteEngine`) and :attr:`checkpoint_store` (a
    :class:`SqliteCheckpointStore`) share its connections. Any number of processes may
    open the same file; within one, open it once and share it.

    Opened with ``async with``, the engine and the journal commit in groups (see the
    "Durable runs" page of the docs); leaving the block closes the file. Without it,
    each write commits alone, and :meth:`aclose` closes the file.

    Args:
        path: the database file; created if missing.
        max_connections: connections (and worker threads) per process, shared by the
            engine and the journal.
        busy_timeout: seconds a write waits for another writer's lock.
        clock: epoch seconds, for leases and timestamps.
    """

    __slots__ = ()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_connections: int = 8,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        db = _database(type(self).__name__, path, max_connections, busy_timeout)
        engine = SqliteEngine._sharing(db, clock=clock)
        store = SqliteCheckpointStore._sharing(db, clock=clock)
        self._share(db, db.path, engine, store)
