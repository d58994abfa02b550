"""An agent uses tools from two real servers over both transports at once: approvals
gated by the servers' annotations, elicitation, sampling and progress routed into the
run, and an abort cancelling calls in flight on both transports."""

from __future__ import annotations

from typing import Any

import trio

from operative import FinishReason, GenerateResponse, create_agent
from operative.mcp import MCPServer
from operative.testing import ScriptedModel
from operative.tools import (
    ApprovalDecision,
    ElicitationRequest,
    ElicitationResponse,
    PendingApproval,
)

from .conftest import HttpServer, script


async def test_an_agent_uses_both_servers_over_both_transports(
    time_server: tuple[str, list[str]],
    everything_stdio: tuple[str, list[str]],
    everything_http: HttpServer,
) -> None:
    approvals: list[str] = []
    questions: list[ElicitationRequest] = []

    async def on_approval(approval: PendingApproval) -> ApprovalDecision:
        approvals.append(approval.tool_name)
        return ApprovalDecision(approved=True)

    async def on_elicitation(request: ElicitationRequest) -> ElicitationResponse:
        questions.append(request)
        return ElicitationResponse(
            request_id=request.request_id, tool_call_id=request.tool_call_id, data={"name": "Ada"}
        )

    sampler = ScriptedModel([GenerateResponse(content="a haiku", model="poet-1")])
    model = script(
        [
            ("get_current_time", {"timezone": "Europe/Paris"}),
            ("local_echo", {"message": "over stdio"}),
            ("web_trigger-elicitation-request", {}),
        ],
        [
            ("local_trigger-sampling-request", {"prompt": "a haiku", "maxTokens": 30}),
            ("web_trigger-long-running-operation", {"duration": 0.3, "steps": 3}),
        ],
        answer="All done.",
    )
    with trio.fail_after(90):
        async with (
            MCPServer.stdio(*time_server) as clock,
            MCPServer.stdio(*everything_stdio, prefix="local", sampling=sampler) as local,
            MCPServer.http(everything_http.url, prefix="web") as web,
        ):
            assert (local.transport, web.transport) == ("stdio", "streamable-http")
            agent = create_agent(
                generate=model,
                tools=[clock, local, web],
                on_approval=on_approval,
                on_elicitation=on_elicitation,
            )
            async with agent.open_run("Use everything.") as run:
                events = [event async for event in run.events()]
            result = await run.result()
    assert result.finish_reason is FinishReason.STOP_CONDITION
    assert result.content == "All done."
    settled = {r.tool_name: r for step in result.steps for r in step.results}
    assert {name: r.outcome for name, r in settled.items()} == dict.fromkeys(settled, "success")
    assert settled["get_current_time"].value["timezone"] == "Europe/Paris"
    assert settled["local_echo"].value == "Echo: over stdio"
    assert "- Name: Ada" in settled["web_trigger-elicitation-request"].value
    assert '"model": "poet-1"' in settled["local_trigger-sampling-request"].value
    # the annotations decided: read-only tools ran at once, the others waited for a person
    assert sorted(approvals) == [
        "local_trigger-sampling-request",
        "web_trigger-elicitation-request",
    ]
    (question,) = questions
    assert question.tool_call_id == "s1c2"
    progress = [e.progress for e in events if e.type == "tool.progress"]
    assert progress == [1.0, 2.0, 3.0]


async def test_an_abort_cancels_calls_in_flight_on_both_transports(
    everything_stdio: tuple[str, list[str]], everything_http: HttpServer
) -> None:
    long = {"duration": 20, "steps": 100}
    with trio.fail_after(60):
        async with (
            MCPServer.stdio(*everything_stdio, prefix="local") as local,
            MCPServer.http(everything_http.url, prefix="web") as web,
        ):
            abort = trio.Event()
            agent = create_agent(
                generate=script(
                    [
                        ("local_trigger-long-running-operation", long),
                        ("web_trigger-long-running-operation", long),
                    ]
                ),
                tools=[local, web],
            )
            async with agent.open_run("Wait.", abort_on=abort) as run:
                seen: set[Any] = set()
                async for event in run.events():
                    if event.type == "tool.progress":
                        seen.add(event.tool_name)
                        if len(seen) == 2:
                            abort.set()
            aborted = await run.result()
            again = create_agent(
                generate=script([("local_echo", {"message": "a"}), ("web_echo", {"message": "b"})]),
                tools=[local, web],
            )
            after = await again.run("Again.")
    assert aborted.finish_reason is FinishReason.ABORTED
    assert [r.outcome for r in aborted.steps[0].results] == ["cancelled", "cancelled"]
    assert [r.value for r in after.steps[0].results] == ["Echo: a", "Echo: b"]
