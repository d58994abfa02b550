"""Tools, approvals, permissions and elicitation end to end, through the agent loop."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from operative import (
    Conversation,
    ConversationHistory,
    FinishReason,
    GenerateResponse,
    RunResult,
    Tool,
    Toolbox,
    ToolCall,
    ToolContext,
    create_agent,
    open_run,
    stop_when,
    tool,
)
from operative.conversation import resolve_tool_result
from operative.kvstore import MemoryStore
from operative.testing import ScriptedModel, check_run_invariants
from operative.tools import (
    ApprovalError,
    ApprovalPolicy,
    Authority,
    ElicitationRequest,
    ElicitationResponse,
    PendingApproval,
    PermissionPolicy,
    RequestContext,
)

SECRET = b"operative-end-to-end-test-secret-32b"
PARK = [stop_when.pending_approval(), stop_when.no_tool_calls()]


# -- helpers -----------------------------------------------------------------------------


class Recorder:
    """Collects every event of a run, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)

    @property
    def types(self) -> list[str]:
        return [event.type for event in self.events]

    def of(self, type: str) -> list[Any]:
        return [event for event in self.events if event.type == type]


def calls(*items: ToolCall) -> GenerateResponse:
    return GenerateResponse(tool_calls=items)


def assert_one_result_per_call(history: ConversationHistory) -> None:
    """Every assistant tool call has exactly one tool message, after it."""
    call_ids = [call.id for m in history.messages for call in m.tool_calls]
    assert len(call_ids) == len(set(call_ids)), f"a call id is used twice: {call_ids}"
    answered = Counter(m.tool_call_id for m in history.messages if m.role == "tool")
    assert answered == Counter(call_ids), f"calls {call_ids} answered {dict(answered)}"


def tool_message(history: ConversationHistory, call_id: str) -> Any:
    (message,) = [m for m in history.messages if m.tool_call_id == call_id]
    return message


async def run_agent(agent: Any, input: Any) -> tuple[RunResult, Recorder]:
    """Run ``agent`` on ``input``, recording every event and checking the invariants."""
    recorder = Recorder()
    async with agent.open_run(input) as run:
        run.add_listener("*", recorder)
    result: RunResult = await run.result()
    check_run_invariants(result, recorder.events, maximum_steps=agent.maximum_steps)
    return result, recorder


class Files:
    """A tiny file system whose tools count how often each call id executed."""

    def __init__(self) -> None:
        self.files = {"/reports/q3.txt": "draft", "/reports/q4.txt": "final"}
        self.executions: Counter[str] = Counter()

    def tools(self, version: str = "1") -> list[Tool]:
        @tool(version=version, mutates=True)
        async def delete_file(path: str, ctx: ToolContext) -> dict[str, Any]:
            """Delete one file."""
            await trio.lowlevel.checkpoint()
            self.executions[ctx.call_id] += 1
            del self.files[path]
            return {"deleted": path}

        @tool(version=version)
        async def read_file(path: str, ctx: ToolContext) -> str:
            """Read one file."""
            await trio.lowlevel.checkpoint()
            self.executions[ctx.call_id] += 1
            return self.files[path]

        return [delete_file, read_file]

    def toolbox(self, state: MemoryStore, secret: bytes = SECRET, version: str = "1") -> Toolbox:
        """A toolbox as a process builds it: once, with the shared secret and store."""
        return Toolbox(
            self.tools(version),
            approval_policy=ApprovalPolicy(mode="on-mutation"),
            approval_secret=secret,
            approval_state=state,
        )


def request_context(*, principal: str = "alice", deadline: float | None = None) -> RequestContext:
    """What a host builds from one authenticated HTTP request."""
    return RequestContext(
        authority=Authority(
            principal_id=principal,
            tenant_id="acme",
            owner_id="session-42",
            capabilities=("files:read", "files:write"),
            authorization_revision="7",
        ),
        audience="tenant",
        agent_id="file-assistant",
        run_id="conversation-42/turn-1",
        deadline=deadline if deadline is not None else time.time() + 30,
    )


def client_history() -> ConversationHistory:
    """The history a browser POSTs: JSON on the wire, decoded by the host."""
    conversation = Conversation()
    conversation.append_system_message("You manage files. Ask before deleting anything.")
    conversation.append_user_message("Please delete the Q3 draft.")
    wire = msgspec.json.encode(conversation.current)
    return msgspec.json.decode(wire, type=ConversationHistory)


DELETE_Q3 = ToolCall(id="call-1", name="delete_file", arguments='{"path": "/reports/q3.txt"}')


async def park_turn(
    files: Files, state: MemoryStore, history: ConversationHistory | None = None
) -> tuple[RunResult, Recorder, ScriptedModel]:
    """Turn 1 of the stateless host: run from the client's history until it parks."""
    model = ScriptedModel([calls(DELETE_Q3)])
    agent = create_agent(
        generate=model,
        toolbox=files.toolbox(state),
        request_context=request_context(),
        stop_when=PARK,
    )
    result, recorder = await run_agent(agent, history or client_history())
    return result, recorder, model


def pending_of(result: RunResult) -> PendingApproval:
    (parked,) = result.steps[-1].pending_approvals
    assert parked.pending_approval is not None
    return parked.pending_approval


def through_a_browser(approval: PendingApproval) -> PendingApproval:
    """Send the approval to a browser as JSON and decode what comes back."""
    in_the_browser: dict[str, Any] = json.loads(msgspec.json.encode(approval))
    assert in_the_browser["arguments"] == {"path": "/reports/q3.txt"}
    return msgspec.json.decode(json.dumps(in_the_browser), type=PendingApproval)


# -- the stateless chat host -------------------------------------------------------------


async def test_stateless_host_parks_resumes_in_a_later_request_and_continues() -> None:
    """Park on approval, resume with a second toolbox and fresh context, resolve, turn 2."""
    files = Files()
    state = MemoryStore()
    posted = client_history()
    posted_json = msgspec.json.encode(posted)

    # Turn 1 (request A): the run parks after the step that asked to delete.
    result, recorder, model = await park_turn(files, state, posted)
    assert result.finish_reason == FinishReason.STOP_CONDITION
    assert model.calls == 1  # parked: no further generate call
    (parked,) = result.steps[-1].results
    assert parked.outcome == "action-required"
    assert parked.pending_approval is not None
    assert files.executions == Counter()  # the tool did not run
    assert "/reports/q3.txt" in files.files
    assert recorder.of("run.completed")[0].finish_reason == "stop-condition"
    stored = result.conversation.current
    assert_one_result_per_call(stored)
    assert tool_message(stored, "call-1").outcome == "action-required"
    assert msgspec.json.encode(posted) == posted_json  # the run snapshotted the input
    assert stored.messages[:2] == posted.messages  # no instructions re-appended

    # The host stores the transcript and sends the approval to a person, as JSON.
    stored_json = msgspec.json.encode(stored)
    approval = through_a_browser(pending_of(result))
    assert approval == parked.pending_approval

    # Later (request B): another toolbox instance, same secret and state store, and a
    # fresh request context carrying the same identity with its own deadline.
    later_toolbox = files.toolbox(state)
    fresh = request_context(deadline=time.time() + 60)
    resumed = await later_toolbox.resume_approval(approval, request_context=fresh)
    assert (resumed.outcome, resumed.value) == ("success", {"deleted": "/reports/q3.txt"})
    assert files.executions == Counter({"call-1": 1})
    assert "/reports/q3.txt" not in files.files

    history = msgspec.json.decode(stored_json, type=ConversationHistory)
    placeholder = tool_message(history, "call-1")
    resolved = resolve_tool_result(history, approval.call_id, resumed)
    replaced = tool_message(resolved, "call-1")
    assert replaced.outcome == "success"
    assert (replaced.id, resolved.messages.index(replaced)) == (
        placeholder.id,
        history.messages.index(placeholder),
    )
    assert len(resolved.messages) == len(history.messages)
    assert_one_result_per_call(resolved)

    # Turn 2 from the resolved history: the model sees the real result.
    model_2 = ScriptedModel(["I deleted /reports/q3.txt."])
    agent_2 = create_agent(
        generate=model_2, toolbox=later_toolbox, request_context=fresh, stop_when=PARK
    )
    final, _ = await run_agent(agent_2, resolved)
    assert final.finish_reason == FinishReason.STOP_CONDITION
    assert final.content == "I deleted /reports/q3.txt."
    seen = tool_message(model_2.requests[0].conversation, "call-1")
    assert (seen.outcome, seen.content) == ("success", '{"deleted":"/reports/q3.txt"}')
    assert_one_result_per_call(final.conversation.current)
    assert [m.role for m in final.conversation.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert files.executions == Counter({"call-1": 1})

    # The original toolbox shares the state store: the approval is spent for it too.
    with pytest.raises(ApprovalError) as info:
        await files.toolbox(state).resume_approval(approval, request_context=fresh)
    assert info.value.reason == "replayed"
    assert files.executions == Counter({"call-1": 1})


async def test_a_plain_reply_finishes_a_parking_agent_in_one_step() -> None:
    """With no tool call, no_tool_calls() ends the run instead of running to the cap."""
    model = ScriptedModel(["Which file?"])
    agent = create_agent(
        generate=model,
        toolbox=Files().toolbox(MemoryStore()),
        request_context=request_context(),
        stop_when=PARK,
    )
    result, _ = await run_agent(agent, client_history())
    assert (result.finish_reason, len(result.steps), model.calls) == ("stop-condition", 1, 1)


async def test_a_denied_approval_is_resolved_and_read_by_the_model() -> None:
    """deny_approval settles the parked call as denied; turn 2 reads the refusal."""
    files = Files()
    state = MemoryStore()
    result, _, _ = await park_turn(files, state)
    approval = through_a_browser(pending_of(result))

    later_toolbox = files.toolbox(state)
    fresh = request_context(deadline=time.time() + 60)
    denied = await later_toolbox.deny_approval(
        approval, reason="keep the draft", request_context=fresh
    )
    assert denied.outcome == "denied"
    resolved = resolve_tool_result(result.conversation.current, approval.call_id, denied)
    assert_one_result_per_call(resolved)

    model_2 = ScriptedModel(["OK, I left the draft alone."])
    agent_2 = create_agent(
        generate=model_2, toolbox=later_toolbox, request_context=fresh, stop_when=PARK
    )
    final, _ = await run_agent(agent_2, resolved)
    seen = tool_message(model_2.requests[0].conversation, "call-1")
    assert seen.outcome == "denied"
    assert "keep the draft" in seen.content
    assert final.content == "OK, I left the draft alone."
    assert files.executions == Counter()
    assert "/reports/q3.txt" in files.files

    # A denial consumes the approval: it can be neither resumed nor denied again.
    with pytest.raises(ApprovalError) as info:
        await later_toolbox.resume_approval(approval, request_context=fresh)
    assert info.value.reason == "replayed"
    with pytest.raises(ApprovalError) as info:
        await later_toolbox.deny_approval(approval, request_context=fresh)
    assert info.value.reason == "replayed"
    assert files.executions == Counter()


def _with_arguments(approval: PendingApproval) -> PendingApproval:
    return msgspec.structs.replace(approval, arguments={"path": "/reports/q4.txt"})


def _with_tool(approval: PendingApproval) -> PendingApproval:
    return msgspec.structs.replace(approval, tool_name="read_file")


def _with_expiry(approval: PendingApproval) -> PendingApproval:
    return msgspec.structs.replace(approval, expires_at=approval.expires_at + 3_600_000)


def _with_signature(approval: PendingApproval) -> PendingApproval:
    return msgspec.structs.replace(approval, signature="0" * 64)


@pytest.mark.parametrize(
    "tamper",
    [_with_arguments, _with_tool, _with_expiry, _with_signature],
    ids=["arguments", "tool", "expiry", "signature"],
)
async def test_a_tampered_approval_is_refused_and_the_original_stays_usable(
    tamper: Callable[[PendingApproval], PendingApproval],
) -> None:
    """An altered approval raises ApprovalError('bad-signature'); nothing runs or is spent."""
    files = Files()
    state = MemoryStore()
    result, _, _ = await park_turn(files, state)
    approval = through_a_browser(pending_of(result))
    later_toolbox = files.toolbox(state)
    fresh = request_context(deadline=time.time() + 60)
    with pytest.raises(ApprovalError) as info:
        await later_toolbox.resume_approval(tamper(approval), request_context=fresh)
    assert info.value.reason == "bad-signature"
    assert files.executions == Counter()
    resumed = await later_toolbox.resume_approval(approval, request_context=fresh)
    assert resumed.outcome == "success"


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("another-secret", "bad-signature"),
        ("another-principal", "authority-mismatch"),
        ("no-request-context", "authority-mismatch"),
        ("tool-version-changed", "version-changed"),
        ("garbage", "malformed"),
    ],
)
async def test_a_resume_from_the_wrong_place_is_refused(how: str, reason: str) -> None:
    """Another secret, identity or tool version, or a malformed approval, is refused."""
    files = Files()
    state = MemoryStore()
    result, _, _ = await park_turn(files, state)
    approval: Any = pending_of(result)
    toolbox = files.toolbox(state)
    context: RequestContext | None = request_context(deadline=time.time() + 60)
    if how == "another-secret":
        toolbox = files.toolbox(state, secret=b"another-secret-that-is-32-bytes-long")
    elif how == "another-principal":
        context = request_context(principal="mallory")
    elif how == "no-request-context":
        context = None
    elif how == "tool-version-changed":
        toolbox = files.toolbox(state, version="2")
    else:
        approval = b'{"approval_id": 7}'
    with pytest.raises(ApprovalError) as info:
        await toolbox.resume_approval(approval, request_context=context)
    assert info.value.reason == reason
    assert files.executions == Counter()


async def test_a_replayed_approval_is_refused() -> None:
    """The second resume of one approval raises ApprovalError('replayed'); it ran once."""
    files = Files()
    state = MemoryStore()
    result, _, _ = await park_turn(files, state)
    approval = pending_of(result)
    fresh = request_context(deadline=time.time() + 60)
    first = await files.toolbox(state).resume_approval(approval, request_context=fresh)
    assert first.outcome == "success"
    with pytest.raises(ApprovalError) as info:
        await files.toolbox(state).resume_approval(approval, request_context=fresh)
    assert info.value.reason == "replayed"
    assert files.executions == Counter({"call-1": 1})


async def test_call_ids_reused_across_turns_are_made_unique() -> None:
    """A server that says call_0 every turn still gets one id per call in the transcript."""
    files = Files()
    read = ToolCall(id="call_0", name="read_file", arguments={"path": "/reports/q4.txt"})
    agent = create_agent(generate=ScriptedModel([calls(read), "final"]), tools=files.tools())
    first, _ = await run_agent(agent, client_history())
    history = first.conversation.current
    conversation = Conversation.from_history(history)
    conversation.append_user_message("And again?")
    agent = create_agent(generate=ScriptedModel([calls(read), "still final"]), tools=files.tools())
    second, _ = await run_agent(agent, conversation.current)
    assert_one_result_per_call(second.conversation.current)
    (renamed,) = second.steps[0].tool_calls
    assert renamed.id != "call_0"
    assert second.steps[0].results[0].call_id == renamed.id


async def test_a_resume_past_the_requests_deadline_does_not_run() -> None:
    """A resume under an expired request deadline is refused and leaves the approval usable."""
    files = Files()
    state = MemoryStore()
    result, _, _ = await park_turn(files, state)
    approval = pending_of(result)
    expired = request_context(deadline=time.time() - 1)
    with pytest.raises(ApprovalError) as info:
        await files.toolbox(state).resume_approval(approval, request_context=expired)
    assert info.value.reason == "deadline-passed"
    assert files.executions == Counter()
    fresh = request_context(deadline=time.time() + 60)
    resumed = await files.toolbox(state).resume_approval(approval, request_context=fresh)
    assert resumed.outcome == "success"
    assert files.executions == Counter({"call-1": 1})


async def test_a_run_past_the_requests_deadline_is_aborted() -> None:
    """A run whose request deadline has passed ends aborted, before the model is called."""
    model = ScriptedModel(["too late"])
    agent = create_agent(
        generate=model,
        toolbox=Files().toolbox(MemoryStore()),
        request_context=request_context(deadline=time.time() - 1),
    )
    result, recorder = await run_agent(agent, client_history())
    assert result.finish_reason == FinishReason.ABORTED
    assert result.abort_reason == "the request this run acts for passed its deadline"
    assert recorder.types[-1] == "run.aborted"
    assert model.calls == 0


# -- headless permissions ----------------------------------------------------------------


@tool
async def shell(command: str) -> str:
    """Run a shell command (never allowed headless)."""
    raise AssertionError("a denied tool ran")


async def test_permissions_deny_calls_the_model_then_reads() -> None:
    """A disallowed or mutating tool settles as denied without running; allowed ones run."""
    files = Files()
    read = ToolCall(id="r", name="read_file", arguments={"path": "/reports/q4.txt"})
    delete = ToolCall(id="d", name="delete_file", arguments={"path": "/reports/q3.txt"})
    run_shell = ToolCall(id="s", name="shell", arguments={"command": "rm -rf /"})
    model = ScriptedModel([calls(read, delete, run_shell), "I could only read q4."])
    agent = create_agent(
        generate=model,
        tools=[*files.tools(), shell],
        permissions=PermissionPolicy(allowed_tools={"read_file", "delete_file"}),
    )
    result, _ = await run_agent(agent, "Tidy up the reports.")
    outcomes = {r.call_id: r.outcome for r in result.steps[0].results}
    assert outcomes == {"r": "success", "d": "denied", "s": "denied"}
    assert files.executions == Counter({"r": 1})
    assert files.files["/reports/q3.txt"] == "draft"
    seen = model.requests[1].conversation
    assert tool_message(seen, "r").content == "final"
    assert "not permitted" in tool_message(seen, "s").content
    assert "may not make changes" in tool_message(seen, "d").content
    assert result.content == "I could only read q4."


async def test_permissions_may_allow_mutation() -> None:
    """With allow_mutation=True an allowed mutating tool runs."""
    files = Files()
    delete = ToolCall(id="d", name="delete_file", arguments={"path": "/reports/q3.txt"})
    agent = create_agent(
        generate=ScriptedModel([calls(delete), "done"]),
        tools=files.tools(),
        permissions=PermissionPolicy(allowed_tools=None, allow_mutation=True),
    )
    result, _ = await run_agent(agent, "Delete the draft.")
    assert result.steps[0].results[0].outcome == "success"
    assert files.executions == Counter({"d": 1})


# -- elicitation and progress ------------------------------------------------------------


class Confirm(msgspec.Struct):
    approved: bool


@tool
async def drop_table(name: str, ctx: ToolContext) -> str:
    """Drop a table after asking a person."""
    answer = await ctx.elicit(f"Drop {name}?", Confirm)
    if answer is None:
        return "declined"
    return "dropped" if answer.approved else "kept"


@pytest.mark.parametrize(
    ("reply", "expected"), [(True, "dropped"), (False, "kept"), (None, "declined")]
)
async def test_elicitation_through_a_run(reply: bool | None, expected: str) -> None:
    """A tool's elicit() reaches on_elicitation; events bracket it; None declines."""
    asked: list[ElicitationRequest] = []

    async def on_elicitation(request: ElicitationRequest) -> ElicitationResponse | None:
        await trio.lowlevel.checkpoint()
        asked.append(request)
        if reply is None:
            return None
        return ElicitationResponse(
            request_id=request.request_id,
            tool_call_id=request.tool_call_id,
            data={"approved": reply},
        )

    conversation = Conversation()
    conversation.append_user_message("Drop the logs table.")
    model = ScriptedModel(
        [calls(ToolCall(id="e1", name="drop_table", arguments={"name": "logs"})), "ok"]
    )
    recorder = Recorder()
    async with open_run(
        generate=model,
        conversation=conversation,
        tools=[drop_table],
        stop_when=stop_when.no_tool_calls(),
        on_elicitation=on_elicitation,
    ) as run:
        run.add_listener("*", recorder)
    result = await run.result()
    check_run_invariants(result, recorder.events)

    (request,) = asked
    assert (request.tool_call_id, request.message) == ("e1", "Drop logs?")
    assert request.schema["properties"] == {"approved": {"type": "boolean"}}
    assert result.steps[0].results[0].value == expected
    (requested,) = recorder.of("elicitation.requested")
    (resolved,) = recorder.of("elicitation.resolved")
    assert requested.request_id == resolved.request_id == request.request_id
    assert (requested.step, requested.tool_call_id, requested.schema) == (1, "e1", request.schema)
    assert resolved.declined is (reply is None)
    types = recorder.types
    assert (
        types.index("tools.executing")
        < types.index("elicitation.requested")
        < types.index("elicitation.resolved")
        < types.index("tools.executed")
    )


async def test_elicitation_without_a_handler_is_an_error_result() -> None:
    """A run with no on_elicitation gives the tool an ElicitationError: an error result."""
    model = ScriptedModel(
        [calls(ToolCall(id="e1", name="drop_table", arguments={"name": "t"})), "ok"]
    )
    agent = create_agent(generate=model, tools=[drop_table])
    result, _ = await run_agent(agent, "Drop t.")
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert "ElicitationError" in (settled.error or "")
    assert result.finish_reason == "stop-condition"


@tool
async def reindex(batches: int, ctx: ToolContext) -> str:
    """Rebuild the index, reporting progress per batch."""
    for done in range(1, batches + 1):
        await ctx.report_progress(done, total=batches, message=f"batch {done}")
    return "reindexed"


async def test_tool_progress_reaches_listeners_and_streams() -> None:
    """report_progress emits tool.progress events to listeners and event streams."""
    model = ScriptedModel(
        [calls(ToolCall(id="p1", name="reindex", arguments={"batches": 3})), "ok"]
    )
    agent = create_agent(generate=model, tools=[reindex])
    heard: list[Any] = []
    streamed: list[Any] = []
    recorder = Recorder()
    async with agent.open_run("Reindex.") as run:
        run.add_listener("*", recorder)
        run.add_listener("tool.progress", heard.append)
        streamed.extend([event async for event in run.events("tool.progress")])
    result = await run.result()
    check_run_invariants(result, recorder.events)
    assert [(e.progress, e.total, e.message) for e in heard] == [
        (1, 3, "batch 1"),
        (2, 3, "batch 2"),
        (3, 3, "batch 3"),
    ]
    assert streamed == heard
    assert {(e.call_id, e.tool_name, e.step, e.run_id) for e in heard} == {
        ("p1", "reindex", 1, run.run_id)
    }
    types = recorder.types
    first, last = types.index("tool.progress"), len(types) - types[::-1].index("tool.progress")
    assert types.index("tools.executing") < first < last <= types.index("tools.executed")


# -- sync tools and timeouts through the loop --------------------------------------------


@tool
def shout(text: str, ctx: ToolContext) -> str:
    """Upper-case the text (a sync tool: it runs in a worker thread)."""
    trio.from_thread.run(ctx.report_progress, 1.0)
    return text.upper()


async def test_a_sync_tool_runs_in_a_thread_through_the_loop() -> None:
    """A plain function tool runs in a worker thread and the model reads its result."""
    model = ScriptedModel([calls(ToolCall(id="s1", name="shout", arguments={"text": "hi"})), "ok"])
    agent = create_agent(generate=model, tools=[shout])
    recorder = Recorder()
    async with agent.open_run("Shout hi.") as run:
        run.add_listener("*", recorder)
    result = await run.result()
    check_run_invariants(result, recorder.events)
    assert result.steps[0].results[0].value == "HI"
    assert tool_message(model.requests[1].conversation, "s1").content == "HI"
    assert len(recorder.of("tool.progress")) == 1


@tool(timeout=5)
async def slow_lookup(key: str) -> str:
    """A lookup that hangs for a minute."""
    await trio.sleep(60)
    return key


async def test_a_tool_timeout_is_an_error_result_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A tool past its timeout settles as an error after 5 virtual seconds; the run goes on."""
    model = ScriptedModel(
        [calls(ToolCall(id="t1", name="slow_lookup", arguments={"key": "k"})), "it timed out"]
    )
    agent = create_agent(generate=model, tools=[slow_lookup])
    start = trio.current_time()
    result, _ = await run_agent(agent, "Look up k.")
    assert trio.current_time() - start == pytest.approx(5)
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert settled.error == "Tool 'slow_lookup' timed out after 5 s and was stopped."
    assert (result.finish_reason, result.content, len(result.steps)) == (
        "stop-condition",
        "it timed out",
        2,
    )
    assert tool_message(model.requests[1].conversation, "t1").outcome == "error"
