"""The same-work floor: a hand-written Trio loop that does, by hand and as cheaply as it
can, the work operative's design requires of every run, and nothing else.

The bare floor (``floor.py``) appends plain dicts to a list it owns. A run of operative
must also leave the caller's history untouched, run inside a cancel scope when anything
but its caller can cancel it (here nothing can: no scope), keep typed
records with ids, validate tool arguments against a typed schema, record each step and
return a result record, and answer every call exactly once whatever ends the run. Each
piece below names the line of ``DESIGN.md`` (sections 1-3) that asks for it. Nothing
here is an event hub, an extension seam, a hook, a run id, a liveness record or an
option check: the design asks for those only when they are used (events are built only
when someone listens; hooks and extensions only when given), so a run with none of them
owes none of their cost.

The ratio of operative to this floor is the overhead of operative's generality; the
ratio of this floor to the bare one is the price of the design's guarantees themselves.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

NAME = "floor (same work)"
RUNNER = "trio"
CALLS = [0]
sleep = trio.sleep

# --------------------------------------------------------------------------------------
# records (DESIGN §3: "Records that are persisted, streamed or sent — messages,
# histories, tool calls, usage ... — are msgspec.Structs (frozen, keyword-only)")
# --------------------------------------------------------------------------------------


class ToolCall(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A call the model asked for; ``id`` names it (§2 invariants 1 and 4 count by id)."""

    id: str
    name: str
    arguments: str


class Usage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """§2 invariant 3: ``result.usage`` is the sum of every generate attempt's usage."""

    prompt: int = 0
    completion: int = 0


NO_USAGE = Usage()


class Message(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """One transcript record with an id (a persisted record needs an identity; a tool
    message names the call it answers)."""

    id: str
    role: str
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    outcome: str | None = None


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What ``generate`` is given: an immutable transcript (§3: histories are records;
    §2 invariant 5: nobody, the model included, holds the run's mutable list)."""

    messages: tuple[Message, ...]
    step: int


class GenerateResponse(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The model's answer as a typed record (§3)."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How one call settled (§3: a bad argument becomes an error result, never a crash)."""

    call_id: str
    outcome: str
    value: Any = None
    error: str | None = None


class StepResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One record per step (§2 invariant 3: ``len(result.steps) <= maximum_steps``)."""

    step: int
    content: str
    tool_calls: tuple[ToolCall, ...]
    results: tuple[ToolResult, ...]
    usage: Usage


class RunResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The run's result (§2 invariant 3: usage, steps, finish reason)."""

    messages: list[Message]
    steps: tuple[StepResult, ...]
    content: str
    usage: Usage
    finish_reason: str


# Message ids: a random per-process prefix and a counter (no system call per id); unique
# within a transcript, as a record's identity must be.
_PREFIX = os.urandom(8).hex()
_COUNT = itertools.count(1)


def new_id() -> str:
    return f"{_PREFIX}{next(_COUNT):08x}"


# --------------------------------------------------------------------------------------
# tools: typed arguments decoded and validated by msgspec (§3: "Tool inputs are any type
# msgspec ... can validate"; "A bad argument from a model becomes an error tool result")
# --------------------------------------------------------------------------------------


class AddArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    a: int
    b: int


class WaitArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    ms: int


async def add(args: AddArgs) -> int:
    CALLS[0] += 1
    return args.a + args.b


async def wait(args: WaitArgs) -> int:
    await trio.sleep(args.ms / 1000)
    CALLS[0] += 1
    return args.ms


TOOLS: dict[str, tuple[Callable[[Any], Awaitable[Any]], msgspec.json.Decoder[Any]]] = {
    "add": (add, msgspec.json.Decoder(AddArgs)),
    "wait": (wait, msgspec.json.Decoder(WaitArgs)),
}
_encode = msgspec.json.Encoder().encode


async def _execute(call: ToolCall) -> ToolResult:
    entry = TOOLS.get(call.name)
    if entry is None:
        return ToolResult(call_id=call.id, outcome="error", error=f"unknown tool {call.name!r}")
    fn, decoder = entry
    try:
        arguments = decoder.decode(call.arguments)
    except msgspec.MsgspecError as exc:
        return ToolResult(call_id=call.id, outcome="error", error=f"invalid arguments: {exc}")
    try:
        value = await fn(arguments)
    except Exception as exc:
        return ToolResult(call_id=call.id, outcome="error", error=f"{type(exc).__name__}: {exc}")
    return ToolResult(call_id=call.id, outcome="success", value=value)


def _result_message(result: ToolResult) -> Message:
    # §2 invariant 1: one tool-result message per call, naming the call. The content is
    # the value as JSON (what a model reads), which also proves the value can be sent.
    if result.outcome == "success":
        value = result.value
        content = value if value.__class__ is str else _encode(value).decode()
    else:
        content = result.error or ""
    return Message(
        id=new_id(),
        role="tool",
        content=content,
        tool_call_id=result.call_id,
        outcome=result.outcome,
    )


async def _execute_into(results: list[Any], i: int, call: ToolCall) -> None:
    results[i] = await _execute(call)


# --------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------


async def run(
    generate: Callable[[GenerateRequest], Awaitable[GenerateResponse]],
    history: tuple[Message, ...],
    maximum_steps: int = 25,
    scope: trio.CancelScope | None = None,
) -> RunResult:
    """Run the loop; ``scope`` is the run scope an abort cancels: the run then ends
    ``aborted``, every call it left open answered. Without one nothing but the caller
    can cancel the run, so it enters none (as operative's sealed runs)."""
    # §2 invariant 5: "The history object a caller passes in is never mutated (runs
    # snapshot it)": the run appends to its own list.
    messages = list(history)
    steps: list[StepResult] = []
    usage = NO_USAGE
    seen: set[str] = set()  # §2 invariant 4: a call executes at most once per call id
    pending: tuple[ToolCall, ...] = ()  # the calls of the step in flight, not yet answered
    answered: list[Any] = []
    finish = "maximum-steps"
    # §1: the loop task runs in the "run scope" (abort, run deadline, budgets are cancel
    # scopes): whoever holds it can abort the run as a whole. A run nobody can abort has
    # no scope to hold.
    # (``with scope:`` written out, PEP 343's expansion: a run with no scope enters no
    # context manager, as operative's sealed runs.)
    if scope is not None:
        scope.__enter__()
    try:
        for step in range(1, maximum_steps + 1):
            # §1: the steering gate at every step's entry is a checkpoint (cancellable).
            await trio.lowlevel.checkpoint()
            # §3: the model is sent an immutable transcript record, not the run's list.
            response = await generate(GenerateRequest(messages=tuple(messages), step=step))
            if response.__class__ is not GenerateResponse:
                raise TypeError(f"generate returned {type(response).__name__}")
            step_usage = response.usage or NO_USAGE
            if response.usage is not None:
                usage = Usage(
                    prompt=usage.prompt + step_usage.prompt,
                    completion=usage.completion + step_usage.completion,
                )
            calls = response.tool_calls
            for call in calls:
                # (operative renames a repeated id; refusing it is the cheapest guard)
                if call.id in seen:
                    raise ValueError(f"call id {call.id!r} used twice")
                seen.add(call.id)
            messages.append(
                Message(id=new_id(), role="assistant", content=response.content, tool_calls=calls)
            )
            results: tuple[ToolResult, ...] = ()
            if calls:
                pending = calls
                if len(calls) == 1:
                    answered = [await _execute(calls[0])]
                else:
                    # §1: "tool nursery: one child task per tool call".
                    answered = [None] * len(calls)
                    async with trio.open_nursery() as nursery:
                        for i, call in enumerate(calls):
                            nursery.start_soon(_execute_into, answered, i, call)
                results = tuple(answered)
                messages.extend([_result_message(r) for r in results])
                pending, answered = (), []
            steps.append(
                StepResult(
                    step=step,
                    content=response.content,
                    tool_calls=calls,
                    results=results,
                    usage=step_usage,
                )
            )
            if not calls:  # the stop condition: an answer with no tool calls
                finish = "stop-condition"
                break
    except BaseException as exc:
        if scope is None or not scope.__exit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        if scope is not None:
            scope.__exit__(None, None, None)
    if (scope is not None and scope.cancelled_caught) or pending:
        # §2 invariant 1, "whatever ended the run": a step cut short answers the calls it
        # left open (§1: the clean-up "repairing the transcript").
        finish = "aborted"
        for i, call in enumerate(pending):
            done = answered[i] if i < len(answered) else None
            result = done or ToolResult(call_id=call.id, outcome="cancelled", error="cancelled")
            messages.append(_result_message(result))
    content = steps[-1].content if steps else ""
    return RunResult(
        messages=messages, steps=tuple(steps), content=content, usage=usage, finish_reason=finish
    )


# --------------------------------------------------------------------------------------
# the benchmark's side: scripted model, the caller's history
# --------------------------------------------------------------------------------------


def _run(
    generate: Callable[[GenerateRequest], Awaitable[GenerateResponse]],
) -> Awaitable[RunResult]:
    # The caller's history, built per run as operative's ``agent.run`` builds its
    # conversation; what is returned is the run's own coroutine.
    return run(generate, (Message(id=new_id(), role="user", content="What is 1 + 1?"),))


def answer(result: RunResult) -> str:
    """The run's answer, once it ended as the script says it does."""
    if result.finish_reason != "stop-condition":
        raise RuntimeError(f"run ended with {result.finish_reason}")
    return result.content


def make_steps(steps: int, latency: float) -> Callable[[], Awaitable[RunResult]]:
    script = [
        GenerateResponse(
            tool_calls=(ToolCall(id=f"call_{k}", name="add", arguments=f'{{"a": {k}, "b": 1}}'),)
        )
        for k in range(1, steps)
    ]
    script.append(GenerateResponse(content="the answer is 42"))

    async def generate(request: GenerateRequest) -> GenerateResponse:
        if latency:
            await trio.sleep(latency)
        return script[request.step - 1]

    return lambda: _run(generate)


def make_parallel(calls: int, tool_sleep: float) -> Callable[[], Awaitable[RunResult]]:
    ms = round(tool_sleep * 1000)
    first = GenerateResponse(
        tool_calls=tuple(
            ToolCall(id=f"call_{k}", name="wait", arguments=f'{{"ms": {ms}}}') for k in range(calls)
        )
    )
    script = [first, GenerateResponse(content="done")]

    async def generate(request: GenerateRequest) -> GenerateResponse:
        return script[request.step - 1]

    return lambda: _run(generate)
