"""What crosses Temporal: the workflow's input, its updates and their replies.

Every payload is msgspec JSON carried as ``bytes`` (Temporal's ``binary/plain``), so the
workflow never imports the kernel and a history can be read back without a worker.
Journal records travel as :class:`msgspec.Raw`: the workflow keeps them as the worker
encoded them and peeks only at the few fields it checks (``type``, ``call_id``,
``parked``).
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

__all__ = [
    "ACTIVITY",
    "SIGNAL_CANCEL",
    "SIGNAL_STEER",
    "UPDATE_APPEND",
    "UPDATE_APPROVE",
    "UPDATE_CLAIM",
    "WORKFLOW",
    "ActivityInput",
    "ActivityReply",
    "Append",
    "AppendReply",
    "Approve",
    "Cancel",
    "Carried",
    "Claim",
    "ClaimReply",
    "Peek",
    "RunInput",
    "decode",
    "encode",
]

WORKFLOW = "operative.Run"
ACTIVITY = "operative.run"
UPDATE_CLAIM = "operative.claim"
UPDATE_APPEND = "operative.append"
SIGNAL_CANCEL = "operative.cancel"
SIGNAL_STEER = "operative.steer"
UPDATE_APPROVE = "operative.approve"

NULL = msgspec.Raw(b"null")
"""An absent raw value (``msgspec.Raw`` fields cannot be optional)."""

MAX_PAYLOAD = 2_000_000
"""Bytes one payload may hold: Temporal's default limit (``limit.blobSize.error``) is
2 MiB; a little is kept for the envelope."""

NON_RETRYABLE = "OperativeRunFailed"
"""The activity error type that ends a run ``error`` instead of retrying it."""
LEASE_LOST = "OperativeLeaseLost"
CONFLICT = "OperativeConflict"
NOT_WAITING = "OperativeNotWaiting"


class Carried(msgspec.Struct, frozen=True, kw_only=True):
    """The state a run carries into its next Temporal run (continue-as-new)."""

    journal: list[msgspec.Raw]
    fence: int = 0
    owner: str | None = None
    cancel_reason: str | None = None
    generation: int = 0
    decisions: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    steering: list[msgspec.Raw] = msgspec.field(default_factory=list)
    """The steering commands sent so far, in order (a ``SteeringCommand`` each)."""


class RunInput(msgspec.Struct, frozen=True, kw_only=True):
    """The workflow's argument: what ``TemporalEngine.start_run`` was asked."""

    run_id: str
    agent_name: str
    heartbeat_timeout: float
    created_at: float
    session_id: str | None = None
    text: str | None = None
    """A plain-text input (the agent adds its instructions)."""
    messages: msgspec.Raw = NULL
    """A conversation (a ``ConversationHistory`` as JSON), when the input was one."""
    rollover_events: int = 20_000
    """History length past which the run continues as new at its next step."""
    carried: Carried | None = None


class ActivityInput(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    agent_name: str
    heartbeat_timeout: float
    session_id: str | None = None
    text: str | None = None
    messages: msgspec.Raw = NULL


class ActivityReply(msgspec.Struct, frozen=True, kw_only=True):
    rollover: bool = False
    """The attempt stopped between steps so the run continues as new."""


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    activity_id: str
    attempt: int
    worker_id: str


class ClaimReply(msgspec.Struct, frozen=True, kw_only=True):
    fence: int
    next_seq: int
    cancel_reason: str | None = None
    steers: int = 0
    """How many steering commands the run was sent so far."""


class Append(msgspec.Struct, frozen=True, kw_only=True):
    fence: int
    seq: int
    records: list[msgspec.Raw]


class AppendReply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    cancel_reason: str | None = None
    rollover: bool = False
    steers: int = 0


class Cancel(msgspec.Struct, frozen=True, kw_only=True):
    reason: str


class Approve(msgspec.Struct, frozen=True, kw_only=True):
    call_id: str
    approved: bool
    reason: str = ""


class Peek(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a journal record the workflow checks."""

    type: str
    call_id: str | None = None
    parked: bool = False
    result: PeekResult | None = None
    outcome: msgspec.Raw = NULL


class PeekResult(msgspec.Struct, frozen=True, kw_only=True):
    call_id: str


_T = TypeVar("_T")
_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def decode(raw: bytes | msgspec.Raw, kind: type[_T]) -> _T:
    return msgspec.json.decode(raw, type=kind)
