"""``Authority(capabilities=...)`` takes any collection of strings: a set is the natural
type, and a frozenset, a list or a tuple work as well."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from operative import ToolCall
from operative._core._errors import InvalidArgument
from operative._core._types import Authority, RequestContext
from operative.tools import ExecutionContext, Toolbox, tool

_FIELDS: dict[str, Any] = {"principal_id": "u", "tenant_id": "t", "owner_id": "o"}


@pytest.mark.parametrize(
    "capabilities",
    [{"files:write", "files:read"}, frozenset({"files:read", "files:write"})],
    ids=["set", "frozenset"],
)
def test_a_set_of_capabilities_is_kept_sorted(capabilities: Any) -> None:
    authority = Authority(**_FIELDS, capabilities=capabilities)
    assert authority.capabilities == ("files:read", "files:write")
    assert authority == Authority(**_FIELDS, capabilities=("files:read", "files:write"))
    assert hash(authority) == hash(msgspec.structs.replace(authority))


def test_a_sequence_of_capabilities_keeps_its_order() -> None:
    listed: Any = ["b", "a"]
    assert Authority(**_FIELDS, capabilities=listed).capabilities == ("b", "a")
    assert Authority(**_FIELDS, capabilities=("b", "a")).capabilities == ("b", "a")
    assert Authority(**_FIELDS).capabilities == ()


@pytest.mark.parametrize("capabilities", ["admin", b"admin", {"admin": True}, [1], {None}, 7])
def test_anything_but_a_collection_of_strings_is_refused(capabilities: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"Authority\.capabilities takes a collection of str"):
        Authority(**_FIELDS, capabilities=capabilities)


def test_a_decoded_authority_keeps_its_capabilities_as_a_tuple() -> None:
    authority = Authority(**_FIELDS, capabilities=frozenset({"b", "a"}))
    decoded = msgspec.json.decode(msgspec.json.encode(authority), type=Authority)
    assert decoded == authority
    assert decoded.capabilities == ("a", "b")


async def test_an_approval_parked_under_a_set_resumes_under_a_list() -> None:
    """The capabilities are bound as a set: the type and order they were given in does
    not change the approval's identity."""
    ran: list[str] = []

    @tool(version="1", needs_approval=True)
    async def delete_file(path: str) -> str:
        """Delete one file."""
        ran.append(path)
        return "deleted"

    def request(capabilities: Any) -> RequestContext:
        return RequestContext(authority=Authority(**_FIELDS, capabilities=capabilities))

    box = Toolbox([delete_file])
    call = ToolCall(id="c1", name="delete_file", arguments={"path": "/tmp/a"})
    parked = await box.execute(
        call, ExecutionContext(request_context=request(frozenset({"files:write", "files:read"})))
    )
    assert parked.pending_approval is not None
    resumed = await box.resume_approval(
        parked.pending_approval, request_context=request(["files:write", "files:read"])
    )
    assert resumed.outcome == "success"
    assert ran == ["/tmp/a"]
