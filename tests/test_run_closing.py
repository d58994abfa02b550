"""``run.closed()`` (the cleanup acknowledgement) and ``run.aclose()`` (the
specification's dispose), on agent runs and lazy agents' runs."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import operative
from operative import CleanupError, create_agent, create_lazy_agent
from operative.testing import HANG, ScriptedModel


async def _hang(result: operative.RunResult) -> None:
    await trio.sleep_forever()


async def test_closed_returns_once_clean_up_finished(autojump_clock: Any) -> None:
    """A run whose clean-up finished acknowledges it; closed() waits for the run."""
    agent = create_agent(generate=ScriptedModel(["done"], delay=5.0))
    async with agent.open_run("hi") as run:
        start = trio.current_time()
        await run.closed()
        assert trio.current_time() - start == pytest.approx(5.0)
    assert (await run.result()).content == "done"


async def test_closed_raises_when_clean_up_did_not_finish(autojump_clock: Any) -> None:
    """A clean-up that overran cleanup_timeout is a failed acknowledgement, every time."""
    agent = create_agent(generate=ScriptedModel(["done"]), on_run_end=_hang, cleanup_timeout=2)
    async with agent.open_run("hi") as run:
        pass
    with pytest.raises(CleanupError):
        await run.closed()
    with pytest.raises(CleanupError):
        await run.closed()


async def test_aclose_aborts_and_waits(autojump_clock: Any) -> None:
    """aclose() stops a run that would go on forever, ends its event streams and
    returns once it has ended; called again, it only waits."""
    agent = create_agent(generate=ScriptedModel([HANG]))
    seen: list[str] = []
    async with agent.open_run("hi") as run, run.events() as stream:
        # Subscribed on entering (before the loop starts): nothing is missed.
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                async for event in stream:
                    seen.append(event.type)  # noqa: PERF401 - appended as they arrive

            nursery.start_soon(follow)
            await trio.sleep(1)
            await run.aclose()  # ends the stream too: follow() returns
        await run.aclose()
    result = await run.result()
    assert result.finish_reason == "aborted"
    assert result.abort_reason == "the run was closed"
    assert seen[0] == "run.started"
    assert "run.aborted" not in seen  # the streams ended before the terminal event


async def test_a_lazy_agents_run_closes_and_acknowledges(autojump_clock: Any) -> None:
    """The same on a lazy agent's run, before and after its definition loaded."""

    async def load() -> operative.Agent:
        await trio.sleep(1)
        return create_agent(generate=ScriptedModel([HANG]), name="lazy")

    lazy = create_lazy_agent(load, name="lazy")
    opening = lazy.open_run("hi")
    opening.abort("before the definition loaded")
    async with opening as run:
        await run.aclose()  # the run ended already: this only waits
    assert (await run.result()).finish_reason == "aborted"
    await run.closed()

    async with lazy.open_run("hi") as run:
        await trio.sleep(5)  # loaded, waiting for the model
        await run.aclose()
    assert (await run.result()).finish_reason == "aborted"
    await run.closed()

    async def load_hanging_cleanup() -> operative.Agent:
        return create_agent(
            generate=ScriptedModel(["done"]), name="lazy", on_run_end=_hang, cleanup_timeout=1
        )

    async with create_lazy_agent(load_hanging_cleanup, name="lazy").open_run("hi") as run:
        pass
    with pytest.raises(CleanupError):
        await run.closed()
