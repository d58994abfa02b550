"""An agent's feature-less runs share its configuration and its plan (``_run_plan``):
the plan gives each run the answers it would work out itself, and a run of ``agent.run``
that nothing can cancel is sealed, with a liveness tracker nobody reads."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from _runs import add, configure, one_call, with_context

import operative
from operative import (
    Authority,
    RequestContext,
    Toolbox,
    create_agent,
)
from operative._core._event_hub import UNHEARD, EventHub
from operative._core._run import ActiveRun
from operative._core._run_plan import plan_for
from operative._core._run_task import drive
from operative.liveness import LivenessTracker, StallPolicy
from operative.liveness._tracker import UNREAD
from operative.tools import ExecutionContext


class _OwnToolbox(Toolbox):
    """A host's toolbox: it is told where each call runs."""

    seen: list[ExecutionContext | None]

    async def execute(
        self, call: operative.ToolCall, context: ExecutionContext | None = None
    ) -> operative.ToolResult:
        type(self).seen.append(context)
        return await super().execute(call, context)


def _request(deadline: float | None = None) -> RequestContext:
    who = Authority(principal_id="p", tenant_id="t", owner_id="o")
    return RequestContext(authority=who, deadline=deadline)


_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("plain", {"tools": [add]}),
    ("a-tool-given-a-context", {"tools": [with_context]}),
    ("a-request-context", {"tools": [add], "request_context": _request()}),
    ("a-toolbox-subclass", {"toolbox": _OwnToolbox([add])}),
    ("a-stall-policy", {"tools": [add], "stall_policy": StallPolicy(stall_after=60.0)}),
    ("a-hook-around-tools", {"tools": [add], "before_tool_execution": lambda calls, ctx: None}),
    ("a-retry", {"tools": [add], "retry": operative.RetryOptions(max_attempts=2)}),
]


@pytest.mark.parametrize("options", [o for _, o in _CONFIGS], ids=[n for n, _ in _CONFIGS])
def test_the_plan_gives_what_a_run_works_out_itself(options: dict[str, Any]) -> None:
    config, live = configure(**options)
    plan = plan_for(config)
    assert plan is not None
    run = ActiveRun(config, live)
    state = run._state
    assert plan.plain_generate == state.plain_generate
    assert plan.plain_tools == state.plain_tools
    assert plan.context_free == state.context_free
    assert plan.sealable == state.sealable
    assert plan.alone == (config.stall_policy is None and config.abort_on is None)


def test_a_configuration_with_a_feature_has_no_plan() -> None:
    from operative.budgets import Budget

    config, _ = configure(budget=Budget(max_tokens=10))
    assert plan_for(config) is None


@pytest.mark.parametrize(
    ("options", "context_free"),
    [
        ({"tools": [add]}, True),
        ({"tools": [with_context]}, False),
        ({"tools": [add], "request_context": _request()}, False),
    ],
    ids=["plain", "a-tool-given-a-context", "a-request-context"],
)
def test_only_calls_nobody_locates_go_without_an_execution_context(
    options: dict[str, Any], context_free: bool
) -> None:
    config, live = configure(**options)
    assert ActiveRun(config, live)._state.context_free is context_free


async def test_a_hosts_toolbox_is_always_told_where_a_call_runs() -> None:
    _OwnToolbox.seen = []
    agent = create_agent(generate=one_call, toolbox=_OwnToolbox([add]))
    result = await agent.run("go")
    assert result.content == "done"
    [context] = _OwnToolbox.seen
    assert context is not None
    assert context.run_id == result.run_id
    assert context.step == 1


async def test_a_tool_given_a_context_sees_its_run() -> None:
    agent = create_agent(generate=one_call, tools=[with_context])
    result = await agent.run("go")
    assert result.steps[0].results[0].value == result.run_id


class _Runs:
    """Every run ``agent.run`` makes, kept to look at once it ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[ActiveRun] = []
        made = self.made

        class Spy(ActiveRun):
            __slots__ = ()

            def __init__(self, *args: Any) -> None:
                super().__init__(*args)
                made.append(self)

        monkeypatch.setattr(operative._agent, "ActiveRun", Spy)


async def test_agent_run_shares_the_agents_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _Runs(monkeypatch)
    agent = create_agent(generate=one_call, tools=[add])
    first = await agent.run("go")
    second = await agent.run("go")
    assert first.run_id != second.run_id
    [one, two] = runs.made
    assert one._state.config is two._state.config is agent._template
    assert (one.run_id, two.run_id) == (first.run_id, second.run_id)
    assert one._state.run_id == first.run_id


async def test_a_sealed_agent_run_has_a_tracker_nobody_reads_and_a_hub_nobody_hears(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = _Runs(monkeypatch)
    agent = create_agent(generate=one_call, tools=[add])
    result = await agent.run("go")
    assert result.finish_reason == "stop-condition"
    assert (await agent.run("again")).finish_reason == "stop-condition"
    [run, again] = runs.made
    assert run._scope.sealed
    assert run._liveness is again._liveness is UNREAD
    assert run._hub is again._hub is UNHEARD
    assert "sealed" in repr(run)
    # The shared hub is as it was: nothing attached, nothing wanted, never closed.
    assert not UNHEARD.wanted
    assert not UNHEARD._closed
    assert not UNHEARD.has_streams


async def test_a_sealed_run_listened_to_as_it_is_made_gets_a_hub_of_its_own() -> None:
    # What operative.testing's RunRecorder.capture_all does: attach as runs are made.
    from operative.testing import RunRecorder

    agent = create_agent(generate=one_call, tools=[add])
    recorder = RunRecorder()
    with recorder.capture_all():
        result = await agent.run("go")
    assert result.finish_reason == "stop-condition"
    types = recorder.types(result)
    assert types[0] == "run.started"
    assert types[-1] == "run.completed"
    assert types.count("step.completed") == 2
    recorder.check(result)
    assert not UNHEARD.wanted
    assert not UNHEARD._closed


async def test_a_listener_after_a_sealed_run_started_fails_loudly() -> None:
    config, live = configure()
    plan = plan_for(config)
    assert plan is not None
    run = ActiveRun(config, live, plan, "r1")
    assert run._hub is UNHEARD
    run._state.started_at = 0.0  # as ``drive`` records at the start
    with pytest.raises(AssertionError, match="after it started"):
        run.add_listener("*", print)
    with pytest.raises(AssertionError, match="after it started"):
        run.events()
    assert run._hub is UNHEARD


def test_nothing_can_be_attached_to_the_hub_nobody_hears() -> None:
    with pytest.raises(AssertionError, match="listener"):
        UNHEARD.add_listener("*", print)
    with pytest.raises(AssertionError, match="listener"):
        UNHEARD.once("run.completed", print)
    stream = UNHEARD.stream(())
    with pytest.raises(AssertionError, match="stream"):
        stream._subscribe()
    assert not UNHEARD.wanted


async def test_a_run_something_can_cancel_keeps_a_real_tracker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = _Runs(monkeypatch)
    # A request deadline can end the run: it keeps its scope, and its liveness is real.
    agent = create_agent(generate=one_call, tools=[add], request_context=_request(4e9))
    await agent.run("go")
    [run] = runs.made
    assert not run._scope.sealed
    assert run._liveness.__class__ is LivenessTracker
    assert run._hub.__class__ is EventHub
    snapshot = run.snapshot()
    assert snapshot.status == "completed"
    assert snapshot.step == 2


async def test_a_run_nobody_can_hear_or_read_cannot_run_unsealed() -> None:
    config, live = configure()
    plan = plan_for(config)
    assert plan is not None
    assert plan.alone
    assert plan.sealable
    run = ActiveRun(config, live, plan, "r1")
    with pytest.raises(AssertionError, match="nobody can hear or read"):
        await drive(run)  # as a loop task: its handle would be out there
    await trio.lowlevel.checkpoint()
