"""Leaf records shared by the conversation model, the toolbox and the loop.

All are frozen, keyword-only ``msgspec.Struct``s: cheap to build, safe to share between
tasks without copying, and encodable as they are.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

import msgspec

__all__ = [
    "ApprovalDecision",
    "Authority",
    "FinishReason",
    "PendingApproval",
    "RequestContext",
    "ToolCall",
    "ToolOutcome",
    "ToolResult",
    "ToolSpec",
    "Usage",
]


class FinishReason(enum.StrEnum):
    """Why a run ended; equal to the specification's strings."""

    STOP_CONDITION = "stop-condition"
    MAXIMUM_STEPS = "maximum-steps"
    ABORTED = "aborted"
    ERROR = "error"
    BUDGET_EXCEEDED = "budget-exceeded"


ToolOutcome = Literal["success", "error", "denied", "action-required", "cancelled"]
"""How one tool call settled."""


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One tool call requested by the model."""

    id: str
    """The provider's call id; every tool result refers to it."""
    name: str
    """The tool's name."""
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)
    """A mapping, or the provider's raw JSON string (parsed and validated at execution)."""


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage of one or more generate calls. ``total`` is what budgets count."""

    prompt: int = 0
    completion: int = 0
    total: int = 0
    cache_read: int = 0
    """Prompt tokens served from the provider's prompt cache."""
    cache_write: int = 0
    """Prompt tokens written to the provider's prompt cache."""
    reasoning: int = 0
    """Completion tokens spent on reasoning, when the provider reports them."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            total=self.total + other.total,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
        )

    @classmethod
    def of(cls, prompt: int = 0, completion: int = 0) -> Usage:
        """Usage with ``total = prompt + completion``."""
        return cls(prompt=prompt, completion=completion, total=prompt + completion)


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a model is told about one tool: stable across runs so providers can cache it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    """A JSON Schema (draft 2020-12) object for the call's arguments."""


class Authority(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request acts for; bound into every signed approval."""

    principal_id: str
    tenant_id: str
    owner_id: str
    capabilities: tuple[str, ...] = ()
    authorization_revision: str = ""


class RequestContext(msgspec.Struct, frozen=True, kw_only=True):
    """The authenticated request a run (or an approval resume) acts for.

    Build one per request; never store it on a reusable toolbox. ``deadline`` is wall
    clock seconds since the epoch (it may cross processes), and is not carried over
    into a resumed approval.
    """

    authority: Authority
    audience: str = ""
    agent_id: str = ""
    run_id: str = ""
    deadline: float | None = None


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call waiting for a human decision, signed so a later request can resume it.

    Every field except ``arguments`` (bound through ``argument_digest``) and ``signature``
    is covered by the HMAC-SHA256 ``signature``.
    """

    approval_id: str
    call_id: str
    tool_name: str
    tool_version: str
    arguments: dict[str, Any]
    argument_digest: str
    authority: Authority | None
    audience: str
    agent_id: str
    run_id: str
    issued_at: int
    """Milliseconds since the epoch (wall clock: approvals cross processes)."""
    expires_at: int
    signature: str


class ApprovalDecision(msgspec.Struct, frozen=True, kw_only=True):
    """A person's decision on a parked call (what an ``on_approval`` handler returns)."""

    approved: bool
    reason: str = ""
    """Why, for a denial: the model reads it."""


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How one tool call settled. The loop never sees a tool raise: it sees one of these."""

    call_id: str
    tool_name: str
    outcome: ToolOutcome
    value: Any = None
    """The tool's return value (JSON-encodable) when ``outcome == "success"``."""
    error: str | None = None
    """What the model is told when the call did not succeed."""
    pending_approval: PendingApproval | None = None
    """Set when ``outcome == "action-required"``."""
    detail: str | None = None
    """Host-side detail never shown to the model (e.g. the traceback of a failed tool)."""
