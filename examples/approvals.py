"""A stateless chat host parks a tool call for approval and resumes it in a later request.

Run it with ``python examples/approvals.py``. No model is called: the assistant's tool
call is written by hand, so the example shows only the toolbox and transcript side of
the round trip. Every step stores or sends JSON, as a real HTTP backend would.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec
import trio

from operative import Conversation, ConversationHistory, Toolbox, ToolCall, tool
from operative.conversation import resolve_tool_result
from operative.kvstore import MemoryStore
from operative.tools import (
    ApprovalError,
    ApprovalPolicy,
    Authority,
    ExecutionContext,
    PendingApproval,
    RequestContext,
)

FILES = {"/reports/q3.txt": "draft", "/reports/q4.txt": "final"}


@tool(version="1", mutates=True)
async def delete_file(path: str) -> dict[str, Any]:
    """Delete one file."""
    await trio.lowlevel.checkpoint()
    del FILES[path]
    return {"deleted": path}


# Built once per process. The secret comes from your secret store; the state store is
# shared by every process that may resume an approval (SQLite or PostgreSQL in
# production, a MemoryStore here).
TOOLBOX = Toolbox(
    [delete_file],
    approval_policy=ApprovalPolicy(mode="on-mutation"),
    approval_secret=secrets.token_bytes(32),
    approval_state=MemoryStore(),
)


def request_context_for(user: str, *, run_id: str) -> RequestContext:
    """Build the request context from the authenticated request (never store it)."""
    return RequestContext(
        authority=Authority(
            principal_id=user,
            tenant_id="acme",
            owner_id="session-42",
            capabilities=("files:write",),
            authorization_revision="7",
        ),
        audience="tenant",
        agent_id="file-assistant",
        run_id=run_id,
    )


async def first_request(client_history: bytes) -> tuple[bytes, bytes]:
    """Turn 1: the model asks to delete a file; the call parks instead of running."""
    conversation = Conversation.from_history(
        msgspec.json.decode(client_history, type=ConversationHistory)
    )
    call = ToolCall(id="call-1", name="delete_file", arguments='{"path": "/reports/q3.txt"}')
    conversation.append_assistant_message("I'll delete the draft.", [call])
    context = ExecutionContext(
        run_id="run-1", request_context=request_context_for("alice", run_id="run-1")
    )
    result = await TOOLBOX.execute(call, context)
    assert result.outcome == "action-required"
    assert result.pending_approval is not None
    conversation.append_tool_result(result)  # every call keeps exactly one result
    # Store the transcript server-side; send the pending approval to a person.
    return msgspec.json.encode(conversation.current), msgspec.json.encode(result.pending_approval)


async def approval_request(stored_history: bytes, approval_json: bytes) -> ConversationHistory:
    """Later: a person approved. Resume the call and fix up the transcript in place."""
    history = msgspec.json.decode(stored_history, type=ConversationHistory)
    approval = msgspec.json.decode(approval_json, type=PendingApproval)
    # A fresh context from this request: same bound identity, its own deadline.
    fresh = msgspec.structs.replace(
        request_context_for("alice", run_id="run-1"), deadline=time.time() + 30
    )
    result = await TOOLBOX.resume_approval(approval, request_context=fresh)
    # Replace the action-required result; appending would leave two results for one call.
    return resolve_tool_result(history, approval.call_id, result)


async def main() -> None:
    start = Conversation()
    start.append_user_message("Please delete the Q3 draft report.")
    stored, approval_json = await first_request(msgspec.json.encode(start.current))
    assert "/reports/q3.txt" in FILES  # nothing ran yet

    history = await approval_request(stored, approval_json)
    assert "/reports/q3.txt" not in FILES
    tool_messages = [m for m in history.messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert tool_messages[0].outcome == "success"
    print(tool_messages[0].text)  # {"deleted":"/reports/q3.txt"}

    # The next turn starts from `history`; the same approval cannot run twice.
    try:
        await approval_request(stored, approval_json)
    except ApprovalError as exc:
        print(f"second resume refused: {exc.reason}")  # replayed


if __name__ == "__main__":
    trio.run(main)
