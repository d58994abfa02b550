"""The AI SDK side of ``operative.ui``: the request parser, the chunk encoder, and the
``/api/chat`` endpoint's refusals (over HTTP, without the Node client)."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import httpx
import msgspec
import pytest

from operative import GenerateResponse, ToolCall, create_agent, stop_when
from operative._core._events import (
    GenerateDelta,
    GenerateRetry,
    RunAborted,
    StepCompleted,
    StepGenerated,
    StepStarted,
    ToolResultValidated,
)
from operative._core._types import ToolResult
from operative.kvstore import MemoryStore
from operative.testing import ScriptedModel
from operative.tools import ApprovalPolicy, PendingApproval, Toolbox, tool
from operative.ui import (
    VercelEncoder,
    VercelRequestError,
    approval_signature,
    asgi_app,
    parse_vercel_request,
    vercel_ai_stream,
)

from .conftest import open_ui_server


def approval(call_id: str = "c1", approval_id: str = "a1") -> PendingApproval:
    return PendingApproval(
        approval_id=approval_id,
        call_id=call_id,
        tool_name="save_note",
        tool_version="1",
        arguments={"text": "milk"},
        argument_digest="d",
        authority=None,
        audience="x",
        agent_id="x",
        run_id="chat",
        issued_at=0,
        expires_at=1,
        signature="s",
    )


def body(*messages: dict[str, Any], **extra: Any) -> bytes:
    return json.dumps(
        {"id": "chat", "trigger": "submit-message", "messages": list(messages), **extra}
    ).encode()


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


def asked_part(state: str = "approval-requested", **answer: Any) -> dict[str, Any]:
    return {
        "type": "tool-save_note",
        "toolCallId": "c1",
        "state": state,
        "input": {"text": "milk"},
        "approval": {"id": "a1", "signature": approval_signature(approval()), **answer},
    }


# -- the parser -------------------------------------------------------------------------


def test_a_new_message_becomes_instructions_and_the_users_text() -> None:
    parsed = parse_vercel_request(body(user("hello")), instructions="Be brief.")
    assert parsed.id == "chat"
    assert parsed.trigger == "submit-message"
    assert [(m.role, m.text) for m in parsed.history.messages] == [
        ("system", "Be brief."),
        ("user", "hello"),
    ]
    assert parsed.decisions == ()
    assert parsed.continues is None


def test_assistant_steps_become_calls_and_results_in_order() -> None:
    assistant = {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "hmm"},
            {"type": "text", "text": "Looking."},
            {
                "type": "tool-get_weather",
                "toolCallId": "w1",
                "state": "output-available",
                "input": {"city": "Lisbon"},
                "output": "sunny",
            },
            {
                "type": "dynamic-tool",
                "toolName": "calculate",
                "toolCallId": "k1",
                "state": "output-error",
                "input": {"expression": "1/0"},
                "errorText": "division by zero",
            },
            {"type": "step-start"},
            {"type": "text", "text": "It is sunny."},
        ],
    }
    parsed = parse_vercel_request(body(user("weather?"), assistant, user("thanks", "u2")))
    messages = parsed.history.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    first = messages[1]
    assert first.text == "Looking."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("w1", "get_weather", {"city": "Lisbon"}),
        ("k1", "calculate", {"expression": "1/0"}),
    ]
    assert (messages[2].tool_call_id, messages[2].outcome, messages[2].text) == (
        "w1",
        "success",
        "sunny",
    )
    assert (messages[3].tool_call_id, messages[3].outcome) == ("k1", "error")
    assert "division by zero" in messages[3].text
    assert messages[4].text == "It is sunny."


def test_an_answered_approval_in_the_last_message_is_a_decision_continuing_it() -> None:
    assistant = {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "step-start"},
            asked_part("approval-responded", approved=False, reason="no"),
        ],
    }
    parsed = parse_vercel_request(body(user("remember milk"), assistant))
    (decision,) = parsed.decisions
    assert decision.approval == approval()
    assert decision.approved is False
    assert decision.reason == "no"
    assert parsed.continues == "m1"
    placeholder = parsed.history.messages[-1]
    assert (placeholder.role, placeholder.outcome) == ("tool", "action-required")


def test_an_earlier_unanswered_approval_stays_action_required() -> None:
    assistant = {"id": "m1", "role": "assistant", "parts": [asked_part()]}
    parsed = parse_vercel_request(body(user("remember milk"), assistant, user("never mind")))
    assert parsed.decisions == ()
    assert [m.outcome for m in parsed.history.messages if m.role == "tool"] == ["action-required"]


def test_a_call_left_without_result_is_recorded_cancelled() -> None:
    assistant = {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "tool-wait", "toolCallId": "t1", "state": "input-available", "input": {}}
        ],
    }
    parsed = parse_vercel_request(body(user("wait"), assistant, user("and now?")))
    assert [m.outcome for m in parsed.history.messages if m.role == "tool"] == ["cancelled"]


def test_an_image_is_read_as_an_image_part() -> None:
    message = {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "what is this?"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"},
        ],
    }
    (read,) = parse_vercel_request(body(message)).history.messages
    assert [type(part).__name__ for part in read.content] == ["TextPart", "ImagePart"]


BAD_BODIES = [
    (b"{not json", "not JSON"),
    (b"[]", "must be a JSON object"),
    (json.dumps({"messages": [user("hi")]}).encode(), "string 'id'"),
    (body(), "non-empty list"),
    (body(user("hi"), trigger="resume-stream"), "not served"),
    (body({"id": "s", "role": "system", "parts": []}, user("hi")), "server holds"),
    (body({"id": "x", "role": "robot", "parts": []}), "role 'robot'"),
    (body({"id": "x", "role": "user", "parts": "hi"}), "needs 'parts'"),
    (body(user("   ")), "is empty"),
    (
        body({"id": "u", "role": "user", "parts": [{"type": "tool-x"}]}),
        "cannot hold",
    ),
    (
        body(
            {
                "id": "u",
                "role": "user",
                "parts": [{"type": "file", "mediaType": "application/pdf", "url": "x"}],
            }
        ),
        "only images",
    ),
    (
        body(
            user("hi"), {"id": "m", "role": "assistant", "parts": [{"type": "text", "text": "a"}]}
        ),
        "answers no approval",
    ),
    (
        body(
            user("hi"),
            {
                "id": "m",
                "role": "assistant",
                "parts": [{"type": "tool-x", "toolCallId": "c", "state": "weird"}],
            },
        ),
        "unknown tool state",
    ),
    (
        body(
            user("hi"),
            {
                "id": "m",
                "role": "assistant",
                "parts": [
                    {"type": "tool-x", "toolCallId": "c", "state": "input-available", "input": 3}
                ],
            },
        ),
        "must be an object",
    ),
]


@pytest.mark.parametrize(("raw", "says"), BAD_BODIES)
def test_a_bad_body_is_a_typed_error_saying_what_to_fix(raw: bytes, says: str) -> None:
    with pytest.raises(VercelRequestError, match=says):
        parse_vercel_request(raw)


def test_an_approval_without_its_signature_or_for_another_call_is_refused() -> None:
    def responded(approval_field: dict[str, Any]) -> bytes:
        part = asked_part("approval-responded", approved=True)
        part["approval"] = {**part["approval"], **approval_field}
        return body(user("hi"), {"id": "m", "role": "assistant", "parts": [part]})

    with pytest.raises(VercelRequestError, match="no signature"):
        parse_vercel_request(responded({"signature": ""}))
    with pytest.raises(VercelRequestError, match="does not decode"):
        parse_vercel_request(responded({"signature": "not-base64-json!"}))
    other = approval_signature(approval(call_id="c2"))
    with pytest.raises(VercelRequestError, match="another call"):
        parse_vercel_request(responded({"signature": other}))
    with pytest.raises(VercelRequestError, match="another call"):
        parse_vercel_request(responded({"id": "a-other"}))


# -- the encoder ------------------------------------------------------------------------


def test_deltas_become_text_reasoning_and_tool_input_parts() -> None:
    encoder = VercelEncoder()
    call = ToolCall(id="c1", name="calc", arguments='{"x": 1}')
    events = [
        StepStarted(run_id="r", step=1),
        GenerateDelta(run_id="r", step=1, kind="thinking", text="hm"),
        GenerateDelta(run_id="r", step=1, kind="text", text="Hi"),
        GenerateDelta(
            run_id="r", step=1, kind="tool_arguments", text='{"x"', call_id="c1", tool_name="calc"
        ),
        GenerateDelta(run_id="r", step=1, kind="tool_arguments", text=": 1}", call_id="c1"),
        StepGenerated(run_id="r", step=1, content="Hi", tool_calls=(call,)),
        ToolResultValidated(
            run_id="r",
            step=1,
            result=ToolResult(call_id="c1", tool_name="calc", outcome="success", value=1),
        ),
        StepCompleted(run_id="r", step=1),
    ]
    chunks = [chunk for event in events for chunk in encoder.chunks(event)]
    assert chunks == [
        {"type": "start-step"},
        {"type": "reasoning-start", "id": "reasoning-0"},
        {"type": "reasoning-delta", "id": "reasoning-0", "delta": "hm"},
        {"type": "reasoning-end", "id": "reasoning-0"},
        {"type": "text-start", "id": "text-1"},
        {"type": "text-delta", "id": "text-1", "delta": "Hi"},
        {"type": "text-end", "id": "text-1"},
        {"type": "tool-input-start", "toolCallId": "c1", "toolName": "calc"},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"x"'},
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": ": 1}"},
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "calc", "input": {"x": 1}},
        {"type": "tool-output-available", "toolCallId": "c1", "output": 1},
        {"type": "finish-step"},
    ]


def test_a_retried_attempt_resets_the_step_and_results_map_to_their_parts() -> None:
    encoder = VercelEncoder()
    chunks = [
        chunk
        for event in [
            StepStarted(run_id="r", step=1),
            GenerateDelta(run_id="r", step=1, text="Hal"),
            GenerateRetry(run_id="r", step=1),
            ToolResultValidated(
                run_id="r",
                step=1,
                result=ToolResult(call_id="a", tool_name="t", outcome="denied", error="no"),
            ),
            ToolResultValidated(
                run_id="r",
                step=1,
                result=ToolResult(call_id="b", tool_name="t", outcome="cancelled", error="gone"),
            ),
            RunAborted(run_id="r", step=1, reason="stopped"),
        ]
        for chunk in encoder.chunks(event)
    ]
    assert chunks[3:] == [
        {"type": "text-end", "id": "text-0"},
        {"type": "reset-step"},
        {"type": "tool-output-denied", "toolCallId": "a"},
        {"type": "tool-output-error", "toolCallId": "b", "errorText": "gone"},
        {"type": "abort", "reason": "stopped"},
    ]
    assert encoder.finish()["finishReason"] == "interrupted"


async def test_vercel_ai_stream_frames_a_whole_run() -> None:
    @tool(mutates=True, version="1")
    async def save(text: str) -> str:
        """Save."""
        return text

    model = ScriptedModel(
        [
            GenerateResponse(
                content="Saving.",
                tool_calls=(ToolCall(id="s1", name="save", arguments={"text": "x"}),),
            )
        ]
    )
    agent = create_agent(
        generate=model,
        toolbox=Toolbox([save], approval_policy=ApprovalPolicy(mode="on-mutation")),
        stop_when=stop_when.pending_approval(),
    )
    async with agent.open_run("save x") as run:
        raw = b"".join([chunk async for chunk in vercel_ai_stream(run, message_id="m1")])
    frames = raw.split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    chunks = [msgspec.json.decode(frame[6:]) for frame in frames[:-2]]
    types = [chunk["type"] for chunk in chunks]
    assert types == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    assert chunks[0] == {"type": "start", "messageId": "m1"}
    request = chunks[7]
    decoded = msgspec.json.decode(
        base64.urlsafe_b64decode(request["signature"] + "=="), type=PendingApproval
    )
    assert decoded.call_id == request["toolCallId"] == "s1"
    assert decoded.approval_id == request["approvalId"]
    assert chunks[-1]["finishReason"] == "tool-calls"


# -- the endpoint's refusals --------------------------------------------------------------


def served() -> Any:
    @tool(mutates=True, version="1")
    async def save(text: str) -> str:
        """Save."""
        return text

    def generate(request: Any) -> GenerateResponse:
        return GenerateResponse(
            content="", tool_calls=(ToolCall(id="s1", name="save", arguments={"text": "x"}),)
        )

    agent = create_agent(
        generate=ScriptedModel(generate),
        toolbox=Toolbox([save], approval_policy=ApprovalPolicy(mode="on-mutation")),
    )
    return asgi_app(agent, approval_secret=secrets.token_bytes(32), approval_state=MemoryStore())


async def test_the_endpoint_refuses_bad_requests_before_streaming() -> None:
    async with open_ui_server(served()) as url, httpx.AsyncClient() as client:
        got = await client.get(f"{url}/api/chat")
        assert got.status_code == 405
        got = await client.post(
            f"{url}/api/chat", content=b"hi", headers={"content-type": "text/plain"}
        )
        assert got.status_code == 415
        got = await client.post(f"{url}/api/chat", json={"id": "c", "messages": []})
        assert got.status_code == 400
        assert "non-empty list" in got.json()["error"]


async def test_a_forged_approval_is_an_error_part_and_nothing_runs() -> None:
    async with open_ui_server(served()) as url, httpx.AsyncClient() as client:
        first = await client.post(
            f"{url}/api/chat",
            json={"id": "c", "trigger": "submit-message", "messages": [user("go")]},
        )
        frames = [json.loads(f[6:]) for f in first.text.split("\n\n") if f.startswith("data: {")]
        (asked,) = [f for f in frames if f["type"] == "tool-approval-request"]
        forged = msgspec.json.decode(
            base64.urlsafe_b64decode(asked["signature"] + "=="), type=PendingApproval
        )
        forged = msgspec.structs.replace(forged, arguments={"text": "something else"})
        part = {
            "type": "tool-save",
            "toolCallId": "s1",
            "state": "approval-responded",
            "input": {"text": "x"},
            "approval": {
                "id": asked["approvalId"],
                "approved": True,
                "signature": approval_signature(forged),
            },
        }
        second = await client.post(
            f"{url}/api/chat",
            json={
                "id": "c",
                "trigger": "submit-message",
                "messages": [user("go"), {"id": "m", "role": "assistant", "parts": [part]}],
            },
        )
    assert second.headers["x-vercel-ai-ui-message-stream"] == "v1"
    chunks = [json.loads(f[6:]) for f in second.text.split("\n\n") if f.startswith("data: {")]
    assert [c["type"] for c in chunks] == ["start", "error", "finish"]
    assert "refused" in chunks[1]["errorText"]
    assert chunks[2]["finishReason"] == "error"
    assert second.text.endswith("data: [DONE]\n\n")
