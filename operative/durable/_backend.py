"""One object per database: the engine and the checkpoint store over one connection pool.

``SqliteDurable(path)`` and ``PostgresDurable(dsn)`` (in :mod:`._sqlite` and
:mod:`._postgres`) build on :class:`SqlBackend`: it opens the database once, and its
``engine`` and ``checkpoint_store`` (the protocol objects, :class:`SqlEngine` and
:class:`SqlCheckpointStore` of that database) share it. Opened with ``async with``, it
starts both group committers; leaving the block stops them and closes the database.

Where durability is asked for (``Durable``, ``recover``, ``serve_durable_runs``,
``open_session``), :func:`durable_parts` turns the backend, or the ``engine=`` and
``checkpoint_store=`` of an engine of one's own, into the pair the run needs.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from .._core._errors import InvalidArgument
from .._sql import Database, SqlBacked
from ._engine import SqlEngine
from ._journal import SqlCheckpointStore

__all__ = ["SqlBackend", "durable_parts", "location_of"]

_BACKENDS = "SqliteDurable(path) or PostgresDurable(dsn)"

_E = TypeVar("_E", bound=SqlEngine)
_S = TypeVar("_S", bound=SqlCheckpointStore)


class SqlBackend(SqlBacked, Generic[_E, _S]):
    """The engine and the checkpoint store of one database, sharing its connections."""

    __slots__ = ("_engine", "_location", "_open", "_store")

    _engine: _E
    _store: _S

    def _share(self, db: Database, location: str, engine: _E, store: _S) -> None:
        self._db = db
        self._location = location
        self._engine = engine
        self._store = store
        self._open = False

    @property
    def engine(self) -> _E:
        """The run records and leases (a :class:`~operative.durable.DurableEngine`)."""
        return self._engine

    @property
    def checkpoint_store(self) -> _S:
        """The journal (a :class:`~operative.durable.CheckpointStore`), in the engine's
        database and sharing its connections."""
        return self._store

    @property
    def database(self) -> str:
        """The database: the file (absolute), or the DSN without its password."""
        return self._db.name

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        if self._open:
            raise InvalidArgument(f"{self!r} is open already; open it once")
        await self._engine._start_committing()
        try:
            await self._store._start_committing()
        except BaseException:
            await self._engine._stop_committing()
            raise
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        try:
            try:
                await self._store._stop_committing()
            finally:
                await self._engine._stop_committing()
        finally:
            await super().__aexit__(exc_type, exc, tb)


def location_of(value: object, *, owner: str, backend: str) -> Any:
    """The file or the DSN (with its password) of ``value`` when it is a backend, for
    the run store ``owner``, which opens a pool of its own on the same database; any
    other ``value`` as it is (a path or a DSN, checked by the store).

    Raises:
        InvalidArgument: ``value`` is a backend of the other database (not ``backend``).
    """
    if not isinstance(value, SqlBackend):
        return value
    if type(value).__name__ != backend:
        other = "SqliteRunStore" if owner == "PostgresRunStore" else "PostgresRunStore"
        raise InvalidArgument(
            f"{owner} reads the runs of a {backend}, not of {value!r}: open "
            f"{other}({type(value).__name__}) instead"
        )
    return value._location


def _given(engine: object, checkpoint_store: object) -> str:
    names = [
        name
        for name, value in (("engine=", engine), ("checkpoint_store=", checkpoint_store))
        if value is not None
    ]
    return " and ".join(names)


def durable_parts(
    backend: object, engine: Any, checkpoint_store: Any, *, call: str, keyword: str = ""
) -> tuple[Any, Any]:
    """The engine and checkpoint store ``call`` runs on: the backend's, or the pair given.

    ``keyword`` names the argument the backend goes in (``"durable="``), when it is not
    the first positional one.

    Raises:
        InvalidArgument: both a backend and ``engine=``/``checkpoint_store=``, neither,
            half a pair, or a backend argument that is not a backend.
    """
    where = f"as {keyword}" if keyword else "first"
    if backend is not None:
        if engine is not None or checkpoint_store is not None:
            raise InvalidArgument(
                f"{call} got a backend ({backend!r}) and {_given(engine, checkpoint_store)}: "
                "pass one of them. The backend carries its engine and checkpoint store; "
                "engine= with checkpoint_store= is for an engine of your own"
            )
        if isinstance(backend, SqlBackend):
            return backend._engine, backend._store
        raise InvalidArgument(f"{call} takes {_BACKENDS} {where}, got {_describe(backend)}")
    if engine is None and checkpoint_store is None:
        raise InvalidArgument(
            f"{call} needs a database: pass {_BACKENDS} {where} (for an engine of your own, "
            "engine= with checkpoint_store=)"
        )
    if engine is None or checkpoint_store is None:
        missing = "checkpoint_store=" if checkpoint_store is None else "engine="
        raise InvalidArgument(
            f"{call} got {_given(engine, checkpoint_store)} without {missing}: an engine of "
            f"your own takes both, over one database; for SQLite or PostgreSQL pass "
            f"{_BACKENDS} {where}, alone"
        )
    return engine, checkpoint_store


def _describe(value: object) -> str:
    """What ``value`` is, and what to pass instead."""
    if isinstance(value, str | os.PathLike):
        return (
            f"{value!r}: open the database with SqliteDurable({value!r}) (a file) or "
            "PostgresDurable(dsn), and pass that"
        )
    if callable(getattr(value, "start_run", None)):
        return (
            f"{value!r}, which runs its runs on its own workers: start them with "
            "`await engine.start_run(agent_name, input)` and serve them with "
            "operative.temporal.serve_temporal_worker (see the Temporal page of the docs)"
        )
    if callable(getattr(value, "claim", None)) or callable(getattr(value, "append", None)):
        return (
            f"{value!r}: an engine or a checkpoint store goes as engine= and "
            "checkpoint_store= (both, over one database), or pass the backend alone"
        )
    return repr(value)
