"""Signed approvals: parking, resuming exactly once, and every way a resume is refused."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from operative._core._errors import ApprovalError, InvalidArgument, ToolDefinitionError
from operative._core._types import Authority, PendingApproval, RequestContext, ToolCall, ToolResult
from operative.kvstore import MemoryStore
from operative.tools import (
    ApprovalPolicy,
    ExecutionContext,
    PermissionPolicy,
    Tool,
    Toolbox,
    ToolContext,
    argument_digest,
    tool,
)

SECRET = b"s" * 32
NOW = 1_700_000_000.0


class Clock:
    """A settable wall clock."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make_tools(log: list[str], version: str = "1") -> list[Tool]:
    @tool(version=version, mutates=True)
    async def delete_file(path: str) -> dict[str, Any]:
        """Delete one file."""
        log.append(path)
        return {"deleted": path}

    @tool(version=version)
    async def read_file(path: str) -> str:
        """Read one file."""
        return f"contents of {path}"

    return [delete_file, read_file]


AUTHORITY = Authority(
    principal_id="user-1",
    tenant_id="tenant-1",
    owner_id="session-1",
    capabilities=("files:write", "files:read"),
    authorization_revision="rev-7",
)
REQUEST = RequestContext(
    authority=AUTHORITY, audience="tenant", agent_id="agent-1", run_id="run-1", deadline=NOW + 30
)


def make_box(
    log: list[str],
    *,
    clock: Clock | None = None,
    state: MemoryStore | None = None,
    version: str = "1",
    **options: Any,
) -> Toolbox:
    return Toolbox(
        make_tools(log, version),
        approval_policy=options.pop("approval_policy", ApprovalPolicy(mode="on-mutation")),
        approval_secret=options.pop("approval_secret", SECRET),
        approval_state=state,
        clock=clock or Clock(),
        **options,
    )


async def park(
    box: Toolbox, arguments: Any = None, request: RequestContext | None = REQUEST
) -> PendingApproval:
    result = await box.execute(
        ToolCall(id="call-1", name="delete_file", arguments=arguments or {"path": "/tmp/a"}),
        ExecutionContext(run_id="run-1", request_context=request),
    )
    assert result.outcome == "action-required"
    assert result.pending_approval is not None
    return result.pending_approval


def fresh_request() -> RequestContext:
    """The resuming request: same identity, its own (later) deadline."""
    return msgspec.structs.replace(REQUEST, deadline=NOW + 3600)


async def test_a_mutating_call_parks_with_a_signed_approval() -> None:
    """on-mutation parks mutating calls, binding call, tool, arguments and identity."""
    log: list[str] = []
    box = make_box(log)
    approval = await park(box)
    assert log == []
    assert approval.call_id == "call-1"
    assert (approval.tool_name, approval.tool_version) == ("delete_file", "1")
    assert approval.arguments == {"path": "/tmp/a"}
    assert approval.argument_digest == argument_digest({"path": "/tmp/a"})
    assert approval.authority == AUTHORITY
    assert (approval.audience, approval.agent_id, approval.run_id) == ("tenant", "agent-1", "run-1")
    assert approval.issued_at == int(NOW * 1000)
    assert approval.expires_at == approval.issued_at + 24 * 3600 * 1000
    assert len(approval.signature) == 64
    read = await box.execute(ToolCall(id="c2", name="read_file", arguments={"path": "/x"}))
    assert read.outcome == "success"


async def test_json_string_arguments_are_carried_as_a_mapping() -> None:
    """Raw JSON arguments are parked as the mapping they decode to."""
    approval = await park(make_box([]), arguments='{"path": "/tmp/b"}')
    assert approval.arguments == {"path": "/tmp/b"}


async def test_invalid_arguments_are_rejected_before_parking() -> None:
    """A call that would fail validation is an error, not an approval request."""
    result = await make_box([]).execute(ToolCall(id="c", name="delete_file", arguments={}))
    assert result.outcome == "error"


async def test_resume_runs_once_and_replay_is_refused() -> None:
    """A resume runs the call; a second resume is refused as replayed."""
    log: list[str] = []
    box = make_box(log)
    approval = await park(box)
    result = await box.resume_approval(approval, request_context=fresh_request())
    assert (result.outcome, result.value, result.call_id) == (
        "success",
        {"deleted": "/tmp/a"},
        "call-1",
    )
    assert log == ["/tmp/a"]
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=fresh_request())
    assert info.value.reason == "replayed"
    assert log == ["/tmp/a"]


async def test_deny_consumes_and_never_runs() -> None:
    """A denied approval settles as denied, with the reason, and cannot be resumed."""
    log: list[str] = []
    box = make_box(log)
    approval = await park(box)
    result = await box.deny_approval(approval, reason="not today", request_context=REQUEST)
    assert result.outcome == "denied"
    assert result.error is not None
    assert "not today" in result.error
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "replayed"
    assert log == []


async def test_expired_approvals_are_refused_but_not_consumed() -> None:
    """Past expiry a resume fails with 'expired' and leaves the approval unused."""
    clock = Clock()
    box = make_box([], clock=clock, approval_ttl=60)
    approval = await park(box)
    clock.now += 60
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=fresh_request())
    assert info.value.reason == "expired"
    clock.now -= 1
    resumed = await box.resume_approval(approval, request_context=fresh_request())
    assert resumed.outcome == "success"


async def test_a_resuming_request_past_its_deadline_is_refused() -> None:
    """A resume under a request whose own deadline passed fails and consumes nothing."""
    clock = Clock()
    box = make_box([], clock=clock)
    approval = await park(box)
    late = msgspec.structs.replace(REQUEST, deadline=NOW - 1)
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=late)
    assert info.value.reason == "deadline-passed"
    resumed = await box.resume_approval(approval, request_context=fresh_request())
    assert resumed.outcome == "success"


@pytest.mark.parametrize(
    "change",
    [
        {"authority": msgspec.structs.replace(AUTHORITY, principal_id="user-2")},
        {"authority": msgspec.structs.replace(AUTHORITY, tenant_id="tenant-2")},
        {"authority": msgspec.structs.replace(AUTHORITY, owner_id="session-2")},
        {"authority": msgspec.structs.replace(AUTHORITY, capabilities=("files:read",))},
        {"authority": msgspec.structs.replace(AUTHORITY, authorization_revision="rev-8")},
        {"audience": "public"},
        {"agent_id": "agent-2"},
        {"run_id": "run-2"},
    ],
)
async def test_another_identity_cannot_resume(change: dict[str, Any]) -> None:
    """Every bound identity field must match; a refused resume leaves it usable."""
    box = make_box([])
    approval = await park(box)
    other = msgspec.structs.replace(REQUEST, **change)
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=other)
    assert info.value.reason == "authority-mismatch"
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=None)
    assert info.value.reason == "authority-mismatch"
    with pytest.raises(ApprovalError):
        await box.deny_approval(approval, request_context=other)
    assert (await box.resume_approval(approval, request_context=REQUEST)).outcome == "success"


async def test_deadline_and_capability_order_are_not_bound() -> None:
    """A fresh deadline and reordered capabilities still match."""
    box = make_box([])
    approval = await park(box)
    reordered = msgspec.structs.replace(
        AUTHORITY, capabilities=tuple(reversed(AUTHORITY.capabilities))
    )
    request = msgspec.structs.replace(REQUEST, authority=reordered, deadline=None)
    assert (await box.resume_approval(approval, request_context=request)).outcome == "success"


async def test_headless_approvals_bind_no_identity() -> None:
    """Issued without a request context, an approval resumes without one."""
    box = make_box([])
    approval = await park(box, request=None)
    assert approval.authority is None
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "authority-mismatch"
    assert (await box.resume_approval(approval)).outcome == "success"


async def test_changed_tool_version_is_refused() -> None:
    """A toolbox whose tool has another version refuses the approval."""
    state = MemoryStore()
    approval = await park(make_box([], state=state))
    newer = make_box([], state=state, version="2")
    with pytest.raises(ApprovalError) as info:
        await newer.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "version-changed"


async def test_missing_tool_is_refused() -> None:
    """A toolbox without the approval's tool refuses it."""
    approval = await park(make_box([]))
    other = Toolbox([], approval_secret=SECRET, clock=Clock())
    with pytest.raises(ApprovalError) as info:
        await other.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "unknown-tool"


@pytest.mark.parametrize("bad", [{"approval_id": 1}, "not json", b"{}", 42, None])
async def test_malformed_approvals_are_refused(bad: Any) -> None:
    """Anything that is not a pending approval is 'malformed'."""
    with pytest.raises(ApprovalError) as info:
        await make_box([]).resume_approval(bad, request_context=REQUEST)
    assert info.value.reason == "malformed"


async def test_approvals_survive_a_json_round_trip() -> None:
    """The JSON a host stores (bytes or decoded) resumes like the original."""
    box = make_box([])
    approval = await park(box)
    wire = msgspec.json.encode(approval)
    result = await box.resume_approval(wire, request_context=REQUEST)  # type: ignore[arg-type]
    assert result.outcome == "success"
    approval = await park(box)
    plain = msgspec.json.decode(msgspec.json.encode(approval))
    result = await box.resume_approval(plain, request_context=REQUEST)
    assert result.outcome == "success"


async def test_random_secret_only_resumes_on_the_same_toolbox() -> None:
    """Without approval_secret each toolbox signs with its own random secret."""
    state = MemoryStore()
    first = make_box([], state=state, approval_secret=None)
    second = make_box([], state=state, approval_secret=None)
    approval = await park(first)
    with pytest.raises(ApprovalError) as info:
        await second.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "bad-signature"
    assert (await first.resume_approval(approval, request_context=REQUEST)).outcome == "success"


@pytest.mark.parametrize("secret", [b"short", "x" * 31, b""])
def test_short_secrets_are_rejected(secret: str | bytes) -> None:
    """Secrets under 32 bytes are refused."""
    with pytest.raises(InvalidArgument, match="32 bytes"):
        make_box([], approval_secret=secret)


def test_unversioned_tools_are_refused_by_mode_policies() -> None:
    """A mode policy that could park an unversioned tool fails at construction."""

    @tool(mutates=True)
    async def wipe() -> None:
        """Wipe."""

    @tool
    async def look() -> None:
        """Look."""

    with pytest.raises(ToolDefinitionError, match="'wipe'"):
        Toolbox([wipe], approval_policy=ApprovalPolicy(mode="on-mutation"))
    with pytest.raises(ToolDefinitionError, match="'look'"):
        Toolbox([look], approval_policy=ApprovalPolicy(mode="always"))
    Toolbox([look], approval_policy=ApprovalPolicy(mode="on-mutation"))
    Toolbox([wipe, look], approval_policy=ApprovalPolicy(mode="never"))


def test_bad_policies_are_rejected() -> None:
    """Unknown modes and non-callables are misuse."""
    with pytest.raises(InvalidArgument):
        ApprovalPolicy(mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Toolbox([], approval_policy=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Toolbox([], approval_ttl=0)


async def test_always_and_never_modes() -> None:
    """'always' parks every call; 'never' parks none."""
    always = make_box([], approval_policy=ApprovalPolicy(mode="always"))
    read = await always.execute(ToolCall(id="c", name="read_file", arguments={"path": "/x"}))
    assert read.outcome == "action-required"
    log: list[str] = []
    never = make_box(log, approval_policy=ApprovalPolicy(mode="never"))
    result = await never.execute(ToolCall(id="c", name="delete_file", arguments={"path": "/x"}))
    assert result.outcome == "success"
    assert log == ["/x"]


@pytest.mark.parametrize("is_async", [False, True])
async def test_callable_policies_decide_per_call(is_async: bool) -> None:
    """A sync or async callable sees the call, the tool and the request context."""
    seen: list[tuple[str, str, RequestContext | None]] = []

    def decide(call: ToolCall, t: Tool, request: RequestContext | None) -> bool:
        seen.append((call.id, t.name, request))
        return isinstance(call.arguments, dict) and call.arguments.get("path") == "/etc"

    async def decide_async(call: ToolCall, t: Tool, request: RequestContext | None) -> bool:
        await trio.lowlevel.checkpoint()
        return decide(call, t, request)

    box = make_box([], approval_policy=decide_async if is_async else decide)
    context = ExecutionContext(request_context=REQUEST)
    parked = await box.execute(
        ToolCall(id="a", name="read_file", arguments={"path": "/etc"}), context
    )
    assert parked.outcome == "action-required"
    free = await box.execute(ToolCall(id="b", name="read_file", arguments={"path": "/x"}), context)
    assert free.outcome == "success"
    assert seen == [("a", "read_file", REQUEST), ("b", "read_file", REQUEST)]


async def test_callable_policy_on_an_unversioned_tool_is_an_error_result() -> None:
    """An unversioned tool cannot be parked; the call settles as an error."""

    @tool
    async def loose() -> None:
        """No version."""

    def failing(call: ToolCall, t: Tool, request: RequestContext | None) -> bool:
        raise RuntimeError("policy broke")

    box = Toolbox([loose], approval_policy=lambda c, t, r: True, approval_secret=SECRET)
    result = await box.execute(ToolCall(id="a", name="loose"))
    assert result.outcome == "error"
    assert result.detail is not None
    assert "no version" in result.detail
    broken = Toolbox([loose], approval_policy=failing)
    result = await broken.execute(ToolCall(id="a", name="loose"))
    assert result.outcome == "error"
    assert result.detail is not None
    assert "policy broke" in result.detail


async def test_a_failing_resumed_call_stays_consumed() -> None:
    """If the approved call fails, the approval is still used up (the call did run)."""
    attempts: list[int] = []

    @tool(version="1", mutates=True)
    async def flaky() -> None:
        """Fail."""
        attempts.append(1)
        raise OSError("disk full")

    box = Toolbox([flaky], approval_policy=ApprovalPolicy(), approval_secret=SECRET, clock=Clock())
    parked = await box.execute(ToolCall(id="f", name="flaky"))
    assert parked.pending_approval is not None
    result = await box.resume_approval(parked.pending_approval)
    assert result.outcome == "error"
    assert result.error == "Tool 'flaky' failed: OSError: disk full"
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(parked.pending_approval)
    assert info.value.reason == "replayed"
    assert attempts == [1]


async def test_resume_uses_the_given_execution_context() -> None:
    """The resumed call sees the resuming request and the host's context."""
    seen: list[ToolContext] = []

    @tool(version="1", mutates=True)
    async def act(ctx: ToolContext) -> str:
        """Act."""
        seen.append(ctx)
        return "done"

    box = Toolbox([act], approval_policy=ApprovalPolicy(), approval_secret=SECRET, clock=Clock())
    parked = await box.execute(
        ToolCall(id="x", name="act"), ExecutionContext(request_context=REQUEST)
    )
    assert parked.pending_approval is not None
    resumed = fresh_request()
    await box.resume_approval(
        parked.pending_approval,
        request_context=resumed,
        context=ExecutionContext(run_id="run-9", step=3),
    )
    (ctx,) = seen
    assert (ctx.run_id, ctx.step, ctx.request_context, ctx.call_id) == ("run-9", 3, resumed, "x")


async def test_permissions_still_apply_on_resume() -> None:
    """A tool the policy does not permit is denied on resume, without consuming."""
    state = MemoryStore()
    approval = await park(make_box([], state=state))
    strict = make_box([], state=state, permissions=PermissionPolicy())
    result = await strict.resume_approval(approval, request_context=REQUEST)
    assert result.outcome == "denied"
    assert (
        await make_box([], state=state).resume_approval(approval, request_context=REQUEST)
    ).outcome == "success"


# --- properties -------------------------------------------------------------------

_text = st.text(min_size=1, max_size=12)
_TAMPERABLE = [
    "approval_id",
    "call_id",
    "tool_name",
    "tool_version",
    "arguments",
    "argument_digest",
    "authority",
    "audience",
    "agent_id",
    "run_id",
    "issued_at",
    "expires_at",
    "signature",
]


def _tampered_value(field: str, original: Any, data: st.DataObject) -> Any:
    if field == "arguments":
        return data.draw(
            st.dictionaries(_text, st.integers() | _text, min_size=1).filter(
                lambda d: d != original
            )
        )
    if field == "authority":
        fields = msgspec.structs.asdict(original)
        which = data.draw(st.sampled_from(sorted(fields)))
        if which == "capabilities":
            new: Any = data.draw(
                st.lists(_text, max_size=3).filter(lambda c: set(c) != set(original.capabilities))
            )
            new = tuple(new)
        else:
            new = data.draw(_text.filter(lambda v: v != fields[which]))
        return msgspec.structs.replace(original, **{which: new})
    if field in ("issued_at", "expires_at"):
        return data.draw(st.integers(0, 2**53).filter(lambda v: v != original))
    if field == "signature":
        return data.draw(
            st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).filter(
                lambda v: v != original
            )
            | st.text(max_size=70).filter(lambda v: v != original)
        )
    return data.draw(_text.filter(lambda v: v != original))


@settings(max_examples=120, deadline=None)
@given(field=st.sampled_from(_TAMPERABLE), data=st.data())
def test_any_tampering_is_refused_and_leaves_the_original_usable(
    field: str, data: st.DataObject
) -> None:
    """Changing any signed field (or the signature) fails as bad-signature."""

    async def main() -> None:
        log: list[str] = []
        box = make_box(log)
        approval = await park(box)
        forged = msgspec.structs.replace(
            approval, **{field: _tampered_value(field, getattr(approval, field), data)}
        )
        with pytest.raises(ApprovalError) as info:
            await box.resume_approval(forged, request_context=REQUEST)
        assert info.value.reason == "bad-signature"
        with pytest.raises(ApprovalError):
            await box.deny_approval(forged, request_context=REQUEST)
        assert log == []
        result = await box.resume_approval(approval, request_context=REQUEST)
        assert result.outcome == "success"

    trio.run(main)


@settings(max_examples=40, deadline=None)
@given(
    secret=st.binary(min_size=32, max_size=64),
    path=_text,
    principal=_text,
    capabilities=st.lists(_text, max_size=3),
    resumes=st.integers(2, 5),
)
def test_two_toolboxes_sharing_secret_and_store_consume_once(
    secret: bytes, path: str, principal: str, capabilities: list[str], resumes: int
) -> None:
    """An approval issued by one toolbox resumes on another, once between them."""

    async def main() -> None:
        log: list[str] = []
        state = MemoryStore()
        first = make_box(log, state=state, approval_secret=secret)
        second = make_box(log, state=state, approval_secret=secret)
        authority = Authority(
            principal_id=principal, tenant_id="t", owner_id="o", capabilities=tuple(capabilities)
        )
        request = RequestContext(authority=authority, run_id="r")
        approval = await park(first, {"path": path}, request)
        result = await second.resume_approval(approval, request_context=request)
        assert result.value == {"deleted": path}
        for i in range(resumes - 1):
            box = (first, second)[i % 2]
            with pytest.raises(ApprovalError) as info:
                await box.resume_approval(approval, request_context=request)
            assert info.value.reason == "replayed"
        assert log == [path]

    trio.run(main)


@settings(max_examples=15, deadline=None)
@given(tasks=st.integers(2, 30), deny_too=st.booleans())
def test_concurrent_resumes_execute_exactly_once(tasks: int, deny_too: bool) -> None:
    """Many tasks resuming (or denying) one approval at once: one wins, the call runs once."""

    async def main() -> None:
        log: list[str] = []
        state = MemoryStore()
        boxes = [make_box(log, state=state), make_box(log, state=state)]
        approval = await park(boxes[0])
        outcomes: list[ToolResult | str] = []

        async def attempt(i: int) -> None:
            box = boxes[i % 2]
            try:
                if deny_too and i % 3 == 2:
                    outcomes.append(await box.deny_approval(approval, request_context=REQUEST))
                else:
                    outcomes.append(await box.resume_approval(approval, request_context=REQUEST))
            except ApprovalError as exc:
                outcomes.append(exc.reason)

        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(attempt, i)
        settled = [o for o in outcomes if isinstance(o, ToolResult)]
        assert len(settled) == 1
        assert outcomes.count("replayed") == tasks - 1
        assert log == (["/tmp/a"] if settled[0].outcome == "success" else [])

    trio.run(main)


async def test_consumed_marker_is_stored_under_the_documented_key() -> None:
    """Consuming writes approval/consumed/<id> with the decision and the expiry."""
    state = MemoryStore()
    box = make_box([], state=state)
    approval = await park(box)
    await box.deny_approval(approval, request_context=REQUEST)
    stored = await state.get(f"approval/consumed/{approval.approval_id}")
    assert stored is not None
    record = msgspec.json.decode(stored.value)
    assert record == {
        "decision": "denied",
        "at": int(NOW * 1000),
        "expires_at": approval.expires_at,
        "nonce": "",
    }


async def test_resume_defaults_to_the_contexts_request() -> None:
    """Without request_context=, the execution context's request is the resuming one."""
    box = make_box([])
    approval = await park(box)
    result = await box.resume_approval(
        approval, context=ExecutionContext(request_context=fresh_request())
    )
    assert result.outcome == "success"


async def test_a_call_past_its_request_deadline_is_denied_by_the_toolbox_clock() -> None:
    """A call whose request deadline has passed on the toolbox's clock does not run, on a
    toolbox without any approval set-up and on one extended with more tools."""
    log: list[str] = []
    clock = Clock()
    box = Toolbox(make_tools(log), clock=clock)
    extended = box.extended(
        [Tool(lambda: "pong", name="ping", description="Answer pong.", version="1")]
    )
    call = ToolCall(id="call-1", name="delete_file", arguments={"path": "/tmp/a"})
    context = ExecutionContext(run_id="run-1", request_context=REQUEST)
    for toolbox in (box, extended):
        clock.now = NOW + 29
        assert (await toolbox.execute(call, context)).outcome == "success"
        clock.now = NOW + 30
        late = await toolbox.execute(call, context)
        assert late.outcome == "denied"
        assert "passed its deadline" in (late.error or "")
    assert log == ["/tmp/a", "/tmp/a"]


async def test_an_extended_toolbox_shares_the_approvals_made_on_first_use() -> None:
    """Approvals are made when first needed, and shared with an extended toolbox: an
    approval parked by one resumes on the other, once, whichever was extended first."""
    log: list[str] = []
    box = make_box(log, approval_secret=None)
    extended = box.extended(
        [Tool(lambda: "pong", name="ping", description="Answer pong.", version="1")]
    )
    approval = await park(extended)
    assert (await box.resume_approval(approval, request_context=REQUEST)).outcome == "success"
    with pytest.raises(ApprovalError) as info:
        await extended.resume_approval(approval, request_context=REQUEST)
    assert info.value.reason == "replayed"
    assert log == ["/tmp/a"]
