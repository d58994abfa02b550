"""Session handles: runs that persist atomically, timers in virtual time, signals, liveness."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
import trio
import trio.testing

import operative
from operative import (
    GenerateRequest,
    GenerateResponse,
    InvalidArgument,
    ToolCall,
    create_agent,
    stop_when,
    tool,
)
from operative.kvstore import ConditionalTextValueStore, Operation
from operative.liveness import LivenessSnapshot
from operative.sessions import (
    AgentSession,
    MissingRunOptionsError,
    MonitorResult,
    SessionPersistenceError,
    SessionStore,
    create_session_store,
    open_session,
    wait_for_signal,
)
from operative.testing import HANG, ScriptedModel

from .conftest import HookedStore


async def test_run_persists_transcript_and_outcome_in_one_write(
    kv: ConditionalTextValueStore,
) -> None:
    """A turn is reserved, run, then settled: transcript and RunRef outcome in one batch."""
    hooked = HookedStore(kv)
    sessions = create_session_store(hooked)
    batches: list[Sequence[Operation]] = []

    async def record(operations: Sequence[Operation]) -> None:
        batches.append(operations)

    agent = create_agent(generate=ScriptedModel(["Hello!"]), name="helper", instructions="Be kind.")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        hooked.before_batch = record
        result = await handle.run("hi")
    assert result.content == "Hello!"
    assert len(batches) == 2  # the reservation, then the settlement
    settled = msgspec.json.decode(batches[1][0].value, type=AgentSession)  # type: ignore[union-attr]
    stored = await sessions.load("s")
    assert stored == settled
    assert [m.role for m in stored.conversation_history.messages] == [
        "system",
        "user",
        "assistant",
    ]
    (ref,) = stored.runs
    assert ref.run_id == result.run_id
    assert ref.user_message_id == stored.conversation_history.messages[1].id
    assert ref.outcome is not None
    assert ref.outcome.finish_reason == "stop-condition"
    assert ref.outcome.succeeded
    assert ref.ended_at is not None
    assert handle.session == stored
    reserved = msgspec.json.decode(batches[0][0].value, type=AgentSession)  # type: ignore[union-attr]
    assert reserved.runs[0].outcome is None  # unsettled until the run ends


async def test_second_turn_continues_the_transcript(sessions: SessionStore) -> None:
    """A second handle on the same session sees the first turn; instructions appear once."""
    model = ScriptedModel(["one", "two"])
    agent = create_agent(generate=model, name="helper", instructions="Be kind.")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        await handle.run("first")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        result = await handle.run("second")
    assert result.content == "two"
    assert [m.content for m in model.requests[1].conversation.messages] == [
        "Be kind.",
        "first",
        "one",
        "second",
    ]
    stored = await sessions.load("s")
    assert stored is not None
    assert len(stored.runs) == 2


async def test_run_options_instead_of_an_agent(sessions: SessionStore) -> None:
    """run_options= runs through open_run with the session's conversation and run id."""
    options = {"generate": ScriptedModel(["ok"]), "stop_when": stop_when.no_tool_calls()}
    async with open_session("s", store=sessions, agent_name="x", run_options=options) as handle:
        result = await handle.run("go")
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].run_id == result.run_id
    assert [m.content for m in stored.conversation_history.messages] == ["go", "ok"]
    with pytest.raises(InvalidArgument):
        async with open_session(
            "s",
            store=sessions,
            agent_name="x",
            run_options={"generate": options["generate"], "conversation": None},
        ):
            pass  # pragma: no cover


async def test_missing_run_options_writes_nothing(
    sessions: SessionStore, kv: ConditionalTextValueStore
) -> None:
    """run() without agent or run options raises before reserving anything."""
    async with open_session("s", store=sessions, agent_name="helper") as handle:
        before = await sessions.load("s")
        with pytest.raises(MissingRunOptionsError):
            await handle.run("hi")
        assert await sessions.load("s") == before
    assert before is not None
    assert before.runs == ()
    assert isinstance(MissingRunOptionsError("x"), InvalidArgument)


async def test_persistence_failure_raises(kv: ConditionalTextValueStore) -> None:
    """When the settling write fails, run raises and the run has no stored outcome."""
    hooked = HookedStore(kv)
    sessions = create_session_store(hooked)
    writes = 0

    async def fail_second(operations: Sequence[Operation]) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:
            raise ConnectionError("database went away")

    agent = create_agent(generate=ScriptedModel(["done"]), name="helper")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        hooked.before_batch = fail_second
        with pytest.raises(SessionPersistenceError) as info:
            await handle.run("hi")
    error = info.value
    assert isinstance(error.__cause__, ConnectionError)
    assert error.session_id == "s"
    assert error.result is not None
    assert error.result.content == "done"  # type: ignore[attr-defined]
    stored = await sessions.load("s")
    assert stored is not None
    (ref,) = stored.runs
    assert ref.run_id == error.run_id
    assert ref.outcome is None  # never reads as a success
    assert [m.role for m in stored.conversation_history.messages] == ["user"]


async def test_concurrent_edits_during_a_run_are_kept(sessions: SessionStore) -> None:
    """Metadata and messages written by others while a run goes on survive its settlement."""

    async def model(request: GenerateRequest) -> GenerateResponse:
        def edit(current: AgentSession) -> AgentSession:
            conversation = current.conversation_history
            return msgspec.structs.replace(
                current,
                metadata={"note": "edited"},
                conversation_history=msgspec.structs.replace(
                    conversation, metadata={**conversation.metadata, "other": 1}
                ),
            )

        await sessions.update("s", edit)
        return GenerateResponse(content="answer")

    agent = create_agent(generate=model, name="helper")
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        await handle.run("hi")
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.metadata == {"note": "edited"}
    assert stored.conversation_history.metadata == {"other": 1}
    assert [m.content for m in stored.conversation_history.messages] == ["hi", "answer"]


async def test_sleep_over_hours(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """sleep waits on trio's clock; cancel() cuts it short."""
    async with open_session("s", store=sessions, agent_name="a") as handle:
        start = trio.current_time()
        assert await handle.sleep("PT2H") is True
        assert trio.current_time() - start == pytest.approx(7200)
        async with trio.open_nursery() as nursery:
            outcomes: list[bool] = []

            async def sleeper() -> None:
                outcomes.append(await handle.sleep("P1D"))

            nursery.start_soon(sleeper)
            await trio.sleep(60)
            handle.cancel()
        assert outcomes == [False]
        assert trio.current_time() - start == pytest.approx(7260)


async def test_monitor_until(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """monitor runs a turn per tick, hours apart in virtual time, until until() holds."""
    model = ScriptedModel(["degraded", "degraded", "degraded", "degraded", "healthy"])
    agent = create_agent(generate=model, name="watcher")
    pulses: list[LivenessSnapshot] = []
    async with open_session("s", store=sessions, agent_name="watcher", agent=agent) as handle:
        handle.subscribe_snapshot(pulses.append)
        start = trio.current_time()
        outcome = await handle.monitor(
            every="PT1H", input="Check health", until=lambda r: r.content == "healthy"
        )
        elapsed = trio.current_time() - start
    assert outcome == MonitorResult(ticks=5, result=outcome.result, stopped_by="until")
    assert outcome.result is not None
    assert outcome.result.content == "healthy"
    assert elapsed == pytest.approx(4 * 3600)
    stored = await sessions.load("s")
    assert stored is not None
    assert len(stored.runs) == 5
    assert all(ref.outcome is not None for ref in stored.runs)
    assert all(s.kind == "session" and not s.terminal for s in pulses)


async def test_monitor_max_ticks_and_validation(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """max_ticks bounds the loop; bad durations are refused eagerly."""
    agent = create_agent(generate=ScriptedModel(lambda request: "tick"), name="w")
    async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
        outcome = await handle.monitor(every=30, input="ping", max_ticks=3)
        assert (outcome.ticks, outcome.stopped_by) == (3, "max-ticks")
        with pytest.raises(InvalidArgument):
            await handle.monitor(every="P1M", input="ping")
        with pytest.raises(InvalidArgument):
            await handle.monitor(every="PT0S", input="ping")


async def test_cancel_stops_monitor_and_in_flight_run(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """cancel() ends a monitor between ticks and aborts a run in flight (outcome stored)."""
    calls = 0

    def script(request: GenerateRequest) -> object:
        nonlocal calls
        calls += 1
        return HANG if calls == 4 else "still waiting"

    agent = create_agent(generate=ScriptedModel(script), name="w")  # type: ignore[arg-type]
    outcomes: list[MonitorResult] = []
    async with (
        open_session("s", store=sessions, agent_name="w", agent=agent) as handle,
        trio.open_nursery() as nursery,
    ):

        async def watch() -> None:
            outcomes.append(await handle.monitor(every="PT30M", input="status?"))

        nursery.start_soon(watch)
        await trio.sleep(3 * 1800 + 10)  # the fourth tick's model call hangs
        handle.cancel()
    (outcome,) = outcomes
    assert outcome.stopped_by == "cancelled"
    assert outcome.ticks == 4
    stored = await sessions.load("s")
    assert stored is not None
    assert [ref.outcome.finish_reason for ref in stored.runs if ref.outcome] == [
        "stop-condition",
        "stop-condition",
        "stop-condition",
        "aborted",
    ]


async def test_cancel_aborts_a_plain_run(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A run stopped by cancel() returns an aborted result whose outcome is stored."""
    agent = create_agent(generate=ScriptedModel([HANG]), name="w")
    async with (
        open_session("s", store=sessions, agent_name="w", agent=agent) as handle,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_cancel_later, handle.cancel, 5.0)
        result = await handle.run("go")
    assert result.finish_reason == "aborted"
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "aborted"


async def _cancel_later(cancel: object, delay: float) -> None:
    await trio.sleep(delay)
    cancel()  # type: ignore[operator]


async def test_caller_cancellation_propagates_and_is_stored(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """The caller's own cancel scope propagates, after the aborted outcome is stored."""
    agent = create_agent(generate=ScriptedModel([HANG]), name="w")
    async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
        with trio.move_on_after(10) as scope:
            await handle.run("go")
    assert scope.cancelled_caught
    stored = await sessions.load("s")
    assert stored is not None
    assert stored.runs[0].outcome is not None
    assert stored.runs[0].outcome.finish_reason == "aborted"


@tool
async def ask_human(question: str) -> str:
    """Ask a person and wait for their answer."""
    answer = await wait_for_signal("answer", prompt=question)
    return f"human said {answer}"


async def test_signal_reaches_a_parked_tool_and_liveness_shows_waiting(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A tool parked in wait_for_signal makes the session waiting; signal() resumes it."""
    model = ScriptedModel(
        [
            GenerateResponse(
                tool_calls=(ToolCall(id="c1", name="ask_human", arguments={"question": "ok?"}),)
            ),
            "thanks",
        ]
    )
    agent = create_agent(generate=model, name="helper", tools=[ask_human])
    seen: list[LivenessSnapshot] = []
    async with open_session("s", store=sessions, agent_name="helper", agent=agent) as handle:
        assert handle.signal("answer", "too early") is False
        subscription = handle.subscribe_snapshot(seen.append)
        async with trio.open_nursery() as nursery:
            results: list[object] = []

            async def turn() -> None:
                results.append(await handle.run("please ask"))

            nursery.start_soon(turn)
            await trio.sleep(3600)  # parked: an hour of silence is not a stall
            parked = handle.snapshot()
            assert parked.kind == "session"
            assert parked.status == "waiting"
            assert parked.declared_wait is not None
            assert parked.declared_wait.reason == "review"
            assert parked.declared_wait.detail == "ok?"
            assert parked.declared_wait.deadline is None
            assert handle.signal("answer", "yes") is True
        subscription.unsubscribe()
        assert handle.snapshot().status == "running"
    stored = await sessions.load("s")
    assert stored is not None
    tool_message = stored.conversation_history.messages[2]
    assert tool_message.role == "tool"
    assert "human said yes" in str(tool_message.content)
    assert any(s.status == "waiting" for s in seen)
    assert not any(s.terminal for s in seen)


async def test_wait_for_signal_outside_a_session_run() -> None:
    """wait_for_signal outside a session run is a clear misuse error."""
    with pytest.raises(InvalidArgument):
        await wait_for_signal("x")


async def test_start_monitor_lives_in_the_session_block(
    sessions: SessionStore, autojump_clock: trio.testing.MockClock
) -> None:
    """A background monitor runs in the open_session nursery and ends with the block."""
    agent = create_agent(generate=ScriptedModel(lambda request: "fine"), name="w")
    done: list[MonitorResult] = []
    async with open_session("s", store=sessions, agent_name="w", agent=agent) as handle:
        handle.start_monitor(every="PT10M", input="ok?", max_ticks=2, on_done=done.append)
        handle.start_monitor(every="PT10M", input="forever?")
        await trio.sleep(3599)
    assert [(d.ticks, d.stopped_by) for d in done] == [(2, "max-ticks")]
    stored = await sessions.load("s")
    assert stored is not None
    assert all(ref.outcome is not None for ref in stored.runs)
    assert len(stored.runs) == 2 + 6  # the endless one ticked at 0, 10, ..., 50 minutes


async def test_open_session_validation(sessions: SessionStore) -> None:
    """open_session refuses bad combinations eagerly."""
    agent = create_agent(generate=ScriptedModel([]), name="a")
    with pytest.raises(InvalidArgument):
        async with open_session(
            "s", store=sessions, agent_name="a", agent=agent, run_options={"generate": agent}
        ):
            pass  # pragma: no cover
    with pytest.raises(InvalidArgument):
        async with open_session("s", store=object(), agent_name="a"):  # type: ignore[arg-type]
            pass  # pragma: no cover
    async with open_session("s", store=sessions, agent_name="a") as handle:
        with pytest.raises(InvalidArgument):
            await handle.run(42)  # type: ignore[arg-type]


async def test_session_events_announce_loads_and_saves(sessions: SessionStore) -> None:
    """session.loaded (at open, also for late listeners) and session.saved per write."""
    agent = create_agent(generate=ScriptedModel(["one"]), name="helper")
    seen: list[tuple[str, bool | str | None]] = []
    async with open_session("ev", store=sessions, agent_name="helper", agent=agent) as handle:
        handle.add_listener("session.loaded", lambda e: seen.append((e.type, e.is_new)))
        handle.add_listener("session.saved", lambda e: seen.append((e.type, e.outcome)))
        await handle.run("hello")
        with pytest.raises(operative.InvalidArgument, match=r"session\.saved"):
            handle.add_listener("run.started", print)
    assert seen == [
        ("session.loaded", True),
        ("session.saved", None),
        ("session.saved", "stop-condition"),
    ]
