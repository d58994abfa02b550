"""AG-UI acceptance: ``@ag-ui/client``'s ``HttpAgent`` (node/agui_client.mjs) against
``POST /api/agui`` served by hypercorn on Trio.

The client is lenient (it drops unknown events and strips unknown fields with only a
warning, and resolves a run that ended in ``RUN_ERROR``), so each test checks that it
warned of nothing, that every event passed ``@ag-ui/core``'s ``EventSchema``, and the
outcome itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from operative import create_agent
from operative.kvstore import MemoryStore
from operative.testing import ScriptedModel
from operative.ui import serve_agent
from operative.ui._agui import agui_endpoint

from .conftest import open_ui_server, run_node
from .test_agui import make_toolbox, script

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


class Server:
    """An app whose only route is ``POST /api/agui``, with the tests' scripted model."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.state = MemoryStore()
        self.cancelled = trio.Event()
        self.model = ScriptedModel(self._generate)

    async def _generate(self, request: Any) -> Any:
        try:
            answer = await script(request)
            if answer.__class__.__name__ == "_Hang":
                await trio.sleep_forever()
            return answer
        except trio.Cancelled:
            self.cancelled.set()
            raise

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        assert scope["path"] == "/api/agui"
        agent = create_agent(
            generate=self.model,
            toolbox=make_toolbox(self.notes, self.state),
            instructions="You are a test agent.",
        )
        await agui_endpoint(scope, receive, send, agent=serve_agent(agent))


async def drive(
    modules: Path, scenario: str, *, cancelled_while_serving: bool = False
) -> tuple[Server, dict[str, Any]]:
    server = Server()
    async with open_ui_server(server) as base:
        output = await run_node(modules, "agui_client.mjs", f"{base}/api/agui", scenario)
        if cancelled_while_serving:  # not by the server's shutdown: by the client leaving
            with trio.fail_after(10):  # a guard; the run is cancelled as the client leaves
                await server.cancelled.wait()
    return server, output


def check_clean(output: dict[str, Any]) -> None:
    """Nothing dropped, stripped or refused by the client; every event valid."""
    assert output["warnings"] == []
    assert output["errors"] == []
    for run in output["runs"]:
        assert run["invalid"] == []
        assert "rejected" not in run, run.get("rejected")
        assert run["events"][0]["type"] == "RUN_STARTED"


def kinds(run: dict[str, Any]) -> list[str]:
    return [event["type"] for event in run["events"]]


async def test_a_tool_using_run(ui_node_modules: Path) -> None:
    _, output = await drive(ui_node_modules, "tool")
    check_clean(output)
    (run,) = output["runs"]
    assert kinds(run)[-1] == "RUN_FINISHED"
    assert run["outcome"] == "success"
    roles = [(m["role"], bool(m.get("toolCalls"))) for m in output["messages"]]
    assert roles == [("user", False), ("assistant", True), ("tool", False), ("assistant", False)]
    assistant, tool_message, answer = output["messages"][1:]
    (call,) = assistant["toolCalls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Lisbon"}
    assert assistant["content"] == "Let me check. "
    assert tool_message["toolCallId"] == call["id"]
    assert tool_message["content"] == "Lisbon: sunny, 21 °C"
    assert answer["content"].strip() == "Done: Lisbon: sunny, 21 °C"


async def test_streamed_thinking_is_a_reasoning_message(ui_node_modules: Path) -> None:
    _, output = await drive(ui_node_modules, "reasoning")
    check_clean(output)
    assert [run["outcome"] for run in output["runs"]] == ["success", "success"]
    reasoning = [m for m in output["messages"] if m["role"] == "reasoning"]
    assert [m["content"] for m in reasoning] == ["The user wants the weather."]
    assert output["messages"][-1]["content"].strip() == "Done: Lisbon: sunny, 21 °C"


async def test_an_approval_interrupt_approved(ui_node_modules: Path) -> None:
    server, output = await drive(ui_node_modules, "approve")
    check_clean(output)
    first, second = output["runs"]
    assert first["outcome"] == "interrupt"
    assert first["pendingInterrupts"] == 1
    (interrupt,) = first["interrupts"]
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["metadata"]["toolName"] == "save_note"
    assert second["outcome"] == "success"
    assert second["pendingInterrupts"] == 0
    assert kinds(second)[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"]
    assert server.notes == ["buy milk"]
    tool_messages = [m for m in output["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["saved 'buy milk'"]
    assert tool_messages[0]["toolCallId"] == interrupt["toolCallId"]
    assert output["messages"][-1]["content"].strip() == "Done: saved 'buy milk'"


async def test_an_approval_interrupt_denied(ui_node_modules: Path) -> None:
    server, output = await drive(ui_node_modules, "deny")
    check_clean(output)
    first, second = output["runs"]
    assert first["outcome"] == "interrupt"
    assert second["outcome"] == "success"
    assert server.notes == []
    (tool_message,) = [m for m in output["messages"] if m["role"] == "tool"]
    assert "denied" in tool_message["content"]


async def test_a_client_tool_round_trip(ui_node_modules: Path) -> None:
    server, output = await drive(ui_node_modules, "frontend")
    check_clean(output)
    first, second = output["runs"]
    assert first["outcome"] == "success"
    (pending,) = first["pendingToolCallIds"]
    assert "TOOL_CALL_RESULT" not in kinds(first)
    offered = [spec.name for spec in server.model.requests[0].tools]
    assert "choose_color" in offered
    assert second["outcome"] == "success"
    assert output["messages"][-1]["content"].strip() == "Done: blue"
    answered = [m for m in output["messages"] if m["role"] == "tool"]
    assert [(m["toolCallId"], m["content"]) for m in answered] == [(pending, "blue")]


async def test_an_error_is_run_error(ui_node_modules: Path) -> None:
    _, output = await drive(ui_node_modules, "error")
    # The client resolves a run that ended in RUN_ERROR: check the event ourselves.
    assert output["warnings"] == []
    (run,) = output["runs"]
    assert run["invalid"] == []
    assert kinds(run)[0] == "RUN_STARTED"
    assert kinds(run)[-1] == "RUN_ERROR"
    assert "RUN_FINISHED" not in kinds(run)
    assert "the model broke" in run["runError"]["message"]
    assert "outcome" not in run


async def test_a_client_disconnect_cancels_the_run(ui_node_modules: Path) -> None:
    server, output = await drive(ui_node_modules, "disconnect", cancelled_while_serving=True)
    assert output["warnings"] == []
    (run,) = output["runs"]
    # What the server sent before the client left, then the client's own abort error.
    assert kinds(run) == ["RUN_STARTED", "STEP_STARTED", "RUN_ERROR"]
    assert run["runError"] == {"message": "This operation was aborted", "code": "abort"}
    assert server.cancelled.is_set()


@pytest.mark.parametrize("scenario", ["tool", "approve"])
async def test_the_app_serves_agui(ui_node_modules: Path, scenario: str) -> None:
    from operative import create_agent
    from operative.ui import asgi_app

    notes: list[str] = []
    agent = create_agent(
        generate=ScriptedModel(script),
        toolbox=make_toolbox(notes),
        instructions="You are a test agent.",
    )
    async with open_ui_server(asgi_app(agent)) as base:
        output = await run_node(ui_node_modules, "agui_client.mjs", f"{base}/api/agui", scenario)
    check_clean(output)
    assert output["runs"][-1]["outcome"] == "success"
    assert output["messages"][-1]["content"].startswith("Done: ")
    assert notes == (["buy milk"] if scenario == "approve" else [])
