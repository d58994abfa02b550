"""``@tool(needs_approval=...)``: a tool says itself that its calls wait for a person."""

from __future__ import annotations

import secrets
from typing import Any

import msgspec
import pytest
from _doubles import calls_then

from operative import Toolbox, ToolCall, ToolResult, create_agent, stop_when
from operative.conversation import resolve_tool_result
from operative.kvstore import MemoryStore
from operative.testing import FaultPlan, ScriptedModel, faulty_tool
from operative.tools import (
    ApprovalError,
    ApprovalPolicy,
    Authority,
    PendingApproval,
    RequestContext,
    Tool,
    ToolContext,
    ToolDefinitionError,
    tool,
)


class Person:
    """Answers every approval request the same way, and remembers what it was asked."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.asked: list[dict[str, Any]] = []

    async def __call__(self, pending: PendingApproval) -> bool:
        self.asked.append(dict(pending.arguments))
        return self.answer


def _pay_tool(ran: list[int], needs_approval: Any, **options: Any) -> Tool:
    @tool(needs_approval=needs_approval, **options)
    async def pay(amount: int) -> str:
        """Pay an amount."""
        ran.append(amount)
        return f"paid {amount}"

    return pay


def _model(*amounts: int) -> ScriptedModel:
    calls = tuple(
        ToolCall(id=f"c{index}", name="pay", arguments={"amount": amount})
        for index, amount in enumerate(amounts)
    )
    return calls_then(*calls)


def _outcomes(results: tuple[ToolResult, ...]) -> list[str]:
    return [result.outcome for result in results]


@pytest.mark.parametrize("answer", [True, False])
async def test_needs_approval_true_asks_on_approval_without_a_secret_or_policy(
    answer: bool,
) -> None:
    """tools= + on_approval=: a read-only tool declared needs_approval waits for the person."""
    ran: list[int] = []
    person = Person(answer)
    agent = create_agent(generate=_model(5), tools=[_pay_tool(ran, True)], on_approval=person)
    result = await agent.run("pay 5")
    assert person.asked == [{"amount": 5}]
    if answer:
        assert _outcomes(result.steps[0].results) == ["success"]
        assert ran == [5]
    else:
        assert _outcomes(result.steps[0].results) == ["denied"]
        assert ran == []


async def test_a_tool_without_needs_approval_is_not_asked_about() -> None:
    """The same read-only tool without needs_approval runs without asking."""
    ran: list[int] = []
    person = Person()
    agent = create_agent(generate=_model(5), tools=[_pay_tool(ran, False)], on_approval=person)
    result = await agent.run("pay 5")
    assert person.asked == []
    assert ran == [5]
    assert _outcomes(result.steps[0].results) == ["success"]


async def test_a_callable_decides_per_call_from_the_arguments() -> None:
    """needs_approval=lambda arguments: ... asks about the large payment only."""
    ran: list[int] = []
    person = Person()
    agent = create_agent(
        generate=_model(5, 500),
        tools=[_pay_tool(ran, lambda arguments: arguments["amount"] > 100)],
        on_approval=person,
    )
    result = await agent.run("pay 5 and 500")
    assert person.asked == [{"amount": 500}]
    assert sorted(ran) == [5, 500]
    assert _outcomes(result.steps[0].results) == ["success", "success"]


async def test_an_async_callable_gets_the_call_context() -> None:
    """A two-parameter (async) callable gets the call's ToolContext, request included."""
    seen: list[tuple[str, str, int, str]] = []

    async def unless_treasurer(arguments: dict[str, Any], context: ToolContext) -> bool:
        assert context.request_context is not None
        seen.append((context.call_id, context.run_id, context.step, context.agent_id))
        return "treasurer" not in context.request_context.authority.capabilities

    ran: list[int] = []
    person = Person()
    for capabilities, asked in (((), 1), (("treasurer",), 1)):
        context = RequestContext(
            authority=Authority(
                principal_id="ana", tenant_id="acme", owner_id="ana", capabilities=capabilities
            ),
            agent_id="payer",
            run_id="run-1",
        )
        agent = create_agent(
            generate=_model(50),
            tools=[_pay_tool(ran, unless_treasurer)],
            on_approval=person,
            request_context=context,
            name="payer",
        )
        await agent.run("pay 50")
        assert len(person.asked) == asked
    assert ran == [50, 50]
    assert seen[0][0] == "c0"
    assert seen[0][2:] == (1, "payer")


async def test_the_callable_cannot_change_what_runs() -> None:
    """The callable gets a copy of the arguments: changing it changes neither the
    signed approval nor the call that runs."""

    def meddle(arguments: dict[str, Any]) -> bool:
        arguments["amount"] = 1
        return True

    ran: list[int] = []
    person = Person()
    agent = create_agent(generate=_model(7), tools=[_pay_tool(ran, meddle)], on_approval=person)
    await agent.run("pay 7")
    assert person.asked == [{"amount": 7}]
    assert ran == [7]


@pytest.mark.parametrize(
    ("decide", "why"),
    [
        (lambda arguments: 1 / 0, "ZeroDivisionError"),
        (lambda arguments: None, "return True"),
    ],
)
async def test_a_failing_callable_means_the_call_does_not_run(decide: Any, why: str) -> None:
    """A callable that raises or returns a non-bool: an error result, the tool never runs."""
    ran: list[int] = []
    person = Person()
    agent = create_agent(generate=_model(5), tools=[_pay_tool(ran, decide)], on_approval=person)
    result = await agent.run("pay 5")
    (settled,) = result.steps[0].results
    assert settled.outcome == "error"
    assert "could not be sent for approval" in (settled.error or "")
    assert why in (settled.detail or "")
    assert ran == []
    assert person.asked == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("yes", "needs_approval takes True, False or a callable"),
        (lambda a, b, c: True, "takes the call's arguments"),
    ],
)
def test_needs_approval_is_checked_when_the_tool_is_defined(value: Any, message: str) -> None:
    """Anything but a bool or a one- or two-parameter callable is refused at once."""
    with pytest.raises(ToolDefinitionError, match=message):
        _pay_tool([], value)


def test_a_tool_that_needs_approval_gets_a_derived_version() -> None:
    """No version=: one derived from name, description and schema (stable; changes with
    the schema); version= wins; a renamed tool derives its own; others stay unversioned."""
    first, again = _pay_tool([], True), _pay_tool([], lambda arguments: False)
    assert first.version is not None
    assert first.version.startswith("auto-")
    assert len(first.version) == len("auto-") + 16
    assert again.version == first.version

    @tool(name="pay", needs_approval=True)
    async def pay(amount: int, currency: str) -> str:
        """Pay an amount."""
        return "paid"

    assert pay.version not in (None, first.version)
    assert _pay_tool([], True, version="3").version == "3"
    renamed = first.renamed("send")
    assert renamed.version not in (None, first.version)
    assert renamed.needs_approval is True
    assert _pay_tool([], False).version is None


async def test_the_signed_stateless_flow_parks_and_resumes_on_another_toolbox() -> None:
    """A toolbox with no approval policy parks a needs_approval call; a second toolbox
    with the same secret and state runs it once; a changed tool is refused."""
    secret, state = secrets.token_bytes(32), MemoryStore()
    ran: list[int] = []
    context = RequestContext(
        authority=Authority(principal_id="ana", tenant_id="acme", owner_id="ana"),
        agent_id="payer",
        run_id="chat-1",
    )

    def toolbox(pay: Tool) -> Toolbox:
        return Toolbox([pay], approval_secret=secret, approval_state=state)

    agent = create_agent(
        generate=_model(500),
        toolbox=toolbox(_pay_tool(ran, lambda arguments: arguments["amount"] > 100)),
        request_context=context,
        stop_when=[stop_when.pending_approval(), stop_when.no_tool_calls()],
    )
    result = await agent.run("pay 500")
    (parked,) = result.steps[-1].pending_approvals
    assert parked.outcome == "action-required"
    assert ran == []
    assert parked.pending_approval is not None
    wire = msgspec.json.encode(parked.pending_approval)

    approval = msgspec.json.decode(wire, type=PendingApproval)
    changed = toolbox(_pay_tool(ran, True, description="Pay an amount, now in cents."))
    with pytest.raises(ApprovalError) as refused:
        await changed.resume_approval(approval, request_context=context)
    assert refused.value.reason == "version-changed"

    later = toolbox(_pay_tool(ran, lambda arguments: arguments["amount"] > 100))
    resumed = await later.resume_approval(approval, request_context=context)
    assert resumed.outcome == "success"
    assert ran == [500]
    resolved = resolve_tool_result(result.conversation.current, approval.call_id, resumed)
    assert resolved.messages[-1].content == "paid 500"
    with pytest.raises(ApprovalError) as replayed:
        await later.resume_approval(approval, request_context=context)
    assert replayed.value.reason == "replayed"
    assert ran == [500]


async def test_in_process_approvals_sign_with_a_secret_of_their_own() -> None:
    """Without approval_secret each toolbox draws its own: another cannot resume its approval."""
    ran: list[int] = []
    call = ToolCall(id="c1", name="pay", arguments={"amount": 9})
    first = Toolbox([_pay_tool(ran, True)])
    parked = await first.execute(call)
    assert parked.pending_approval is not None
    with pytest.raises(ApprovalError) as refused:
        await Toolbox([_pay_tool(ran, True)]).resume_approval(parked.pending_approval)
    assert refused.value.reason == "bad-signature"
    assert (await first.resume_approval(parked.pending_approval)).value == "paid 9"
    assert ran == [9]


async def test_toolbox_with_a_tool_that_needs_approval_takes_on_approval() -> None:
    """toolbox= without an approval policy is accepted with on_approval= when a tool
    needs approval, and the handler decides."""
    ran: list[int] = []
    person = Person()
    agent = create_agent(
        generate=_model(5), toolbox=Toolbox([_pay_tool(ran, True)]), on_approval=person
    )
    result = await agent.run("pay 5")
    assert person.asked == [{"amount": 5}]
    assert _outcomes(result.steps[0].results) == ["success"]


async def test_a_policy_never_exempts_a_tool_that_needs_approval() -> None:
    """ApprovalPolicy('never') parks nothing of its own, but a tool's needs_approval holds."""
    ran: list[int] = []
    box = Toolbox([_pay_tool(ran, True)], approval_policy=ApprovalPolicy(mode="never"))
    parked = await box.execute(ToolCall(id="c1", name="pay", arguments={"amount": 5}))
    assert parked.outcome == "action-required"
    assert ran == []


async def test_a_mutating_tool_with_a_callable_is_decided_by_the_callable() -> None:
    """Under the on-mutation policy on_approval= implies, a mutating tool that decides
    per call runs its small payments unasked; an unversioned mutating tool is accepted
    once it declares needs_approval."""
    ran: list[int] = []
    person = Person()
    agent = create_agent(
        generate=_model(5, 500),
        tools=[_pay_tool(ran, lambda arguments: arguments["amount"] > 100, mutates=True)],
        on_approval=person,
    )
    await agent.run("pay 5 and 500")
    assert person.asked == [{"amount": 500}]
    assert sorted(ran) == [5, 500]

    with pytest.raises(ToolDefinitionError, match="needs_approval=True"):
        create_agent(
            generate=_model(5), tools=[_pay_tool(ran, False, mutates=True)], on_approval=person
        )
    agent = create_agent(
        generate=_model(5), tools=[_pay_tool(ran, True, mutates=True)], on_approval=person
    )
    await agent.run("pay 5")
    assert person.asked == [{"amount": 500}, {"amount": 5}]


async def test_faulty_tool_keeps_needs_approval() -> None:
    """A tool wrapped with injected faults still waits for a person."""
    ran: list[int] = []
    wrapped = faulty_tool(_pay_tool(ran, True), FaultPlan(faults=()))
    parked = await Toolbox([wrapped]).execute(
        ToolCall(id="c1", name="pay", arguments={"amount": 5})
    )
    assert parked.outcome == "action-required"
    assert ran == []
