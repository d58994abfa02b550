"""A data directory holding one durable run of each kind the run viewer draws: completed
(two parallel calls, one failing), aborted, failed, recovered (a call run again) and in
flight (its worker gone, its call open). Real runs, through the durable engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

from operative import GenerateResponse, ToolCall, Usage, create_agent
from operative.cli._state import DATABASE
from operative.durable import Durable, SqliteDurable, recover
from operative.testing import ScriptedModel
from operative.tools import Tool, tool

__all__ = ["RUNS", "Gate", "fill", "finish_in_flight"]

RUNS = ("completed", "aborted", "failed", "recovered", "in-flight")


@tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Gate:
    """A ``wait`` tool that parks until the test releases it."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        gate = self

        @tool(name="wait", idempotent=True)
        async def wait(ticket: str) -> str:
            """Wait for a ticket to be served."""
            gate.entered.set()
            await gate.release.wait()
            return f"served {ticket}"

        self.tool: Tool = wait


def answer(content: str, *calls: ToolCall, tokens: tuple[int, int] = (100, 10)) -> GenerateResponse:
    return GenerateResponse(
        content=content, tool_calls=calls, usage=Usage.of(*tokens), model="gpt-4o-mini"
    )


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


@attrs.define
class _Fleet:
    backend: SqliteDurable

    def durable(self, run_id: str) -> Durable:
        return Durable(
            self.backend,
            run_id=run_id,
            session_id="viewer",
            worker_id=f"worker-{run_id}",
        )

    async def park(self, agent: Any, gate: Gate, run_id: str) -> None:
        """Start a run and shut its caller down once its call is executing."""

        async def drive() -> None:
            async with agent.open_run(f"task {run_id}", durable=self.durable(run_id)):
                pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive)
            await gate.entered.wait()
            nursery.cancel_scope.cancel()


async def fill(data_dir: Path) -> None:
    """Write the five runs (ids as in ``RUNS``) into ``data_dir``'s database."""
    await trio.Path(data_dir).mkdir(parents=True, exist_ok=True)
    path = data_dir / DATABASE
    async with SqliteDurable(path) as backend:
        fleet = _Fleet(backend=backend)
        calc = create_agent(
            generate=ScriptedModel(
                [
                    answer("adding", call("c1", "add", a=1, b=2), call("c2", "add", a=1, b="x")),
                    answer("1 + 2 = 3", tokens=(300, 20)),
                ]
            ),
            tools=[add],
            name="calc",
        )
        async with calc.open_run("add 1 and 2", durable=fleet.durable("completed")) as run:
            await run.result()

        gate = Gate()
        waiter = create_agent(
            generate=ScriptedModel([answer("waiting", call("w1", "wait", ticket="a"))]),
            tools=[gate.tool],
            name="calc",
        )
        async with waiter.open_run("wait", durable=fleet.durable("aborted")) as run:
            await gate.entered.wait()
            run.abort("user pressed stop")
            await run.result()

        failing = create_agent(
            generate=ScriptedModel(
                [
                    answer("drafting", call("d1", "add", a=2, b=2)),
                    RuntimeError("model backend down"),
                ]
            ),
            tools=[add],
            name="writer",
        )
        async with failing.open_run("draft", durable=fleet.durable("failed")) as run:
            await run.result()

        gate = Gate()
        script = [answer("waiting", call("r1", "wait", ticket="b")), answer("served at last")]
        parked = create_agent(generate=ScriptedModel(script), tools=[gate.tool], name="waiter")
        await fleet.park(parked, gate, "recovered")
        gate.release.set()
        again = create_agent(generate=ScriptedModel(script[1:]), tools=[gate.tool], name="waiter")
        await recover(backend, agents={"waiter": again}, run_ids=["recovered"])

        gate = Gate()
        script = [answer("waiting", call("f1", "wait", ticket="c")), answer("done waiting")]
        flying = create_agent(generate=ScriptedModel(script), tools=[gate.tool], name="flyer")
        await fleet.park(flying, gate, "in-flight")


async def finish_in_flight(data_dir: Path) -> None:
    """Recover the in-flight run: its call runs again, settles, and the run completes."""
    path = data_dir / DATABASE
    async with SqliteDurable(path) as backend:
        gate = Gate()
        gate.release.set()
        agent = create_agent(
            generate=ScriptedModel([answer("done waiting")]), tools=[gate.tool], name="flyer"
        )
        await recover(backend, agents={"flyer": agent}, run_ids=["in-flight"])
