"""Property tests: the loop invariants of DESIGN section 2 over random scripts and faults.

Each example runs in its own ``trio.run`` under a ``MockClock`` that jumps ahead whenever
every task sleeps, so hour-long hangs and aborts at any virtual time cost nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import operative
from operative import Conversation, open_run, stop_when
from operative.retry import RetryOptions
from operative.testing import (
    FaultPlan,
    RunRecorder,
    ToolCallingModel,
    check_run_invariants,
    faulty_generate,
    faulty_tool,
)
from operative.testing.strategies import (
    Interruption,
    Step,
    fault_plans,
    interruptions,
    model_scripts,
    scripted_model,
    scripted_tools,
)


def _live_tasks() -> list[trio.lowlevel.Task]:
    """Every task alive except the current one and trio's own system tasks."""
    me = trio.lowlevel.current_task()
    found: list[trio.lowlevel.Task] = []

    def walk(task: trio.lowlevel.Task) -> None:
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                if child is not me and not child.name.startswith(("<", "test ")):
                    found.append(child)
                walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return [t for t in found if not t.name.startswith("trio.")]


def run_example(
    script: list[Step],
    interruption: Interruption,
    *,
    maximum_steps: int,
    tool_concurrency: int | None,
    use_history: bool,
    slow_hooks: bool,
    cleanup: str = "none",
    slow_stream: bool = False,
) -> None:
    async def main() -> None:
        async with trio.open_nursery() as consumers:
            await example(consumers)

    async def consume(
        stream: Any, streamed: list[Any], buffered: list[int], drained: trio.Event
    ) -> None:
        """A consumer slower than the run: a block stream makes the run wait for it."""
        async for event in stream:
            buffered.append(stream.statistics()["buffered"])
            streamed.append(event)
            await trio.sleep(0.3)
        drained.set()

    async def example(consumers: trio.Nursery) -> None:
        streamed: list[Any] = []
        buffered: list[int] = []
        drained = trio.Event()
        executions: dict[str, int] = {}
        model = scripted_model(script)
        events: list[Any] = []
        seed = Conversation()
        seed.append_user_message("go")
        history = seed.current
        snapshot_of_history = history.messages
        conversation: Any = history if use_history else seed
        hooks: dict[str, Any] = {}
        if slow_hooks:

            async def slow_prepare(request: operative.GenerateRequest) -> None:
                await trio.sleep(0.25)

            async def slow_on_step(step: operative.StepResult, ctx: Any) -> None:
                await trio.sleep(0.25)

            hooks = {"prepare_step": slow_prepare, "on_step": slow_on_step}
        if cleanup != "none":
            # Clean-up that takes time (or never ends), where aborts and cancellations
            # of the caller may land too; it is bounded by cleanup_timeout.

            async def on_run_end(result: operative.RunResult) -> None:
                if cleanup == "hang":
                    await trio.sleep_forever()
                await trio.sleep(0.5)

            hooks["on_run_end"] = on_run_end
            hooks["cleanup_timeout"] = 3.0
        captured: list[operative.ActiveRun] = []
        interrupted = False
        with trio.CancelScope() as outer:
            if interruption.kind == "cancel":
                outer.deadline = trio.current_time() + interruption.at
            try:
                async with open_run(
                    generate=model,
                    conversation=conversation,
                    tools=scripted_tools(executions),
                    stop_when=stop_when.no_tool_calls(),
                    maximum_steps=maximum_steps,
                    tool_concurrency=tool_concurrency,
                    **hooks,
                ) as run:
                    captured.append(run)
                    run.add_listener("*", events.append)
                    if slow_stream:
                        stream = run.events(capacity=2)
                        await stream.__aenter__()  # subscribed now: no yield, nothing missed
                        consumers.start_soon(
                            consume,
                            stream,
                            streamed,
                            buffered,
                            drained,
                            name="test stream consumer",
                        )
                    if interruption.kind == "abort":
                        await trio.sleep(interruption.at)
                        run.abort("property abort")
                    elif interruption.kind == "interrupt":
                        await trio.sleep(interruption.at)
                        raise KeyboardInterrupt
                    elif interruption.kind == "none":
                        # Scripts may hang; a late abort (virtual time) ends those runs.
                        with trio.move_on_after(1e6):
                            await run.result()
                        run.abort("hung")
            except KeyboardInterrupt:
                interrupted = True
            except operative.CleanupError:
                assert cleanup == "hang"
        if interruption.kind == "interrupt":
            assert interrupted  # the block's own exception comes through, unwrapped
        # Invariant 6: when open_run returns, no task the run started is alive.
        assert _live_tasks() == [], _live_tasks()
        run = captured[0]
        if cleanup == "hang":
            # The clean-up never finished: the run does not read as a success.
            with pytest.raises(operative.CleanupError):
                await run.result()
            result = run._control.ended_result
            assert result is not None
        else:
            result = await run.result()
        check_run_invariants(result, events, maximum_steps=maximum_steps, executions=executions)
        # Invariant 5: the caller's history object is never mutated.
        assert history.messages is snapshot_of_history
        assert len(history.messages) == 1
        if interruption.kind == "cancel" and outer.cancelled_caught:
            assert result.finish_reason in ("aborted", "error")
        if result.finish_reason == "aborted" and interruption.kind == "abort":
            assert result.abort_reason == "property abort"
        if interrupted and result.finish_reason == "aborted":
            # Ctrl-C in the block is a shutdown, recorded as such (never as an abort).
            assert result.abort_reason is not None
            assert result.abort_reason.startswith("interrupted (KeyboardInterrupt)")
        if slow_stream:
            # A bounded stream behind a slow consumer holds at most its capacity, plus
            # what the run's clean-up sends (``step.aborted`` and the terminal event:
            # clean-up never waits for a consumer), and loses nothing.
            await drained.wait()  # the stream ends with the run; the consumer drains it
            assert [e.type for e in streamed] == [e.type for e in events]
            cleanup_events = sum(
                e.type in ("step.aborted", "run.completed", "run.aborted", "run.error")
                for e in events
            )
            assert max(buffered, default=0) <= 2 + cleanup_events
        # Every call that started a tool body was counted, and hanging or cut calls
        # carry a cancelled result: no result is ever lost.
        for step in result.steps:
            for call, outcome in zip(step.tool_calls, step.results, strict=True):
                assert outcome.call_id == call.id

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=300, deadline=None)
@given(
    script=model_scripts(),
    interruption=interruptions(),
    maximum_steps=st.integers(1, 6),
    tool_concurrency=st.none() | st.integers(1, 3),
    use_history=st.booleans(),
    slow_hooks=st.booleans(),
    cleanup=st.sampled_from(["none", "slow", "hang"]),
    slow_stream=st.booleans(),
)
def test_loop_invariants_hold_for_any_script(
    script: list[Step],
    interruption: Interruption,
    maximum_steps: int,
    tool_concurrency: int | None,
    use_history: bool,
    slow_hooks: bool,
    cleanup: str,
    slow_stream: bool,
) -> None:
    """Every invariant holds whatever the model says, the tools do (sync tools in threads
    included), where an abort, a cancellation or Ctrl-C lands (clean-up included), however
    long clean-up takes, and behind a slow consumer of a bounded event stream."""
    run_example(
        script,
        interruption,
        maximum_steps=maximum_steps,
        tool_concurrency=tool_concurrency,
        use_history=use_history,
        slow_hooks=slow_hooks,
        cleanup=cleanup,
        slow_stream=slow_stream,
    )


@operative.tool(timeout=120)
async def lookup(key: str, limit: int = 3) -> list[str]:
    """Look ``key`` up (a tool the schema-driven model fills in)."""
    await trio.sleep(0.5)
    return [key] * min(limit, 3)


@operative.tool
async def note(text: str, tags: list[str] = []) -> str:  # noqa: B006 - never mutated
    """Write a note."""
    return text


@settings(max_examples=100, deadline=None)
@given(
    tool_plan=fault_plans(call_ids=["call_1_0_lookup", "call_1_1_note"]),
    model_plan=fault_plans(abort=False),
    seed=st.integers(0, 3),
    retry=st.booleans(),
    maximum_steps=st.integers(1, 4),
)
def test_loop_invariants_hold_under_fault_plans(
    tool_plan: FaultPlan, model_plan: FaultPlan, seed: int, retry: bool, maximum_steps: int
) -> None:
    """Faults injected into tools and the model (with or without retries) break no invariant."""

    async def main() -> None:
        recorder = RunRecorder()
        executions: dict[str, int] = {}

        def counted(tool: operative.Tool) -> operative.Tool:
            async def count(arguments: Any, ctx: operative.ToolContext) -> Any:
                executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
                return await tool._invoke(arguments, None)

            return operative.Tool(
                count,
                name=tool.name,
                description=tool.description,
                input_type=tool.input_type,
                input_schema=tool.input_schema,
                timeout=tool.timeout,
            )

        seed_conversation = Conversation()
        seed_conversation.append_user_message("go")
        async with open_run(
            generate=faulty_generate(ToolCallingModel(seed=seed), model_plan),
            conversation=seed_conversation,
            tools=[faulty_tool(counted(lookup), tool_plan), faulty_tool(counted(note), tool_plan)],
            stop_when=stop_when.no_tool_calls(),
            maximum_steps=maximum_steps,
            retry=RetryOptions(max_attempts=2, jitter=False) if retry else None,
        ) as run:
            recorder.attach(run)
            with trio.move_on_after(10_000):  # a hang without an abort ends here
                await tool_plan.abort_when_due(run)
                await run.result()
            run.abort("bounded")
        assert _live_tasks() == [], _live_tasks()
        result = await run.result()
        recorder.check(result, maximum_steps=maximum_steps, executions=executions)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
