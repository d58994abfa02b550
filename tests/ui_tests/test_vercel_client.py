"""The Vercel AI SDK's own chat client (``ai`` 7: ``AbstractChat``, what ``useChat`` wraps,
with ``DefaultChatTransport``) against ``asgi_app`` served by hypercorn on Trio.

The client is lenient: it does not check the ``x-vercel-ai-ui-message-stream`` header and
takes a stream cut short as finished. The Node script hands back each response's header
and raw body, and these tests check them.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import trio

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent
from operative.cli._agents import _note_tool, calculate, get_weather, offline_generate
from operative.kvstore import MemoryStore
from operative.tools import ApprovalPolicy, Toolbox, tool
from operative.ui import asgi_app

from .conftest import open_ui_server, run_node


class World:
    """The served agent: the demo's tools, a tool that never ends, a model that can fail."""

    def __init__(self, notes: Path) -> None:
        self.notes = notes
        self.started = trio.Event()
        self.cancelled = trio.Event()

        @tool(idempotent=True)
        async def wait_forever() -> str:
            """Wait until cancelled."""
            self.started.set()
            try:
                await trio.sleep_forever()
            finally:
                self.cancelled.set()

        toolbox = Toolbox(
            [get_weather, calculate, _note_tool(notes), wait_forever],
            approval_policy=ApprovalPolicy(mode="on-mutation"),
        )
        self.agent = create_agent(
            generate=self.generate, toolbox=toolbox, instructions="Answer briefly."
        )

    async def generate(self, request: GenerateRequest) -> GenerateResponse:
        said = [m for m in request.conversation.messages if m.role == "user"][-1].text
        if "explode" in said:
            raise RuntimeError("the model's server is on fire")
        if "wait" in said:
            return GenerateResponse(
                content="", tool_calls=(ToolCall(id="wait-1", name="wait_forever"),)
            )
        return await offline_generate(request)


def app_of(world: World) -> Any:
    return asgi_app(
        world.agent, approval_secret=secrets.token_bytes(32), approval_state=MemoryStore()
    )


def chunks(body: str) -> list[dict[str, Any]]:
    """The JSON chunks of a raw UI message stream; asserts its framing and its end."""
    assert body.endswith("data: [DONE]\n\n"), body[-200:]
    frames = body.split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""]
    out = []
    for frame in frames[:-2]:
        assert frame.startswith("data: "), frame
        assert "\n" not in frame, frame
        out.append(json.loads(frame[len("data: ") :]))
    return out


def check_response(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["status"] == 200
    assert response["header"] == "v1"
    assert response["contentType"].startswith("text/event-stream")
    return chunks(response["body"])


def tool_parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in result["messages"]
        for part in message["parts"]
        if part["type"].startswith("tool-")
    ]


def text_of(message: dict[str, Any]) -> str:
    return "".join(part["text"] for part in message["parts"] if part["type"] == "text")


async def test_a_tool_using_turn_streams_text_and_tool_parts(
    tmp_path: Path, ui_node_modules: Path
) -> None:
    world = World(tmp_path / "notes.txt")
    async with open_ui_server(app_of(world)) as url:
        result = await run_node(ui_node_modules, "vercel_chat.mjs", url, "say", "weather in Lisbon")
    assert result["status"] == "ready"
    assert result["error"] is None
    sent = check_response(result["responses"][0])
    kinds = [chunk["type"] for chunk in sent]
    assert kinds[0] == "start"
    assert kinds[-1] == "finish"
    assert kinds.count("start-step") == kinds.count("finish-step") == 2
    assert sent[-1]["finishReason"] == "stop"
    usage = sent[-1]["messageMetadata"]["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    user, assistant = result["messages"]
    assert user["role"] == "user"
    assert assistant["role"] == "assistant"
    assert assistant["metadata"]["usage"] == usage
    types = [part["type"] for part in assistant["parts"]]
    assert types == ["step-start", "text", "tool-get_weather", "step-start", "text"]
    (weather,) = tool_parts(result)
    assert weather["state"] == "output-available"
    assert weather["input"] == {"city": "Lisbon"}
    assert weather["output"].startswith("Lisbon: ")
    assert text_of(assistant).endswith(weather["output"].strip("'\"") + ".")


async def test_an_approved_call_runs_and_the_answer_continues_the_same_message(
    tmp_path: Path, ui_node_modules: Path
) -> None:
    world = World(tmp_path / "notes.txt")
    async with open_ui_server(app_of(world)) as url:
        result = await run_node(
            ui_node_modules, "vercel_chat.mjs", url, "approve", "remember to buy milk"
        )
    assert result["status"] == "ready"
    assert result["error"] is None
    first, second = (check_response(response) for response in result["responses"])
    asked = [chunk for chunk in first if chunk["type"] == "tool-approval-request"]
    assert len(asked) == 1
    assert first[-1]["finishReason"] == "tool-calls"
    assert "messageId" not in second[0]  # the answer continues the client's message
    assert second[1] == {
        "type": "tool-output-available",
        "toolCallId": asked[0]["toolCallId"],
        "output": f"saved the note 'buy milk' to {world.notes}",
    }
    assert world.notes.read_text() == "buy milk\n"
    # the client sent its message back with the approval answered
    request = result["responses"][1]["request"]
    assert request["trigger"] == "submit-message"
    (answered,) = [p for p in request["messages"][-1]["parts"] if p["type"] == "tool-save_note"]
    assert answered["state"] == "approval-responded"
    assert answered["approval"]["approved"] is True
    _user, assistant = result["messages"]  # one assistant message, continued
    (note,) = tool_parts(result)
    assert note["state"] == "output-available"
    assert text_of(assistant).endswith(f"saved the note 'buy milk' to {world.notes}.")


async def test_a_denied_call_is_output_denied_and_never_runs(
    tmp_path: Path, ui_node_modules: Path
) -> None:
    world = World(tmp_path / "notes.txt")
    async with open_ui_server(app_of(world)) as url:
        result = await run_node(
            ui_node_modules, "vercel_chat.mjs", url, "deny", "remember to buy milk"
        )
    assert result["status"] == "ready"
    assert result["error"] is None
    second = check_response(result["responses"][1])
    assert second[1]["type"] == "tool-output-denied"
    assert not world.notes.exists()
    _user, assistant = result["messages"]
    (note,) = tool_parts(result)
    assert note["state"] == "output-denied"
    assert "I did not run save_note" in text_of(assistant)
    assert "not today" in text_of(assistant)


async def test_stopping_the_client_cancels_the_run(tmp_path: Path, ui_node_modules: Path) -> None:
    world = World(tmp_path / "notes.txt")
    async with open_ui_server(app_of(world)) as url:
        result = await run_node(ui_node_modules, "vercel_chat.mjs", url, "stop", "wait for it")
        with trio.fail_after(10):
            await world.cancelled.wait()
    assert world.started.is_set()
    (response,) = result["responses"]
    assert response["header"] == "v1"
    assert not response["body"].endswith("data: [DONE]\n\n")  # cut: the client stopped it
    (waiting,) = tool_parts(result)
    assert waiting["state"] == "input-available"


async def test_a_failed_run_is_an_error_part_the_client_reports(
    tmp_path: Path, ui_node_modules: Path
) -> None:
    world = World(tmp_path / "notes.txt")
    async with open_ui_server(app_of(world)) as url:
        result = await run_node(ui_node_modules, "vercel_chat.mjs", url, "say", "explode")
    sent = check_response(result["responses"][0])
    (error,) = [chunk for chunk in sent if chunk["type"] == "error"]
    assert "the model's server is on fire" in error["errorText"]
    assert sent[-1]["type"] == "finish"
    assert sent[-1]["finishReason"] == "error"
    assert result["errors"] == [error["errorText"]]
