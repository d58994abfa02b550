"""``resume_session``: a stored session (or a new one) and a live conversation for it."""

from __future__ import annotations

import attrs

from .._core._errors import InvalidArgument
from ..conversation import Conversation
from ._records import AgentSession, check_session_id, create_agent_session
from ._store import SessionStore

__all__ = ["ResumedSession", "resume_session"]


@attrs.frozen(kw_only=True)
class ResumedSession:
    """What :func:`resume_session` returns."""

    session: AgentSession
    conversation: Conversation
    """A live conversation starting from the session's history (yours to change)."""
    is_new: bool
    """True when no session was stored under the id (the new one is not saved yet)."""


async def resume_session(store: SessionStore, id: str, *, agent_name: str) -> ResumedSession:
    """Load session ``id`` from ``store``, or start a new one for ``agent_name``.

    A new session is not stored until it is saved (``store.save(resumed.session)``).

    Raises:
        InvalidArgument: the stored session belongs to another agent.
        CorruptRecordError: the stored bytes are not a session.
    """
    if not isinstance(store, SessionStore):
        raise InvalidArgument(
            f"resume_session() takes a SessionStore (create_session_store(kv)), "
            f"got {type(store).__name__}"
        )
    check_session_id(id)
    session = await store.load(id)
    is_new = session is None
    if session is None:
        session = create_agent_session(agent_name=agent_name, id=id, clock=store.clock)
    elif session.agent_name != agent_name:
        raise InvalidArgument(
            f"session {id!r} belongs to agent {session.agent_name!r}, not {agent_name!r}"
        )
    return ResumedSession(
        session=session,
        conversation=Conversation.from_history(session.conversation_history),
        is_new=is_new,
    )
