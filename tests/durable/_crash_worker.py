"""The worker processes of the crash tests, and the agent they run.

::

    python tests/durable/_crash_worker.py --fork-server     (what the tests start)
    python tests/durable/_crash_worker.py '<json config>'   (one worker, for debugging)

A fresh interpreter spends 0.3 s (SQLite) to 0.6 s (PostgreSQL) of CPU importing trio,
operative and psycopg, so the tests start this module once as a fork server: it imports
everything, then forks one worker process per request read from stdin (one JSON config
per line) and replies with the worker's pid. A worker is an ordinary process from then
on: it opens its own database connections, runs ``trio.run`` and is killed with SIGKILL.
The fork server, the worker's process set-up and the ``start`` and ``recover`` loops are
the crash kit's (:mod:`operative.testing._crash_worker`); this module adds the agent,
its configuration, the ``serve`` mode and the full reports.

``mode`` in the config says what the worker does:

- ``start``: start one durable run per ``runs`` entry, concurrently, report
  ``{"acked": run_id}`` once ``wait_durably_started()`` returned and the run's result
  when it ends (the test usually kills the process first);
- ``recover``: wait until the leases of ``run_ids`` expired, then ``recover(...)`` them
  and report each result;
- ``serve``: ``serve_durable_runs`` until every run of ``run_ids`` has finished, then
  cancel it and report each finished run's outcome and journal transcript.

A worker appends its reports, one JSON object per line, to the file ``out`` (the last
one is ``{"exit": 0}``) and its stderr to the file ``stderr``.

The agent's model answers as a pure function of the conversation (the plan in the user
message, the number of assistant messages and the tool results so far), so a step
re-asked after a crash gets the same answer; its final answer is sometimes not in the
output format at first, so the run appends a reminder and asks again. Every tool
execution appends ``begin`` and ``end`` lines to a log file (``O_APPEND``, fsync'd before
the tool returns) that survives a SIGKILL.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Collection, Sequence
from functools import partial
from typing import Any

import msgspec
import trio

from operative import (
    Agent,
    GenerateRequest,
    GenerateResponse,
    RunResult,
    StepResult,
    ToolCall,
    ToolContext,
    ToolResult,
    Usage,
    create_agent,
    tool,
)
from operative.conversation import Message
from operative.durable import replay_journal, serve_durable_runs, transcript
from operative.durable._driver import UNKNOWN_OUTCOME
from operative.hooks import HookContext
from operative.testing._crash_worker import (
    Mode,
    claimable,
    emit,
    recover_runs,
    serve_forks,
    start_runs,
    work,
)

__all__ = [
    "AGENT_NAME",
    "IDEMPOTENT",
    "MAXIMUM_STEPS",
    "SLOW",
    "TOOLS",
    "Plan",
    "Summary",
    "ToolLog",
    "build_agent",
    "message_view",
    "prompt",
    "result_view",
]

AGENT_NAME = "crash-agent"
TOOLS = ("lookup", "note", "fetch", "charge")
"""The tools a plan draws from (``stall`` is for the tests of stalled workers)."""
IDEMPOTENT = frozenset({"lookup", "fetch", "stall"})
SLOW = frozenset({"fetch", "charge", "stall"})
MAXIMUM_STEPS = 40


class Summary(msgspec.Struct):
    """The agent's structured output."""

    results: int
    digest: str


Plan = Sequence[Sequence[str]]
"""Per step, the tools the model calls in parallel; then a final answer."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prompt(plan: Plan) -> str:
    """The user message that makes the model follow ``plan``."""
    return "plan " + json.dumps([list(step) for step in plan])


class ToolLog:
    """Append-only lines ``event worker run call tool time``, fsync'd one by one."""

    def __init__(self, path: str | None, worker: str) -> None:
        self._worker = worker
        self._fd = (
            None if path is None else os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        )

    def write(self, event: str, run_id: str, call_id: str, tool: str) -> None:
        if self._fd is None:
            return
        line = f"{event} {self._worker} {run_id} {call_id} {tool} {time.time():.6f}\n"
        os.write(self._fd, line.encode())
        os.fsync(self._fd)


RELEASE = signal.SIGUSR1
"""Sent by the test to let a stalled worker go (blocked from the fork on, so a signal
sent before the stall begins waits for it)."""


def _stall_process() -> None:
    """Block the whole process (no task runs, no lease is renewed) until the test sends
    ``RELEASE``, for at most a minute (or until the process is killed)."""
    signal.sigtimedwait({RELEASE}, 60)


def build_agent(
    log: ToolLog | None = None,
    *,
    delay_scale: float = 1.0,
    stall_blocks: bool = False,
    stall_after_step: int | None = None,
    unknown: Collection[str] = (),
    name: str = AGENT_NAME,
    maximum_steps: int = MAXIMUM_STEPS,
) -> Agent:
    """The crash tests' agent.

    Args:
        log: where tool executions are logged (none for the reference runs).
        delay_scale: multiplies the model's and the slow tools' delays (0: no delay).
        stall_blocks: the ``stall`` tool blocks the whole process (not just its task) until the
            test sends ``RELEASE``, then returns a value marked ``STALE`` that must never
            reach the journal. Without it ``stall`` is an ordinary slow tool.
        stall_after_step: once this step is journaled, the ``on_step`` hook logs a
            ``stalled`` line and blocks the whole process (until ``RELEASE``, or it is
            killed).
        unknown: call ids whose result is replaced by the "outcome unknown" error
            (reference runs: what recovery reports for a call cut short).
        name: the agent's name (a worker claims only the runs of the agents it knows).
        maximum_steps: the agent's step limit.
    """

    async def generate(request: GenerateRequest) -> GenerateResponse:
        messages = request.conversation.messages
        plan: list[list[str]] = json.loads(
            next(m.text for m in messages if m.role == "user").removeprefix("plan ")
        )
        done = sum(1 for m in messages if m.role == "assistant")
        results = [m.text for m in messages if m.role == "tool"]
        digest = _digest("\x1f".join(results))[:8]
        await trio.sleep(0.002 * delay_scale * (1 + done % 3))
        usage = Usage.of(prompt=10 * len(messages), completion=done + 1)
        if done < len(plan):
            step = done + 1
            calls = tuple(
                ToolCall(id=f"c{step}-{index}", name=name, arguments={"key": f"{step}.{digest}"})
                for index, name in enumerate(plan[done])
            )
            return GenerateResponse(
                content=f"step {step}: {len(results)} results so far ({digest})",
                tool_calls=calls,
                usage=usage,
                model="crash-model",
            )
        if messages[-1].role == "user" or len(results) % 2:
            # The answer in the output format (at once, or when reminded of it).
            answer = json.dumps({"results": len(results), "digest": digest})
        else:
            answer = f"final: {len(results)} results, digest {digest}"  # not JSON
        return GenerateResponse(content=answer, usage=usage, model="crash-model")

    async def execute(name: str, key: str, context: ToolContext) -> str:
        if log is not None:
            log.write("begin", context.run_id, context.call_id, name)
        if name in SLOW:
            await trio.sleep(delay_scale * (0.008 + int(_digest(name + key)[:4], 16) % 20 / 1000))
        value = f"{name}({key}) = {_digest(name + key)[:10]}"
        if name == "stall" and stall_blocks:
            _stall_process()
            value = f"STALE {value}"
        if log is not None:
            log.write("end", context.run_id, context.call_id, name)
        return value

    @tool(idempotent=True)
    async def lookup(key: str, context: ToolContext) -> str:
        """Look a key up (fast, idempotent)."""
        return await execute("lookup", key, context)

    @tool
    async def note(key: str, context: ToolContext) -> str:
        """Write a note (fast, not idempotent)."""
        return await execute("note", key, context)

    @tool(idempotent=True)
    async def fetch(key: str, context: ToolContext) -> str:
        """Fetch a document (slow, idempotent)."""
        return await execute("fetch", key, context)

    @tool
    async def charge(key: str, context: ToolContext) -> str:
        """Charge a card (slow, not idempotent)."""
        return await execute("charge", key, context)

    @tool(idempotent=True)
    async def stall(key: str, context: ToolContext) -> str:
        """Wait on a slow system (slow, idempotent)."""
        return await execute("stall", key, context)

    replaced = frozenset(unknown)

    def outcome_unknown(result: ToolResult, context: HookContext) -> ToolResult | None:
        if result.call_id not in replaced:
            return None
        return ToolResult(
            call_id=result.call_id,
            tool_name=result.tool_name,
            outcome="error",
            error=UNKNOWN_OUTCOME,
        )

    def stall_between_steps(step: StepResult, context: HookContext) -> None:
        if step.step == stall_after_step:
            if log is not None:
                log.write("stalled", context.run_id, f"step-{step.step}", "-")
            _stall_process()

    options: dict[str, Any] = {}
    if replaced:
        options["validate_tool_result"] = outcome_unknown
    if stall_after_step is not None:
        options["on_step"] = stall_between_steps
    return create_agent(
        generate=generate,
        instructions="Follow the plan.",
        tools=[lookup, note, fetch, charge, stall],
        maximum_steps=maximum_steps,
        name=name,
        output=Summary,
        **options,
    )


# -- what the worker reports ---------------------------------------------------------


def message_view(message: Message) -> dict[str, Any]:
    """The parts of a message the tests compare (not its id or metadata)."""
    return {
        "role": message.role,
        "content": msgspec.to_builtins(message.content),
        "tool_calls": [
            [call.id, call.name, msgspec.to_builtins(call.arguments)] for call in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "tool_name": message.tool_name,
        "outcome": message.outcome,
    }


def result_view(run_id: str, result: RunResult) -> dict[str, Any]:
    error = result.error
    return {
        "run": run_id,
        "finish_reason": str(result.finish_reason),
        "content": result.content,
        "usage": msgspec.to_builtins(result.usage),
        "steps": len(result.steps),
        "error_type": None if error is None else type(error).__name__,
        "error": None if error is None else str(error),
        "abort_reason": result.abort_reason,
        "messages": [message_view(m) for m in result.conversation.messages],
    }


# -- the modes ------------------------------------------------------------------------


def _open(config: dict[str, Any]) -> tuple[Any, Any]:
    namespace: dict[str, Any] = {}
    exec(config["imports"], namespace)
    return eval(config["engine"], namespace), eval(config["store"], namespace)


async def _start(config: dict[str, Any]) -> None:
    engine, store = _open(config)
    worker: str = config["worker"]
    agent = build_agent(
        ToolLog(config["log"], worker),
        stall_blocks=config.get("stall_blocks", False),
        stall_after_step=config.get("stall_after_step"),
        name=config.get("agent", AGENT_NAME),
        maximum_steps=config.get("maximum_steps", MAXIMUM_STEPS),
    )
    await start_runs(
        engine,
        store,
        agent,
        [(run_id, prompt(plan)) for run_id, plan in config["runs"]],
        worker=worker,
        lease_seconds=config["lease_seconds"],
        report=result_view,
        stagger=config.get("stagger", 0.0),
    )


def _agents(config: dict[str, Any]) -> dict[str, Agent]:
    name: str = config.get("agent", AGENT_NAME)
    agent = build_agent(
        ToolLog(config["log"], config["worker"]),
        name=name,
        maximum_steps=config.get("maximum_steps", MAXIMUM_STEPS),
    )
    return {name: agent}


async def _recover(config: dict[str, Any]) -> None:
    engine, store = _open(config)
    await recover_runs(
        engine,
        store,
        _agents(config),
        config["run_ids"],
        worker=config["worker"],
        lease_seconds=config.get("lease_seconds", 30.0),
        report=result_view,
        seconds=60,
        claim_seconds=30,
    )


async def _serve(config: dict[str, Any]) -> None:
    engine, store = _open(config)
    worker: str = config["worker"]
    agents = _agents(config)
    run_ids: list[str] = config["run_ids"]
    pending = await claimable(engine, run_ids, seconds=30)
    emit({"claiming": pending})
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(
                    serve_durable_runs,
                    engine=engine,
                    checkpoint_store=store,
                    agents=agents,
                    worker_id=worker,
                    lease_seconds=config.get("lease_seconds", 30.0),
                    poll_interval=0.05,
                )
            )
            while True:
                records = [await engine.get(run_id) for run_id in pending]
                if all(record is not None and record.status != "running" for record in records):
                    break
                await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    for run_id in pending:
        record = await engine.get(run_id)
        outcome = record.outcome
        replay = replay_journal(run_id, await store.read(run_id))
        emit(
            {
                "run": run_id,
                "finish_reason": outcome.finish_reason,
                "content": outcome.content,
                "usage": msgspec.to_builtins(outcome.usage),
                "steps": outcome.steps,
                "error_type": outcome.error_type,
                "error": outcome.error,
                "abort_reason": outcome.abort_reason,
                "messages": [message_view(m) for m in transcript(replay).messages],
            }
        )
    await engine.aclose()
    await store.aclose()


_MODES: dict[str, Mode] = {"start": _start, "recover": _recover, "serve": _serve}


def main(argv: Sequence[str]) -> None:
    if argv[1:] == ["--fork-server"]:
        serve_forks(_MODES, blocked={RELEASE})
    else:
        work(json.loads(argv[1]), _MODES)


if __name__ == "__main__":
    main(sys.argv)
