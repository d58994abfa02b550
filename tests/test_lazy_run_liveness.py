"""A lazy agent's run keeps the liveness contract across the switch to the real run.

What ``open_run`` returns (a ``LoadingRun``) is observed while the definition loads, in
another task than the one entering its block; once loaded, the block has the loaded
agent's ``ActiveRun`` and the subscriptions follow it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from operative import Agent, FinishReason, InvalidArgument, RunResult, create_agent
from operative._lazy._agent import create_lazy_agent
from operative._lazy._run import LoadingRun
from operative.errors import AsyncDefinitionLoadError
from operative.liveness import LivenessSnapshot
from operative.testing import HANG, ScriptedModel


def slow_agent(*, answers: int = 1) -> Agent:
    """A real agent whose scripted model thinks for a virtual second per answer."""
    model = ScriptedModel([f"answer {n}" for n in range(answers)], delay=1)
    return create_agent(generate=model, name="slow")


def loading(agent: Any, seconds: float = 5) -> Any:
    """A loader that takes ``seconds`` of virtual time, then returns ``agent``."""

    async def loader() -> Any:
        await trio.sleep(seconds)
        return agent

    return loader


def check_contract(seen: list[LivenessSnapshot]) -> None:
    """Revisions only grow, and the last snapshot is the one terminal snapshot."""
    revisions = [s.revision for s in seen]
    assert revisions == sorted(set(revisions))
    assert sum(s.terminal for s in seen) == 1
    assert seen[-1].terminal


def subscriptions(opening: LoadingRun) -> int:
    """Subscriptions the loading run holds or forwards (a helper, so narrowing never
    sticks)."""
    return opening._liveness.statistics()["subscriptions"]


def real_subscriptions(opening: LoadingRun) -> int:
    """Subscriptions on the loaded agent's run's own tracker."""
    real = opening.run
    assert real is not None
    return int(real._control.liveness.statistics()["subscriptions"])


# -- following the run -------------------------------------------------------------


async def test_subscribing_before_the_load_follows_the_run_to_its_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """`starting` at once, then the real run's changes, then the terminal snapshot once."""
    lazy = create_lazy_agent(loading(slow_agent()))
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    subscription = opening.subscribe_snapshot(seen.append)
    assert [(s.status, s.revision) for s in seen] == [("starting", 0)]

    async def watch() -> None:
        await trio.sleep(1)
        assert len(seen) == 1  # still loading: nothing changed

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        async with opening as run:
            pass
    result = await run.result()
    assert result.finish_reason == FinishReason.STOP_CONDITION
    check_contract(seen)
    assert seen[0].status == "starting"
    assert "running" in [s.status for s in seen]
    assert seen[-1].status == "completed"
    assert seen[-1].finish_reason == result.finish_reason
    assert seen[-1].id == run.run_id == result.run_id == opening.run_id
    assert seen[-1].revision == opening.snapshot().revision == run.snapshot().revision
    assert not subscription.active
    assert subscription.delivered == len(seen)
    assert subscriptions(opening) == 0
    assert real_subscriptions(opening) == 0


async def test_subscribing_after_the_real_run_started(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A subscription made mid-run starts with the real run's current snapshot."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=1))
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    async with opening as run:
        async for _ in run.events("step.started"):
            break
        now = opening.snapshot()
        assert now.status == "running"
        subscription = opening.subscribe_snapshot(seen.append)
        assert len(seen) == 1
        assert (seen[0].status, seen[0].revision, seen[0].id) == (
            now.status,
            now.revision,
            run.run_id,
        )
        assert real_subscriptions(opening) == 1
    await run.result()
    check_contract(seen)
    assert seen[0].revision == now.revision
    assert seen[-1].status == "completed"
    assert not subscription.active
    assert real_subscriptions(opening) == 0


async def test_subscribing_after_the_run_finished_delivers_the_terminal_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Finished work: one delivery, the terminal snapshot; the subscription is over."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=1))
    opening = lazy.open_run("hi")
    async with opening as run:
        pass
    await run.result()
    seen: list[LivenessSnapshot] = []
    subscription = opening.subscribe_snapshot(seen.append)
    assert [s.status for s in seen] == ["completed"]
    assert seen[0].revision == run.snapshot().revision
    assert not subscription.active
    subscription.unsubscribe()  # nothing to do
    assert subscriptions(opening) == 0


# -- runs that end before the agent loaded -----------------------------------------


async def test_an_abort_before_the_load_delivers_aborted_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """starting, then aborted (revision 1), once; a later subscriber gets aborted once."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=3600))
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    subscription = opening.subscribe_snapshot(seen.append)

    async def leave() -> None:
        await trio.sleep(1)
        opening.abort("the user left")
        opening.abort("twice")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leave)
        async with opening as run:
            pass
    result = await run.result()
    assert result.finish_reason == FinishReason.ABORTED
    assert [(s.status, s.revision) for s in seen] == [("starting", 0), ("aborted", 1)]
    assert seen[-1].finish_reason == FinishReason.ABORTED
    assert not subscription.active
    late: list[LivenessSnapshot] = []
    opening.subscribe_snapshot(late.append)
    assert [(s.status, s.revision) for s in late] == [("aborted", 1)]
    assert subscriptions(opening) == 0
    assert trio.current_time() < 2


async def test_a_load_failure_delivers_failed_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A loader that raises: starting, then failed, once, on callbacks and streams alike."""

    async def broken() -> Agent:
        await trio.sleep(2)
        raise ConnectionError("registry unreachable")

    lazy = create_lazy_agent(broken)
    seen: list[LivenessSnapshot] = []
    streamed: list[str] = []
    opening = lazy.open_run("hi")
    opening.subscribe_snapshot(seen.append)

    async def follow() -> None:
        async with opening.snapshots() as stream:
            streamed.extend([s.status async for s in stream])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with opening as run:
            pass
    result = await run.result()
    assert isinstance(result.error, AsyncDefinitionLoadError)
    assert [s.status for s in seen] == streamed == ["starting", "failed"]
    check_contract(seen)
    assert seen[-1].finish_reason == FinishReason.ERROR
    assert opening.snapshot().status == "failed"


async def test_a_cancelled_caller_before_the_load_ends_the_subscription(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An outer deadline during the load: the subscriber still gets `aborted`, once."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=100))
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    opening.subscribe_snapshot(seen.append)
    with trio.move_on_after(5):
        async with opening:
            raise AssertionError("the block waits for the definition")
    assert [s.status for s in seen] == ["starting", "aborted"]


# -- unsubscribing -------------------------------------------------------------------


async def test_unsubscribing_before_the_switch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Unsubscribed while loading: nothing more, and nothing reaches the real run."""
    lazy = create_lazy_agent(loading(slow_agent()))
    seen: list[LivenessSnapshot] = []
    kept: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")

    async def watch() -> None:
        with opening.subscribe_snapshot(seen.append) as subscription:
            opening.subscribe_snapshot(kept.append)
            await trio.sleep(1)
        assert not subscription.active
        assert subscriptions(opening) == 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        async with opening as run:
            async for _ in run.events("step.started"):
                assert real_subscriptions(opening) == 1  # only the kept one was forwarded
                break
    await run.result()
    assert [s.status for s in seen] == ["starting"]
    check_contract(kept)


async def test_unsubscribing_after_the_switch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Unsubscribed mid-run: delivery stops and the real run lets go of it at once."""
    lazy = create_lazy_agent(loading(slow_agent(answers=1), seconds=1))
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    subscription = opening.subscribe_snapshot(seen.append)
    async with opening as run:
        async for _ in run.events("step.started"):
            break
        assert real_subscriptions(opening) == 1
        assert subscriptions(opening) == 1
        subscription.unsubscribe()
        subscription.unsubscribe()
        assert real_subscriptions(opening) == 0
        assert subscriptions(opening) == 0
        delivered = len(seen)
    await run.result()
    assert len(seen) == delivered
    assert not any(s.terminal for s in seen)
    assert seen[0].status == "starting"


async def test_an_observer_may_unsubscribe_itself_during_the_switch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Leaving from inside a delivery of the real run's leaves nothing behind."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=1))
    seen: list[str] = []
    holder: list[Any] = []

    def observer(snapshot: LivenessSnapshot) -> None:
        seen.append(snapshot.status)
        if snapshot.status == "running":
            holder[0].unsubscribe()

    opening = lazy.open_run("hi")
    holder.append(opening.subscribe_snapshot(observer))
    async with opening as run:
        pass
    await run.result()
    assert seen == ["starting", "running"]
    assert subscriptions(opening) == 0
    assert real_subscriptions(opening) == 0


# -- iterating -----------------------------------------------------------------------


async def test_snapshots_iterate_from_starting_to_the_terminal_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stream opened while loading yields starting, the real run's changes, the end."""
    lazy = create_lazy_agent(loading(slow_agent(answers=1)))
    opening = lazy.open_run("hi")
    stream = opening.snapshots()
    got: list[LivenessSnapshot] = []

    async def follow() -> None:
        got.extend([snapshot async for snapshot in stream])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with opening:
            pass
    assert got[0].status == "starting"
    assert got[-1].status == "completed"
    check_contract(got)
    assert stream.dropped == 0
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_a_slow_consumer_misses_the_oldest_never_the_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """capacity=2 and a consumer that sleeps: it loses old snapshots, keeps the end."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=1))
    got: list[LivenessSnapshot] = []
    opening = lazy.open_run("hi")
    stream = opening.snapshots(capacity=2)

    async def follow() -> None:
        async with stream:
            async for snapshot in stream:
                got.append(snapshot)
                await trio.sleep(10)  # far behind the run

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with opening as run:
            pass
    assert stream.dropped > 0
    assert got[0].status == "starting"
    assert got[-1].status == "completed"
    assert got[-1].revision == run.snapshot().revision
    check_contract(got)


async def test_leaving_a_stream_early_lets_go_of_the_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """aclose() before or after the switch ends the subscription everywhere."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=1))
    opening = lazy.open_run("hi")
    early = opening.snapshots()
    async for snapshot in early:
        assert snapshot.status == "starting"
        break
    await early.aclose()
    async with opening as run:
        late = opening.snapshots()
        async with late:
            async for snapshot in late:
                if snapshot.status == "running":
                    break
        assert subscriptions(opening) == 0
        assert real_subscriptions(opening) == 0
    await run.result()


async def test_snapshots_of_a_run_aborted_before_the_load(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stream waiting through the load ends with the one `aborted` snapshot."""
    lazy = create_lazy_agent(loading(slow_agent(), seconds=3600))
    got: list[str] = []
    opening = lazy.open_run("hi")

    async def consume() -> None:
        got.extend([s.status async for s in opening.snapshots()])

    async def leave() -> None:
        await trio.sleep(1)
        opening.abort()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        nursery.start_soon(leave)
        async with opening:
            pass
    assert got == ["starting", "aborted"]
    got.clear()
    await consume()
    assert got == ["aborted"]


# -- misbehaving observers and arguments -----------------------------------------------


async def test_a_raising_observer_is_logged_and_counted_and_the_run_goes_on(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before and after the switch, a raising observer never breaks the run."""

    def broken(snapshot: LivenessSnapshot) -> None:
        raise RuntimeError("observer bug")

    lazy = create_lazy_agent(loading(slow_agent()))
    seen: list[LivenessSnapshot] = []
    with caplog.at_level(logging.ERROR, logger="operative.liveness"):
        opening = lazy.open_run("hi")
        failing = opening.subscribe_snapshot(broken)
        opening.subscribe_snapshot(seen.append)
        async with opening as run:
            pass
        result = await run.result()
    assert result.finish_reason == FinishReason.STOP_CONDITION
    check_contract(seen)
    assert failing.delivered == len(seen)
    assert opening._liveness.observer_errors == len(seen)
    logged = [r for r in caplog.records if r.name == "operative.liveness"]
    assert len(logged) == len(seen)
    assert all("raised" in r.getMessage() and r.exc_info is not None for r in logged)


async def test_arguments_are_checked(autojump_clock: trio.testing.MockClock) -> None:
    """A non-callable observer or a bad capacity is InvalidArgument, as for ActiveRun."""
    lazy = create_lazy_agent(loading(create_agent(generate=ScriptedModel([HANG]))))
    opening = lazy.open_run("hi")
    with pytest.raises(InvalidArgument, match="observer"):
        opening.subscribe_snapshot("print")  # type: ignore[arg-type]
    for capacity in (0, True, 1.5):
        with pytest.raises(InvalidArgument, match="capacity"):
            opening.snapshots(capacity=capacity)  # type: ignore[arg-type]
    opening.abort()
    async with opening:
        pass


async def test_reading_a_snapshot_changes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    """snapshot() is synchronous and side-effect free in every phase."""
    lazy = create_lazy_agent(loading(slow_agent()))
    opening = lazy.open_run("hi")
    first, second = opening.snapshot(), opening.snapshot()
    assert first.status == second.status == "starting"
    assert first.revision == second.revision == 0
    assert subscriptions(opening) == 0
    assert lazy.loads == 0
    async with opening:
        pass
    done = opening.snapshot()
    assert done.revision == opening.snapshot().revision
    assert done.terminal


# -- a run handle without snapshot subscriptions -------------------------------------


class FrozenHandle:
    """A run handle that has ``snapshot()`` but no subscriptions, and never says it ended."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.run_id = real.run_id
        self.frozen = LivenessSnapshot(id=real.run_id, status="running", revision=3)

    def abort(self, reason: str = "aborted") -> None:
        self.real.abort(reason)

    def add_listener(self, type: str, listener: Any) -> Any:
        return self.real.add_listener(type, listener)

    def events(self, *types: str, capacity: int = 256, overflow: Any = "block") -> Any:
        return self.real.events(*types, capacity=capacity, overflow=overflow)

    def snapshot(self) -> LivenessSnapshot:
        return self.frozen

    async def result(self) -> RunResult:
        result: RunResult = await self.real.result()
        return result

    async def unwrap(self) -> RunResult:
        result: RunResult = await self.real.unwrap()
        return result

    async def output(self) -> Any:
        return await self.real.output()


class FrozenAgent:
    """An agent whose runs are :class:`FrozenHandle` s."""

    name = "frozen"
    has_output = False

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    async def run(self, input: Any, *, context: Any = None) -> RunResult:
        raise AssertionError("not called")

    @asynccontextmanager
    async def open_run(self, input: Any, *, context: Any = None) -> AsyncIterator[FrozenHandle]:
        async with self.agent.open_run(input, context=context) as real:
            yield FrozenHandle(real)


async def test_a_handle_without_subscriptions_still_ends_every_subscription(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Its snapshot at the switch, then one terminal snapshot when the run is over."""
    lazy = create_lazy_agent(loading(FrozenAgent(slow_agent()), seconds=1))
    seen: list[LivenessSnapshot] = []
    got: list[tuple[str, int]] = []
    opening = lazy.open_run("hi")
    opening.subscribe_snapshot(seen.append)

    async def follow() -> None:
        got.extend([(s.status, s.revision) async for s in opening.snapshots()])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        async with opening as run:
            assert isinstance(run, FrozenHandle)  # what the loaded agent's block gives
    result = await run.result()
    assert result.finish_reason == FinishReason.STOP_CONDITION
    assert [(s.status, s.revision) for s in seen] == got
    assert got == [("starting", 0), ("running", 3), ("completed", 4)]
    assert seen[-1].finish_reason == FinishReason.STOP_CONDITION
    late: list[str] = []
    opening.subscribe_snapshot(lambda snapshot: late.append(snapshot.status))
    assert late == ["completed"]
