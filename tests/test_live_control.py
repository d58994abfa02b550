"""Live control through real runs: parked approvals, steering, selection, stall watchdog."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import operative
import operative.steering
from operative import Conversation, GenerateResponse, Toolbox, ToolCall, open_run, stop_when, tool
from operative.liveness import StallPolicy
from operative.steering import SelectionOutcome, Steering
from operative.testing import HANG, ScriptedModel, check_run_invariants
from operative.tools import ApprovalDecision, ApprovalPolicy, PendingApproval

RAN: list[str] = []


@tool(version="1", mutates=True)
async def delete(path: str) -> str:
    """Delete a file."""
    RAN.append(path)
    return f"deleted {path}"


def _user() -> Conversation:
    conversation = Conversation()
    conversation.append_user_message("clean up")
    return conversation


def _delete(call_id: str, path: str) -> GenerateResponse:
    return GenerateResponse(
        tool_calls=(ToolCall(id=call_id, name="delete", arguments={"path": path}),)
    )


def _toolbox() -> Toolbox:
    return Toolbox(
        [delete], approval_policy=ApprovalPolicy(mode="on-mutation"), approval_secret=b"k" * 32
    )


async def _run(model: Any, **options: Any) -> tuple[operative.RunResult, list[Any], list[str]]:
    RAN.clear()
    events: list[Any] = []
    statuses: list[str] = []
    options.setdefault("toolbox", _toolbox())
    options.setdefault("stop_when", stop_when.no_tool_calls())
    async with open_run(generate=model, conversation=_user(), **options) as run:
        run.add_listener("*", events.append)
        run.subscribe_snapshot(lambda snapshot: statuses.append(snapshot.status))
    result = await run.result()
    check_run_invariants(result, events)
    return result, events, statuses


async def test_a_parked_approval_resumes_inside_the_live_run(autojump_clock: Any) -> None:
    """on_approval keeps the run alive: the call waits, a person approves, it runs once."""
    decided: list[PendingApproval] = []

    async def person(pending: PendingApproval) -> ApprovalDecision:
        await trio.sleep(3600)  # an hour of thinking, in virtual time
        decided.append(pending)
        return ApprovalDecision(approved=True)

    model = ScriptedModel([_delete("c1", "/tmp/a"), "done"])
    result, _, statuses = await _run(model, on_approval=person)
    assert RAN == ["/tmp/a"]
    assert result.steps[0].results[0].outcome == "success"
    assert decided[0].tool_name == "delete"
    assert "waiting" in statuses
    assert statuses[-1] == "completed"
    assert statuses.count("completed") == 1


async def test_a_denied_parked_approval_is_a_denied_result() -> None:
    """A denial settles the call as denied with the person's reason; nothing runs."""
    model = ScriptedModel([_delete("c1", "/tmp/a"), "ok, not deleting"])
    result, _, _ = await _run(
        model, on_approval=lambda pending: ApprovalDecision(approved=False, reason="not today")
    )
    assert RAN == []
    (denied,) = result.steps[0].results
    assert denied.outcome == "denied"
    assert "not today" in (denied.error or "")


async def test_an_undecided_approval_times_out_as_denied(autojump_clock: Any) -> None:
    """approval_timeout turns a missing decision into a denial after that long."""

    async def nobody(pending: PendingApproval) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    start = trio.current_time()
    model = ScriptedModel([_delete("c1", "/tmp/a"), "gave up"])
    result, _, _ = await _run(model, on_approval=nobody, approval_timeout=300)
    assert trio.current_time() - start == pytest.approx(300)
    assert result.steps[0].results[0].outcome == "denied"
    assert RAN == []


async def test_abort_while_an_approval_is_parked(autojump_clock: Any) -> None:
    """An abort cancels the parked wait; the call gets a cancelled result."""

    async def nobody(pending: PendingApproval) -> bool:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    events: list[Any] = []
    async with open_run(
        generate=ScriptedModel([_delete("c1", "/tmp/a")]),
        conversation=_user(),
        toolbox=_toolbox(),
        on_approval=nobody,
    ) as run:
        run.add_listener("*", events.append)
        await trio.sleep(10)
        assert run.snapshot().status == "waiting"
        run.abort("host shut down")
    result = await run.result()
    check_run_invariants(result, events)
    assert result.steps[0].results[0].outcome == "cancelled"


async def test_steering_pauses_resumes_and_applies_config(autojump_clock: Any) -> None:
    """A paused session parks the run at step entry; resume lets it go; configs apply once."""
    steering = Steering("session-1")
    steering.pause()
    model = ScriptedModel(lambda request: f"answer {request.step}")
    events: list[Any] = []
    async with open_run(
        generate=model,
        conversation=_user(),
        steering=steering,
        run_id="run-1",
        maximum_steps=3,
    ) as run:
        run.add_listener("*", events.append)
        await trio.sleep(60)
        assert model.calls == 0
        assert run.snapshot().status == "waiting"
        steering.configure({"tone": "terse"}, version=1)
        steering.resume()
    result = await run.result()
    check_run_invariants(result, events)
    assert len(result.steps) == 3
    applied = [e for e in events if e.type == "steering.applied"]
    assert [(e.config_version, e.step) for e in applied] == [(1, 1)]
    assert applied[0].config == {"tone": "terse"}
    outcomes = [
        e.type for e in events if e.type.startswith("steering.") and e.type != "steering.applied"
    ]
    assert outcomes == ["steering.accepted", "steering.accepted"]


async def test_steering_needs_a_run_id() -> None:
    """Setting steering without run_id fails when the run is built."""
    with pytest.raises(operative.InvalidArgument, match="run_id"):
        async with open_run(
            generate=ScriptedModel(["x"]), conversation=_user(), steering=Steering("s")
        ):
            pass


class Plan:
    """A selection gate whose plan goes stale after step 1."""

    def __init__(self) -> None:
        self.valid = True

    def get_plan(self) -> str:
        return "plan-a"

    def revalidate(self, plan: str) -> SelectionOutcome:
        return SelectionOutcome(outcome="selected" if self.valid else "expired", reason="quota")


async def test_a_stale_selection_fails_the_step() -> None:
    """A plan that no longer revalidates ends the run with SelectionRevalidationError."""
    plan = Plan()

    def expire(step: operative.StepResult, ctx: Any) -> None:
        plan.valid = False

    model = ScriptedModel(lambda request: f"step {request.step}")
    result, _, _ = await _run(model, selection=plan, on_step=expire, stop_when=None)
    assert result.finish_reason == "error"
    assert isinstance(result.error, operative.steering.SelectionRevalidationError)
    assert len(result.steps) == 1


async def test_stall_watchdog_aborts_a_hung_run(autojump_clock: Any) -> None:
    """A model that hangs for an hour is seen stalled and aborted by policy."""
    start = trio.current_time()
    result, _, statuses = await _run(
        ScriptedModel([HANG]),
        stall_policy=StallPolicy(stall_after=120, abort_when_stalled=True),
    )
    assert result.finish_reason == "aborted"
    assert trio.current_time() - start == pytest.approx(120, abs=1)
    assert "stalled" in statuses
    assert statuses[-1] == "aborted"


async def test_waiting_never_counts_as_stalling(autojump_clock: Any) -> None:
    """A parked approval longer than stall_after does not stall the run."""

    async def slow_person(pending: PendingApproval) -> bool:
        await trio.sleep(3600)
        return True

    result, _, statuses = await _run(
        ScriptedModel([_delete("c1", "/tmp/a"), "done"]),
        on_approval=slow_person,
        stall_policy=StallPolicy(stall_after=60, abort_when_stalled=True),
    )
    assert result.finish_reason == "stop-condition"
    assert "stalled" not in statuses


async def test_a_steered_agent_names_each_run() -> None:
    """An agent with steering= takes each run's id from AgentRunContext."""
    steering = Steering("session-2")
    steering.configure({"mode": "careful"}, version=1)
    agent = operative.create_agent(generate=ScriptedModel(["one", "two"]), steering=steering)
    with pytest.raises(operative.InvalidArgument, match="run_id"):
        async with agent.open_run("hi"):
            pass
    events: list[Any] = []
    async with agent.open_run("hi", context=operative.AgentRunContext(run_id="r-1")) as run:
        run.add_listener("steering.applied", events.append)
    assert run.run_id == "r-1"
    assert [e.config_version for e in events] == [1]
    async with agent.open_run("again", context=operative.AgentRunContext(run_id="r-2")) as run:
        run.add_listener("steering.applied", events.append)
    assert [e.config_version for e in events] == [1]  # applied once per session
