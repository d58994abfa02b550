"""Every error operative raises, in one tree rooted at :class:`OperativeError`.

Catch ``OperativeError`` to catch them all. Each error is defined by the package that
raises it, and importable from there as well (the package is named in brackets); the
kernel's (the run, its tools, its model calls, the codec) have no other public home.
A message says what went wrong and what to do about it.

::

    OperativeError(Exception)                   the root
    ├── InvalidArgument(TypeError)              an API got arguments it cannot take: raised
    │   │                                       at the call that was wrong
    │   ├── ToolDefinitionError                 a tool that cannot be offered [tools]
    │   └── MissingRunOptionsError              a session handle with no agent [sessions]
    ├── RunFailed                               ``await agent.run(...)`` ended in error
    │                                           (``.result``; the error is its cause)
    ├── TrioRequiredError(RuntimeError)         called outside Trio (from asyncio)
    ├── CleanupError                            a run ended, its outcome not committed
    ├── OutputValidationError(ValueError)       the final answer never fit ``output=``
    ├── InvalidResponseError                    ``generate`` returned something unusable
    ├── HookError                               a hook returned what the loop cannot use
    ├── ProviderError                           a model provider failed (``.retryable``)
    │   ├── ProviderRequestError                the request was refused (4xx): not retried
    │   │   └── ProviderAuthenticationError     bad or missing credentials (401, 403)
    │   ├── ProviderRateLimitError              429, with ``retry_after``
    │   ├── ProviderUnavailableError            5xx, 529 overloaded, 409
    │   ├── ProviderTimeoutError(TimeoutError)  no answer in time
    │   └── ProviderConnectionError(ConnectionError)  the connection failed or was cut
    ├── AllProvidersFailed(ExceptionGroup)      every provider a fallover tried [providers]
    ├── NoRouteError(LookupError)               a routing generate matched no route
    │                                           [providers]
    ├── ApprovalError                           a signed approval was refused (``.reason``)
    │   │                                       [tools]
    │   └── ApprovalStateError                  the approval store failed [tools]
    ├── ElicitationError                        a tool asked for input nobody gives [tools]
    ├── ConversationError(ValueError)           a transcript edit that does not apply
    │                                           [conversation]
    ├── CorruptRecordError(ValueError)          stored or received bytes that do not decode
    │   └── SchemaVersionError                  written by a newer operative: upgrade
    ├── DataValidationError(ValueError)         decoded data that does not fit its type
    ├── DatabaseFileError                       a database file that is not one, or damaged
    ├── OutcomeUnknownError                     a PostgreSQL write cut off unanswered: read
    │                                           back before retrying
    ├── ConflictError                           a conditional store write lost a race
    │                                           [kvstore]
    ├── AsyncDefinitionLoadError                a lazy agent's loader raised (loads again)
    ├── AgentContractError(TypeError)           a lazy loader's agent is not an agent
    ├── BudgetExceededError                     a run's budget ran out (``.limit``) [budgets]
    ├── GuardrailTripped                        a guardrail stopped the run [guardrails]
    ├── SelectionRevalidationError              a step's selected plan no longer holds
    │                                           [steering]
    ├── SubagentError                           a subagent's run gave no answer [multiagent]
    ├── HandoffError                            a handoff that cannot take place
    │                                           [multiagent]
    ├── WorkerFailedError                       a supervisor's worker failed [multiagent]
    ├── SessionNotFoundError(LookupError)       no session under that id [sessions]
    ├── SessionPersistenceError                 a turn's outcome was not stored [sessions]
    ├── LeaseHeldError                          a turn to recover another worker holds
    │                                           [sessions]
    ├── LeaseLostError                          another worker took the durable run [durable]
    ├── RunNotFoundError(LookupError)           no durable run under that id [durable]
    ├── TemporalRunError                        a run on Temporal ended with it [temporal]
    ├── MCPServerError                          an MCP server failed [mcp]
    │   ├── MCPNotConnectedError(RuntimeError)  used outside its ``async with`` [mcp]
    │   ├── MCPConnectionError(ConnectionError)  not started, not reached, or lost [mcp]
    │   ├── MCPProtocolError                    a JSON-RPC error or a broken result [mcp]
    │   └── MCPToolError                        the tool reported a failure [mcp]
    ├── ClientMessageError                      a client sent a system message [ui]
    ├── AguiInputError(ValueError)              a body that is no ``RunAgentInput`` [ui]
    ├── VercelRequestError(ValueError)          a body that is no chat request [ui]
    ├── InjectedError                           what a ``fail`` fault raises [testing]
    ├── ScriptExhausted(AssertionError)         a scripted model ran out [testing]
    ├── CrashKitError                           the crash kit could not run [testing.crash]
    └── CrashTestFailure(AssertionError)        an invariant broke under crashes
                                                [testing.crash]

The errors of a feature load with it, on first use (``import operative.errors`` loads
no feature, and no optional dependency: ``TemporalRunError`` needs ``temporalio``).
"""

import importlib
import typing

from ._core._errors import ApprovalError as ApprovalError
from ._core._errors import ApprovalStateError as ApprovalStateError
from ._core._errors import CleanupError as CleanupError
from ._core._errors import CorruptRecordError as CorruptRecordError
from ._core._errors import DataValidationError as DataValidationError
from ._core._errors import ElicitationError as ElicitationError
from ._core._errors import HookError as HookError
from ._core._errors import InvalidArgument as InvalidArgument
from ._core._errors import InvalidResponseError as InvalidResponseError
from ._core._errors import OperativeError as OperativeError
from ._core._errors import OutputValidationError as OutputValidationError
from ._core._errors import ProviderAuthenticationError as ProviderAuthenticationError
from ._core._errors import ProviderConnectionError as ProviderConnectionError
from ._core._errors import ProviderError as ProviderError
from ._core._errors import ProviderRateLimitError as ProviderRateLimitError
from ._core._errors import ProviderRequestError as ProviderRequestError
from ._core._errors import ProviderTimeoutError as ProviderTimeoutError
from ._core._errors import ProviderUnavailableError as ProviderUnavailableError
from ._core._errors import RunFailed as RunFailed
from ._core._errors import SchemaVersionError as SchemaVersionError
from ._core._errors import ToolDefinitionError as ToolDefinitionError
from ._core._errors import TrioRequiredError as TrioRequiredError
from ._lazy._errors import AgentContractError as AgentContractError
from ._lazy._errors import AsyncDefinitionLoadError as AsyncDefinitionLoadError
from .conversation import ConversationError as ConversationError

if typing.TYPE_CHECKING:
    from ._sql._postgres import OutcomeUnknownError as OutcomeUnknownError
    from ._sql._sqlite_file import DatabaseFileError as DatabaseFileError
    from .budgets import BudgetExceededError as BudgetExceededError
    from .durable import LeaseLostError as LeaseLostError
    from .durable import RunNotFoundError as RunNotFoundError
    from .guardrails import GuardrailTripped as GuardrailTripped
    from .kvstore import ConflictError as ConflictError
    from .mcp import MCPConnectionError as MCPConnectionError
    from .mcp import MCPNotConnectedError as MCPNotConnectedError
    from .mcp import MCPProtocolError as MCPProtocolError
    from .mcp import MCPServerError as MCPServerError
    from .mcp import MCPToolError as MCPToolError
    from .multiagent import HandoffError as HandoffError
    from .multiagent import SubagentError as SubagentError
    from .multiagent import WorkerFailedError as WorkerFailedError
    from .providers import AllProvidersFailed as AllProvidersFailed
    from .providers import NoRouteError as NoRouteError
    from .sessions import LeaseHeldError as LeaseHeldError
    from .sessions import MissingRunOptionsError as MissingRunOptionsError
    from .sessions import SessionNotFoundError as SessionNotFoundError
    from .sessions import SessionPersistenceError as SessionPersistenceError
    from .steering import SelectionRevalidationError as SelectionRevalidationError
    from .temporal import TemporalRunError as TemporalRunError
    from .testing import InjectedError as InjectedError
    from .testing import ScriptExhausted as ScriptExhausted
    from .testing.crash import CrashKitError as CrashKitError
    from .testing.crash import CrashTestFailure as CrashTestFailure
    from .ui import AguiInputError as AguiInputError
    from .ui import ClientMessageError as ClientMessageError
    from .ui import VercelRequestError as VercelRequestError

__all__ = [
    "AgentContractError",
    "AguiInputError",
    "AllProvidersFailed",
    "ApprovalError",
    "ApprovalStateError",
    "AsyncDefinitionLoadError",
    "BudgetExceededError",
    "CleanupError",
    "ClientMessageError",
    "ConflictError",
    "ConversationError",
    "CorruptRecordError",
    "CrashKitError",
    "CrashTestFailure",
    "DataValidationError",
    "DatabaseFileError",
    "ElicitationError",
    "GuardrailTripped",
    "HandoffError",
    "HookError",
    "InjectedError",
    "InvalidArgument",
    "InvalidResponseError",
    "LeaseHeldError",
    "LeaseLostError",
    "MCPConnectionError",
    "MCPNotConnectedError",
    "MCPProtocolError",
    "MCPServerError",
    "MCPToolError",
    "MissingRunOptionsError",
    "NoRouteError",
    "OperativeError",
    "OutcomeUnknownError",
    "OutputValidationError",
    "ProviderAuthenticationError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderRequestError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RunFailed",
    "RunNotFoundError",
    "SchemaVersionError",
    "ScriptExhausted",
    "SelectionRevalidationError",
    "SessionNotFoundError",
    "SessionPersistenceError",
    "SubagentError",
    "TemporalRunError",
    "ToolDefinitionError",
    "TrioRequiredError",
    "VercelRequestError",
    "WorkerFailedError",
]

# The errors of features, loaded with their package on first use.
_FEATURES = {
    "BudgetExceededError": ".budgets",
    "LeaseLostError": ".durable",
    "RunNotFoundError": ".durable",
    "GuardrailTripped": ".guardrails",
    "ConflictError": ".kvstore",
    "DatabaseFileError": "._sql._sqlite_file",
    "OutcomeUnknownError": "._sql._postgres",
    "MCPConnectionError": ".mcp",
    "MCPNotConnectedError": ".mcp",
    "MCPProtocolError": ".mcp",
    "MCPServerError": ".mcp",
    "MCPToolError": ".mcp",
    "HandoffError": ".multiagent",
    "SubagentError": ".multiagent",
    "WorkerFailedError": ".multiagent",
    "AllProvidersFailed": ".providers",
    "NoRouteError": ".providers",
    "LeaseHeldError": ".sessions",
    "MissingRunOptionsError": ".sessions",
    "SessionNotFoundError": ".sessions",
    "SessionPersistenceError": ".sessions",
    "SelectionRevalidationError": ".steering",
    "TemporalRunError": ".temporal",
    "InjectedError": ".testing",
    "ScriptExhausted": ".testing",
    "CrashKitError": ".testing.crash",
    "CrashTestFailure": ".testing.crash",
    "AguiInputError": ".ui",
    "ClientMessageError": ".ui",
    "VercelRequestError": ".ui",
}


def __getattr__(name: str) -> object:
    package = _FEATURES.get(name)
    if package is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(package, "operative"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FEATURES))
