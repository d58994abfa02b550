"""Resuming an approval under cancellation: an approved call is run or stays resumable."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative import InvalidArgument, ToolCall
from operative.kvstore import MemoryStore
from operative.tools import (
    ApprovalError,
    ApprovalPolicy,
    Authority,
    ExecutionContext,
    PendingApproval,
    RequestContext,
    Toolbox,
    argument_digest,
    tool,
)
from operative.tools._approvals import Approvals

SECRET = b"s" * 32


async def test_resume_cancelled_while_waiting_for_capacity_stays_resumable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A resume cancelled before its call started leaves the approval usable."""
    ran: list[str] = []
    release = trio.Event()

    @tool(version="1", mutates=True)
    async def delete_file(path: str) -> str:
        """Delete one file."""
        ran.append(path)
        return "deleted"

    @tool(version="1")
    async def slow_read() -> str:
        """Hold the toolbox's only slot until released."""
        await release.wait()
        return "read"

    box = Toolbox(
        [delete_file, slow_read],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=SECRET,
        max_concurrency=1,
    )
    parked = await box.execute(ToolCall(id="c1", name="delete_file", arguments={"path": "/a"}))
    approval = parked.pending_approval
    assert approval is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.execute, ToolCall(id="c2", name="slow_read", arguments={}))
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(5) as scope:  # the resuming request gives up
            await box.resume_approval(approval)
        release.set()
    assert scope.cancelled_caught
    assert ran == []  # the call never started
    result = await box.resume_approval(approval)  # raises ApprovalError(reason="replayed")
    assert (result.outcome, ran) == ("success", ["/a"])


class CommitThenStall:
    """A store whose writes commit, then keep the caller waiting (as a thread-backed
    store can: the commit lands, and the caller's cancellation arrives after it)."""

    def __init__(self) -> None:
        from operative.kvstore import MemoryStore

        self.inner = MemoryStore()
        self.stall = True

    async def get(self, key: str) -> object:
        return await self.inner.get(key)

    async def get_many(self, keys: object) -> object:
        return await self.inner.get_many(keys)  # type: ignore[arg-type]

    async def list(self, prefix: str = "", **kwargs: object) -> object:
        return await self.inner.list(prefix, **kwargs)  # type: ignore[arg-type]

    async def conditional_batch(self, operations: object) -> object:
        result = await self.inner.conditional_batch(operations)  # type: ignore[arg-type]
        if self.stall:
            await trio.sleep_forever()
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_consume_cancelled_after_its_commit_is_taken_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """When the marker was written but the resume was cancelled, the approval stays usable."""
    ran: list[str] = []

    @tool(version="1", mutates=True)
    async def delete_file(path: str) -> str:
        """Delete one file."""
        ran.append(path)
        return "deleted"

    state = CommitThenStall()
    box = Toolbox(
        [delete_file],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=SECRET,
        approval_state=state,  # type: ignore[arg-type]
        max_concurrency=2,
    )
    parked = await box.execute(ToolCall(id="c1", name="delete_file", arguments={"path": "/a"}))
    assert parked.pending_approval is not None
    with trio.move_on_after(5) as scope:
        await box.resume_approval(parked.pending_approval)
    assert scope.cancelled_caught
    assert ran == []
    state.stall = False
    resumed = await box.resume_approval(parked.pending_approval)
    assert resumed.outcome == "success"
    assert ran == ["/a"]


def _request(revision: int | str) -> RequestContext:
    authority = Authority(
        principal_id="user-1",
        tenant_id="tenant-1",
        owner_id="session-1",
        capabilities=("files:write",),
        authorization_revision=revision,
    )
    return RequestContext(authority=authority, audience="tenant", agent_id="a", run_id="r")


def _approval_box(ran: list[str]) -> Toolbox:
    @tool(version="1", mutates=True)
    async def delete_file(path: str) -> str:
        """Delete one file."""
        ran.append(path)
        return "deleted"

    return Toolbox(
        [delete_file], approval_policy=ApprovalPolicy(mode="on-mutation"), approval_secret=SECRET
    )


async def test_an_integer_revision_parks_an_approval_its_own_request_resumes() -> None:
    """authorization_revision=1 is bound as an int: the same request resumes, also via JSON."""
    ran: list[str] = []
    box = _approval_box(ran)
    request = _request(1)
    call = ToolCall(id="c1", name="delete_file", arguments={"path": "/a"})
    parked = await box.execute(call, ExecutionContext(request_context=request))
    approval = parked.pending_approval
    assert approval is not None
    assert approval.authority is not None
    assert approval.authority.authorization_revision == 1
    wire = msgspec.json.encode(approval)
    decoded = msgspec.json.decode(wire, type=PendingApproval)
    assert decoded.authority is not None
    assert decoded.authority.authorization_revision == 1
    resumed = await box.resume_approval(decoded, request_context=request)
    assert (resumed.outcome, ran) == ("success", ["/a"])
    again = await box.execute(call, ExecutionContext(request_context=request))
    assert again.pending_approval is not None
    wire = msgspec.json.encode(again.pending_approval)
    resumed = await box.resume_approval(wire, request_context=request)  # type: ignore[arg-type]
    assert (resumed.outcome, ran) == ("success", ["/a", "/a"])


@pytest.mark.parametrize(("issued", "resumed"), [(1, "1"), ("1", 1), (0, ""), (1, 2)])
async def test_an_int_and_a_str_revision_never_sign_the_same(
    issued: int | str, resumed: int | str
) -> None:
    """Revision 1 and revision "1" are different identities: neither resumes the other."""
    box = _approval_box([])
    parked = await box.execute(
        ToolCall(id="c1", name="delete_file", arguments={"path": "/a"}),
        ExecutionContext(request_context=_request(issued)),
    )
    assert parked.pending_approval is not None
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(parked.pending_approval, request_context=_request(resumed))
    assert info.value.reason == "authority-mismatch"
    # Forging the other type into the signed approval breaks its signature.
    assert parked.pending_approval.authority is not None
    forged = msgspec.structs.replace(
        parked.pending_approval,
        authority=msgspec.structs.replace(
            parked.pending_approval.authority, authorization_revision=resumed
        ),
    )
    with pytest.raises(ApprovalError) as info:
        await box.resume_approval(forged, request_context=_request(resumed))
    assert info.value.reason == "bad-signature"


def test_a_str_revision_signs_as_it_always_did() -> None:
    """Approvals signed before revisions could be ints still verify (same signed bytes)."""
    approvals = Approvals(SECRET, state=MemoryStore(), ttl=60.0, clock=lambda: 1.0)
    authority = Authority(
        principal_id="user-1",
        tenant_id="tenant-1",
        owner_id="session-1",
        capabilities=("files:write",),
        authorization_revision="7",
    )
    approval = PendingApproval(
        approval_id="a" * 32,
        call_id="call-1",
        tool_name="delete_file",
        tool_version="1",
        arguments={"path": "/a"},
        argument_digest=argument_digest({"path": "/a"}),
        authority=authority,
        audience="tenant",
        agent_id="agent-1",
        run_id="run-1",
        issued_at=1000,
        expires_at=2000,
        signature="9beab97747ce599534d87e2a54de8a5f9c6086a70bbbd2515964325369dfc878",
    )
    request = RequestContext(
        authority=authority, audience="tenant", agent_id="agent-1", run_id="run-1"
    )
    assert approvals.verify(approval, request) == approval


_AUTHORITY_FIELDS: dict[str, Any] = {
    "principal_id": "user-1",
    "tenant_id": "tenant-1",
    "owner_id": "session-1",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("principal_id", None),
        ("principal_id", 7),
        ("tenant_id", b"tenant"),
        ("owner_id", None),
        ("capabilities", "admin"),
        ("capabilities", ("admin", 1)),
        ("capabilities", None),
        ("capabilities", {"admin": True}),
        ("authorization_revision", None),
        ("authorization_revision", True),
        ("authorization_revision", 1.0),
        ("authorization_revision", ["1"]),
    ],
)
def test_authority_refuses_wrong_types_naming_the_field(field: str, value: Any) -> None:
    """Every Authority field is type-checked when it is built."""
    with pytest.raises(InvalidArgument, match=f"Authority.{field}"):
        Authority(**{**_AUTHORITY_FIELDS, field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("authority", None),
        ("authority", {"principal_id": "user-1"}),
        ("audience", None),
        ("agent_id", 3),
        ("run_id", None),
        ("deadline", "soon"),
        ("deadline", True),
        ("deadline", float("nan")),
    ],
)
def test_request_context_refuses_wrong_types_naming_the_field(field: str, value: Any) -> None:
    """Every RequestContext field is type-checked when it is built."""
    fields: dict[str, Any] = {"authority": Authority(**_AUTHORITY_FIELDS), field: value}
    with pytest.raises(InvalidArgument, match=f"RequestContext.{field}"):
        RequestContext(**fields)


def test_valid_authorities_and_contexts_are_accepted() -> None:
    """Ints and strs for the revision, a list of capabilities (kept as a tuple), int deadlines."""
    listed: Any = ["b", "a"]
    authority = Authority(**_AUTHORITY_FIELDS, capabilities=listed, authorization_revision=3)
    assert authority.capabilities == ("b", "a")
    assert hash(authority) == hash(msgspec.structs.replace(authority))
    assert Authority(**_AUTHORITY_FIELDS).authorization_revision == ""
    context = RequestContext(authority=authority, deadline=1_700_000_000)
    assert context.deadline == 1_700_000_000
    assert RequestContext(authority=authority).deadline is None


def test_decoding_checks_types_too() -> None:
    """A stored approval with a wrongly typed authority is refused as it is decoded."""
    raw = b'{"principal_id": "u", "tenant_id": "t", "owner_id": "o", "capabilities": "admin"}'
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(raw, type=Authority)
