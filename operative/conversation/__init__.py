"""The conversation model: messages, the live ``Conversation`` and immutable histories."""

from ._conversation import Conversation as Conversation
from ._history import HISTORY_SCHEMA_VERSION as HISTORY_SCHEMA_VERSION
from ._history import ConversationHistory as ConversationHistory
from ._message import ContentPart as ContentPart
from ._message import FilePart as FilePart
from ._message import ImagePart as ImagePart
from ._message import Message as Message
from ._message import Role as Role
from ._message import TextPart as TextPart
from ._message import new_message_id as new_message_id
from ._message import tool_result_content as tool_result_content
from ._tool_results import ConversationError as ConversationError
from ._tool_results import cancelled_result as cancelled_result
from ._tool_results import find_dangling_tool_calls as find_dangling_tool_calls
from ._tool_results import repair_dangling_tool_calls as repair_dangling_tool_calls
from ._tool_results import resolve_tool_result as resolve_tool_result
from ._tool_results import tool_result_message as tool_result_message

__all__ = [
    "HISTORY_SCHEMA_VERSION",
    "ContentPart",
    "Conversation",
    "ConversationError",
    "ConversationHistory",
    "FilePart",
    "ImagePart",
    "Message",
    "Role",
    "TextPart",
    "cancelled_result",
    "find_dangling_tool_calls",
    "new_message_id",
    "repair_dangling_tool_calls",
    "resolve_tool_result",
    "tool_result_content",
    "tool_result_message",
]
