"""``open_session``: the block a session handle lives in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from .._agent import RunnableAgent
from .._core._errors import InvalidArgument
from .._core._run_state import only_cancelled
from .._lazy._agent import LazyAgent
from ._handle import SessionHandle
from ._resume import resume_session
from ._store import SessionStore

if TYPE_CHECKING:
    from ..durable import PostgresDurable, SqliteDurable

__all__ = ["open_session"]


@asynccontextmanager
async def open_session(
    id: str,
    *,
    store: SessionStore,
    agent_name: str | None = None,
    agent: RunnableAgent | None = None,
    run_options: Mapping[str, Any] | None = None,
    cleanup_timeout: float = 10.0,
    durable: SqliteDurable | PostgresDurable | None = None,
    engine: Any = None,
    checkpoint_store: Any = None,
    lease_seconds: float = 30.0,
    worker_id: str | None = None,
) -> AsyncIterator[SessionHandle]:
    """Open session ``id`` (created and stored when new) for runs, timers and signals.

    Args:
        id: the session's id.
        store: where it lives (:func:`create_session_store`).
        agent: runs go through ``agent.open_run(history, context=...)``; the session
            belongs to the agent named ``agent.name``.
        agent_name: the agent the session belongs to, given without ``agent=``
            (with ``run_options=``, or to read and signal the session). With ``agent=``
            it is not needed, and must be ``agent.name`` if given.
        run_options: or through ``open_run(**run_options)`` (``generate=``, ``tools=``,
            ``stop_when=`` ...; the conversation and run id are the session's).
        cleanup_timeout: bound, in seconds, on storing a run's outcome.
        durable: the database (``SqliteDurable(path)``, ``PostgresDurable(dsn)``): every
            turn is a durable run (:mod:`operative.durable`), and
            :meth:`SessionHandle.recover` resumes one whose process stopped.
        engine: instead of ``durable``, for an engine of your own, with
            ``checkpoint_store``.
        checkpoint_store: with ``engine``: the journal, in the same database.
        lease_seconds: the durable runs' lease.
        worker_id: the lease owner recorded (default: host, pid and a random suffix).

    Leaving the block cancels the tasks the handle started in it (:meth:`start_monitor`)
    and waits for them. An exception raised in the block propagates as itself (a
    ``KeyboardInterrupt`` stays a ``KeyboardInterrupt``), once those tasks have ended;
    only when a task of the session failed too are both raised, in an exception group.
    """
    if not isinstance(store, SessionStore):
        raise InvalidArgument(
            f"store= takes a SessionStore (create_session_store(kv)), got {type(store).__name__}"
        )
    if agent is not None and run_options is not None:
        raise InvalidArgument("pass agent= or run_options=, not both")
    if agent is not None and not callable(getattr(agent, "open_run", None)):
        raise InvalidArgument(f"agent= takes an agent (create_agent(...)), got {agent!r}")
    agent_name = _agent_name(id, agent, agent_name)
    if run_options is not None:
        if not isinstance(run_options, Mapping):
            raise InvalidArgument(f"run_options= takes a mapping, got {type(run_options).__name__}")
        for taken in ("conversation", "run_id"):
            if taken in run_options:
                raise InvalidArgument(
                    f"run_options= cannot set {taken}=: the session provides it for every run"
                )
        if "generate" not in run_options:
            raise InvalidArgument("run_options= needs generate= (the model to call)")
        run_options = dict(run_options)
    if isinstance(cleanup_timeout, bool) or not isinstance(cleanup_timeout, int | float):
        raise InvalidArgument(f"cleanup_timeout= takes seconds, got {cleanup_timeout!r}")
    durability = None
    if durable is not None or engine is not None or checkpoint_store is not None:
        from ._durable import SessionDurability

        durability = SessionDurability.of(
            durable, engine, checkpoint_store, lease_seconds, worker_id
        )
    resumed = await resume_session(store, id, agent_name=agent_name)
    session = resumed.session
    if resumed.is_new:
        session = await store.save(session)
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            handle = SessionHandle(
                session=session,
                store=store,
                agent=agent,
                run_options=run_options,
                nursery=nursery,
                cleanup_timeout=float(cleanup_timeout),
                durability=durability,
            )
            handle._announce_load(resumed.is_new)
            handle._tracker.start()
            try:
                yield handle
            except BaseException as exc:
                # Raised again below, as itself: not wrapped in the nursery's group.
                body_error = exc
            nursery.cancel_scope.cancel()
    except BaseException as tasks_error:
        if body_error is None or only_cancelled(body_error):
            raise  # a task of the session failed (and cancelled the block)
        if not only_cancelled(tasks_error):
            # The block and a task of the session both failed: both are raised, as a
            # nursery would.
            raise BaseExceptionGroup(
                f"the open_session({id!r}) block and a task of the session failed",
                [body_error, *_flat(tasks_error)],
            ) from None
        # else: only a cancellation from outside reached the nursery: the block's own
        # error is what propagates (raised below, outside this handler, unchanged).
    if body_error is not None:
        raise body_error


def _agent_name(id: str, agent: RunnableAgent | None, agent_name: str | None) -> str:
    """The name of the agent session ``id`` belongs to: ``agent``'s, or ``agent_name``."""
    if agent is None:
        if agent_name is None:
            raise InvalidArgument(
                f"open_session({id!r}) needs the agent the session belongs to: pass "
                "agent= (the agent its runs go through), or agent_name= without one"
            )
        if not isinstance(agent_name, str) or not agent_name:
            raise InvalidArgument(f"agent_name= takes a non-empty str, got {agent_name!r}")
        return agent_name
    if isinstance(agent, LazyAgent) and agent._name is None and agent.loaded is None:
        # Its name is known once it loads: agent_name= says it until then.
        if agent_name is None:
            raise InvalidArgument(
                f"open_session({id!r}) got a lazy agent whose name is known only once it "
                "loads: give it one, create_lazy_agent(..., name=...), or pass agent_name="
            )
        return agent_name
    name = agent.name
    if agent_name is not None and agent_name != name:
        raise InvalidArgument(
            f"open_session({id!r}) got agent_name={agent_name!r} and an agent named "
            f"{name!r}: the session belongs to the agent's name, so drop agent_name= (or "
            f"name the agent {agent_name!r}: create_agent(..., name={agent_name!r}))"
        )
    return name


def _flat(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return list(error.exceptions)
    return [error]
