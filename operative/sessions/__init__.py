"""Sessions: conversations with an agent kept in a store across runs and processes."""

from ._duration import Duration as Duration
from ._duration import parse_duration as parse_duration
from ._errors import LeaseHeldError as LeaseHeldError
from ._errors import MissingRunOptionsError as MissingRunOptionsError
from ._errors import SessionNotFoundError as SessionNotFoundError
from ._errors import SessionPersistenceError as SessionPersistenceError
from ._events import SessionRecoverFailed as SessionRecoverFailed
from ._handle import SessionHandle as SessionHandle
from ._monitor import MonitorResult as MonitorResult
from ._open import open_session as open_session
from ._records import SESSION_SCHEMA_VERSION as SESSION_SCHEMA_VERSION
from ._records import AgentSession as AgentSession
from ._records import RunOutcome as RunOutcome
from ._records import RunRef as RunRef
from ._records import SessionSummary as SessionSummary
from ._records import create_agent_session as create_agent_session
from ._resume import ResumedSession as ResumedSession
from ._resume import resume_session as resume_session
from ._signals import wait_for_signal as wait_for_signal
from ._store import SessionStore as SessionStore
from ._store import SessionUpdater as SessionUpdater
from ._store import create_session_store as create_session_store
from ._store import load_agent_session as load_agent_session
from ._store import save_agent_session as save_agent_session

__all__ = [
    "SESSION_SCHEMA_VERSION",
    "AgentSession",
    "Duration",
    "LeaseHeldError",
    "MissingRunOptionsError",
    "MonitorResult",
    "ResumedSession",
    "RunOutcome",
    "RunRef",
    "SessionHandle",
    "SessionNotFoundError",
    "SessionPersistenceError",
    "SessionRecoverFailed",
    "SessionStore",
    "SessionSummary",
    "SessionUpdater",
    "create_agent_session",
    "create_session_store",
    "load_agent_session",
    "open_session",
    "parse_duration",
    "resume_session",
    "save_agent_session",
    "wait_for_signal",
]
