"""Handoffs in durable runs: recovery goes on under the agent in charge when the
journal was cut, wherever it was cut (a property test over journal prefixes)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operative import GenerateRequest, GenerateResponse, ToolCall, create_agent, stop_when, tool
from operative.conversation import ConversationHistory
from operative.durable import Durable, ToolSettled, ToolStarted, recover
from operative.multiagent import handoff, remove_tool_messages

from .test_durable_runs import open_db, shape

TRANSFER = "transfer_to_specialist"
SPECIALIST_INSTRUCTIONS = "You are the specialist."

Script = list[list[str]]
"""Per step, the tools the model calls (an empty list: the final answer)."""


def scripted(script: Script, who: str, seen: list[tuple[str, int]]) -> Any:
    """A model whose answer depends only on the conversation; it records who answered."""

    async def generate(request: GenerateRequest) -> GenerateResponse:
        step = 1 + sum(1 for m in request.conversation.messages if m.role == "assistant")
        seen.append((who, step))
        if step > len(script) or not script[step - 1]:
            return GenerateResponse(content=f"{who}: final after {step - 1} steps")
        return GenerateResponse(
            content=f"{who}: step {step}",
            tool_calls=tuple(
                ToolCall(
                    id=f"s{step}c{i}",
                    name=name,
                    arguments={} if name == TRANSFER else {"n": step * 10 + i},
                )
                for i, name in enumerate(script[step - 1])
            ),
        )

    return generate


def agents(
    script: Script,
    executions: Counter[str],
    seen: list[tuple[str, int]],
    *,
    filtered: bool = False,
    stops_at_handoff: bool = False,
) -> Any:
    """A triage agent that hands off to a specialist; each counts its own tool runs."""

    def counting(owner: str) -> Any:
        @tool(idempotent=True)
        async def work(n: int) -> str:
            """Work."""
            executions[f"{owner}:{n}"] += 1
            return f"{owner} did {n}"

        return work

    specialist = create_agent(
        name="specialist",
        instructions=SPECIALIST_INSTRUCTIONS,
        generate=scripted(script, "specialist", seen),
        tools=[counting("specialist")],
        # With the flag, a condition the handoff step itself meets: nobody judges that
        # step (it belongs to neither agent's turn), so it must not stop the run.
        stop_when=[stop_when.no_tool_calls(), stop_when.tool_called(TRANSFER)]
        if stops_at_handoff
        else None,
    )
    transfer = handoff(specialist, input_filter=remove_tool_messages if filtered else None)
    return create_agent(
        name="triage",
        generate=scripted(script, "triage", seen),
        tools=[counting("triage"), transfer],
    )


async def _full_run(
    path: Path, script: Script, filtered: bool, stops: bool = False
) -> tuple[Any, list[Any]]:
    engine, store = open_db(path)
    async with engine, store:
        durable = Durable(engine=engine, checkpoint_store=store, run_id="h")
        triage = agents(script, Counter(), [], filtered=filtered, stops_at_handoff=stops)
        async with triage.open_run("help me", durable=durable) as run:
            result = await run.result()
        return result, await store.read("h")


async def _recover_prefix(
    path: Path,
    script: Script,
    entries: list[Any],
    executions: Counter[str],
    seen: list[tuple[str, int]],
    filtered: bool,
    stops: bool = False,
) -> tuple[Any, Any]:
    engine, store = open_db(path)
    async with engine, store:
        lease = await engine.start(
            entries[0].record, run_id="h", worker_id="crashed", lease_seconds=60
        )
        for entry in entries[1:]:
            await store.append(lease, entry.seq, [entry.record])
        await engine.release(lease)
        triage = agents(script, executions, seen, filtered=filtered, stops_at_handoff=stops)
        results = await recover(engine=engine, checkpoint_store=store, agents={"triage": triage})
        return results["h"], await engine.get("h")


# Steps before the handoff, the handoff step (maybe with other work), steps after it.
handoff_scripts = st.tuples(
    st.integers(min_value=0, max_value=2),
    st.integers(min_value=0, max_value=1),
    st.integers(min_value=0, max_value=2),
).map(
    lambda sizes: [
        *(["work"] for _ in range(sizes[0])),
        ["work"] * sizes[1] + [TRANSFER],
        *(["work"] for _ in range(sizes[2])),
        [],
    ]
)


def _handoff_step(script: Script) -> int:
    return next(k for k, calls in enumerate(script, start=1) if TRANSFER in calls)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=handoff_scripts, filtered=st.booleans(), data=st.data())
def test_recovery_from_any_journal_prefix_keeps_the_handoff(
    script: Script, filtered: bool, data: st.DataObject
) -> None:
    """Cut a handed-off run's journal anywhere: recovery ends it as an uninterrupted run
    would, with the specialist answering every step after the handoff (its tools, its
    model), the specialist's instructions in the transcript exactly once, and no settled
    call run again."""
    switch = _handoff_step(script)
    with tempfile.TemporaryDirectory() as directory:
        reference, journal = trio.run(_full_run, Path(directory) / "full.db", script, filtered)
        cut = data.draw(st.integers(min_value=1, max_value=len(journal) - 1), label="cut")
        prefix = journal[:cut]
        settled = {e.record.result.call_id for e in prefix if isinstance(e.record, ToolSettled)}
        started = {e.record.call_id for e in prefix if isinstance(e.record, ToolStarted)}
        executions: Counter[str] = Counter()
        seen: list[tuple[str, int]] = []
        result, record = trio.run(
            _recover_prefix, Path(directory) / "cut.db", script, prefix, executions, seen, filtered
        )
    assert record.status == "completed"
    assert result.finish_reason == "stop-condition"
    assert result.content == reference.content == f"specialist: final after {len(script) - 1} steps"
    assert shape(result.conversation.current) == shape(reference.conversation.current)
    systems = [m for m in result.conversation.messages if m.role == "system"]
    assert [m.text for m in systems] == [SPECIALIST_INSTRUCTIONS]
    # Who answered each step the recovered worker asked a model for.
    assert all(who == ("triage" if step <= switch else "specialist") for who, step in seen)
    for step in result.steps:
        owner = "triage" if step.step <= switch else "specialist"
        for call in step.tool_calls:
            if call.name == TRANSFER:
                continue
            n = call.arguments["n"]
            runs = executions[f"{owner}:{n}"]
            assert executions[f"{'specialist' if owner == 'triage' else 'triage'}:{n}"] == 0
            if call.id in settled:
                assert runs == 0, f"settled call {call.id} ran again"
            else:
                assert runs == 1 or call.id in started, f"call {call.id} ran {runs} times"


async def test_a_run_cut_right_after_the_handoff_step_goes_on_under_the_specialist(
    tmp_path: Path,
) -> None:
    """The journal ends with the handoff step's step.done (the switch itself was never
    journaled): recovery switches, appends the specialist's instructions once, and judges
    that step by no agent's stop conditions, as the uninterrupted run did."""
    script: Script = [[TRANSFER], ["work"], []]
    reference, journal = await _full_run(tmp_path / "full.db", script, False, True)
    done = [i for i, e in enumerate(journal) if type(e.record).__name__ == "StepDone"]
    prefix = journal[: done[0] + 1]
    executions: Counter[str] = Counter()
    seen: list[tuple[str, int]] = []
    result, _ = await _recover_prefix(
        tmp_path / "cut.db", script, prefix, executions, seen, False, True
    )
    assert seen == [("specialist", 2), ("specialist", 3)]
    assert executions == Counter({"specialist:20": 1})
    history: ConversationHistory = result.conversation.current
    assert shape(history) == shape(reference.conversation.current)
    assert [m.role for m in history.messages][:4] == ["user", "assistant", "tool", "system"]


async def test_a_handoff_call_cut_in_flight_or_settled_still_switches(tmp_path: Path) -> None:
    """Cut after the handoff call started (it is idempotent: it runs again) or after it
    settled (its switch is asked for again, the call is not run): either way the next
    steps are the specialist's."""
    script: Script = [[TRANSFER], ["work"], []]
    reference, journal = await _full_run(tmp_path / "full.db", script, False)
    for kind in (ToolStarted, ToolSettled):
        index = next(i for i, e in enumerate(journal) if isinstance(e.record, kind))
        seen: list[tuple[str, int]] = []
        executions: Counter[str] = Counter()
        result, _ = await _recover_prefix(
            tmp_path / f"{kind.__name__}.db", script, journal[: index + 1], executions, seen, False
        )
        assert seen == [("specialist", 2), ("specialist", 3)], kind.__name__
        assert executions == Counter({"specialist:20": 1})
        assert shape(result.conversation.current) == shape(reference.conversation.current)
