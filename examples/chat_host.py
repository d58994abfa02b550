"""A stateless chat host: park a tool call on approval, resume it later, continue the chat.

Run it with ``python examples/chat_host.py``. It needs no API key: the model is a
SCRIPTED MODEL (``operative.testing.ScriptedModel``) that plays a fixed conversation.
Swap ``scripted_model()`` for a provider's generate function to talk to a real one.

The host keeps nothing in memory between requests. Every request below gets only JSON
(the conversation the client POSTs, the approval a person sends back) and builds its
own ``RequestContext`` from its own authentication. What the process does keep is the
toolbox configuration: the approval secret and the approval-state store, which every
toolbox instance (in this or any other process) must share.

1. Turn 1: run the agent on the POSTed history; it parks on the mutating call.
2. Send the pending approval to a person (printed here as JSON).
3. A later request resumes it, with its own authority and a fresh deadline.
4. ``resolve_tool_result`` replaces the placeholder result in place.
5. Turn 2 runs from the resolved history; the model reads the real result.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import msgspec
import trio

from operative import (
    Agent,
    Conversation,
    ConversationHistory,
    GenerateRequest,
    GenerateResponse,
    Toolbox,
    ToolCall,
    create_agent,
    stop_when,
    tool,
)
from operative.conversation import resolve_tool_result
from operative.kvstore import MemoryStore
from operative.testing import ScriptedModel
from operative.tools import ApprovalPolicy, Authority, PendingApproval, RequestContext

FILES = {"/reports/q3.txt": "draft", "/reports/q4.txt": "final"}


@tool(version="1", mutates=True)
async def delete_file(path: str) -> dict[str, Any]:
    """Delete one file."""
    await trio.lowlevel.checkpoint()
    del FILES[path]
    return {"deleted": path}


@tool(version="1")
async def list_files() -> list[str]:
    """List the files."""
    await trio.lowlevel.checkpoint()
    return sorted(FILES)


# Process-wide configuration. In production the secret comes from your secret store
# and the state store is durable and shared (SqliteStore or PostgresStore).
APPROVAL_SECRET = secrets.token_bytes(32)
APPROVAL_STATE = MemoryStore()


def build_toolbox() -> Toolbox:
    """Every process builds its toolbox the same way: same secret, same state store."""
    return Toolbox(
        [delete_file, list_files],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=APPROVAL_SECRET,
        approval_state=APPROVAL_STATE,
    )


def request_context_for(user: str) -> RequestContext:
    """Built from each authenticated request; never stored on the toolbox."""
    return RequestContext(
        authority=Authority(
            principal_id=user,
            tenant_id="acme",
            owner_id="session-42",
            capabilities=("files:read", "files:write"),
            authorization_revision="7",
        ),
        audience="tenant",
        agent_id="file-assistant",
        run_id="conversation-42",
        deadline=time.time() + 30,  # this request's own deadline
    )


def scripted_model() -> ScriptedModel:
    """SCRIPTED MODEL: a stand-in for a provider, answering from the transcript."""

    def answer(request: GenerateRequest) -> GenerateResponse | str:
        last = request.conversation.messages[-1]
        if last.role == "user":
            arguments = json.dumps({"path": "/reports/q3.txt"})
            return GenerateResponse(
                content="I'll delete the Q3 draft.",
                tool_calls=(ToolCall(id="call-1", name="delete_file", arguments=arguments),),
            )
        if last.role == "tool" and last.outcome == "success":
            return f"Done: I deleted {json.loads(last.text)['deleted']}."
        return f"I did not delete it ({last.outcome}): {last.text}"

    return ScriptedModel(answer)


def agent_for(context: RequestContext, toolbox: Toolbox) -> Agent:
    """One agent per request, around the process's toolbox and the request's context."""
    return create_agent(
        generate=scripted_model(),
        toolbox=toolbox,
        request_context=context,
        stop_when=[stop_when.pending_approval(), stop_when.no_tool_calls()],
    )


async def post_chat(body: bytes) -> tuple[bytes, bytes | None, str]:
    """POST /chat: run a turn on the client's history; park if a call needs approval."""
    history = msgspec.json.decode(body, type=ConversationHistory)
    agent = agent_for(request_context_for("alice"), build_toolbox())
    result = await agent.run(history)
    stored = msgspec.json.encode(result.conversation.current)
    pending = result.steps[-1].pending_approvals
    if pending:
        approval = pending[0].pending_approval
        assert approval is not None
        return stored, msgspec.json.encode(approval), result.content
    return stored, None, result.content


async def post_approval(stored: bytes, approval_json: bytes) -> bytes:
    """POST /approvals/<id>: a person approved; run the call and fix the transcript."""
    approval = msgspec.json.decode(approval_json, type=PendingApproval)
    context = request_context_for("alice")  # same identity, this request's deadline
    resumed = await build_toolbox().resume_approval(approval, request_context=context)
    history = msgspec.json.decode(stored, type=ConversationHistory)
    # Replace the action-required result in place: appending would leave two results.
    resolved = resolve_tool_result(history, approval.call_id, resumed)
    return msgspec.json.encode(resolved)


async def main() -> None:
    client = Conversation()
    client.append_system_message("You manage the team's files.")
    client.append_user_message("Please delete the Q3 draft report.")

    # 1. Turn 1: the client POSTs its history; the run parks on the delete.
    stored, approval_json, said = await post_chat(msgspec.json.encode(client.current))
    assert approval_json is not None, "the delete should wait for approval"
    assert "/reports/q3.txt" in FILES  # nothing ran yet
    print(f"assistant: {said}")

    # 2. Send the pending approval to a person (a browser, a chat, an email).
    print(f"pending approval: {approval_json.decode()}")

    # 3-4. Later, in another request: the person approved.
    resolved = await post_approval(stored, approval_json)
    assert "/reports/q3.txt" not in FILES

    # 5. Turn 2 from the resolved history (the client would POST it back).
    final, _, said = await post_chat(resolved)
    print(f"final answer: {said}")
    print("transcript:")
    for message in msgspec.json.decode(final, type=ConversationHistory).messages:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        outcome = f" [{message.outcome}]" if message.outcome else ""
        print(f"  {message.role}{outcome}: {message.text}{' -> ' + calls if calls else ''}")


if __name__ == "__main__":
    trio.run(main)
