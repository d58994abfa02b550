"""AG-UI: the ``RunAgentInput`` parser, the event encoder and the ASGI handler, in process.

The event shapes checked here are ``@ag-ui/core`` 1.0.0's (``RunAgentInputSchema``,
``EventSchema``); ``test_agui_client.py`` drives the handler with the vendor's own
``HttpAgent``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from operative import GenerateResponse, ToolCall, Usage, create_agent
from operative._core._deltas import current_delta_sink
from operative.kvstore import MemoryStore
from operative.providers import Delta
from operative.testing import HANG, ScriptedModel
from operative.tools import ApprovalPolicy, Authority, RequestContext, Toolbox, tool
from operative.ui import serve_agent
from operative.ui._agui import (
    AguiEncoder,
    AguiInputError,
    agui_endpoint,
    agui_stream,
    approval_from_interrupt_id,
    interrupt_id,
    parse_agui_input,
)

SECRET = b"s" * 32


# -- the agent the tests run -----------------------------------------------------------


@tool
async def get_weather(city: str) -> str:
    """Today's weather in a city."""
    await trio.lowlevel.checkpoint()
    return f"{city}: sunny, 21 °C"


def make_toolbox(notes: list[str], state: Any = None) -> Toolbox:
    @tool(mutates=True, version="1")
    async def save_note(text: str) -> str:
        """Save a note (asks the user first)."""
        await trio.lowlevel.checkpoint()
        notes.append(text)
        return f"saved {text!r}"

    return Toolbox(
        [get_weather, save_note],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=SECRET,
        approval_state=state if state is not None else MemoryStore(),
    )


def request_context(thread_id: str) -> RequestContext:
    return RequestContext(
        authority=Authority(
            principal_id="user",
            tenant_id="local",
            owner_id=thread_id,
            capabilities=(),
            authorization_revision="1",
        ),
        audience="agui-tests",
        agent_id="agui-tests",
        run_id=thread_id,
        deadline=time.time() + 300,
    )


async def script(request: Any) -> GenerateResponse | Any:
    """A model that streams: text word by word, tool arguments in two slices."""
    messages = request.conversation.messages
    last_user = max(i for i, m in enumerate(messages) if m.role == "user")
    turn = messages[last_user:]
    said = turn[0].text
    results = [m for m in turn if m.role == "tool"]
    sink = current_delta_sink()
    if results:
        text = "Done: " + "; ".join(m.text for m in results)
        for word in text.split(" "):
            if sink is not None:
                sink(Delta(kind="text", text=word + " "))
            await trio.lowlevel.checkpoint()
        return GenerateResponse(content=text, usage=Usage(prompt=10, completion=5, total=15))
    if "fail" in said:
        raise RuntimeError("the model broke")
    if "hang" in said:
        return HANG
    arguments: dict[str, Any] = {"city": "Lisbon"}
    name = "get_weather"
    if "note" in said:
        name, arguments = "save_note", {"text": "buy milk"}
    elif "color" in said:
        name, arguments = "choose_color", {"options": ["red", "blue"]}
    elif "weather" not in said:
        return GenerateResponse(content=f"You said {said}", usage=Usage(prompt=3, total=3))
    call_id = f"call-{len(messages)}"
    raw = json.dumps(arguments)
    if sink is not None and "think" in said:
        for part in ("The user wants ", "the weather."):
            sink(Delta(kind="thinking", text=part))
    if sink is not None:
        sink(Delta(kind="text", text="Let me check. "))
        for part in (raw[:5], raw[5:]):
            sink(Delta(kind="tool_arguments", text=part, call_id=call_id, tool_name=name))
    return GenerateResponse(
        content="Let me check. ",
        tool_calls=(ToolCall(id=call_id, name=name, arguments=arguments),),
        usage=Usage(prompt=7, completion=3, total=10),
    )


# -- driving the ASGI handler ------------------------------------------------------------


def body(messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "threadId": "thread-1",
        "runId": "run-1",
        "messages": messages,
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **more,
    }


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


class Response:
    def __init__(self) -> None:
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.chunks: list[bytes] = []
        self.ended = False

    @property
    def raw(self) -> bytes:
        return b"".join(self.chunks)

    def events(self) -> list[dict[str, Any]]:
        """The SSE frames, split the way the client splits them (on a blank line)."""
        frames = self.raw.decode().split("\n\n")
        assert frames[-1] == "", "the stream must end with a complete frame"
        out = []
        for frame in frames[:-1]:
            lines = frame.split("\n")
            assert all(line.startswith("data: ") for line in lines), frame
            out.append(json.loads("\n".join(line[6:] for line in lines)))
        return out


async def call(
    payload: Any,
    *,
    toolbox: Toolbox,
    generate: Any = None,
    method: str = "POST",
    content_type: bytes = b"application/json",
    disconnect: trio.Event | None = None,
    stop_when: Any = (),
    options: Any = None,
) -> Response:
    response = Response()
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    sent = False
    gone = disconnect if disconnect is not None else trio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": data, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            response.status = message["status"]
            response.headers = dict(message["headers"])
        elif message.get("more_body", False):
            response.chunks.append(message["body"])
        else:
            response.chunks.append(message.get("body", b""))
            response.ended = True

    scope = {
        "type": "http",
        "method": method,
        "path": "/api/agui",
        "headers": [(b"content-type", content_type)],
    }
    agent = create_agent(
        generate=generate or ScriptedModel(script),
        toolbox=toolbox,
        instructions="You are a test agent.",
        stop_when=list(stop_when) or None,
        name="agui-tests",
        **(options or {}),
    )
    await agui_endpoint(scope, receive, send, agent=serve_agent(agent, principal="user"))
    return response


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# -- the parser ------------------------------------------------------------------------


def test_parse_reads_the_thread_into_operative_messages() -> None:
    parsed = parse_agui_input(
        json.dumps(
            body(
                [
                    {"id": "s", "role": "system", "content": "Be brief."},
                    {"id": "d", "role": "developer", "content": "Prefer metric."},
                    {"id": "u", "role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {
                        "id": "a",
                        "role": "assistant",
                        "content": "checking",
                        "toolCalls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city":"X"}'},
                            }
                        ],
                    },
                    {"id": "t", "role": "tool", "toolCallId": "c1", "content": "sunny"},
                    {"id": "r", "role": "reasoning", "content": "hmm"},
                    {"id": "x", "role": "activity", "activityType": "plan", "content": {}},
                ],
                context=[{"description": "user timezone", "value": "UTC"}],
                state={"count": 2},
                tools=[{"name": "choose", "description": "Pick one", "parameters": {}}],
                forwardedProps={"k": 1},
            )
        ).encode()
    )
    roles = [(m.id, m.role) for m in parsed.messages]
    assert roles == [
        ("s", "system"),
        ("d", "system"),
        ("u", "user"),
        ("a", "assistant"),
        ("t", "tool"),
    ]
    assistant = parsed.messages[3]
    assert assistant.tool_calls == (ToolCall(id="c1", name="get_weather", arguments={"city": "X"}),)
    tool_message = parsed.messages[4]
    assert (tool_message.tool_name, tool_message.outcome, tool_message.text) == (
        "get_weather",
        "success",
        "sunny",
    )
    assert [t.name for t in parsed.tools] == ["choose"]
    assert parsed.forwarded_props == {"k": 1}
    history = parsed.history("Instructions.")
    system = [m.text for m in history.messages if m.role == "system"]
    assert system[0] == "Instructions."
    assert "user timezone: UTC" in system[1]
    assert '{"count": 2}' in system[1]


def test_parse_reads_a_resume_entry_as_a_decision() -> None:
    approval = _approval(call_id="c1")
    messages = [
        user("save it"),
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "save_note", "arguments": "{}"},
                }
            ],
        },
    ]
    resolved = parse_agui_input(
        json.dumps(
            body(
                messages,
                resume=[
                    {
                        "interruptId": interrupt_id(approval),
                        "status": "resolved",
                        "payload": {"approved": False, "reason": "not now"},
                    }
                ],
            )
        ).encode()
    )
    assert resolved.decisions[0].approval == approval
    assert (resolved.decisions[0].approved, resolved.decisions[0].reason) == (False, "not now")
    cancelled = parse_agui_input(
        json.dumps(
            body(messages, resume=[{"interruptId": interrupt_id(approval), "status": "cancelled"}])
        ).encode()
    )
    assert cancelled.decisions[0].approved is False


def _approval(call_id: str) -> Any:
    from operative.tools import PendingApproval

    return PendingApproval(
        approval_id="ap",
        call_id=call_id,
        tool_name="save_note",
        tool_version="1",
        arguments={"text": "x"},
        argument_digest="d",
        authority=None,
        audience="a",
        agent_id="g",
        run_id="r",
        issued_at=1,
        expires_at=2,
        signature="sig",
    )


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"not json", "not a valid AG-UI RunAgentInput"),
        (b'{"threadId": "t", "runId": "r"}', "messages"),
        (json.dumps(body([{"id": "1", "role": "robot", "content": "x"}])).encode(), "robot"),
        (
            json.dumps(
                body([{"id": "t", "role": "tool", "toolCallId": "nope", "content": "x"}])
            ).encode(),
            "no earlier assistant message",
        ),
        (
            json.dumps(
                body(
                    [user("x")],
                    tools=[{"name": "a", "description": "d"}, {"name": "a", "description": "d"}],
                )
            ).encode(),
            "repeated: a",
        ),
        (
            json.dumps(
                body(
                    [
                        {
                            "id": "a",
                            "role": "assistant",
                            "toolCalls": [
                                {
                                    "id": "c",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{oops"},
                                }
                            ],
                        }
                    ]
                )
            ).encode(),
            "not JSON",
        ),
        (
            json.dumps(
                body(
                    [
                        {
                            "id": "u",
                            "role": "user",
                            "content": [
                                {"type": "audio", "source": {"type": "url", "value": "http://x"}}
                            ],
                        }
                    ]
                )
            ).encode(),
            "not 'audio'",
        ),
        (
            json.dumps(
                body([user("x")], resume=[{"interruptId": "garbage!", "status": "resolved"}])
            ).encode(),
            "not an interrupt this server sent",
        ),
        (
            json.dumps(
                body(
                    [user("x")],
                    resume=[
                        {
                            "interruptId": interrupt_id(_approval("c9")),
                            "status": "resolved",
                            "payload": {"approved": True},
                        }
                    ],
                )
            ).encode(),
            "does not match a call waiting",
        ),
    ],
)
def test_parse_refuses_bad_bodies_with_a_typed_error(payload: bytes, message: str) -> None:
    with pytest.raises(AguiInputError, match=message):
        parse_agui_input(payload)


def test_a_resolved_interrupt_needs_an_approved_flag() -> None:
    messages = [
        user("x"),
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "save_note", "arguments": "{}"},
                }
            ],
        },
    ]
    with pytest.raises(AguiInputError, match='"approved": true'):
        parse_agui_input(
            json.dumps(
                body(
                    messages,
                    resume=[{"interruptId": interrupt_id(_approval("c1")), "status": "resolved"}],
                )
            ).encode()
        )


def test_interrupt_ids_round_trip_the_signed_approval() -> None:
    approval = _approval("c1")
    assert approval_from_interrupt_id(interrupt_id(approval)) == approval


# -- the encoder -------------------------------------------------------------------------


def test_encoder_frames_each_event_as_one_data_line_and_a_blank_line() -> None:
    encoder = AguiEncoder("t", "r")
    frame = encoder.run_started()
    assert frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 2
    assert json.loads(frame[len(b"data: ") :]) == {
        "type": "RUN_STARTED",
        "threadId": "t",
        "runId": "r",
    }
    assert b"[DONE]" not in frame
    error = json.loads(encoder.run_error("boom", "X")[6:])
    assert error == {"type": "RUN_ERROR", "message": "boom", "code": "X"}
    assert encoder.finished


# -- the handler, end to end -------------------------------------------------------------


async def test_a_tool_using_run_streams_text_calls_results_and_steps() -> None:
    response = await call(body([user("weather please")]), toolbox=make_toolbox([]))
    assert response.status == 200
    assert response.ended
    assert response.headers[b"content-type"] == b"text/event-stream"
    events = response.events()
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_ARGS",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * 5,  # a word each
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    start = events[4]
    assert start["toolCallName"] == "get_weather"
    assert start["parentMessageId"] == events[2]["messageId"]
    arguments = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(arguments) == {"city": "Lisbon"}
    result = events[9]
    assert result["toolCallId"] == start["toolCallId"]
    assert result["content"] == "Lisbon: sunny, 21 °C"
    assert result["role"] == "tool"
    finished = events[-1]
    assert finished["outcome"] == {"type": "success"}
    assert finished["usage"] == [{"inputTokens": 17, "outputTokens": 8, "totalTokens": 25}]
    assert finished["threadId"] == "thread-1"
    assert finished["runId"] == "run-1"


async def test_an_approval_is_an_interrupt_resumed_by_the_next_run() -> None:
    notes: list[str] = []
    state = MemoryStore()
    first = (await call(body([user("save a note")]), toolbox=make_toolbox(notes, state))).events()
    assert "TOOL_CALL_RESULT" not in types(first)
    outcome = first[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    call_id = next(e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START")
    assert interrupt["toolCallId"] == call_id
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"] == {"toolName": "save_note", "arguments": {"text": "buy milk"}}
    assert notes == []

    thread = [
        user("save a note"),
        {
            "id": "a1",
            "role": "assistant",
            "content": "Let me check. ",
            "toolCalls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "save_note", "arguments": '{"text": "buy milk"}'},
                }
            ],
        },
    ]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    second = (
        await call(body(thread, runId="run-2", resume=resume), toolbox=make_toolbox(notes, state))
    ).events()
    assert types(second)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert second[1]["toolCallId"] == call_id
    assert second[1]["content"] == "saved 'buy milk'"
    assert second[-1]["outcome"] == {"type": "success"}
    assert notes == ["buy milk"]

    # The same approval cannot be used twice: the run fails with the approval's reason.
    again = (
        await call(body(thread, runId="run-3", resume=resume), toolbox=make_toolbox(notes, state))
    ).events()
    assert types(again) == ["RUN_STARTED", "RUN_ERROR"]
    assert again[-1]["code"].startswith("approval-")
    assert notes == ["buy milk"]


async def test_a_denied_interrupt_tells_the_model_and_runs_nothing() -> None:
    notes: list[str] = []
    state = MemoryStore()
    first = (await call(body([user("save a note")]), toolbox=make_toolbox(notes, state))).events()
    (interrupt,) = first[-1]["outcome"]["interrupts"]
    thread = [
        user("save a note"),
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": interrupt["toolCallId"],
                    "type": "function",
                    "function": {"name": "save_note", "arguments": '{"text": "buy milk"}'},
                }
            ],
        },
    ]
    second = (
        await call(
            body(thread, resume=[{"interruptId": interrupt["id"], "status": "cancelled"}]),
            toolbox=make_toolbox(notes, state),
        )
    ).events()
    assert second[1]["type"] == "TOOL_CALL_RESULT"
    assert "denied" in second[1]["content"]
    assert second[-1]["type"] == "RUN_FINISHED"
    assert notes == []
    final = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert "denied" in final


async def test_a_client_tool_call_ends_the_run_pending_and_its_answer_continues_it() -> None:
    tools = [
        {
            "name": "choose_color",
            "description": "Ask the user to pick a color",
            "parameters": {
                "type": "object",
                "properties": {"options": {"type": "array", "items": {"type": "string"}}},
            },
        }
    ]
    model = ScriptedModel(script)
    first = (
        await call(
            body([user("pick a color")], tools=tools), toolbox=make_toolbox([]), generate=model
        )
    ).events()
    assert [spec.name for spec in model.requests[0].tools] == [
        "get_weather",
        "save_note",
        "choose_color",
    ]
    call_id = next(e["toolCallId"] for e in first if e["type"] == "TOOL_CALL_START")
    assert "TOOL_CALL_RESULT" not in types(first)
    assert first[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [call_id]}

    thread = [
        user("pick a color"),
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "choose_color", "arguments": '{"options":["red"]}'},
                }
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": call_id, "content": "blue"},
    ]
    second = (await call(body(thread, tools=tools), toolbox=make_toolbox([]))).events()
    text = "".join(e["delta"] for e in second if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.strip() == "Done: blue"
    assert second[-1]["outcome"] == {"type": "success"}


async def test_a_failing_model_ends_the_run_with_run_error() -> None:
    events = (await call(body([user("fail now")]), toolbox=make_toolbox([]))).events()
    assert types(events)[0] == "RUN_STARTED"
    assert types(events)[-1] == "RUN_ERROR"
    assert "the model broke" in events[-1]["message"]
    assert "RUN_FINISHED" not in types(events)


@pytest.mark.parametrize(
    ("method", "content_type", "payload", "status"),
    [
        ("GET", b"application/json", b"{}", 405),
        ("POST", b"text/plain", b"{}", 415),
        ("POST", b"application/json", b"{}", 400),
    ],
)
async def test_bad_requests_are_answered_with_json_errors(
    method: str, content_type: bytes, payload: bytes, status: int
) -> None:
    response = await call(
        payload, toolbox=make_toolbox([]), method=method, content_type=content_type
    )
    assert response.status == status
    assert "error" in json.loads(response.raw)


async def test_a_client_tool_named_like_a_server_tool_is_refused() -> None:
    tools = [{"name": "get_weather", "description": "shadow"}]
    response = await call(body([user("x")], tools=tools), toolbox=make_toolbox([]))
    assert response.status == 400
    assert b"server tool" in response.raw


async def test_a_client_disconnect_cancels_the_run(autojump_clock: Any) -> None:
    gone = trio.Event()
    model = ScriptedModel(script)
    with trio.move_on_after(60) as timeout:
        async with trio.open_nursery() as nursery:
            responses: list[Response] = []

            async def run() -> None:
                responses.append(
                    await call(
                        body([user("hang")]),
                        toolbox=make_toolbox([]),
                        generate=model,
                        disconnect=gone,
                    )
                )

            nursery.start_soon(run)
            await trio.sleep(5)
            assert len(model.requests) == 1  # the model is hanging mid-run
            gone.set()
    assert not timeout.cancelled_caught, "the run outlived its client"
    (response,) = responses
    assert not response.ended  # nothing more is sent to a client that left
    assert types(response.events())[:2] == ["RUN_STARTED", "STEP_STARTED"]


def test_the_module_never_imports_asyncio() -> None:
    source = (Path(__file__).parents[2] / "operative" / "ui" / "_agui.py").read_text()
    assert "asyncio" not in source
    assert msgspec  # used above


async def test_the_agents_own_stop_conditions_apply() -> None:
    from operative import stop_when

    response = await call(
        body([user("weather please")]),
        toolbox=make_toolbox([]),
        stop_when=[stop_when.tool_called("get_weather")],
    )
    events = response.events()
    assert types(events).count("STEP_STARTED") == 1
    assert events[-1]["outcome"] == {"type": "success"}


async def test_agui_stream_reads_an_active_run() -> None:
    from operative import create_agent

    agent = create_agent(
        generate=ScriptedModel(script),
        toolbox=make_toolbox([]),
        request_context=request_context("t"),
    )
    async with agent.open_run("weather please") as run:
        chunks = [chunk async for chunk in agui_stream(run, thread_id="t", run_id="r")]
    events = [json.loads(chunk[len(b"data: ") :]) for chunk in chunks]
    assert all(chunk.endswith(b"\n\n") and chunk.count(b"\n") == 2 for chunk in chunks)
    assert events[0] == {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
    assert "TOOL_CALL_RESULT" in types(events)
    assert events[-1]["type"] == "RUN_FINISHED"
    async with agent.open_run("hello") as run:
        later = [c async for c in agui_stream(run, thread_id="t", run_id="r2", started=True)]
    assert json.loads(later[0][6:])["type"] == "STEP_STARTED"


async def test_streamed_thinking_is_a_reasoning_message() -> None:
    events = (
        await call(body([user("think about the weather")]), toolbox=make_toolbox([]))
    ).events()
    assert types(events)[:8] == [
        "RUN_STARTED",
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    ]
    ids = {e["messageId"] for e in events[2:8]}
    assert len(ids) == 1
    assert events[3]["role"] == "reasoning"
    assert "".join(e["delta"] for e in events[4:6]) == "The user wants the weather."
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_a_retried_attempt_streams_into_a_new_message(autojump_clock: Any) -> None:
    from operative import ProviderError
    from operative.retry import RetryOptions

    attempts: list[int] = []

    async def flaky(request: Any) -> GenerateResponse:
        attempts.append(1)
        sink = current_delta_sink()
        assert sink is not None
        if len(attempts) == 1:
            sink(Delta(kind="text", text="Partial "))
            sink(Delta(kind="tool_arguments", text='{"ci', call_id="c1", tool_name="get_weather"))
            raise ProviderError("overloaded", retryable=True)
        sink(Delta(kind="text", text="Whole answer."))
        return GenerateResponse(content="Whole answer.")

    response = await call(
        body([user("hello")]),
        toolbox=make_toolbox([]),
        generate=ScriptedModel(flaky),
        options={"retry": RetryOptions(jitter=False)},
    )
    events = response.events()
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert events[2]["messageId"] != events[9]["messageId"]
    assert "did not run" in events[8]["content"]
    assert events[10]["delta"] == "Whole answer."
