"""What ``durable=`` takes: a :class:`Durable` routing for a new run (over a backend,
``Durable(SqliteDurable(path))``, or an engine and a checkpoint store of one's own), a
:class:`Resumed` one for a run recovered from its journal. Both are features of the
extension seam: each gives its run a :class:`~operative.durable._driver.DurableDriver`."""

from __future__ import annotations

import hashlib
import os
import socket
from typing import TYPE_CHECKING, ClassVar

import attrs
import msgspec

from .._core._errors import InvalidArgument
from ._backend import durable_parts
from ._protocols import CheckpointStore, DurableEngine, accepts_journal
from ._records import Lease
from ._replay import Replay

if TYPE_CHECKING:
    from .._core._options import RunConfig
    from ._driver import DurableDriver
    from ._postgres import PostgresDurable
    from ._sqlite import SqliteDurable

__all__ = ["Durable", "Resumed", "default_worker_id", "fingerprint"]


def default_worker_id() -> str:
    """``host:pid:random``: unique per process, readable in the run records."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


@attrs.frozen(kw_only=True, init=False)
class Durable:
    """Route a run through a durable engine: ``open_run(..., durable=Durable(backend))``.

    ::

        async with SqliteDurable("runs.db") as backend:
            async with agent.open_run("hi", durable=Durable(backend, run_id="r-1")) as run:
                ...

    Args:
        backend: the database (:class:`SqliteDurable`, :class:`PostgresDurable`), which
            carries the engine and the checkpoint store.
        engine: instead of ``backend``, for an engine of your own: the run records and
            leases (a :class:`DurableEngine`), with ``checkpoint_store``.
        checkpoint_store: with ``engine``: the journal (a :class:`CheckpointStore`), in
            the engine's database.
        run_id: the run's identity (generated when omitted).
        worker_id: who holds the lease (default: host, pid and a random suffix).
        lease_seconds: how long the lease lasts unrenewed; the run renews it every
            third of this. A worker that stalls longer loses the run to another.
        session_id: the session the run belongs to (recorded, queryable).

    Raises:
        InvalidArgument: both ``backend`` and ``engine=``/``checkpoint_store=``, or
            neither, or an engine and a checkpoint store over two databases.
    """

    option: ClassVar[str] = "durable"

    engine: DurableEngine
    checkpoint_store: CheckpointStore
    run_id: str | None = None
    worker_id: str | None = None
    lease_seconds: float = 30.0
    session_id: str | None = None
    finish_takes_journal: bool = attrs.field(init=False, default=True, repr=False, eq=False)
    """Whether ``engine.finish`` takes ``journal=`` (else the run appends those records
    in a commit of their own before it finishes)."""

    def __init__(
        self,
        backend: SqliteDurable | PostgresDurable | None = None,
        *,
        engine: DurableEngine | None = None,
        checkpoint_store: CheckpointStore | None = None,
        run_id: str | None = None,
        worker_id: str | None = None,
        lease_seconds: float = 30.0,
        session_id: str | None = None,
    ) -> None:
        engine, checkpoint_store = durable_parts(
            backend, engine, checkpoint_store, call="Durable()"
        )
        self.__attrs_init__(
            engine=engine,
            checkpoint_store=checkpoint_store,
            run_id=run_id,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            session_id=session_id,
        )

    def __attrs_post_init__(self) -> None:
        if callable(getattr(self.engine, "start_run", None)):
            raise InvalidArgument(
                f"{self.engine!r} runs its runs on its own workers: start them with "
                "`await engine.start_run(agent_name, input)` and serve them with "
                "operative.temporal.serve_temporal_worker (see the Temporal page of the docs)"
            )
        if not isinstance(self.engine, DurableEngine):
            raise InvalidArgument(
                f"engine= takes a DurableEngine, got {self.engine!r} (for SQLite or "
                "PostgreSQL pass SqliteDurable(path) or PostgresDurable(dsn) alone)"
            )
        store = self.checkpoint_store
        if not isinstance(store, CheckpointStore):
            raise InvalidArgument(
                f"checkpoint_store= takes a CheckpointStore, got {self.checkpoint_store!r} "
                "(for SQLite or PostgreSQL pass SqliteDurable(path) or PostgresDurable(dsn) "
                "alone)"
            )
        if self.engine.database != self.checkpoint_store.database:
            raise InvalidArgument(
                f"the engine ({self.engine.database}) and the checkpoint store "
                f"({self.checkpoint_store.database}) must share one database: a journal write "
                "checks the run's lease in the same transaction"
            )
        if self.run_id is not None and (not isinstance(self.run_id, str) or not self.run_id):
            raise InvalidArgument(f"run_id= takes a non-empty str, got {self.run_id!r}")
        seconds = self.lease_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise InvalidArgument(f"lease_seconds= takes seconds > 0, got {seconds!r}")
        object.__setattr__(self, "finish_takes_journal", accepts_journal(self.engine))

    def extension(self, config: RunConfig) -> DurableDriver:
        """The run's journal writer (one per run)."""
        from ._driver import DurableDriver

        return DurableDriver(self)


def fingerprint(config: RunConfig) -> str:
    """A digest of the options that shape a run, to notice a changed agent on recovery."""
    shape = {
        "tools": sorted(
            (tool.name, tool.version, tool.spec.input_schema) for tool in config.toolbox
        ),
        "maximum_steps": config.maximum_steps,
        "output_schema": config.output_schema,
        "settings": config.settings,
    }
    try:
        raw = msgspec.json.encode(shape, order="sorted")
    except (TypeError, ValueError):
        raw = repr(shape).encode()
    return hashlib.sha256(raw).hexdigest()[:32]


@attrs.frozen(kw_only=True)
class Resumed:
    """A recovered run's durable routing: the claimed lease and the replayed journal."""

    option: ClassVar[str] = "durable"
    resumes_journal: ClassVar[bool] = True
    """The run goes on from its journal's transcript (checked when it first ran)."""

    durable: Durable
    lease: Lease
    replay: Replay

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    def extension(self, config: RunConfig) -> DurableDriver:
        """The run's journal writer, going on from the replayed journal."""
        from ._driver import DurableDriver

        return DurableDriver(self.durable, replay=self.replay, lease=self.lease)
