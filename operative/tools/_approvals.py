"""Signed approvals: park a tool call for a person, resume it in a later request.

A pending approval is signed with HMAC-SHA256 over a canonical encoding of every field
that decides what would run and for whom: the call, the tool and its version, a digest
of the arguments, the request's authority, audience, agent and run, and its lifetime.
A resume verifies the signature, the expiry and the resuming request's identity, then
consumes the approval exactly once through a conditional write to the state store.

A state store that fails while an approval is being consumed (a locked database, a lost
connection, a full disk) is :class:`~operative.tools.ApprovalStateError`, not the tool's
failure: the call has not run, and the approval is still usable. A consumer that wrote
its marker before the store failed takes it back (it recognises its own by a nonce).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import msgspec
import trio

from .._core._errors import ApprovalError, ApprovalStateError, InvalidArgument
from .._core._types import Authority, PendingApproval, RequestContext, ToolCall
from ..kvstore._protocol import ConditionalTextValueStore, ConflictError, Delete, Put
from ._tool import Tool

__all__ = [
    "APPROVAL_KEY_PREFIX",
    "ApprovalDecider",
    "ApprovalMode",
    "ApprovalPolicy",
    "Approvals",
    "argument_digest",
]

ApprovalMode: TypeAlias = Literal["never", "on-mutation", "always"]

ApprovalDecider: TypeAlias = Callable[
    [ToolCall, Tool, RequestContext | None], bool | Awaitable[bool]
]
"""``(call, tool, request_context) -> bool`` (sync or async): does this call need approval?"""

APPROVAL_KEY_PREFIX = "approval/consumed/"
"""State-store keys of consumed approvals: ``approval/consumed/<approval_id>``."""

_SIGNATURE_DOMAIN = "operative.approval.v1"
_MIN_SECRET_BYTES = 32
_canonical = msgspec.json.Encoder(order="sorted").encode


@attrs.frozen(kw_only=True)
class ApprovalPolicy:
    """Which tool calls wait for a person: ``"never"``, ``"on-mutation"`` or ``"always"``.

    ``"on-mutation"`` selects every call of a tool declared ``mutates=True``, except a
    tool that decides per call itself (a ``needs_approval`` callable); a tool whose
    ``mutates`` is undeclared (``None``) is not selected, so declare ``mutates=True``
    on every tool that changes the world. A tool's own ``needs_approval``
    holds under every mode, ``"never"`` included: a policy adds calls, never exempts
    one. For a per-call decision across tools pass a callable as the toolbox's
    ``approval_policy`` instead.
    """

    mode: ApprovalMode = "on-mutation"

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("never", "on-mutation", "always"):
            raise InvalidArgument(
                f"ApprovalPolicy mode must be 'never', 'on-mutation' or 'always', not {self.mode!r}"
            )

    def requires(self, tool: Tool) -> bool:
        """Whether every call of ``tool`` needs approval under this mode."""
        if self.mode == "always":
            return True
        return self.mode == "on-mutation" and tool.mutates is True and tool._approval_check is None


def argument_digest(arguments: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the arguments' canonical JSON (keys sorted at every level)."""
    return hashlib.sha256(_canonical(arguments)).hexdigest()


def _authority_fields(authority: Authority | None) -> list[Any] | None:
    if authority is None:
        return None
    return [
        authority.principal_id,
        authority.tenant_id,
        authority.owner_id,
        sorted(set(authority.capabilities)),
        authority.authorization_revision,
    ]


def _identity(context: RequestContext | None) -> tuple[Any, str, str, str]:
    if context is None:
        return (None, "", "", "")
    return (
        _authority_fields(context.authority),
        context.audience,
        context.agent_id,
        context.run_id,
    )


def _signed_bytes(approval: PendingApproval) -> bytes:
    return msgspec.json.encode(
        [
            _SIGNATURE_DOMAIN,
            approval.approval_id,
            approval.call_id,
            approval.tool_name,
            approval.tool_version,
            approval.argument_digest,
            _authority_fields(approval.authority),
            approval.audience,
            approval.agent_id,
            approval.run_id,
            approval.issued_at,
            approval.expires_at,
        ]
    )


def _secret_bytes(secret: str | bytes | None) -> bytes:
    if secret is None:
        return os.urandom(_MIN_SECRET_BYTES)
    raw = secret.encode() if isinstance(secret, str) else secret
    if not isinstance(raw, bytes) or len(raw) < _MIN_SECRET_BYTES:
        raise InvalidArgument(
            f"approval_secret must be at least {_MIN_SECRET_BYTES} bytes; generate one with "
            "secrets.token_hex(32) and keep it in your secret store"
        )
    return raw


@attrs.frozen(eq=False)
class Approvals:
    """Issues, verifies and consumes signed approvals for one toolbox."""

    secret: bytes = attrs.field(converter=_secret_bytes, repr=False)
    state: ConditionalTextValueStore
    ttl: float
    clock: Callable[[], float]

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _sign(self, approval: PendingApproval) -> str:
        return hmac.new(self.secret, _signed_bytes(approval), hashlib.sha256).hexdigest()

    def issue(
        self, call: ToolCall, tool: Tool, arguments: dict[str, Any], context: RequestContext | None
    ) -> PendingApproval:
        """A signed pending approval for ``call`` (which has not run)."""
        if tool.version is None:
            raise ApprovalError(
                f"tool {tool.name!r} needs approval but has no version, so an approval "
                "could not tell whether it changed: give it one, e.g. @tool(version='1')",
                reason="unversioned-tool",
            )
        issued = self._now_ms()
        authority, audience, agent_id, run_id = (
            (None, "", "", "")
            if context is None
            else (context.authority, context.audience, context.agent_id, context.run_id)
        )
        unsigned = PendingApproval(
            approval_id=os.urandom(16).hex(),
            call_id=call.id,
            tool_name=tool.name,
            tool_version=tool.version,
            arguments=arguments,
            argument_digest=argument_digest(arguments),
            authority=authority,
            audience=audience,
            agent_id=agent_id,
            run_id=run_id,
            issued_at=issued,
            expires_at=issued + int(self.ttl * 1000),
            signature="",
        )
        return msgspec.structs.replace(unsigned, signature=self._sign(unsigned))

    def verify(self, approval: object, context: RequestContext | None) -> PendingApproval:
        """``approval`` as a checked :class:`PendingApproval`; does not consume it.

        Raises:
            ApprovalError: malformed, bad-signature, expired, deadline-passed or
                authority-mismatch.
        """
        checked = _coerce(approval)
        expected = self._sign(checked)
        if not hmac.compare_digest(expected.encode(), checked.signature.encode()):
            raise ApprovalError(
                "the approval's signature does not match its contents: it was altered, or "
                "signed with another secret (toolboxes that resume each other's approvals "
                "need the same approval_secret)",
                reason="bad-signature",
            )
        digest = argument_digest(checked.arguments)
        if not hmac.compare_digest(digest.encode(), checked.argument_digest.encode()):
            raise ApprovalError(
                "the approval's arguments do not match its signed digest: they were altered",
                reason="bad-signature",
            )
        now_ms = self._now_ms()
        if now_ms >= checked.expires_at:
            raise ApprovalError(
                f"approval {checked.approval_id} expired; the model has to ask again",
                reason="expired",
            )
        if (
            context is not None
            and context.deadline is not None
            and now_ms >= context.deadline * 1000
        ):
            raise ApprovalError(
                "the resuming request's deadline has passed: build its RequestContext "
                "with a deadline derived from the new request, not copied from an old "
                "one (the approval was not consumed)",
                reason="deadline-passed",
            )
        bound = (
            _authority_fields(checked.authority),
            checked.audience,
            checked.agent_id,
            checked.run_id,
        )
        if _identity(context) != bound:
            raise ApprovalError(
                f"approval {checked.approval_id} was issued for another request identity: "
                "resume it with a request_context whose authority, audience, agent_id and "
                "run_id equal those bound into the approval",
                reason="authority-mismatch",
            )
        return checked

    async def consume_or_release(self, approval: PendingApproval, decision: str) -> None:
        """:meth:`consume`, but a consume cut short by cancellation, or by a store that
        failed, is taken back.

        A store may commit and then deliver the caller's cancellation (or fail to report
        its commit); the call then never runs, so the marker this consumer wrote
        (recognised by its nonce) is deleted, under a shield when cancelled, and the
        approval stays usable. A marker written by anyone else stays.
        """
        nonce = os.urandom(8).hex()
        try:
            await self.consume(approval, decision, nonce=nonce)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._release(approval, nonce)
            raise
        except ApprovalStateError:
            await self._release(approval, nonce)
            raise

    async def _release(self, approval: PendingApproval, nonce: str) -> None:
        """Delete this consumer's marker of ``approval``, if it is there; best effort, for
        at most ``_RELEASE_TIMEOUT`` seconds (a store still failing leaves it to the
        store: nothing was written, or a later try is refused as ``replayed``)."""
        with trio.move_on_after(_RELEASE_TIMEOUT), contextlib.suppress(Exception):
            key = APPROVAL_KEY_PREFIX + approval.approval_id
            stored = await self.state.get(key)
            if stored is not None and nonce in stored.value:
                await self.state.conditional_batch(
                    [Delete(key=key, expected_version=stored.version)]
                )

    async def consume(self, approval: PendingApproval, decision: str, *, nonce: str = "") -> None:
        """Mark ``approval`` used, once; a second consumer gets ``replayed``.

        Raises:
            ApprovalError: ``replayed``: another consumer used it first.
            ApprovalStateError: the state store failed (any error of its write); the
                approval was not used, and can be tried again.
        """
        # The expiry lets a sweeper drop markers of approvals that can no longer verify.
        record = _canonical(
            {
                "decision": decision,
                "at": self._now_ms(),
                "expires_at": approval.expires_at,
                "nonce": nonce,
            }
        ).decode()
        key = APPROVAL_KEY_PREFIX + approval.approval_id
        try:
            await self.state.conditional_batch([Put(key=key, value=record, expected_version=None)])
        except ConflictError:
            raise ApprovalError(
                f"approval {approval.approval_id} was already used; an approval runs its "
                "call at most once",
                reason="replayed",
            ) from None
        except Exception as exc:
            verb = "denied" if decision == "denied" else "run"
            raise ApprovalStateError(
                f"approval {approval.approval_id} was not used: the approval-state store "
                f"failed while recording it ({type(exc).__name__}: {exc}), so the call was "
                f"not {verb}; try the same approval again once the store answers"
            ) from exc

    async def needs_approval(
        self,
        decide: ApprovalDecider,
        call: ToolCall,
        tool: Tool,
        context: RequestContext | None,
    ) -> bool:
        """Ask a callable policy whether ``call`` needs approval."""
        verdict = decide(call, tool, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)


def _coerce(approval: object) -> PendingApproval:
    try:
        if isinstance(approval, str | bytes):
            checked = msgspec.json.decode(approval, type=PendingApproval)
        else:
            # A round trip also type-checks a PendingApproval built by hand.
            checked = msgspec.convert(msgspec.to_builtins(approval), PendingApproval)
    except (msgspec.ValidationError, msgspec.DecodeError, TypeError) as exc:
        raise ApprovalError(
            f"this is not a pending approval ({exc}); pass the PendingApproval the "
            "toolbox issued, or its JSON",
            reason="malformed",
        ) from None
    return checked


_RELEASE_TIMEOUT = 5.0
"""Seconds a cancelled consume may spend taking its marker back."""
