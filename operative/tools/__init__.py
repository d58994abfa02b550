"""Tools: defining them, offering them to models, executing calls, approvals."""

from ._approvals import ApprovalDecider as ApprovalDecider
from ._approvals import ApprovalMode as ApprovalMode
from ._approvals import ApprovalPolicy as ApprovalPolicy
from ._approvals import argument_digest as argument_digest
from ._context import ExecutionContext as ExecutionContext
from ._context import ToolContext as ToolContext
from ._elicitation import ElicitationRequest as ElicitationRequest
from ._elicitation import ElicitationResponse as ElicitationResponse
from ._elicitation import OnElicitation as OnElicitation
from ._permissions import PermissionPolicy as PermissionPolicy
from ._source import ToolSource as ToolSource
from ._tool import Tool as Tool
from ._tool import tool as tool
from ._toolbox import Toolbox as Toolbox

__all__ = [
    "ApprovalDecider",
    "ApprovalMode",
    "ApprovalPolicy",
    "ElicitationRequest",
    "ElicitationResponse",
    "ExecutionContext",
    "OnElicitation",
    "PermissionPolicy",
    "Tool",
    "ToolContext",
    "ToolSource",
    "Toolbox",
    "argument_digest",
    "tool",
]
