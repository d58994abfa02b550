"""The cost ledger of a one-step run and of one marginal step: what each of the three
loops (the bare floor, the same-work floor, operative) spends its time on.

Every component is measured in isolation, in one process, in interleaved rounds (each
round times every component once, in turn, so a slow stretch of a shared machine hits
them all): the primitives the loops are made of (a ``trio.CancelScope`` entered and
left, ``trio.lowlevel.checkpoint()``, a coroutine call, each record type built, the
tool-argument decode, the id generation, ...), operative's phases as ``agent.run``
goes through them (the run's conversation; its parts, an ``ActiveRun`` on the agent's
validated configuration with a run id of its own; ``drive`` of a one-step run
in the caller's task, its finish included) and each system's whole one-step and 20-step
runs. A component's
time is its loop's time minus the same loop around a no-op, per iteration; the cyclic GC
is off while a loop runs (``bench_peers.py`` measures the GC's share of a batch).

Instruction counts come from the CPU where it exposes them (``perf stat -e
instructions:u``, checked at start-up), else from valgrind's callgrind: the same
components run once more under ``valgrind --tool=callgrind``, each loop between a
``CALLGRIND_ZERO_STATS`` and a ``CALLGRIND_DUMP_STATS_AT`` client request (a small C
helper compiled at run time and called through ``ctypes``), minus the no-op loop's count.
Instruction counts do not depend on the machine's load, so they are the figure to compare
when the timings are noisy; they do not count cache misses or branch mispredictions.

Which system pays which component, and how many times in a one-step run and in each
further step, is read from the code (``peers/floor.py``, ``peers/floor_same_work.py``)
and, for operative, counted with ``cProfile`` (Python-level functions only: records
built in C are not seen, so operative's record counts are left blank where the profile
cannot count them). The ledger's sum for a system (count x µs over the components it
pays) is set against its measured run: what the ledger does not explain is the loop's
own code between the components.

Usage::

    python benchmarks/bench_breakdown.py --json benchmarks/results/breakdown.json
    python benchmarks/bench_breakdown.py --quick --no-instructions
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import inspect
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, print_table, spread, write_json

HERE = Path(__file__).resolve()
LONG = 20
"""Steps of the long run; the marginal step is (long run - one-step run) / (LONG - 1)."""
SYSTEMS = ("floor", "floor-same-work", "operative")
_HELPER_C = r"""
#include <valgrind/callgrind.h>
void ledger_zero(void) { CALLGRIND_ZERO_STATS; }
void ledger_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""


# --------------------------------------------------------------------------------------
# the components
# --------------------------------------------------------------------------------------


@dataclass
class Component:
    """One line of the ledger: ``op(arg)`` (sync or async) for each prepared ``arg``."""

    name: str
    group: str  # "primitive", "operative phase" or "whole run"
    op: Callable[[Any], Any]
    prepare: Callable[[int], list[Any]] | None = None
    """Fresh arguments, one per iteration, built before the timed loop (None: no argument)."""
    pays: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    """System -> (times in a one-step run, times per further step); None: not counted."""
    note: str = ""
    heavy: bool = False
    """A whole run or a phase: fewer iterations."""

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.op)


def _noop(arg: Any) -> None:
    return None


async def _anoop(arg: Any) -> None:
    return None


def components() -> list[Component]:
    """Every component, built once (imports and set-up outside the timed loops)."""
    import json as stdjson

    from peers import floor
    from peers import floor_same_work as sw
    from peers import operative_side as op_side

    from operative import Conversation, ToolCall
    from operative import GenerateResponse as OpResponse
    from operative._core._model import GenerateRequest as OpRequest
    from operative._core._options import config_for_run
    from operative._core._results import StepResult as OpStep
    from operative._core._run import ActiveRun
    from operative._core._run_task import drive
    from operative._core._types import ToolResult as OpToolResult
    from operative.conversation import Message as OpMessage
    from operative.conversation import tool_result_message

    out: list[Component] = []

    def add(name: str, group: str, op: Callable[[Any], Any], **kw: Any) -> None:
        out.append(Component(name, group, op, **kw))

    # ---- trio
    def cancel_scope(_: Any) -> None:
        with trio.CancelScope():  # noqa: ASYNC100  (the cost of the scope itself)
            pass

    add(
        "`trio.CancelScope()` entered and left",
        "primitive",
        cancel_scope,
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": None},
        note="the run scope (DESIGN §1): every operative run enters one; the floors only "
        "when something but the caller can cancel the run; operative's count is "
        "from the profile, where `trio.run`'s own scopes are spread over the profiled runs",
    )

    async def checkpoint(_: Any) -> None:
        await trio.lowlevel.checkpoint()

    add(
        "`trio.lowlevel.checkpoint()`",
        "primitive",
        checkpoint,
        pays={"floor": (1, 1), "floor-same-work": (1, 1), "operative": None},
        note="a scheduler pass: the step's cancellation point (the steering gate, §1)",
    )

    async def checkpoint_if_cancelled(_: Any) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()

    add(
        "`trio.lowlevel.checkpoint_if_cancelled()`",
        "primitive",
        checkpoint_if_cancelled,
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": None},
        note="no scheduler pass (operative's Toolbox.execute, on entry)",
    )

    async def nursery(_: Any) -> None:
        async with trio.open_nursery():
            pass

    add(
        "`trio.open_nursery()` entered and left, empty",
        "primitive",
        nursery,
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (0, 0)},
        note="only a step with several calls opens one (none of the three in these runs)",
    )

    async def leaf() -> None:
        return None

    async def coroutine_call(_: Any) -> None:
        await leaf()

    add(
        "an `async def` called and awaited",
        "primitive",
        coroutine_call,
        pays={"floor": (2, 3), "floor-same-work": (3, 3), "operative": None},
        note="floors: the loop and generate per run; generate, execute and the tool per step",
    )

    # ---- ids and records
    add(
        "message id (random prefix + counter)",
        "primitive",
        lambda _: sw.new_id(),
        pays={"floor": (0, 0), "floor-same-work": (1, 2), "operative": (1, 1)},
        note="the assistant message per run; assistant and tool per step (operative's tool "
        "message: in `tool_result_message`'s row; the user message: in the caller's row)",
    )
    add(
        "run id, `os.urandom(12).hex()`",
        "primitive",
        lambda _: os.urandom(12).hex(),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 0)},
        note="operative's `new_run_id`; the specification needs a run id only with steering",
    )
    call = sw.ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 1}')
    calls = (call,)
    add(
        "`dict` message (the bare floor's record)",
        "primitive",
        lambda _: {"role": "assistant", "content": "", "tool_calls": calls},
        pays={"floor": (2, 2), "floor-same-work": (0, 0), "operative": (0, 0)},
    )
    add(
        "`Message` struct (same-work floor's), id given",
        "primitive",
        lambda _: sw.Message(id="m", role="assistant", content="", tool_calls=calls),
        pays={"floor": (0, 0), "floor-same-work": (1, 2), "operative": (0, 0)},
        note="the assistant message per run; assistant and tool per step",
    )
    op_call = ToolCall(id="call_1", name="add", arguments='{"a": 1, "b": 1}')
    op_calls = (op_call,)
    add(
        "operative `Message` (its `__post_init__` checks), id given",
        "primitive",
        lambda _: OpMessage(id="m", role="assistant", content="", tool_calls=op_calls),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 1)},
        note="the assistant message (the profile counts 2 + 2/step in all: the user and "
        "tool messages are in the caller's and `tool_result_message`'s rows)",
    )
    short = [sw.Message(id=sw.new_id(), role="user", content="What is 1 + 1?")]
    long = short * (2 * LONG - 1)
    add(
        "`GenerateRequest` over a 1-message transcript (`tuple(messages)`)",
        "primitive",
        lambda _: sw.GenerateRequest(messages=tuple(short), step=1),
        pays={"floor": (0, 0), "floor-same-work": (1, 0), "operative": (0, 0)},
    )
    add(
        f"`GenerateRequest` over a {len(long)}-message transcript",
        "primitive",
        lambda _: sw.GenerateRequest(messages=tuple(long), step=LONG),
        pays={"floor": (0, 0), "floor-same-work": (0, 1), "operative": (0, 0)},
        note="the transcript at the long run's last step (the snapshot grows with the run)",
    )
    live = Conversation()
    live.append_user_message("What is 1 + 1?")
    specs = op_side.TOOLBOX.specs()

    def op_request(_: Any) -> Any:
        live._snapshot = None  # a step appends to the transcript: the snapshot is rebuilt
        return OpRequest(conversation=live.current, tools=specs, step=1, run_id="r")

    add(
        "operative `GenerateRequest` (`conversation.current` rebuilt, 1 message)",
        "primitive",
        op_request,
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 1)},
    )
    add(
        "`list(history)`: the caller's history snapshotted",
        "primitive",
        lambda _: list(short),
        pays={"floor": (0, 0), "floor-same-work": (1, 0), "operative": (0, 0)},
        note="invariant 5",
    )
    seen: set[str] = set()

    def fresh_ids(n: int) -> list[str]:
        seen.clear()
        return [f"call_{i}" for i in range(n)]

    def check_id(call_id: str) -> None:
        if call_id in seen:
            raise ValueError(f"call id {call_id!r} used twice")
        seen.add(call_id)

    add(
        "call id checked and added to the run's set",
        "primitive",
        check_id,
        prepare=fresh_ids,
        pays={"floor": (0, 0), "floor-same-work": (0, 1), "operative": (0, 1)},
        note="invariant 4 (operative: `normalize_calls`)",
    )
    decoder = sw.TOOLS["add"][1]
    raw = call.arguments
    add(
        "tool arguments: msgspec `Decoder(Struct).decode`",
        "primitive",
        lambda _: decoder.decode(raw),
        pays={"floor": (0, 0), "floor-same-work": (0, 1), "operative": (0, 0)},
    )
    params = floor.TOOLS["add"][1]

    def json_loads_checked(_: Any) -> Any:
        arguments = stdjson.loads(raw)
        if not isinstance(arguments, dict) or any(
            type(arguments.get(name)) is not kind for name, kind in params.items()
        ):
            raise TypeError("invalid arguments")
        return arguments

    add(
        "tool arguments: `json.loads` + type checks (bare floor)",
        "primitive",
        json_loads_checked,
        pays={"floor": (0, 1), "floor-same-work": (0, 0), "operative": (0, 0)},
    )
    op_tool = op_side.TOOLBOX.tools["add"]
    add(
        "tool arguments: operative `Tool.parse_arguments`",
        "primitive",
        lambda _: op_tool.parse_arguments(raw),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": None},
    )
    encode = msgspec.json.Encoder().encode
    add(
        "tool value to JSON: msgspec encode",
        "primitive",
        lambda _: encode(2).decode(),
        pays={"floor": (0, 0), "floor-same-work": (0, 1), "operative": (0, 0)},
        note="operative pays it inside `tool_result_message` (counted in that row)",
    )
    add(
        "tool value to JSON: `json.dumps` (bare floor)",
        "primitive",
        lambda _: stdjson.dumps(2),
        pays={"floor": (0, 1), "floor-same-work": (0, 0), "operative": (0, 0)},
    )
    add(
        "`ToolResult` struct",
        "primitive",
        lambda _: sw.ToolResult(call_id="call_1", outcome="success", value=2),
        pays={"floor": (0, 0), "floor-same-work": (0, 1), "operative": (0, 0)},
    )
    op_result = OpToolResult(call_id="call_1", tool_name="add", outcome="success", value=2)
    add(
        "operative `ToolResult` + its tool message (`tool_result_message`)",
        "primitive",
        lambda _: tool_result_message(
            OpToolResult(call_id="call_1", tool_name="add", outcome="success", value=2)
        ),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (0, 1)},
    )
    results = (sw.ToolResult(call_id="call_1", outcome="success", value=2),)
    add(
        "`StepResult` struct",
        "primitive",
        lambda _: sw.StepResult(
            step=1, content="", tool_calls=calls, results=results, usage=sw.NO_USAGE
        ),
        pays={"floor": (0, 0), "floor-same-work": (1, 1), "operative": (0, 0)},
    )
    op_results = (op_result,)
    add(
        "operative `StepResult` struct",
        "primitive",
        lambda _: OpStep(step=1, content="", tool_calls=op_calls, results=op_results),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 1)},
    )
    steps = [sw.StepResult(step=1, content="x", tool_calls=(), results=(), usage=sw.NO_USAGE)]
    add(
        "`RunResult` struct + `tuple(steps)`",
        "primitive",
        lambda _: sw.RunResult(
            messages=short,
            steps=tuple(steps),
            content="x",
            usage=sw.NO_USAGE,
            finish_reason="stop-condition",
        ),
        pays={"floor": (0, 0), "floor-same-work": (1, 0), "operative": (0, 0)},
    )
    response = OpResponse(tool_calls=op_calls)
    add(
        "operative `GenerateResponse` built (its `__post_init__` checks)",
        "primitive",
        lambda _: OpResponse(tool_calls=op_calls),
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (0, 0)},
        note="built by the scripted model once, not per run; a provider adapter pays it per step",
    )
    del response

    # ---- operative's phases
    generate = op_side.make_steps(1, 0.0)

    one_step = op_side.make_steps(1, 0.0)
    agent = _operative_agent(one_step)

    def agent_conversation(_: Any) -> Any:
        return agent._conversation("What is 1 + 1?")

    add(
        "operative: the run's `Conversation` + user message (`agent.run`'s input)",
        "primitive",
        agent_conversation,
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 0)},
        note="the floors build their history in their row below",
    )
    add(
        "floors: the caller's history (one user message, with its id)",
        "primitive",
        lambda _: (sw.Message(id=sw.new_id(), role="user", content="What is 1 + 1?"),),
        pays={"floor": (0, 0), "floor-same-work": (1, 0), "operative": (0, 0)},
        note="the bare floor's is a one-dict list (the dict row)",
    )
    template = agent._template
    if template is None:
        raise RuntimeError("the benchmark's agent has no validated configuration")

    def parts(conversation: Any) -> Any:
        return ActiveRun(config_for_run(template), conversation)

    add(
        "operative: the run's parts (`ActiveRun` on the agent's configuration, its own id)",
        "operative phase",
        parts,
        prepare=lambda n: [agent_conversation(None) for _ in range(n)],
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 0)},
        note="the run id included",
        heavy=True,
    )

    async def driven(run: Any) -> Any:
        await drive(run._control)
        return run._outcome()

    add(
        "operative: `drive` in the caller's task (one step, finish included) + `_outcome`",
        "operative phase",
        driven,
        prepare=lambda n: [parts(agent_conversation(None)) for _ in range(n)],
        pays={"floor": (0, 0), "floor-same-work": (0, 0), "operative": (1, 0)},
        heavy=True,
    )
    del generate

    # ---- whole runs
    for name, module in (("floor", floor), ("floor-same-work", sw), ("operative", op_side)):
        run_one, run_long = module.make_steps(1, 0.0), module.make_steps(LONG, 0.0)

        async def whole_one(_: Any, run: Any = run_one) -> Any:
            return await run()

        async def whole_long(_: Any, run: Any = run_long) -> Any:
            return await run()

        add(f"{name}: one-step run", "whole run", whole_one, heavy=True, pays={})
        add(f"{name}: {LONG}-step run", "whole run", whole_long, heavy=True, pays={})
    return out


def _operative_agent(make: Callable[[], Any]) -> Any:
    """The agent inside an ``operative_side`` run factory (its closure)."""
    from operative import Agent

    for cell in make.__closure__ or ():
        if isinstance(cell.cell_contents, Agent):
            return cell.cell_contents
    raise RuntimeError("operative_side.make_steps no longer closes over its agent")


# --------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------


def _iterations(component: Component, quick: bool) -> int:
    if component.heavy:
        return 20 if quick else 200
    return 200 if quick else 5000


async def _time_loop(op: Callable[[Any], Any], args: list[Any], is_async: bool) -> int:
    """Nanoseconds for ``op`` over ``args`` (GC off)."""
    gc.disable()
    try:
        if is_async:
            start = time.perf_counter_ns()
            for arg in args:
                await op(arg)
            return time.perf_counter_ns() - start
        start = time.perf_counter_ns()
        for arg in args:
            op(arg)
        return time.perf_counter_ns() - start
    finally:
        gc.enable()


def _args(component: Component, n: int) -> list[Any]:
    return component.prepare(n) if component.prepare is not None else [None] * n


async def measure_times(found: list[Component], rounds: int, quick: bool) -> dict[str, Any]:
    """Per-iteration µs of every component, in ``rounds`` interleaved rounds."""
    per: dict[str, list[float]] = {c.name: [] for c in found}
    base: dict[tuple[bool, int], list[float]] = {}
    for c in found:  # warm-up: caches, lazily built tables, the interpreter's specialising
        await _time_loop(c.op, _args(c, 20 if c.heavy else 200), c.is_async)
    for _ in range(rounds):
        for c in found:
            n = _iterations(c, quick)
            key = (c.is_async, n)
            noop = _anoop if c.is_async else _noop
            empty = await _time_loop(noop, [None] * n, c.is_async)
            base.setdefault(key, []).append(empty / n / 1000)
            taken = await _time_loop(c.op, _args(c, n), c.is_async)
            per[c.name].append((taken - empty) / n / 1000)
            gc.collect()
    return {name: spread(values) for name, values in per.items()}


def perf_instructions_available() -> str | None:
    """None when ``perf stat -e instructions:u`` counts here, else why not."""
    perf = shutil.which("perf") or ("/usr/bin/perf" if os.path.exists("/usr/bin/perf") else None)
    if perf is None:
        return "perf is not installed"
    probe = subprocess.run(
        [perf, "stat", "-x,", "-e", "instructions:u", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
        check=False,
    )
    first = (probe.stderr.strip().splitlines() or [""])[-1]
    if probe.returncode != 0 or not first[:1].isdigit():
        return f"perf stat -e instructions:u does not count here ({first or probe.returncode})"
    return None


def _helper(directory: str) -> str | None:
    """Compile the callgrind client-request helper; its path, or None without gcc."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None or not os.path.exists("/usr/include/valgrind/callgrind.h"):
        return None
    source = os.path.join(directory, "ledger.c")
    library = os.path.join(directory, "libledger.so")
    Path(source).write_text(_HELPER_C)
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", library, source], check=True)
    return library


async def child_instructions(library: str, quick: bool) -> None:
    """Under callgrind: every component's loop, and a no-op loop of the same shape, each
    between a zero and a dump of the counters (dumps named ``<index>:<kind>``)."""
    lib = ctypes.CDLL(library)
    lib.ledger_dump.argtypes = [ctypes.c_char_p]
    found = components()
    for index, c in enumerate(found):
        n = (10 if quick else 50) if c.heavy else (100 if quick else 1000)
        for kind, op in (("noop", _anoop if c.is_async else _noop), ("op", c.op)):
            # Warm-up: the interpreter specialises a code path over its first runs, and
            # that one-off cost must not be spread over the counted iterations.
            await _time_loop(op, _args(c, 20 if c.heavy else 200), c.is_async)
            args = _args(c, n) if kind == "op" else [None] * n
            gc.collect()
            gc.disable()
            lib.ledger_zero()
            if c.is_async:
                for arg in args:
                    await cast("Awaitable[Any]", op(arg))
            else:
                for arg in args:
                    op(arg)
            lib.ledger_dump(f"{index}:{kind}:{n}".encode())
            gc.enable()


def measure_instructions(quick: bool) -> tuple[dict[str, float] | None, str]:
    """Instructions per iteration of every component, and how they were counted."""
    why_not_perf = perf_instructions_available()
    if why_not_perf is None:
        # Not reached on the machine this was written on; perf would count the whole
        # child, so the per-component split would still need the zero/dump requests.
        why_not_perf = "perf counts only whole processes; callgrind splits by component"
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None, f"{why_not_perf}; valgrind is not installed"
    with tempfile.TemporaryDirectory() as tmp:
        library = _helper(tmp)
        if library is None:
            return None, f"{why_not_perf}; no C compiler or callgrind.h for the helper"
        out = os.path.join(tmp, "cg.out")
        cmd = [
            valgrind,
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            "--dump-line=no",
            sys.executable,
            str(HERE),
            "--child-instructions",
            library,
        ] + (["--quick"] if quick else [])
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            return None, f"{why_not_perf}; callgrind failed: {proc.stderr[-500:]}"
        counts: dict[tuple[int, str], tuple[int, int]] = {}
        for path in Path(tmp).glob("cg.out*"):
            text = path.read_text(errors="replace")
            trigger = total = None
            for line in text.splitlines():
                if line.startswith("desc: Trigger: Client Request: "):
                    trigger = line.rsplit(": ", 1)[1].strip()
                elif line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
            if trigger and total is not None and trigger.count(":") == 2:
                where, kind, count = trigger.split(":")
                counts[(int(where), kind)] = (total, int(count))
    names = [c.name for c in components()]
    found: dict[str, float] = {}
    for index, name in enumerate(names):
        if (index, "op") in counts and (index, "noop") in counts:
            (op_total, n), (noop_total, _) = counts[(index, "op")], counts[(index, "noop")]
            found[name] = (op_total - noop_total) / n
    return found, f"valgrind --tool=callgrind ({why_not_perf})"


def operative_profile(repetitions: int) -> dict[str, Any]:
    """cProfile of operative's one-step and 20-step runs: calls per run of what the
    ledger counts, and the functions with the most own time (their "calls" count a
    coroutine's resumptions as well as its calls)."""
    from peers import operative_side as op_side

    # cProfile counts a coroutine's every resumption as a call: ``checkpoint`` always
    # suspends once, so its count is halved; the others here never suspend.
    suspends = {"trio.lowlevel.checkpoint()": 2}
    watched = {
        ("trio/_core/_run.py", "__enter__"): "trio.CancelScope entered",
        ("trio/_core/_run.py", "checkpoint"): "trio.lowlevel.checkpoint()",
        ("trio/_core/_run.py", "checkpoint_if_cancelled"): "checkpoint_if_cancelled()",
        ("operative/conversation/_message.py", "__post_init__"): "Message built",
        ("operative/tools/_tool.py", "parse_arguments"): "Tool.parse_arguments",
    }
    out: dict[str, Any] = {"repetitions": repetitions}
    for label, steps in (("one_step", 1), ("long", LONG)):
        run = op_side.make_steps(steps, 0.0)

        async def main(run: Any = run) -> None:
            for _ in range(repetitions):
                await run()

        trio.run(main)  # warm-up
        profiler = cProfile.Profile()
        profiler.enable()
        trio.run(main)
        profiler.disable()
        stats = pstats.Stats(profiler)
        raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        counted: dict[str, float] = {}
        rows = []
        for (filename, _line, function), (_cc, ncalls, tottime, _ct, _callers) in raw.items():
            path = filename.replace("\\", "/")
            for (suffix, name), what in watched.items():
                if function == name and path.endswith(suffix):
                    counted[what] = counted.get(what, 0) + ncalls / repetitions / suspends.get(
                        what, 1
                    )
            short = path.split("site-packages/")[-1]
            if "/benchmarks/" in short:
                short = "benchmarks/" + short.rsplit("/benchmarks/", 1)[-1]
            elif "/operative/" in short:
                short = "operative/" + short.rsplit("/operative/", 1)[-1]
            elif "/lib/python" in short:
                short = short.rsplit("/", 1)[-1]
            rows.append((tottime, ncalls, f"{short}:{_line}({function})"))
        rows.sort(reverse=True)
        out[label] = {
            "calls_per_run": counted,
            "top_own_time": [
                {
                    "function": where,
                    "calls_per_run": ncalls / repetitions,
                    "share": tottime / max(1e-12, sum(r[0] for r in rows)),
                }
                for tottime, ncalls, where in rows[:15]
            ],
        }
    return out


# --------------------------------------------------------------------------------------
# the ledger
# --------------------------------------------------------------------------------------


def _counts_from_profile(found: list[Component], profile: dict[str, Any]) -> None:
    """Fill operative's counts the profile can see (the marginal step from the long run)."""
    by_row = {
        "`trio.CancelScope()` entered and left": "trio.CancelScope entered",
        "`trio.lowlevel.checkpoint()`": "trio.lowlevel.checkpoint()",
        "`trio.lowlevel.checkpoint_if_cancelled()`": "checkpoint_if_cancelled()",
        "tool arguments: operative `Tool.parse_arguments`": "Tool.parse_arguments",
    }
    for c in found:
        what = by_row.get(c.name)
        if what is None or c.pays.get("operative") is not None:
            continue
        one = profile["one_step"]["calls_per_run"].get(what, 0.0)
        long = profile["long"]["calls_per_run"].get(what, 0.0)
        c.pays["operative"] = (one, (long - one) / (LONG - 1))


def ledger(
    found: list[Component],
    times: dict[str, Any],
    instructions: dict[str, float] | None,
) -> dict[str, Any]:
    rows = [
        {
            "component": c.name,
            "group": c.group,
            "us": times[c.name],
            "instructions": None if instructions is None else instructions.get(c.name),
            "pays": {s: c.pays.get(s) for s in SYSTEMS},
            "note": c.note,
        }
        for c in found
    ]
    totals: dict[str, Any] = {}
    for s in SYSTEMS:
        one = times[f"{s}: one-step run"]["median"]
        long = times[f"{s}: {LONG}-step run"]["median"]
        marginal = (long - one) / (LONG - 1)
        explained_run = explained_step = 0.0
        instr_run = instr_step = 0.0
        for row in rows:
            counts = row["pays"][s]
            if row["group"] != "primitive" or not counts:
                continue  # operative's phases are another split of the same run
            us = row["us"]["median"]
            explained_run += counts[0] * us
            explained_step += counts[1] * us
            if row["instructions"] is not None:
                instr_run += counts[0] * row["instructions"]
                instr_step += counts[1] * row["instructions"]
        whole: dict[str, Any] = {
            "us_run_1_step": one,
            "us_run_long": long,
            "us_marginal_step": marginal,
        }
        if instructions is not None:
            i_one = instructions.get(f"{s}: one-step run")
            i_long = instructions.get(f"{s}: {LONG}-step run")
            if i_one is not None and i_long is not None:
                whole["instructions_run_1_step"] = i_one
                whole["instructions_marginal_step"] = (i_long - i_one) / (LONG - 1)
        whole["ledger_us_run_1_step"] = explained_run
        whole["ledger_us_marginal_step"] = explained_step
        if instructions is not None:
            whole["ledger_instructions_run_1_step"] = instr_run
            whole["ledger_instructions_marginal_step"] = instr_step
        totals[s] = whole
    return {"rows": rows, "systems": totals}


def operative_phases(result: dict[str, Any]) -> dict[str, Any]:
    """The one-step run of operative split by phase; the rest is the benchmark's caller
    side and the ``agent.run`` glue between the phases."""
    rows = {r["component"]: r for r in result["rows"]}
    names = [
        "operative: the run's `Conversation` + user message (`agent.run`'s input)",
        "operative: the run's parts (`ActiveRun` on the agent's configuration, its own id)",
        "operative: `drive` in the caller's task (one step, finish included) + `_outcome`",
    ]
    total = result["systems"]["operative"]["us_run_1_step"]
    phases = {name: rows[name]["us"]["median"] for name in names}
    out: dict[str, Any] = {"us_run_1_step": total, "phases_us": phases}
    out["rest_us"] = total - sum(phases.values())
    instr = result["systems"]["operative"].get("instructions_run_1_step")
    if instr is not None and all(rows[n]["instructions"] is not None for n in names):
        out["phases_instructions"] = {n: rows[n]["instructions"] for n in names}
        out["instructions_run_1_step"] = instr
        out["rest_instructions"] = instr - sum(out["phases_instructions"].values())
    return out


def _cell(counts: tuple[float, float] | None) -> str:
    if counts is None:
        return "?"
    one, step = counts
    if not one and not step:
        return "-"
    return f"{one:g} + {step:g}/step"


def print_ledger(result: dict[str, Any]) -> None:
    header = ["component", "µs", "instructions", "bare floor", "same-work", "operative"]
    rows = []
    for row in result["rows"]:
        if row["group"] == "whole run":
            continue
        us = row["us"]
        instr = row["instructions"]
        rows.append(
            [
                row["component"],
                f"{us['median']:.3f} ({us['min']:.3f}-{us['max']:.3f})",
                "-" if instr is None else f"{instr:,.0f}",
                *(_cell(row["pays"][s]) for s in SYSTEMS),
            ]
        )
    title = "cost ledger (per occurrence; counts: one-step run + per further step)"
    print_table(title, header, rows)
    header = ["system", "1-step run µs", "marginal step µs", "1-step instr", "step instr"]
    rows = []
    for s, x in result["systems"].items():
        rows.append(
            [
                s,
                f"{x['us_run_1_step']:.1f} (ledger {x.get('ledger_us_run_1_step', 0):.1f})",
                f"{x['us_marginal_step']:.1f} (ledger {x.get('ledger_us_marginal_step', 0):.1f})",
                f"{x.get('instructions_run_1_step', 0):,.0f}",
                f"{x.get('instructions_marginal_step', 0):,.0f}",
            ]
        )
    print_table("whole runs", header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-instructions"]:
        trio.run(child_instructions, argv[1], "--quick" in argv)
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (15)")
    parser.add_argument("--no-instructions", action="store_true", help="skip callgrind")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": list(os.getloadavg()),
        "quick": args.quick,
        "rounds": rounds,
        "long_steps": LONG,
    }
    found = components()
    gc.collect()
    gc.freeze()
    print(f"timing {len(found)} components, {rounds} rounds", file=sys.stderr, flush=True)
    times = trio.run(measure_times, found, rounds, args.quick)
    print("profiling operative", file=sys.stderr, flush=True)
    profile = operative_profile(20 if args.quick else 200)
    _counts_from_profile(found, profile)
    instructions: dict[str, float] | None = None
    if args.no_instructions:
        how = "not counted (--no-instructions)"
    else:
        print("counting instructions under callgrind", file=sys.stderr, flush=True)
        instructions, how = measure_instructions(args.quick)
    results["instructions_by"] = how
    result = ledger(found, times, instructions)
    results.update(result)
    results["operative_phases"] = operative_phases(result)
    results["operative_profile"] = profile
    results["load_after"] = list(os.getloadavg())
    results["elapsed_s"] = time.perf_counter() - started
    print_ledger(result)
    print(f"\ninstructions: {how}")
    if args.json:
        write_json(args.json, results)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
