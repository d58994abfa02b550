"""The durable engine and checkpoint store in one SQLite file.

The engine and journal of :mod:`._engine` and :mod:`._journal` over a
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
from ._engine import SqlEngine
from ._journal import SqlCheckpointStore
from ._schema import DURABLE

__all__ = ["SqliteCheckpointStore", "SqliteEngine"]


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
