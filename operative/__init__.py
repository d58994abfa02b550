"""operative: a Trio-first, structured-concurrency runtime for LLM agents.

Every name here is re-exported from a private module; see the docs for the guide.
"""

import importlib
import typing

from . import conditions as stop_when
from ._agent import Agent as Agent
from ._agent import AgentInput as AgentInput
from ._agent import RunHandle as RunHandle
from ._agent import RunnableAgent as RunnableAgent
from ._agent import create_agent as create_agent
from ._core._codec import decode as decode
from ._core._codec import encode as encode
from ._core._errors import AgentContractError as AgentContractError
from ._core._errors import AllProvidersFailed as AllProvidersFailed
from ._core._errors import ApprovalError as ApprovalError
from ._core._errors import ApprovalStateError as ApprovalStateError
from ._core._errors import AsyncDefinitionLoadError as AsyncDefinitionLoadError
from ._core._errors import BudgetExceededError as BudgetExceededError
from ._core._errors import CleanupError as CleanupError
from ._core._errors import ConflictError as ConflictError
from ._core._errors import ConversationError as ConversationError
from ._core._errors import CorruptRecordError as CorruptRecordError
from ._core._errors import DatabaseFileError as DatabaseFileError
from ._core._errors import DataValidationError as DataValidationError
from ._core._errors import ElicitationError as ElicitationError
from ._core._errors import GuardrailTripped as GuardrailTripped
from ._core._errors import HookError as HookError
from ._core._errors import InvalidArgument as InvalidArgument
from ._core._errors import InvalidResponseError as InvalidResponseError
from ._core._errors import LeaseLostError as LeaseLostError
from ._core._errors import MissingRunOptionsError as MissingRunOptionsError
from ._core._errors import NoRouteError as NoRouteError
from ._core._errors import OperativeError as OperativeError
from ._core._errors import OutputValidationError as OutputValidationError
from ._core._errors import ProviderError as ProviderError
from ._core._errors import RunNotFoundError as RunNotFoundError
from ._core._errors import SchemaVersionError as SchemaVersionError
from ._core._errors import SelectionRevalidationError as SelectionRevalidationError
from ._core._errors import SessionNotFoundError as SessionNotFoundError
from ._core._errors import SessionPersistenceError as SessionPersistenceError
from ._core._errors import ToolDefinitionError as ToolDefinitionError
from ._core._event_hub import EventStream as EventStream
from ._core._events import Event as Event
from ._core._events import RunEvent as RunEvent
from ._core._extension import Extension as Extension
from ._core._extension import Feature as Feature
from ._core._extension import ResumePoint as ResumePoint
from ._core._extension import Switch as Switch
from ._core._model import GenerateFunction as GenerateFunction
from ._core._model import GenerateRequest as GenerateRequest
from ._core._model import GenerateResponse as GenerateResponse
from ._core._open_run import open_run as open_run
from ._core._options import RunConfig as RunConfig
from ._core._results import RunResult as RunResult
from ._core._results import SchemaValidation as SchemaValidation
from ._core._results import StepResult as StepResult
from ._core._run import ActiveRun as ActiveRun
from ._core._types import ApprovalDecision as ApprovalDecision
from ._core._types import Authority as Authority
from ._core._types import FinishReason as FinishReason
from ._core._types import PendingApproval as PendingApproval
from ._core._types import RequestContext as RequestContext
from ._core._types import ToolCall as ToolCall
from ._core._types import ToolOutcome as ToolOutcome
from ._core._types import ToolResult as ToolResult
from ._core._types import ToolSpec as ToolSpec
from ._core._types import Usage as Usage
from .conversation import Conversation as Conversation
from .conversation import ConversationHistory as ConversationHistory
from .conversation import FilePart as FilePart
from .conversation import ImagePart as ImagePart
from .conversation import Message as Message
from .conversation import TextPart as TextPart
from .conversation import find_dangling_tool_calls as find_dangling_tool_calls
from .conversation import repair_dangling_tool_calls as repair_dangling_tool_calls
from .conversation import resolve_tool_result as resolve_tool_result
from .hooks import HookContext as HookContext
from .hooks import HookRegistry as HookRegistry
from .liveness import LivenessSnapshot as LivenessSnapshot
from .tools import ExecutionContext as ExecutionContext
from .tools import Tool as Tool
from .tools import Toolbox as Toolbox
from .tools import ToolContext as ToolContext
from .tools import tool as tool

if typing.TYPE_CHECKING:
    from ._agent_context import AgentRunContext as AgentRunContext
    from ._core._run_options import RunOptions as RunOptions
    from ._lazy._agent import create_lazy_agent as create_lazy_agent
    from ._lazy._agent import create_lazy_generate as create_lazy_generate
    from .budgets import Budget as Budget
    from .context import ContextManagement as ContextManagement
    from .kvstore import ConditionalTextValueStore as ConditionalTextValueStore
    from .kvstore import MemoryStore as MemoryStore
    from .kvstore import PostgresStore as PostgresStore
    from .kvstore import SqliteStore as SqliteStore
    from .liveness import StallPolicy as StallPolicy
    from .multiagent import HandoffError as HandoffError
    from .multiagent import SubagentError as SubagentError
    from .multiagent import WorkerFailedError as WorkerFailedError
    from .multiagent import WorkerReport as WorkerReport
    from .multiagent import WorkerTask as WorkerTask
    from .multiagent import create_supervisor as create_supervisor
    from .multiagent import dispatch_tool as dispatch_tool
    from .multiagent import handoff as handoff
    from .multiagent import subagent_tool as subagent_tool
    from .retry import RetryOptions as RetryOptions
    from .sessions import AgentSession as AgentSession
    from .sessions import RunOutcome as RunOutcome
    from .sessions import RunRef as RunRef
    from .sessions import SessionHandle as SessionHandle
    from .sessions import SessionStore as SessionStore
    from .sessions import create_agent_session as create_agent_session
    from .sessions import create_session_store as create_session_store
    from .sessions import load_agent_session as load_agent_session
    from .sessions import open_session as open_session
    from .sessions import resume_session as resume_session
    from .sessions import save_agent_session as save_agent_session
    from .steering import Steering as Steering
    from .tools import ApprovalPolicy as ApprovalPolicy
    from .tools import ElicitationRequest as ElicitationRequest
    from .tools import ElicitationResponse as ElicitationResponse
    from .tools import OnElicitation as OnElicitation
    from .tools import PermissionPolicy as PermissionPolicy

__version__ = "0.1.0"
"""This release of operative (the ``version`` of ``pyproject.toml``)."""

__all__ = [
    "ActiveRun",
    "Agent",
    "AgentContractError",
    "AgentInput",
    "AgentRunContext",
    "AgentSession",
    "AllProvidersFailed",
    "ApprovalDecision",
    "ApprovalError",
    "ApprovalPolicy",
    "ApprovalStateError",
    "AsyncDefinitionLoadError",
    "Authority",
    "Budget",
    "BudgetExceededError",
    "CleanupError",
    "ConditionalTextValueStore",
    "ConflictError",
    "ContextManagement",
    "Conversation",
    "ConversationError",
    "ConversationHistory",
    "CorruptRecordError",
    "DataValidationError",
    "DatabaseFileError",
    "ElicitationError",
    "ElicitationRequest",
    "ElicitationResponse",
    "Event",
    "EventStream",
    "ExecutionContext",
    "Extension",
    "Feature",
    "FilePart",
    "FinishReason",
    "GenerateFunction",
    "GenerateRequest",
    "GenerateResponse",
    "GuardrailTripped",
    "HandoffError",
    "HookContext",
    "HookError",
    "HookRegistry",
    "ImagePart",
    "InvalidArgument",
    "InvalidResponseError",
    "LeaseLostError",
    "LivenessSnapshot",
    "MemoryStore",
    "Message",
    "MissingRunOptionsError",
    "NoRouteError",
    "OnElicitation",
    "OperativeError",
    "OutputValidationError",
    "PendingApproval",
    "PermissionPolicy",
    "PostgresStore",
    "ProviderError",
    "RequestContext",
    "ResumePoint",
    "RetryOptions",
    "RunConfig",
    "RunEvent",
    "RunHandle",
    "RunNotFoundError",
    "RunOptions",
    "RunOutcome",
    "RunRef",
    "RunResult",
    "RunnableAgent",
    "SchemaValidation",
    "SchemaVersionError",
    "SelectionRevalidationError",
    "SessionHandle",
    "SessionNotFoundError",
    "SessionPersistenceError",
    "SessionStore",
    "SqliteStore",
    "StallPolicy",
    "Steering",
    "StepResult",
    "SubagentError",
    "Switch",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "Usage",
    "WorkerFailedError",
    "WorkerReport",
    "WorkerTask",
    "create_agent",
    "create_agent_session",
    "create_lazy_agent",
    "create_lazy_generate",
    "create_session_store",
    "create_supervisor",
    "decode",
    "dispatch_tool",
    "encode",
    "find_dangling_tool_calls",
    "handoff",
    "load_agent_session",
    "open_run",
    "open_session",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
    "resume_session",
    "save_agent_session",
    "stop_when",
    "subagent_tool",
    "tool",
]


# Optional subsystems load on first use, so ``import operative`` stays light.
_LAZY: dict[str, tuple[str, str]] = {
    "create_lazy_agent": ("._lazy._agent", "create_lazy_agent"),
    "create_lazy_generate": ("._lazy._agent", "create_lazy_generate"),
    "Budget": (".budgets", "Budget"),
    "ContextManagement": (".context", "ContextManagement"),
    "Steering": (".steering", "Steering"),
    "AgentSession": (".sessions", "AgentSession"),
    "RunRef": (".sessions", "RunRef"),
    "RunOutcome": (".sessions", "RunOutcome"),
    "SessionStore": (".sessions", "SessionStore"),
    "SessionHandle": (".sessions", "SessionHandle"),
    "create_agent_session": (".sessions", "create_agent_session"),
    "load_agent_session": (".sessions", "load_agent_session"),
    "save_agent_session": (".sessions", "save_agent_session"),
    "create_session_store": (".sessions", "create_session_store"),
    "resume_session": (".sessions", "resume_session"),
    "open_session": (".sessions", "open_session"),
    "PostgresStore": (".kvstore", "PostgresStore"),
    "SqliteStore": (".kvstore", "SqliteStore"),
    "HandoffError": (".multiagent", "HandoffError"),
    "SubagentError": (".multiagent", "SubagentError"),
    "WorkerFailedError": (".multiagent", "WorkerFailedError"),
    "WorkerReport": (".multiagent", "WorkerReport"),
    "WorkerTask": (".multiagent", "WorkerTask"),
    "create_supervisor": (".multiagent", "create_supervisor"),
    "dispatch_tool": (".multiagent", "dispatch_tool"),
    "handoff": (".multiagent", "handoff"),
    "subagent_tool": (".multiagent", "subagent_tool"),
}


# What a plain run (a generate function and a toolbox) never needs loads on first use
# too: a caller's per-run context, approvals and permission policies, elicitation, the
# stall watchdog, retries, key-value stores.
# These names (and the submodules they came with) stay listed by dir(), as when they
# were bound at import.
_DEFERRED: dict[str, tuple[str, str | None]] = {
    "AgentRunContext": ("._agent_context", "AgentRunContext"),
    "ApprovalPolicy": (".tools._approvals", "ApprovalPolicy"),
    "PermissionPolicy": (".tools._permissions", "PermissionPolicy"),
    "ElicitationRequest": (".tools._elicitation", "ElicitationRequest"),
    "ElicitationResponse": (".tools._elicitation", "ElicitationResponse"),
    "OnElicitation": (".tools._elicitation", "OnElicitation"),
    "StallPolicy": (".liveness._watchdog", "StallPolicy"),
    "RetryOptions": (".retry", "RetryOptions"),
    "RunOptions": ("._core._run_options", "RunOptions"),
    "ConditionalTextValueStore": (".kvstore", "ConditionalTextValueStore"),
    "MemoryStore": (".kvstore", "MemoryStore"),
    "retry": (".retry", None),
    "kvstore": (".kvstore", None),
}


def __getattr__(name: str) -> object:
    entry = _LAZY.get(name) or _DEFERRED.get(name)
    if entry is None:
        raise AttributeError(f"module 'operative' has no attribute {name!r}")
    module, attribute = entry
    loaded = importlib.import_module(module, __name__)
    value = loaded if attribute is None else getattr(loaded, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_DEFERRED))
