"""Tools: defining them, offering them to models, executing calls, approvals."""

import importlib
import typing

from .._core._errors import ApprovalError as ApprovalError
from .._core._errors import ApprovalStateError as ApprovalStateError
from .._core._errors import ElicitationError as ElicitationError
from .._core._errors import ToolDefinitionError as ToolDefinitionError
from .._core._types import ApprovalDecision as ApprovalDecision
from .._core._types import Authority as Authority
from .._core._types import PendingApproval as PendingApproval
from .._core._types import RequestContext as RequestContext
from .._core._types import ToolOutcome as ToolOutcome
from .._core._types import ToolSpec as ToolSpec
from ._context import ExecutionContext as ExecutionContext
from ._context import ToolContext as ToolContext
from ._method import ToolMethod as ToolMethod
from ._method import tool as tool
from ._source import ToolSource as ToolSource
from ._tool import Tool as Tool
from ._tool import ToolDescriptionWarning as ToolDescriptionWarning
from ._toolbox import Toolbox as Toolbox

if typing.TYPE_CHECKING:
    from ._approvals import ApprovalDecider as ApprovalDecider
    from ._approvals import ApprovalMode as ApprovalMode
    from ._approvals import ApprovalPolicy as ApprovalPolicy
    from ._approvals import argument_digest as argument_digest
    from ._elicitation import ElicitationRequest as ElicitationRequest
    from ._elicitation import ElicitationResponse as ElicitationResponse
    from ._elicitation import OnElicitation as OnElicitation
    from ._permissions import PermissionPolicy as PermissionPolicy

__all__ = [
    "ApprovalDecider",
    "ApprovalDecision",
    "ApprovalError",
    "ApprovalMode",
    "ApprovalPolicy",
    "ApprovalStateError",
    "Authority",
    "ElicitationError",
    "ElicitationRequest",
    "ElicitationResponse",
    "ExecutionContext",
    "OnElicitation",
    "PendingApproval",
    "PermissionPolicy",
    "RequestContext",
    "Tool",
    "ToolContext",
    "ToolDefinitionError",
    "ToolDescriptionWarning",
    "ToolMethod",
    "ToolOutcome",
    "ToolSource",
    "ToolSpec",
    "Toolbox",
    "argument_digest",
    "tool",
]


# Approvals and permission policies load on first use: a toolbox needs them only when
# it is given a policy or parks a call. Elicitation loads when a tool first asks.
_LAZY = {
    "ApprovalDecider": "._approvals",
    "ApprovalMode": "._approvals",
    "ApprovalPolicy": "._approvals",
    "argument_digest": "._approvals",
    "PermissionPolicy": "._permissions",
    "ElicitationRequest": "._elicitation",
    "ElicitationResponse": "._elicitation",
    "OnElicitation": "._elicitation",
}


def __getattr__(name: str) -> object:
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The deferred names are listed as if they were bound (they were, eagerly, before).
    return sorted(set(globals()) | set(_LAZY))
