"""Resuming an approval under cancellation: an approved call is run or stays resumable."""

from __future__ import annotations

import trio
import trio.testing

from operative import ToolCall
from operative.tools import ApprovalPolicy, Toolbox, tool

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
        from operative import MemoryStore

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
