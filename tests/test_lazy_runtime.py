"""create_lazy_agent(runtime=): the clock of a lazy run's snapshots before its agent loads."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from operative import Agent, InvalidArgument, LivenessSnapshot, create_agent
from operative._lazy._agent import create_lazy_agent
from operative.testing import ScriptedModel


class WallClock:
    """A host clock: a fixed offset from trio's virtual clock (as a wall clock would be)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.offset + trio.current_time()


def _agent() -> Agent:
    return create_agent(generate=ScriptedModel(["done"]), name="late")


async def test_snapshots_read_the_runtime_clock_until_the_agent_loads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = WallClock(1_000_000.0)

    async def loader() -> Agent:
        await trio.sleep(5)  # a slow import
        return _agent()

    lazy = create_lazy_agent(loader, runtime=clock)
    seen: list[LivenessSnapshot] = []
    opening = lazy.open_run("go")
    opening.subscribe_snapshot(seen.append)

    async def watch() -> None:
        await trio.sleep(2)
        waiting = opening.snapshot()
        assert waiting.status == "starting"
        assert waiting.started_at == pytest.approx(1_000_000.0)
        assert waiting.observed_at == pytest.approx(1_000_002.0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        async with opening:
            pass
    assert seen[0].status == "starting"
    assert seen[0].started_at == pytest.approx(1_000_000.0)
    # Once loaded, the real run's own clock (trio's) answers.
    assert seen[-1].status == "completed"
    assert seen[-1].observed_at == pytest.approx(5.0)
    assert clock.reads >= 3


async def test_an_early_abort_is_observed_on_the_runtime_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    clock = WallClock(500.0)

    async def loader() -> Agent:
        await trio.sleep(60)
        return _agent()

    lazy = create_lazy_agent(loader, runtime=clock)
    opening = lazy.open_run("go")

    async def leave() -> None:
        await trio.sleep(1)
        opening.abort("the user left")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leave)
        async with opening:
            pass
    final = opening.snapshot()
    assert final.status == "aborted"
    assert final.started_at == pytest.approx(500.0)
    assert final.observed_at == pytest.approx(501.0)


async def test_the_default_runtime_is_trios_clock(autojump_clock: trio.testing.MockClock) -> None:
    await trio.sleep(7)

    async def loader() -> Agent:
        await trio.sleep(1)
        return _agent()

    opening = create_lazy_agent(loader).open_run("go")
    assert opening.snapshot().started_at == pytest.approx(7.0)
    async with opening:
        pass


def test_runtime_must_be_a_clock() -> None:
    bad: Any = 12.5
    with pytest.raises(InvalidArgument, match="runtime= takes a clock"):
        create_lazy_agent(_agent, runtime=bad)
