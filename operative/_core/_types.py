"""Leaf records shared by the conversation model, the toolbox and the loop.

All are frozen, keyword-only ``msgspec.Struct``s: cheap to build, safe to share between
tasks without copying, and encodable as they are.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal, NoReturn

import msgspec

from ._errors import InvalidArgument

__all__ = [
    "NO_METADATA",
    "NO_USAGE",
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


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Token usage of one or more generate calls. ``total`` is what budgets count.

    Untracked by the cyclic collector (``gc=False``): it holds ints only.
    """

    prompt: int = 0
    completion: int = 0
    total: int = 0
    cache_read: int = 0
    """Prompt tokens served from the provider's prompt cache."""
    cache_write: int = 0
    """Prompt tokens written to the provider's prompt cache."""
    reasoning: int = 0
    """Completion tokens spent on reasoning, when the provider reports them."""
    estimated: bool = False
    """True when some of these counts are operative's estimate, not the provider's: a
    server that reports no usage (llama.cpp's streams, some OpenAI-compatible servers)
    gets an estimate from the approximate token counter instead of a silent zero."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            total=self.total + other.total,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            reasoning=self.reasoning + other.reasoning,
            estimated=self.estimated or other.estimated,
        )

    @classmethod
    def of(cls, prompt: int = 0, completion: int = 0) -> Usage:
        """Usage with ``total = prompt + completion``."""
        return cls(prompt=prompt, completion=completion, total=prompt + completion)


NO_USAGE = Usage()
"""Nothing spent. Frozen, so every run, step and tracker can start from this one."""


class _NoMetadata(dict[str, Any]):
    """The metadata of every message and history that has none: one shared, empty
    ``dict`` (it encodes and compares as ``{}``) that refuses changes, since every
    record without metadata holds this one object. A transcript keeps ten of them in
    a five-step run; sharing saves a dict each."""

    __slots__ = ()

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise InvalidArgument(
            "this metadata is empty and shared by every record without metadata, so it "
            "is read-only: build the record with metadata={...} instead "
            "(msgspec.structs.replace(message, metadata={...}))"
        )

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only
    __ior__ = _read_only

    def __reduce__(self) -> tuple[Callable[[], dict[str, Any]], tuple[()]]:
        return _no_metadata, ()  # unpickled and copied as the shared object


def _no_metadata() -> dict[str, Any]:
    return NO_METADATA


NO_METADATA: dict[str, Any] = _NoMetadata()
"""Empty, read-only and shared: the default metadata of a message or history."""


def own_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` as a record keeps it: a ``dict`` of its own, or the shared empty one."""
    return dict(metadata) if metadata else NO_METADATA


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a model is told about one tool: stable across runs so providers can cache it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    """A JSON Schema (draft 2020-12) object for the call's arguments."""


def _require_str(record: str, field: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidArgument(f"{record}.{field} takes a str, got {value!r}")


class Authority(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request acts for; bound into every signed approval.

    Every field is type-checked when the record is built (or decoded): a wrong type
    raises :class:`~operative.InvalidArgument` naming the field, instead of parking an
    approval that no request could ever resume.
    """

    principal_id: str
    tenant_id: str
    owner_id: str
    capabilities: Collection[str] = ()
    """The capabilities granted: any collection of str (a set, frozenset, list or tuple),
    kept as a tuple (a set's sorted). The order is not bound into approvals."""
    authorization_revision: int | str = ""
    """The revision of the grant: an ``int`` or a ``str``, bound with its type, so
    revision ``1`` and revision ``"1"`` are different identities."""

    def __post_init__(self) -> None:
        _require_str("Authority", "principal_id", self.principal_id)
        _require_str("Authority", "tenant_id", self.tenant_id)
        _require_str("Authority", "owner_id", self.owner_id)
        capabilities: object = self.capabilities
        if type(capabilities) is not tuple:
            if isinstance(capabilities, str | bytes | Mapping) or not isinstance(
                capabilities, Collection
            ):
                capabilities = None
            else:
                capabilities = tuple(capabilities)
        if capabilities is None or not all(isinstance(c, str) for c in capabilities):
            raise InvalidArgument(
                "Authority.capabilities takes a collection of str (a set, list or tuple), "
                f"got {self.capabilities!r}"
            )
        if capabilities is not self.capabilities:
            if not isinstance(self.capabilities, Sequence):
                capabilities = tuple(sorted(capabilities))  # a set: in a stable order
            msgspec.structs.force_setattr(self, "capabilities", capabilities)
        revision = self.authorization_revision
        if not isinstance(revision, int | str) or isinstance(revision, bool):
            raise InvalidArgument(
                f"Authority.authorization_revision takes an int or a str, got {revision!r}"
            )


class RequestContext(msgspec.Struct, frozen=True, kw_only=True):
    """The authenticated request a run (or an approval resume) acts for.

    Build one per request; never store it on a reusable toolbox. ``deadline`` is wall
    clock seconds since the epoch (it may cross processes), and is not carried over
    into a resumed approval. Every field is type-checked when the record is built
    (:class:`~operative.InvalidArgument` names the field).
    """

    authority: Authority
    audience: str = ""
    agent_id: str = ""
    run_id: str = ""
    deadline: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.authority, Authority):
            raise InvalidArgument(
                f"RequestContext.authority takes an Authority, got {self.authority!r}"
            )
        _require_str("RequestContext", "audience", self.audience)
        _require_str("RequestContext", "agent_id", self.agent_id)
        _require_str("RequestContext", "run_id", self.run_id)
        deadline = self.deadline
        if deadline is not None and (
            not isinstance(deadline, int | float)
            or isinstance(deadline, bool)
            or math.isnan(deadline)
        ):
            raise InvalidArgument(
                "RequestContext.deadline takes wall-clock seconds since the epoch (a float, "
                f"e.g. time.time() + 30) or None, got {deadline!r}"
            )


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
