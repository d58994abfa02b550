"""Signed approvals consumed exactly once across processes through a shared SQLite file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import trio

from operative import Toolbox, ToolCall, tool
from operative.kvstore import SqliteStore
from operative.tools import ApprovalPolicy, Authority, ExecutionContext, RequestContext

SECRET = b"s" * 32
REQUEST = RequestContext(
    authority=Authority(principal_id="u", tenant_id="t", owner_id="o"),
    audience="tenant",
    agent_id="agent",
    run_id="run",
)

WORKER = """
import sys, msgspec, trio
from pathlib import Path
from operative import Toolbox, tool
from operative.kvstore import SqliteStore
from operative.tools import (
    ApprovalError,
    ApprovalPolicy,
    Authority,
    PendingApproval,
    RequestContext,
)

log = Path(sys.argv[1])

@tool(version="1", mutates=True)
async def charge(amount: int) -> str:
    '''Charge a card.'''
    with log.open("a") as f:
        f.write(f"charged {amount}\\n")
    return "charged"

async def main() -> None:
    approval = msgspec.json.decode(Path(sys.argv[3]).read_bytes(), type=PendingApproval)
    request = RequestContext(
        authority=Authority(principal_id="u", tenant_id="t", owner_id="o"),
        audience="tenant", agent_id="agent", run_id="run",
    )
    async with SqliteStore(sys.argv[2]) as state:
        box = Toolbox([charge], approval_policy=ApprovalPolicy(mode="on-mutation"),
                      approval_secret=b"s" * 32, approval_state=state)
        try:
            result = await box.resume_approval(approval, request_context=request)
            print("ran", result.outcome)
        except ApprovalError as exc:
            print("refused", exc.reason)

trio.run(main)
"""


@tool(version="1", mutates=True)
async def charge(amount: int) -> str:
    """Charge a card."""
    raise AssertionError("the parent process never runs the call")


def test_racing_processes_consume_one_approval_once(tmp_path: Path) -> None:
    """Four processes resume one approval at once: one runs the call, three are refused."""

    async def park() -> bytes:
        async with SqliteStore(tmp_path / "approvals.db") as state:
            box = Toolbox(
                [charge],
                approval_policy=ApprovalPolicy(mode="on-mutation"),
                approval_secret=SECRET,
                approval_state=state,
            )
            result = await box.execute(
                ToolCall(id="c1", name="charge", arguments={"amount": 42}),
                ExecutionContext(request_context=REQUEST, agent_id="agent", run_id="run"),
            )
            assert result.outcome == "action-required"
            assert result.pending_approval is not None
            return msgspec.json.encode(result.pending_approval)

    approval = tmp_path / "approval.json"
    approval.write_bytes(trio.run(park))
    log = tmp_path / "charges.log"
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(log), str(tmp_path / "approvals.db"), str(approval)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        outputs.append(out.strip())
    assert sorted(outputs) == ["ran success"] + ["refused replayed"] * 3
    assert log.read_text().splitlines() == ["charged 42"]
