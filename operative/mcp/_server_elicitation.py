"""A served tool asks the person behind the MCP client: elicitation and approvals.

A tool's :meth:`~operative.tools.ToolContext.elicit` becomes an ``elicitation/create``
request (form mode) sent on the call's own channel, when the client declared the
elicitation capability: the answer's content is validated against the type the tool
asked for; ``decline`` and ``cancel`` are ``None`` (declined). The form schema is the
type's, made into what MCP forms accept: an object of top-level fields (``$ref``\\ s to
them inlined, a string enum typed ``string``); any other type is asked as one field
named ``value``. A client without the capability makes ``elicit`` raise
:class:`~operative.tools.ElicitationError`, which fails the call with a message saying so.

A call that waits for a person's approval (a tool declared ``needs_approval``, or a
toolbox's ``approval_policy``) is asked the same way: a form with an ``approve``
checkbox and an optional ``reason``. Yes runs the call; no (or a dismissed form) denies
it, and the result says a person denied it.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
import msgspec
from mcp.server.session import ServerSession

from .._core._errors import ElicitationError
from .._core._types import ApprovalDecision, PendingApproval
from ..tools import ElicitationRequest, ElicitationResponse

__all__ = ["ClientQuestions", "form_schema"]

_WRAPPED = "value"
_APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Let the call run",
            "default": False,
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "Why not (the caller reads it)",
        },
    },
    "required": ["approve"],
}


class ClientQuestions:
    """The questions one ``tools/call`` may put to the client's person."""

    def __init__(self, session: ServerSession, request_id: types.RequestId | None) -> None:
        self._session = session
        self._request_id = request_id

    def can_ask(self) -> bool:
        """Whether the client takes form elicitation on this call's channel."""
        capabilities = self._session.client_capabilities
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is None:
            return False
        # An empty capability object is form mode (the protocol's back-compatibility rule).
        form = elicitation.form is not None or elicitation.url is None
        return form and self._session.can_send_request

    async def _ask(self, message: str, schema: dict[str, Any]) -> types.ElicitResult:
        return await self._session.elicit_form(message, schema, related_request_id=self._request_id)

    async def on_elicitation(self, request: ElicitationRequest) -> ElicitationResponse | None:
        """Answers a served tool's ``context.elicit(...)`` (the call's ``on_elicitation``)."""
        if not self.can_ask():
            raise ElicitationError(
                "this tool asked for input, but the MCP client it is served to cannot be "
                "asked: it did not declare the elicitation capability (form mode)"
            )
        schema, wrapped = form_schema(request.schema)
        answer = await self._ask(request.message, schema)
        if answer.action != "accept":
            return None
        content: dict[str, Any] = dict(answer.content or {})
        data = content.get(_WRAPPED) if wrapped else content
        return ElicitationResponse(
            request_id=request.request_id, tool_call_id=request.tool_call_id, data=data
        )

    async def approval(self, pending: PendingApproval) -> ApprovalDecision | None:
        """A person's decision on a parked call; ``None`` when the client cannot be asked."""
        if not self.can_ask():
            return None
        arguments = msgspec.json.encode(pending.arguments, order="sorted").decode()
        answer = await self._ask(
            f"Allow the tool {pending.tool_name!r} to run with these arguments? {arguments}",
            _APPROVAL_SCHEMA,
        )
        if answer.action != "accept":
            verb = "declined" if answer.action == "decline" else "dismissed"
            return ApprovalDecision(approved=False, reason=f"the person {verb} the approval form")
        content = answer.content or {}
        if content.get("approve") is True:
            return ApprovalDecision(approved=True)
        reason = content.get("reason")
        return ApprovalDecision(approved=False, reason=reason if isinstance(reason, str) else "")


def form_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The form to ask for ``schema``'s values, and whether it wraps them in one field."""
    definitions: dict[str, Any] = schema.get("$defs", {})
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, dict):
        form: dict[str, Any] = {
            "type": "object",
            "properties": {name: _field(field, definitions) for name, field in properties.items()},
        }
        required = schema.get("required")
        if required:
            form["required"] = list(required)
        return form, False
    return {
        "type": "object",
        "properties": {_WRAPPED: _field(schema, definitions)},
        "required": [_WRAPPED],
    }, True


def _field(field: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    ref = field.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = definitions.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, dict):
            field = {**target, **{k: v for k, v in field.items() if k != "$ref"}}
    field = _typed_enum({k: v for k, v in field.items() if k != "$defs"})
    items = field.get("items")
    if field.get("type") == "array" and isinstance(items, dict):
        field["items"] = _typed_enum(dict(items))
    return field


def _typed_enum(field: dict[str, Any]) -> dict[str, Any]:
    """A string enum with its ``"type": "string"`` (MCP forms require it)."""
    values = field.get("enum")
    strings = isinstance(values, list) and values and all(isinstance(v, str) for v in values)
    if strings and "type" not in field:
        field["type"] = "string"
    return field
