"""operative: a Trio-first, structured-concurrency runtime for LLM agents.

What a program needs in its first hour: agents and the three ways to run one
(``await agent.run(...)``, ``async with agent.open_run(...) as run``, and the agent-less
``async with open_run(...) as run``), tools, the conversation, results, events, stop
conditions, the root error and the few errors a caller catches. Every other name lives
in its subpackage (``operative.tools``, ``operative.sessions``, ``operative.durable``,
...), and every error in :mod:`operative.errors`.
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
from ._core._errors import CleanupError as CleanupError
from ._core._errors import InvalidArgument as InvalidArgument
from ._core._errors import OperativeError as OperativeError
from ._core._errors import OutputValidationError as OutputValidationError
from ._core._errors import ProviderError as ProviderError
from ._core._errors import RunFailed as RunFailed
from ._core._event_hub import EventStream as EventStream
from ._core._events import Event as Event
from ._core._events import RunEvent as RunEvent
from ._core._model import GenerateFunction as GenerateFunction
from ._core._model import GenerateRequest as GenerateRequest
from ._core._model import GenerateResponse as GenerateResponse
from ._core._open_run import open_run as open_run
from ._core._results import RunResult as RunResult
from ._core._results import SchemaValidation as SchemaValidation
from ._core._results import StepResult as StepResult
from ._core._run import ActiveRun as ActiveRun
from ._core._types import FinishReason as FinishReason
from ._core._types import ToolCall as ToolCall
from ._core._types import ToolResult as ToolResult
from ._core._types import Usage as Usage
from .conversation import Conversation as Conversation
from .conversation import ConversationHistory as ConversationHistory
from .conversation import FilePart as FilePart
from .conversation import ImagePart as ImagePart
from .conversation import Message as Message
from .conversation import TextPart as TextPart
from .liveness import LivenessSnapshot as LivenessSnapshot
from .tools import Tool as Tool
from .tools import Toolbox as Toolbox
from .tools import ToolContext as ToolContext
from .tools import tool as tool

if typing.TYPE_CHECKING:
    from ._agent_context import AgentRunContext as AgentRunContext
    from ._core._run_options import RunOptions as RunOptions
    from ._lazy._agent import create_lazy_agent as create_lazy_agent
    from ._lazy._agent import create_lazy_generate as create_lazy_generate

__version__ = "0.1.0"
"""This release of operative (the ``version`` of ``pyproject.toml``)."""

__all__ = [
    "ActiveRun",
    "Agent",
    "AgentInput",
    "AgentRunContext",
    "CleanupError",
    "Conversation",
    "ConversationHistory",
    "Event",
    "EventStream",
    "FilePart",
    "FinishReason",
    "GenerateFunction",
    "GenerateRequest",
    "GenerateResponse",
    "ImagePart",
    "InvalidArgument",
    "LivenessSnapshot",
    "Message",
    "OperativeError",
    "OutputValidationError",
    "ProviderError",
    "RunEvent",
    "RunFailed",
    "RunHandle",
    "RunOptions",
    "RunResult",
    "RunnableAgent",
    "SchemaValidation",
    "StepResult",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "Toolbox",
    "Usage",
    "create_agent",
    "create_lazy_agent",
    "create_lazy_generate",
    "decode",
    "encode",
    "open_run",
    "stop_when",
    "tool",
]


# What a plain run never needs loads on first use, so ``import operative`` stays light:
# a caller's per-run context, the options' TypedDict (for type checkers), lazy agents.
# dir() lists these names as if they were bound.
_DEFERRED: dict[str, tuple[str, str]] = {
    "AgentRunContext": ("._agent_context", "AgentRunContext"),
    "RunOptions": ("._core._run_options", "RunOptions"),
    "create_lazy_agent": ("._lazy._agent", "create_lazy_agent"),
    "create_lazy_generate": ("._lazy._agent", "create_lazy_generate"),
}


def __getattr__(name: str) -> object:
    entry = _DEFERRED.get(name)
    if entry is None:
        raise AttributeError(f"module 'operative' has no attribute {name!r}")
    module, attribute = entry
    value = getattr(importlib.import_module(module, __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_DEFERRED))
