"""Property tests: the multi-agent patterns keep the run's promises over random scripts.

A parent calls subagents and plain tools in random orders and numbers per step; its
children call tools, fail (their model raises or returns no response, their tools
raise), run long or hang, or answer; the parent may be aborted at a random virtual time
or run out of a random budget. Supervisors dispatch random task lists under both
failure policies, and a triage agent hands off at a random step. Each example runs in
its own ``trio.run`` under a ``MockClock`` that jumps ahead whenever every task sleeps.

What every example checks, for the parent and for every child run: one result per tool
call, in call order, also after an abort; the loop invariants of
``check_run_invariants``; usage equal to the run's own generate calls plus what its
children spent (per run and per step), with ``subagent.completed`` carrying each
child's usage; every child event forwarded as ``subagent.event`` tagged with the child's
run id; no task and no tool body left when ``open_run`` returns; and finish reasons that
say what happened (abort, budget, a failed child as a ``SubagentError`` result).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import event as note_case
from hypothesis import given, settings

from operative import (
    FinishReason,
    GenerateRequest,
    GenerateResponse,
    RunResult,
    ToolCall,
    Usage,
    create_agent,
    stop_when,
)
from operative.budgets import Budget
from operative.multiagent import create_supervisor, handoff, subagent_tool
from operative.testing import ScriptedModel, check_run_invariants

from ._helpers import Capture, live_tasks, unwrap
from ._scripts import (
    SAFETY_ABORT,
    ChildPlan,
    HandoffPlan,
    ParentStep,
    SubagentUse,
    SupervisorPlan,
    ToolRecords,
    TreePlan,
    call_id_of,
    child_answer,
    child_key,
    child_plans_of,
    handoff_plans,
    scripted_children,
    scripted_parent,
    scripted_workers,
    supervisor_plans,
    tree_plans,
    usage,
    work_tool,
)

ANSWERED = (FinishReason.STOP_CONDITION, FinishReason.MAXIMUM_STEPS)
CHILD_AGENT = {"alpha": "alpha", "ask_beta": "beta"}
EXPECTED_CHILD_FINISH = {
    "answer": FinishReason.STOP_CONDITION,
    "raise": FinishReason.ERROR,
    "invalid": FinishReason.ERROR,
    "hang": None,
}
EXPECTED_CHILD_ERROR = {"raise": "RuntimeError", "invalid": "InvalidResponseError"}


def run_with_mock_clock(main: Callable[[], Any]) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- checks shared by every property --------------------------------------------------------


def total(usages: Iterable[Usage]) -> Usage:
    summed = Usage()
    for item in usages:
        summed = summed + item
    return summed


def check_transcript_order(result: RunResult) -> None:
    """Right after each assistant message with calls come their results, in call order."""
    messages = result.conversation.messages
    for index, message in enumerate(messages):
        if not message.tool_calls:
            continue
        wanted = [c.id for c in message.tool_calls]
        following = messages[index + 1 : index + 1 + len(wanted)]
        assert [m.role for m in following] == ["tool"] * len(wanted), (index, following)
        assert [m.tool_call_id for m in following] == wanted


def check_work_results(result: RunResult, records: ToolRecords) -> None:
    """A ``work`` call's result says what its body did; a body cut by a cancellation has
    a ``cancelled`` result, and only an aborted step has those."""
    for step in result.steps:
        for call, outcome in zip(step.tool_calls, step.results, strict=True):
            if outcome.outcome == "cancelled":
                assert step.aborted, (step.step, outcome)
            if call.name != "work":
                continue
            ended = records.ended.get((result.run_id, call.id))
            if ended == "cancelled":
                assert outcome.outcome == "cancelled", (call, outcome)
            if outcome.outcome == "success":
                assert ended == "done", (call, ended)
            elif outcome.outcome == "error":
                assert ended == "failed", (call, ended, outcome)
                assert "RuntimeError" in (outcome.error or "")


def check_run(result: RunResult, events: list[Any], records: ToolRecords) -> None:
    check_run_invariants(result, events)
    check_transcript_order(result)
    check_work_results(result, records)


class ChildCall:
    """What the parent asked of one child run."""

    def __init__(
        self, step: int, call_id: str, tool_name: str, agent_name: str, plan: ChildPlan | None
    ) -> None:
        self.step = step
        self.call_id = call_id
        self.tool_name = tool_name
        self.agent_name = agent_name
        self.plan = plan


def check_children(
    result: RunResult,
    events: list[Any],
    kids: list[RunResult],
    asked: Mapping[str, ChildCall],
    records: ToolRecords,
    *,
    siblings_cancel: bool = False,
) -> dict[str, RunResult]:
    """The children's runs, their forwarded events, their accounting and the parent's usage.

    ``asked`` maps each possible child run id to the call that would start it;
    ``siblings_cancel`` says a failing child may cancel the others (a supervisor's
    ``"cancel_siblings"``).
    """
    run_id = result.run_id
    note_case(f"parent {result.finish_reason}")
    for kid in kids:
        note_case(f"child {kid.finish_reason}")
    by_id = {kid.run_id: kid for kid in kids}
    assert len(by_id) == len(kids), "a child run ended twice"
    parent_end = events[-1].time
    # Every forwarded event is tagged with the parent's run and step and the child's id.
    wrappers = [e for e in events if e.type == "subagent.event"]
    for wrapper in wrappers:
        child = asked[wrapper.child_run_id]
        assert wrapper.run_id == run_id
        assert wrapper.child_run_id in by_id, "a child event from a run that never ended"
        assert (wrapper.step, wrapper.call_id) == (child.step, child.call_id)
        assert (wrapper.tool_name, wrapper.agent_name) == (child.tool_name, child.agent_name)
        assert wrapper.event.run_id == wrapper.child_run_id
    started = {w.child_run_id for w in wrappers if w.event.type == "run.started"}
    assert started == set(by_id)
    completed = [e for e in events if e.type == "subagent.completed"]
    assert sorted(e.child_run_id for e in completed) == sorted(by_id)
    for event in completed:
        kid = by_id[event.child_run_id]
        child = asked[event.child_run_id]
        assert event.usage == kid.usage
        assert event.finish_reason == kid.finish_reason
        assert event.steps == len(kid.steps)
        assert (event.step, event.call_id) == (child.step, child.call_id)
        assert (event.tool_name, event.agent_name) == (child.tool_name, child.agent_name)
    for kid in kids:
        inner = unwrap(events, kid.run_id)
        check_run(kid, inner, records)
        assert all(e.run_id == kid.run_id for e in inner)
        if kid.finish_reason is FinishReason.ABORTED and not siblings_cancel:
            # Only the parent's cancellation aborts a child: it ends as the parent does.
            assert inner[-1].time == parent_end
            assert result.finish_reason in (FinishReason.ABORTED, FinishReason.BUDGET_EXCEEDED)
    # The parent's usage: its own generate calls and what every child spent, per step too.
    own = [e for e in events if e.type == "generate.completed"]
    assert result.usage == total(e.usage for e in own) + total(k.usage for k in kids)
    for step in result.steps:
        children_of_step = [k for k in kids if asked[k.run_id].step == step.step]
        expected = total(e.usage for e in own if e.step == step.step)
        assert step.usage == expected + total(k.usage for k in children_of_step), step.step
    return by_id


def check_subagent_children(
    result: RunResult,
    by_id: Mapping[str, RunResult],
    asked: Mapping[str, ChildCall],
    inputs: Mapping[str, str],
) -> None:
    """Each child ended as its script says unless the parent cut it, and its call's result
    is its answer or a ``SubagentError`` naming why it did not answer."""
    for kid in by_id.values():
        plan = asked[kid.run_id].plan
        assert plan is not None
        if kid.finish_reason is FinishReason.BUDGET_EXCEEDED:
            continue  # it started with what was left of the parent's budget
        if kid.finish_reason is FinishReason.ABORTED:
            continue  # checked in check_children: the parent was ending
        expected = EXPECTED_CHILD_FINISH[plan.end.kind]
        assert kid.finish_reason is expected, (kid.finish_reason, plan)
        assert len(kid.steps) == len(plan.steps) + (plan.end.kind == "answer")
        if expected is FinishReason.STOP_CONDITION:
            assert kid.content == child_answer(inputs[kid.run_id])
        else:
            assert type(kid.error).__name__ == EXPECTED_CHILD_ERROR[plan.end.kind]
    for step in result.steps:
        for call, outcome in zip(step.tool_calls, step.results, strict=True):
            child_id = f"{result.run_id}/{call.id}"
            if call.name not in CHILD_AGENT:
                continue
            answered_by = by_id.get(child_id)
            if outcome.outcome == "cancelled":
                assert step.aborted
                continue
            assert answered_by is not None, f"call {call.id} settled but its child never ran"
            if outcome.outcome == "success":
                assert answered_by.finish_reason in ANSWERED
                assert outcome.value == answered_by.content
            else:
                assert outcome.outcome == "error", outcome
                assert answered_by.finish_reason not in ANSWERED
                assert "SubagentError: " in (outcome.error or ""), outcome.error
                assert repr(str(answered_by.finish_reason)) in (outcome.error or "")


def check_finish(
    result: RunResult,
    events: list[Any],
    start: float,
    abort_at: float,
    budget: Budget | None,
) -> bool:
    """The parent's finish reason agrees with what happened; True when it ran to its end."""
    ended = events[-1].time - start
    reason = result.finish_reason
    # A child's failure is a tool result; the parent's own scripts never fail.
    assert reason is not FinishReason.ERROR, result.error
    if ended >= abort_at:
        assert reason is FinishReason.ABORTED
        assert result.abort_reason == "property abort"
        assert ended == abort_at, "an abort ends the run at once"
        return False
    limit = budget.max_duration if budget is not None else None
    if limit is not None and ended >= limit:
        assert reason is FinishReason.BUDGET_EXCEEDED
        assert ended == pytest.approx(limit)
        return False
    max_tokens = budget.max_tokens if budget is not None else None
    if max_tokens is not None and result.usage.total > max_tokens:
        # Past the limit (a child's spend included) the run ends where it is.
        assert reason is FinishReason.BUDGET_EXCEEDED, (reason, result.usage, max_tokens)
    if reason is FinishReason.BUDGET_EXCEEDED:
        # At the limit exactly, the next generate call is refused.
        assert max_tokens is not None
        assert result.usage.total >= max_tokens
        return False
    assert reason is FinishReason.STOP_CONDITION
    return True


def planned_children(
    run_id: str, steps: tuple[ParentStep, ...], prefix: str
) -> tuple[dict[str, ChildCall], dict[str, str]]:
    asked: dict[str, ChildCall] = {}
    inputs: dict[str, str] = {}
    for number, step in enumerate(steps, 1):
        for index, use in enumerate(step.calls):
            if isinstance(use, SubagentUse):
                call_id = call_id_of(prefix, number, index)
                child_id = f"{run_id}/{call_id}"
                asked[child_id] = ChildCall(
                    number, call_id, use.tool, CHILD_AGENT[use.tool], use.child
                )
                inputs[child_id] = child_key(prefix, number, index)
    return asked, inputs


def child_agents(plans: dict[str, ChildPlan], records: ToolRecords, kids: Capture) -> list[Any]:
    """The parent's subagent tools: ``alpha`` (``subagent_tool``) and ``ask_beta``."""
    generate = scripted_children(plans)
    alpha = create_agent(
        name="alpha",
        instructions="You are alpha.",
        generate=generate,
        tools=[work_tool(records)],
        on_run_end=kids,
    )
    beta = create_agent(name="beta", generate=generate, tools=[work_tool(records)], on_run_end=kids)
    return [subagent_tool(alpha), subagent_tool(beta, name="ask_beta")]


# -- subagents ------------------------------------------------------------------------------


def run_tree(plan: TreePlan) -> None:
    async def main() -> None:
        records = ToolRecords()
        kids = Capture()
        budget = None
        if plan.max_tokens is not None or plan.max_duration is not None:
            budget = Budget(max_tokens=plan.max_tokens, max_duration=plan.max_duration)
        parent = create_agent(
            name="parent",
            generate=scripted_parent(plan.steps, (plan.final_delay, plan.final_tokens, "final")),
            tools=[
                work_tool(records),
                *child_agents(child_plans_of(plan.steps, "p"), records, kids),
            ],
            budget=budget,
            tool_concurrency=plan.tool_concurrency,
        )
        abort_at = plan.abort_at if plan.abort_at is not None else SAFETY_ABORT
        events: list[Any] = []
        start = trio.current_time()
        async with parent.open_run("go") as run:
            run.add_listener("*", events.append)
            await trio.sleep(abort_at)
            run.abort("property abort")
        # Nothing outlives the parent: no task, no tool body, no child run.
        assert live_tasks() == []
        assert records.unfinished() == []
        result = await run.result()
        check_run(result, events, records)
        asked, inputs = planned_children(run.run_id, plan.steps, "p")
        by_id = check_children(result, events, kids.results, asked, records)
        check_subagent_children(result, by_id, asked, inputs)
        finished = check_finish(result, events, start, abort_at, budget)
        if plan.abort_at is None and result.finish_reason is FinishReason.ABORTED:
            # Only a hanging child keeps a parent with no abort planned from ending.
            assert any(p.end.kind == "hang" for p in child_plans_of(plan.steps, "p").values())
        if finished:
            assert result.content == "final"
            assert len(result.steps) == len(plan.steps) + 1
            assert not any(s.aborted for s in result.steps)
        if result.finish_reason is FinishReason.ABORTED:
            # An aborted parent's children that were still running end aborted too.
            for kid in kids.results:
                if unwrap(events, kid.run_id)[-1].time - start >= abort_at:
                    assert kid.finish_reason is FinishReason.ABORTED

    run_with_mock_clock(main)


@settings(max_examples=300, deadline=None)
@given(plan=tree_plans)
def test_subagent_trees_keep_every_promise(plan: TreePlan) -> None:
    """Random parents calling random subagents and tools, aborted or out of budget at
    random times: transcripts, accounting, events, task tree and finish reasons agree."""
    run_tree(plan)


# -- supervisors ----------------------------------------------------------------------------

WORKERS = ("north", "south", "east")


def failing(kind: str, worker: str) -> bool:
    return worker not in WORKERS or kind in ("raise", "invalid")


def run_supervisor(plan: SupervisorPlan) -> None:
    async def main() -> None:
        jobs = {f"job{i}": job for i, job in enumerate(plan.jobs)}
        running = [0, 0]
        records = ToolRecords()
        kids = Capture()
        generate = scripted_workers(jobs, running)
        workers = [
            create_agent(
                name=name,
                instructions=f"You cover the {name}.",
                generate=generate,
                tools=[work_tool(records)],
                on_run_end=kids,
            )
            for name in WORKERS
        ]
        tasks = [{"worker": job.worker, "task": key} for key, job in jobs.items()]
        dispatch = GenerateResponse(
            content="",
            tool_calls=(ToolCall(id="d1", name="dispatch", arguments={"tasks": tasks}),),
            usage=usage(plan.plan_tokens),
        )
        supervisor = create_supervisor(
            generate=ScriptedModel([dispatch, "summary"]),
            workers=workers,
            max_concurrency=plan.max_concurrency,
            on_worker_error=plan.policy,
        )
        abort_at = plan.abort_at if plan.abort_at is not None else SAFETY_ABORT
        events: list[Any] = []
        start = trio.current_time()
        async with supervisor.open_run("go") as run:
            run.add_listener("*", events.append)
            await trio.sleep(abort_at)
            run.abort("property abort")
        assert live_tasks() == []
        assert records.unfinished() == []
        result = await run.result()
        check_run(result, events, records)
        run_id = run.run_id
        asked = {
            f"{run_id}/d1/{index}": ChildCall(1, "d1", "dispatch", job.worker, None)
            for index, job in enumerate(plan.jobs)
        }
        by_id = check_children(
            result,
            events,
            kids.results,
            asked,
            records,
            siblings_cancel=plan.policy == "cancel_siblings",
        )
        assert running[1] <= plan.max_concurrency
        finished = check_finish(result, events, start, abort_at, None)
        if not finished:
            assert result.finish_reason is FinishReason.ABORTED
            assert all(
                kid.finish_reason is FinishReason.ABORTED
                for kid in kids.results
                if unwrap(events, kid.run_id)[-1].time - start >= abort_at
            )
            return
        assert result.content == "summary"
        dispatched = result.steps[0].results[0]
        failures = [failing(job.kind, job.worker) for job in plan.jobs]
        if plan.policy == "isolate" or not any(failures):
            assert dispatched.outcome == "success", dispatched
            reports = json.loads(json.dumps(dispatched.value, default=_plain))
        else:
            assert dispatched.outcome == "error"
            error = dispatched.error or ""
            assert "WorkerFailedError: " in error, error
            reports = json.loads(error.split("Reports: ", 1)[1])
        # One report per task, in the order asked.
        assert [(r["worker"], r["task"]) for r in reports] == [
            (t["worker"], t["task"]) for t in tasks
        ]
        for index, (job, report) in enumerate(zip(plan.jobs, reports, strict=True)):
            kid = by_id.get(f"{run_id}/d1/{index}")
            if report["outcome"] == "cancelled":
                assert plan.policy == "cancel_siblings"
                assert kid is None or kid.finish_reason is FinishReason.ABORTED
                continue
            if failing(job.kind, job.worker):
                assert report["outcome"] == "error", report
                if job.worker in WORKERS:
                    assert kid is not None
                    assert kid.finish_reason is FinishReason.ERROR
                    assert report["finish_reason"] == "error"
                else:
                    assert kid is None
                    assert "no worker is named" in report["error"]
            else:
                assert report["outcome"] == "success", report
                assert kid is not None
                assert kid.finish_reason is FinishReason.STOP_CONDITION
                suffix = "recovered" if job.kind == "tool-error" else f"did {job.delay}"
                assert report["answer"] == f"{job.worker} {suffix}"
        if plan.policy == "cancel_siblings" and any(failures):
            assert any(r["outcome"] == "error" for r in reports)
            if plan.max_concurrency >= len(plan.jobs):
                # Every worker started at once: the first failure cancels exactly the
                # workers that had not finished by then.
                first = min(
                    job.delay if job.worker in WORKERS else 0
                    for job in plan.jobs
                    if failing(job.kind, job.worker)
                )
                for job, report in zip(plan.jobs, reports, strict=True):
                    done_at = job.delay if job.worker in WORKERS else 0
                    if done_at < first:
                        assert report["outcome"] != "cancelled", (job, report)
                    elif done_at > first:
                        assert report["outcome"] == "cancelled", (job, report)
        elif plan.max_concurrency >= len(plan.jobs):
            took = max((job.delay for job in plan.jobs if job.worker in WORKERS), default=0)
            assert result.steps[0].results
            assert events[-1].time - start == took

    run_with_mock_clock(main)


def _plain(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


@settings(max_examples=200, deadline=None)
@given(plan=supervisor_plans)
def test_supervisor_dispatch_keeps_order_and_policy(plan: SupervisorPlan) -> None:
    """Random task lists under "isolate" and "cancel_siblings", with random concurrency and
    aborts: reports in the order asked, failures per the policy, workers all ended."""
    run_supervisor(plan)


# -- handoffs -------------------------------------------------------------------------------


def run_handoff(plan: HandoffPlan) -> None:
    async def main() -> None:
        records = ToolRecords()
        kids = Capture()
        handing = len(plan.before) + 1
        extras = plan.handoff_extras
        handoff_step = ParentStep(delay=1, tokens=5, calls=extras)
        triage_steps = (*plan.before, handoff_step)
        billing_requests: list[GenerateRequest] = []
        billing_script = scripted_parent(plan.after, (1, 3, "billing done"), "b", handing + 1)

        async def billing_model(request: GenerateRequest) -> GenerateResponse:
            billing_requests.append(request)
            response: GenerateResponse = await billing_script(request)
            return response

        billing = create_agent(
            name="billing",
            instructions="You handle billing.",
            generate=billing_model,
            tools=[work_tool(records)],
        )
        triage_script = scripted_parent(triage_steps, (0, 0, "triage never answers"), "t")
        triage_steps_seen: list[int] = []

        async def triage_model(request: GenerateRequest) -> GenerateResponse:
            triage_steps_seen.append(request.step)
            response: GenerateResponse = await triage_script(request)
            if request.step == handing:
                handoffs = [ToolCall(id="h1", name="transfer_to_billing", arguments={})]
                if plan.second_handoff:
                    handoffs.append(ToolCall(id="h2", name="transfer_to_billing", arguments={}))
                calls = (*response.tool_calls, *handoffs)
                response = GenerateResponse(content="", tool_calls=calls, usage=response.usage)
            return response

        triage = create_agent(
            name="triage",
            generate=triage_model,
            tools=[
                work_tool(records),
                *child_agents(child_plans_of(triage_steps, "t"), records, kids),
                handoff(billing),
            ],
            stop_when=stop_when.tool_called("transfer_to_billing")
            if plan.stop_on_handoff
            else None,
        )
        abort_at = plan.abort_at if plan.abort_at is not None else SAFETY_ABORT
        events: list[Any] = []
        start = trio.current_time()
        async with triage.open_run("go") as run:
            run.add_listener("*", events.append)
            await trio.sleep(abort_at)
            run.abort("property abort")
        assert live_tasks() == []
        assert records.unfinished() == []
        result = await run.result()
        check_run(result, events, records)
        asked, inputs = planned_children(run.run_id, triage_steps, "t")
        by_id = check_children(result, events, kids.results, asked, records)
        check_subagent_children(result, by_id, asked, inputs)
        finished = check_finish(result, events, start, abort_at, None)
        switched = [e for e in events if e.type == "handoff"]
        assert len(switched) <= 1
        assert all(step <= handing for step in triage_steps_seen)
        handed = len(result.steps) >= handing and not result.steps[handing - 1].aborted
        assert bool(switched) == handed
        if handed:
            [event] = switched
            assert (event.step, event.from_agent, event.to_agent) == (handing, "triage", "billing")
            outcomes = {
                r.call_id: r for r in result.steps[handing - 1].results if r.call_id in ("h1", "h2")
            }
            winners = [r.call_id for r in outcomes.values() if r.outcome == "success"]
            assert winners == [event.call_id]
            if plan.second_handoff:
                [loser] = [r for r in outcomes.values() if r.outcome != "success"]
                assert loser.outcome == "error"
                assert "once per step" in (loser.error or "")
            # The new agent's instructions follow the handoff step's results.
            messages = result.conversation.messages
            last_result = max(i for i, m in enumerate(messages) if m.tool_call_id in set(outcomes))
            assert messages[last_result + 1].role == "system"
            assert messages[last_result + 1].content == "You handle billing."
            for request in billing_requests:
                assert [spec.name for spec in request.tools] == ["work"]
                assert request.step > handing
        else:
            assert billing_requests == []
        if finished:
            assert result.content == "billing done"
            assert len(result.steps) == handing + len(plan.after) + 1
            assert triage_steps_seen == list(range(1, handing + 1))

    run_with_mock_clock(main)


@settings(max_examples=200, deadline=None)
@given(plan=handoff_plans)
def test_a_handoff_at_a_random_step_switches_once_and_keeps_every_promise(
    plan: HandoffPlan,
) -> None:
    """A triage agent that works (subagents, tools) for random steps, hands off (maybe
    twice in one step), and a billing agent that finishes; aborts at random times."""
    run_handoff(plan)
