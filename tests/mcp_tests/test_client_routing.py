"""What a server asks and tells during a call reaches the run that made it: elicitation,
sampling, progress, log messages; and the rule when the transport does not say who."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterator
from typing import Any

import mcp_types as types
import pytest
import trio

from operative import Conversation, GenerateResponse, ImagePart, TextPart, Usage, open_run
from operative.mcp import MCPServer
from operative.mcp._sampling import generate_request
from operative.testing import ScriptedModel
from operative.tools import ElicitationRequest, ElicitationResponse

from .conftest import HttpServer, run_calls, script

LONG = ("trigger-long-running-operation", {"duration": 2.0, "steps": 4})


class Person:
    """An on_elicitation handler that answers with ``data`` (``None``: declines)."""

    def __init__(self, data: dict[str, Any] | None = None, *, accept: bool = True) -> None:
        self.data = data
        self.accept = accept
        self.requests: list[ElicitationRequest] = []

    async def __call__(self, request: ElicitationRequest) -> ElicitationResponse | None:
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        if not self.accept:
            return None
        return ElicitationResponse(
            request_id=request.request_id, tool_call_id=request.tool_call_id, data=self.data
        )


def _text(result: Any) -> str:
    value = result.value
    return value if isinstance(value, str) else str(value)


async def test_a_form_elicitation_reaches_the_run_with_the_schema_defaults_applied(
    everything_stdio: tuple[str, list[str]],
) -> None:
    person = Person({"name": "Ada", "check": True})
    async with MCPServer.stdio(*everything_stdio) as server:
        result, events = await run_calls(
            [server], ("trigger-elicitation-request", {}), on_elicitation=person
        )
    (request,) = person.requests
    assert request.tool_call_id == "s1c0"
    assert request.url is None
    assert request.schema["required"] == ["name"]
    text = _text(result.steps[0].results[0])
    assert "- Name: Ada" in text
    assert "- Favorite Integer: 42" in text  # the schema's default, not the person's
    assert "- Favorite Number: 3.14" in text
    kinds = [e.type for e in events if e.type.startswith("elicitation.")]
    assert kinds == ["elicitation.requested", "elicitation.resolved"]
    requested = next(e for e in events if e.type == "elicitation.requested")
    assert requested.tool_call_id == "s1c0"  # type: ignore[attr-defined]


async def test_a_run_without_a_handler_declines(everything_stdio: tuple[str, list[str]]) -> None:
    async with MCPServer.stdio(*everything_stdio) as server:
        result, _ = await run_calls([server], ("trigger-elicitation-request", {}))
    assert "User declined" in _text(result.steps[0].results[0])


async def test_an_answer_that_breaks_the_schema_is_not_sent(
    everything_stdio: tuple[str, list[str]],
) -> None:
    person = Person({"check": "yes"})  # no name, and a string for a boolean
    async with MCPServer.stdio(*everything_stdio) as server:
        result, _ = await run_calls(
            [server], ("trigger-elicitation-request", {}), on_elicitation=person
        )
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert "does not match the requested schema" in (settled.error or "")


async def test_a_url_elicitation_reaches_the_handler_with_its_url(
    everything_stdio: tuple[str, list[str]],
) -> None:
    person = Person()
    url = "https://example.com/authorize?state=1"
    async with MCPServer.stdio(*everything_stdio) as server:
        result, _ = await run_calls(
            [server], ("trigger-url-elicitation", {"url": url}), on_elicitation=person
        )
    (request,) = person.requests
    assert request.url == url
    assert request.schema == {}
    assert request.tool_call_id == "s1c0"
    assert f"URL: {url}" in _text(result.steps[0].results[0])


async def test_a_url_the_server_requires_first_is_put_to_the_person_then_the_call_retried(
    everything_stdio: tuple[str, list[str]],
) -> None:
    person = Person()
    url = "https://example.com/pay"
    arguments = {"url": url, "errorPath": True, "elicitationId": "e-1"}
    async with MCPServer.stdio(*everything_stdio) as server:
        result, _ = await run_calls(
            [server], ("trigger-url-elicitation", arguments), on_elicitation=person
        )
        refused, _ = await run_calls(
            [server],
            ("trigger-url-elicitation", {**arguments, "elicitationId": "e-2"}),
            on_elicitation=Person(accept=False),
        )
    assert [r.url for r in person.requests] == ["https://modelcontextprotocol.io", url]
    assert "User completed the URL elicitation flow" in _text(result.steps[0].results[0])
    (settled,) = refused.steps[0].results
    assert settled.outcome == "error"
    assert "MCPToolError" in (settled.error or "")
    assert "https://modelcontextprotocol.io" in (settled.error or "")


async def test_sampling_asks_the_generate_function_and_charges_the_run(
    everything_stdio: tuple[str, list[str]],
) -> None:
    model = ScriptedModel(
        [
            GenerateResponse(
                content="Forty-two.",
                model="tiny-1",
                usage=Usage.of(7, 3),
                stop_reason="end_turn",
            )
        ]
    )
    async with MCPServer.stdio(*everything_stdio, sampling=model) as server:
        result, _ = await run_calls(
            [server], ("trigger-sampling-request", {"prompt": "the answer?", "maxTokens": 50})
        )
    (request,) = model.requests
    system, user = request.conversation.messages
    assert (system.role, system.text) == ("system", "You are a helpful test server.")
    assert user.role == "user"
    assert user.text.endswith("context: the answer?")
    assert request.settings == {"max_tokens": 50, "temperature": 0.7}
    assert request.conversation.metadata["mcp.server"] == "'mcp-servers/everything'"
    text = _text(result.steps[0].results[0])
    assert '"model": "tiny-1"' in text
    assert '"text": "Forty-two."' in text
    assert '"stopReason": "endTurn"' in text
    assert result.usage.total == 10


async def test_without_sampling_the_server_does_not_offer_its_sampling_tools(
    everything_stdio: tuple[str, list[str]],
) -> None:
    async with MCPServer.stdio(*everything_stdio) as server:
        names = {tool.name for tool in await server.list_tools()}
    assert "trigger-elicitation-request" in names  # elicitation is always declared
    assert "trigger-sampling-request" not in names


def test_a_sampling_request_maps_its_messages_limits_and_preferences() -> None:
    params = types.CreateMessageRequestParams(
        messages=[
            types.SamplingMessage(
                role="user",
                content=[
                    types.TextContent(type="text", text="What is in this picture?"),
                    types.ImageContent(
                        type="image", data=base64.b64encode(b"png").decode(), mime_type="image/png"
                    ),
                ],
            ),
            types.SamplingMessage(
                role="assistant", content=types.TextContent(type="text", text="A cat.")
            ),
        ],
        max_tokens=20,
        stop_sequences=["END"],
        model_preferences=types.ModelPreferences(
            hints=[types.ModelHint(name="sonnet")], speed_priority=0.8
        ),
    )
    request = generate_request(params, label="'demo'", run_id="r1")
    first, second = request.conversation.messages
    assert first.content == (
        TextPart(text="What is in this picture?"),
        ImagePart(data=b"png", media_type="image/png"),
    )
    assert (second.role, second.text) == ("assistant", "A cat.")
    assert request.settings == {"max_tokens": 20}
    assert request.conversation.metadata == {
        "mcp.server": "'demo'",
        "mcp.model_preferences": {"hints": [{"name": "sonnet"}], "speed_priority": 0.8},
        "mcp.stop_sequences": ["END"],
    }
    assert request.run_id == "r1"


async def test_progress_becomes_tool_progress_events_of_the_call(
    everything_stdio: tuple[str, list[str]],
) -> None:
    async with MCPServer.stdio(*everything_stdio) as server:
        _, events = await run_calls(
            [server], ("trigger-long-running-operation", {"duration": 0.3, "steps": 3})
        )
    progress = [e for e in events if e.type == "tool.progress"]
    assert [(e.call_id, e.progress, e.total) for e in progress] == [  # type: ignore[attr-defined]
        ("s1c0", 1.0, 3.0),
        ("s1c0", 2.0, 3.0),
        ("s1c0", 3.0, 3.0),
    ]
    kinds = [e.type for e in events]
    assert kinds.index("tools.executed") > kinds.index("tool.progress")


class _Catch(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.arrived = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.arrived.set()


@pytest.fixture
def server_log() -> Iterator[_Catch]:
    catch = _Catch()
    logger = logging.getLogger("operative.mcp.server")
    logger.addHandler(catch)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield catch
    logger.removeHandler(catch)
    logger.setLevel(level)


async def test_log_messages_go_to_python_logging(
    everything_stdio: tuple[str, list[str]], server_log: _Catch
) -> None:
    async with MCPServer.stdio(*everything_stdio) as server:
        await run_calls([server], ("toggle-simulated-logging", {}))
        with trio.fail_after(10):
            await server_log.arrived.wait()
    record = server_log.records[0]
    assert record.mcp_server == "'mcp-servers/everything'"  # type: ignore[attr-defined]
    assert re.search(r"level.message", record.getMessage())  # "Debug-level message", ...
    assert record.levelno >= logging.DEBUG


# -- which run: over stdio the rule, over HTTP the transport's link -----------------------


async def test_over_stdio_one_run_with_several_calls_in_flight_gets_the_request(
    everything_stdio: tuple[str, list[str]],
) -> None:
    person = Person({"name": "Ada"})
    async with MCPServer.stdio(*everything_stdio) as server:
        result, _ = await run_calls(
            [server], LONG, ("trigger-elicitation-request", {}), on_elicitation=person
        )
    (request,) = person.requests
    assert request.tool_call_id is None  # its run is known, not which of its calls asked
    assert "- Name: Ada" in _text(result.steps[0].results[1])


async def _two_runs(server: MCPServer) -> tuple[Person, Person, Any, Any]:
    """Run A holds a long call while run B's call asks for input; both handlers accept."""
    first, second = Person({"name": "A"}), Person({"name": "B"})
    results: dict[str, Any] = {}

    async def run(name: str, call: tuple[str, dict[str, Any]], person: Person, busy: Any) -> None:
        conversation = Conversation()
        conversation.append_user_message(name)
        async with open_run(
            generate=script([call]),
            conversation=conversation,
            tools=[server],
            on_elicitation=person,
        ) as handle:
            async for event in handle.events():
                if event.type == "tool.progress":
                    busy.set()
        results[name] = await handle.result()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            busy = trio.Event()
            nursery.start_soon(run, "A", LONG, first, busy)
            await busy.wait()  # A's call is in flight
            nursery.start_soon(run, "B", ("trigger-elicitation-request", {}), second, trio.Event())
    return first, second, results["A"], results["B"]


async def test_over_stdio_calls_of_several_runs_in_flight_decline_the_request(
    everything_stdio: tuple[str, list[str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="operative.mcp")
    async with MCPServer.stdio(*everything_stdio) as server:
        first, second, _, result = await _two_runs(server)
    assert first.requests == second.requests == []
    assert "User declined" in _text(result.steps[0].results[0])
    assert "2 calls of 2 runs are in flight" in caplog.text


async def test_over_http_the_request_reaches_the_run_whose_call_made_it(
    everything_http: HttpServer,
) -> None:
    async with MCPServer.http(everything_http.url) as server:
        first, second, _, result = await _two_runs(server)
    assert first.requests == []
    (request,) = second.requests
    assert request.tool_call_id == "s1c0"
    assert "- Name: B" in _text(result.steps[0].results[0])


async def test_a_handler_still_thinking_when_its_call_ends_is_cancelled(
    everything_stdio: tuple[str, list[str]],
) -> None:
    cancelled = trio.Event()

    async def slow_person(request: ElicitationRequest) -> ElicitationResponse | None:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()

    async with MCPServer.stdio(*everything_stdio, timeout=1.0) as server:
        result, _ = await run_calls(
            [server], ("trigger-elicitation-request", {}), on_elicitation=slow_person
        )
        with trio.fail_after(5):
            await cancelled.wait()
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert "timed out" in (settled.error or "")
