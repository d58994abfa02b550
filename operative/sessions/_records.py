"""Session records: ``AgentSession``, ``RunRef`` and ``RunOutcome``.

They are persisted, so they follow the schema-evolution rules: new fields get defaults,
a field never changes type, and ``AgentSession`` carries the schema version it was
written with. Times are wall-clock seconds since the epoch (``time.time()``), because a
session outlives the process (and the trio clock) that wrote it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from .._core._codec import check_schema_version
from .._core._errors import InvalidArgument
from .._core._results import RunResult
from .._core._types import FinishReason
from ..conversation import ContentPart, ConversationHistory

__all__ = [
    "SESSION_SCHEMA_VERSION",
    "AgentSession",
    "RunOutcome",
    "RunRef",
    "SessionSummary",
    "checked_input",
    "create_agent_session",
    "outcome_of",
]

SESSION_SCHEMA_VERSION = 1
"""The version this code writes; it reads every version up to this one."""


class RunOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How a session's run ended, safe to store (no error messages, no content)."""

    finish_reason: str
    """The run's ``finish_reason`` (``"stop-condition"``, ``"aborted"``, ``"error"``, ...)."""
    error: str | None = None
    """A short classifier when something went wrong: ``"output/INVALID_OUTPUT"`` for a
    final answer that failed its output type (the finish reason stays
    ``"stop-condition"``), ``"error/<ErrorType>"`` for a run that ended with an error."""

    @property
    def succeeded(self) -> bool:
        """True when the run ended normally with nothing flagged."""
        return self.error is None and self.finish_reason in (
            FinishReason.STOP_CONDITION,
            FinishReason.MAXIMUM_STEPS,
        )


class RunRef(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One run recorded on a session: reserved when it starts, settled when it ends.

    ``outcome`` is ``None`` until the run's terminal state is stored, so a run whose
    outcome could not be written (or whose process died) never reads as a success.
    """

    run_id: str
    user_message_id: str | None = None
    """The id of the user message that started the run, when there was one."""
    outcome: RunOutcome | None = None
    base_conversation_metadata: dict[str, Any] | None = None
    """The conversation metadata when the run was reserved: when the run settles (also
    when it is recovered), the keys it changed from this base are applied over the
    session's current metadata, and concurrent edits to other keys are kept. ``None``
    in older records: the session's current values then win every conflict."""
    started_at: float = 0.0
    """Wall-clock seconds since the epoch."""
    ended_at: float | None = None

    @property
    def settled(self) -> bool:
        """True once the run's outcome is stored."""
        return self.outcome is not None


class AgentSession(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation with one agent, kept in a store across runs and processes.

    Immutable: derive a changed session with :func:`msgspec.structs.replace` (or inside
    ``SessionStore.update``) and save it.
    """

    id: str
    agent_name: str
    conversation_history: ConversationHistory = ConversationHistory()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Caller-defined, JSON-encodable data about the session."""
    runs: tuple[RunRef, ...] = ()
    """Every run started on this session, oldest first."""
    created_at: float = 0.0
    """Wall-clock seconds since the epoch."""
    updated_at: float = 0.0
    """When the session last saw activity (a background write may leave it as it is)."""
    revision: int = 0
    """How many times the session was written; ``save`` compares it with the stored one
    to tell a plain overwrite from a concurrent edit that must be merged."""
    schema_version: int = SESSION_SCHEMA_VERSION
    """Always written, so a reader can tell which rules the bytes follow."""

    def __post_init__(self) -> None:
        check_schema_version("AgentSession", self.schema_version, SESSION_SCHEMA_VERSION)
        if type(self.metadata) is not dict:  # keep it encodable whatever mapping was given
            msgspec.structs.force_setattr(self, "metadata", dict(self.metadata))

    def run(self, run_id: str) -> RunRef | None:
        """The run recorded under ``run_id``, or ``None``."""
        for ref in self.runs:
            if ref.run_id == run_id:
                return ref
        return None


class SessionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What ``SessionStore.list`` returns per session (read from the index, not the record)."""

    id: str
    agent_name: str
    created_at: float
    updated_at: float
    message_count: int = 0
    run_count: int = 0


def create_agent_session(
    *,
    agent_name: str,
    conversation_history: ConversationHistory | None = None,
    id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    clock: Callable[[], float] = time.time,
) -> AgentSession:
    """A new, unsaved session (``id`` defaults to a random one)."""
    if not isinstance(agent_name, str) or not agent_name:
        raise InvalidArgument(f"agent_name= takes a non-empty str, got {agent_name!r}")
    if id is None:
        id = "session_" + os.urandom(12).hex()
    check_session_id(id)
    if conversation_history is None:
        conversation_history = ConversationHistory()
    elif not isinstance(conversation_history, ConversationHistory):
        raise InvalidArgument(
            "conversation_history= takes a ConversationHistory (a live Conversation's "
            f".current), got {type(conversation_history).__name__}"
        )
    now = clock()
    return AgentSession(
        id=id,
        agent_name=agent_name,
        conversation_history=conversation_history,
        metadata=dict(metadata or {}),
        created_at=now,
        updated_at=now,
    )


def check_session_id(id: object) -> str:
    """``id`` if it is a usable session id; raises ``InvalidArgument`` otherwise."""
    if not isinstance(id, str) or not id:
        raise InvalidArgument(f"a session id is a non-empty str, got {id!r}")
    return id


def outcome_of(result: RunResult) -> RunOutcome:
    """The storable outcome of a finished run."""
    finish = str(result.finish_reason)
    if result.finish_reason == FinishReason.ERROR:
        name = type(result.error).__name__ if result.error is not None else "Error"
        return RunOutcome(finish_reason=finish, error=f"error/{name}")
    validation = result.schema_validation
    if validation is not None and not validation.success:
        return RunOutcome(finish_reason=finish, error="output/INVALID_OUTPUT")
    return RunOutcome(finish_reason=finish)


def checked_input(input: object) -> str | Sequence[ContentPart]:
    """A session turn's input (the user's message): a str or a list of content parts."""
    if isinstance(input, str):
        return input
    if isinstance(input, Sequence) and not isinstance(input, bytes | ConversationHistory):
        return input
    raise InvalidArgument(
        f"a session turn's input is a str or a list of content parts, got {type(input).__name__}"
    )
