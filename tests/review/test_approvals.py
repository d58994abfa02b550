"""Resuming an approval under cancellation: an approved call is run or stays resumable."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from operative import ToolCall
from operative.tools import ApprovalPolicy, Toolbox, tool

SECRET = b"s" * 32


@pytest.mark.xfail(
    strict=True,
    reason="resume_approval consumes the approval before _run waits for the toolbox's "
    "capacity; a cancel there burns the approval although the call never ran",
)
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
