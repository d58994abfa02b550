"""``SessionStore``: sessions kept in a conditional text-value store.

Key layout (``namespace`` defaults to ``"operative/sessions/"``; ids and agent names
are percent-encoded, so neither can reach into another key's prefix)::

    {namespace}s/{id}                   the AgentSession record (JSON)
    {namespace}a/{agent_name}/{id}      its index entry: a SessionSummary (JSON)

The record and its index entry are written in one all-or-nothing batch, guarded by the
record's version, so the index never disagrees with the records. ``list`` reads only
index entries (one prefix listing, paged), never whole transcripts.
"""

from __future__ import annotations

import builtins
import random
import time
from collections.abc import Callable
from typing import Literal
from urllib.parse import quote

import attrs
import msgspec
import trio

from .._core._codec import decode, encode
from .._core._errors import InvalidArgument
from ..kvstore import ConditionalTextValueStore, Delete, Operation, Put, Versioned
from ..kvstore._protocol import ConflictError
from ._errors import SessionNotFoundError
from ._merge import merge_sessions
from ._records import AgentSession, SessionSummary, check_session_id

__all__ = [
    "SessionStore",
    "SessionUpdater",
    "create_session_store",
    "load_agent_session",
    "save_agent_session",
]

SessionUpdater = Callable[[AgentSession], AgentSession]
"""Takes the stored session, returns the new one; may be called more than once."""

SortBy = Literal["updatedAt", "createdAt"]

_PAGE = 500


@attrs.frozen(kw_only=True)
class SessionStore:
    """Sessions in a :class:`~operative.kvstore.ConditionalTextValueStore`.

    Build one with :func:`create_session_store`. Every method is safe to call from many
    tasks and (with a shared store such as SQLite) many processes at once.
    """

    kv: ConditionalTextValueStore
    namespace: str = "operative/sessions/"
    clock: Callable[[], float] = time.time
    """Wall-clock seconds since the epoch; sessions outlive processes."""
    max_attempts: int = 32
    """How many times ``update`` and ``save`` try before giving up on a busy key."""
    retry_delay: float = 0.002
    """The first back-off between attempts (seconds, doubled each time, with jitter)."""
    max_retry_delay: float = 0.25

    # -- keys ------------------------------------------------------------------------

    def record_key(self, id: str) -> str:
        """The key that holds session ``id``'s record."""
        return f"{self.namespace}s/{quote(id, safe='')}"

    def index_key(self, agent_name: str, id: str) -> str:
        """The key of session ``id``'s index entry."""
        return f"{self.namespace}a/{quote(agent_name, safe='')}/{quote(id, safe='')}"

    # -- reading ---------------------------------------------------------------------

    async def load(self, id: str) -> AgentSession | None:
        """The session stored under ``id``, or ``None``.

        Raises:
            CorruptRecordError: the stored bytes are not a session (the key is named).
        """
        check_session_id(id)
        stored = await self._read(id)
        return None if stored is None else stored[1]

    async def _read(self, id: str) -> tuple[Versioned, AgentSession] | None:
        key = self.record_key(id)
        found = await self.kv.get(key)
        if found is None:
            return None
        session = decode(found.value, AgentSession, what=f"session record at key {key!r}")
        return found, session

    async def list(
        self, agent_name: str | None = None, sort_by: SortBy = "updatedAt"
    ) -> builtins.list[SessionSummary]:
        """Summaries of the stored sessions (of one agent, or all), most recent first.

        ``sort_by`` is ``"updatedAt"`` (last activity) or ``"createdAt"``.
        """
        if sort_by not in ("updatedAt", "createdAt"):
            raise InvalidArgument(f"sort_by= takes 'updatedAt' or 'createdAt', got {sort_by!r}")
        prefix = f"{self.namespace}a/"
        if agent_name is not None:
            if not isinstance(agent_name, str) or not agent_name:
                raise InvalidArgument(f"agent_name= takes a non-empty str, got {agent_name!r}")
            prefix += quote(agent_name, safe="") + "/"
        summaries: builtins.list[SessionSummary] = []
        after: str | None = None
        while True:
            page = await self.kv.list(prefix, limit=_PAGE, after=after)
            summaries.extend(
                decode(entry.value, SessionSummary, what=f"session index at key {entry.key!r}")
                for entry in page
            )
            if len(page) < _PAGE:
                break
            after = page[-1].key
        if sort_by == "updatedAt":
            summaries.sort(key=lambda s: (s.updated_at, s.id), reverse=True)
        else:
            summaries.sort(key=lambda s: (s.created_at, s.id), reverse=True)
        return summaries

    # -- writing ---------------------------------------------------------------------

    async def save(self, session: AgentSession) -> AgentSession:
        """Store ``session``; returns what was stored (continue from that).

        When the stored session is the one ``session`` was derived from (same
        ``revision``), it is replaced. When someone else wrote in between, the two are
        merged (see :mod:`operative.sessions._merge`: nothing either side added is
        lost). ``updated_at`` is stamped now.
        """
        if not isinstance(session, AgentSession):
            raise InvalidArgument(f"save() takes an AgentSession, got {type(session).__name__}")
        check_session_id(session.id)

        def merge(current: AgentSession | None) -> AgentSession:
            if current is None or current.revision == session.revision:
                return session
            return merge_sessions(current, session)

        return await self._write(session.id, merge, refresh_activity=True, create=True)

    async def update(
        self, id: str, updater: SessionUpdater, *, refresh_activity: bool = True
    ) -> AgentSession:
        """Read, change and write session ``id`` with optimistic concurrency.

        ``updater`` gets the stored session and returns the new one; when another writer
        got there first it is called again with the newer session (so keep it free of
        side effects), up to ``max_attempts`` times with jittered back-off on trio's
        clock. ``refresh_activity=False`` keeps ``updated_at`` as it was, for background
        writes that must not read as activity. Returns what was stored.

        Raises:
            SessionNotFoundError: no session is stored under ``id``.
            ConflictError: every attempt lost a race.
            CorruptRecordError: the stored bytes are not a session.
        """
        check_session_id(id)
        if not callable(updater):
            raise InvalidArgument(f"updater must be callable (session -> session), got {updater!r}")

        def apply(current: AgentSession | None) -> AgentSession:
            if current is None:
                raise SessionNotFoundError(f"no session is stored under id {id!r}", session_id=id)
            new = updater(current)
            if not isinstance(new, AgentSession):
                raise InvalidArgument(
                    f"the updater must return an AgentSession, got {type(new).__name__}"
                )
            if new.id != id:
                raise InvalidArgument(f"the updater changed the session id {id!r} to {new.id!r}")
            return new

        return await self._write(id, apply, refresh_activity=refresh_activity, create=False)

    async def _write(
        self,
        id: str,
        make: Callable[[AgentSession | None], AgentSession],
        *,
        refresh_activity: bool,
        create: bool,
    ) -> AgentSession:
        delay = self.retry_delay
        for attempt in range(1, self.max_attempts + 1):
            stored = await self._read(id)
            current = None if stored is None else stored[1]
            new = make(current)
            revision = 0 if current is None else current.revision
            updated_at = self.clock() if refresh_activity or current is None else current.updated_at
            new = msgspec.structs.replace(
                new,
                revision=revision + 1,
                updated_at=updated_at,
                agent_name=new.agent_name if current is None else current.agent_name,
                created_at=new.created_at if current is None else current.created_at,
            )
            operations: builtins.list[Operation] = [
                Put(
                    key=self.record_key(id),
                    value=encode(new).decode(),
                    expected_version=None if stored is None else stored[0].version,
                ),
                Put(key=self.index_key(new.agent_name, id), value=_summary(new)),
            ]
            try:
                await self.kv.conditional_batch(operations)
            except ConflictError:
                if attempt == self.max_attempts:
                    raise
                await trio.sleep(random.uniform(0, delay))
                delay = min(delay * 2, self.max_retry_delay)
                continue
            return new
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete(self, id: str) -> bool:
        """Remove session ``id`` (record and index entry); False when there was none."""
        check_session_id(id)
        for _ in range(self.max_attempts):
            stored = await self._read(id)
            if stored is None:
                return False
            found, session = stored
            try:
                await self.kv.conditional_batch(
                    [
                        Delete(key=found.key, expected_version=found.version),
                        Delete(key=self.index_key(session.agent_name, id)),
                    ]
                )
            except ConflictError:
                await trio.sleep(random.uniform(0, self.retry_delay))
                continue
            return True
        raise ConflictError(self.record_key(id), expected="a quiet key", actual=None)

    async def cleanup(self, *, older_than: float) -> int:
        """Delete sessions with no activity for ``older_than`` seconds; returns how many.

        A session that saw activity after it was listed is left alone.
        """
        if isinstance(older_than, bool) or not isinstance(older_than, int | float):
            raise InvalidArgument(f"older_than= takes seconds, got {older_than!r}")
        if older_than < 0:
            raise InvalidArgument(f"older_than= takes seconds >= 0, got {older_than!r}")
        cutoff = self.clock() - older_than
        deleted = 0
        for summary in await self.list():
            if summary.updated_at >= cutoff:
                continue
            stored = await self._read(summary.id)
            if stored is None:
                continue
            found, session = stored
            if session.updated_at >= cutoff:
                continue
            try:
                await self.kv.conditional_batch(
                    [
                        Delete(key=found.key, expected_version=found.version),
                        Delete(key=self.index_key(session.agent_name, session.id)),
                    ]
                )
            except ConflictError:
                continue  # written meanwhile: it is active again
            deleted += 1
        return deleted


def _summary(session: AgentSession) -> str:
    return encode(
        SessionSummary(
            id=session.id,
            agent_name=session.agent_name,
            created_at=session.created_at,
            updated_at=session.updated_at,
            message_count=len(session.conversation_history.messages),
            run_count=len(session.runs),
        )
    ).decode()


def create_session_store(
    kv: ConditionalTextValueStore,
    *,
    namespace: str = "operative/sessions/",
    clock: Callable[[], float] | None = None,
    max_attempts: int = 32,
) -> SessionStore:
    """A :class:`SessionStore` over ``kv`` (any conditional text-value store).

    Args:
        kv: where sessions live: ``MemoryStore()``, a SQLite or PostgreSQL store.
        namespace: the key prefix every session key starts with.
        clock: wall-clock seconds since the epoch (default ``time.time``), for tests.
        max_attempts: attempts ``update``/``save`` make on a contended key.
    """
    for method in ("get", "list", "conditional_batch"):
        if not callable(getattr(kv, method, None)):
            raise InvalidArgument(
                f"create_session_store() needs a ConditionalTextValueStore (with .{method}), "
                f"got {type(kv).__name__}"
            )
    if not isinstance(namespace, str):
        raise InvalidArgument(f"namespace= takes a str, got {namespace!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise InvalidArgument(f"max_attempts= takes an int >= 1, got {max_attempts!r}")
    if clock is not None and not callable(clock):
        raise InvalidArgument(f"clock= takes a callable returning seconds, got {clock!r}")
    return SessionStore(
        kv=kv, namespace=namespace, clock=clock or time.time, max_attempts=max_attempts
    )


async def load_agent_session(kv: ConditionalTextValueStore, id: str) -> AgentSession | None:
    """The session stored under ``id`` in ``kv`` (default layout), or ``None``."""
    return await create_session_store(kv).load(id)


async def save_agent_session(kv: ConditionalTextValueStore, session: AgentSession) -> AgentSession:
    """Store ``session`` in ``kv`` (default layout), merging concurrent edits."""
    return await create_session_store(kv).save(session)
