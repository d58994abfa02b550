"""Supervisors: an agent that plans, dispatches workers in parallel, and aggregates.

::

    supervisor run
    └── step k
        └── tool task "dispatch"              one call carries the whole plan
            └── nursery                       leaving it means every worker has ended
                ├── worker task 0 ─ open_run(worker)   bounded by a CapacityLimiter
                ├── worker task 1 ─ open_run(worker)
                └── ...

The dispatch tool's result is one report per task, in the order the supervisor asked
for them; the supervisor's model aggregates them into its answer. What a failing worker
does to its siblings is a policy, and structured concurrency makes it exact:
``"isolate"`` reports the failure and lets the others finish; ``"cancel_siblings"``
cancels the nursery, so every other worker ends ``aborted`` with a repaired transcript,
and the dispatch call is an error result naming the failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import msgspec
import trio

from .._agent import Agent, RunnableAgent, create_agent
from .._core._errors import InvalidArgument
from .._core._model import GenerateFunction
from .._core._types import FinishReason
from ..tools import Tool, ToolContext
from ._errors import SubagentError, WorkerFailedError
from ._subagent import answer_of, run_subagent

__all__ = ["OnWorkerError", "WorkerReport", "WorkerTask", "create_supervisor", "dispatch_tool"]

OnWorkerError: TypeAlias = Literal["isolate", "cancel_siblings"]


class WorkerTask(msgspec.Struct, frozen=True, kw_only=True):
    """One task of a supervisor's plan."""

    worker: str
    """The name of the worker to give it to."""
    task: str
    """What the worker should do, in plain language."""


class WorkerReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How one task went, as the supervisor's model reads it."""

    worker: str
    task: str
    outcome: Literal["success", "error", "cancelled"]
    answer: Any = None
    """The worker's final answer (or structured output) when it succeeded."""
    error: str | None = None
    finish_reason: str | None = None
    """The worker run's finish reason (absent when it never started)."""


def _workers(workers: Mapping[str, RunnableAgent] | Sequence[RunnableAgent]) -> dict[str, Any]:
    if isinstance(workers, Mapping):
        chosen = dict(workers)
    elif isinstance(workers, list | tuple):
        chosen = {worker.name: worker for worker in workers}
        if len(chosen) != len(workers):
            raise InvalidArgument(
                "two workers share a name: give them distinct names, or pass a mapping "
                "{name: agent}"
            )
    else:
        raise InvalidArgument(
            f"workers= takes a list of agents or a mapping {{name: agent}}, got "
            f"{type(workers).__name__}"
        )
    if not chosen:
        raise InvalidArgument("workers= is empty: a supervisor needs at least one worker")
    for key, worker in chosen.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"worker names are non-empty strs, got {key!r}")
        if not isinstance(worker, RunnableAgent):
            raise InvalidArgument(f"worker {key!r} is {type(worker).__name__}, not an agent")
    return chosen


def _roster(workers: Mapping[str, Any]) -> str:
    lines = []
    for key, worker in workers.items():
        instructions = getattr(worker, "instructions", None)
        first = instructions.strip().splitlines()[0] if instructions else ""
        lines.append(f"- {key}" + (f": {first}" if first else ""))
    return "\n".join(lines)


def dispatch_tool(
    workers: Mapping[str, RunnableAgent] | Sequence[RunnableAgent],
    *,
    name: str = "dispatch",
    description: str | None = None,
    max_concurrency: int = 4,
    on_worker_error: OnWorkerError = "isolate",
) -> Tool:
    """A tool that runs a list of tasks on workers in parallel and returns their reports.

    Each task runs as a child run of the dispatch call (see :func:`subagent_tool`: the
    parent's abort, deadline and remaining budget reach every worker, their events are
    forwarded as ``subagent.event`` and their usage added to the caller's), at most
    ``max_concurrency`` at once (a ``trio.CapacityLimiter``). The result lists one
    :class:`WorkerReport` per task, in order.

    Args:
        workers: the agents the model may dispatch to, by name.
        name: the tool's name.
        description: what the model reads (default: the roster of workers).
        max_concurrency: how many workers run at once (>= 1).
        on_worker_error: ``"isolate"`` reports a failed worker and lets the others
            finish; ``"cancel_siblings"`` cancels the others at the first failure and
            makes the call an error result (a :class:`WorkerFailedError`).
    """
    roster = _workers(workers)
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise InvalidArgument(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    if max_concurrency < 1:
        raise InvalidArgument(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
    if on_worker_error not in ("isolate", "cancel_siblings"):
        raise InvalidArgument(
            f"on_worker_error must be 'isolate' or 'cancel_siblings', got {on_worker_error!r}"
        )
    if description is None:
        description = (
            "Run tasks on worker agents in parallel and get one report per task, in "
            f"order. Workers:\n{_roster(roster)}"
        )

    async def dispatch(tasks: list[WorkerTask], context: ToolContext) -> list[WorkerReport]:
        reports: list[WorkerReport | None] = [None] * len(tasks)
        failed: list[WorkerReport] = []
        limiter = trio.CapacityLimiter(max_concurrency)

        async def run_one(index: int, item: WorkerTask, cancel: trio.CancelScope) -> None:
            report = await _run_worker(roster, index, item, context, limiter)
            reports[index] = report
            if report.outcome == "error" and on_worker_error == "cancel_siblings":
                failed.append(report)
                cancel.cancel()

        async with trio.open_nursery() as nursery:
            for index, item in enumerate(tasks):
                nursery.start_soon(
                    run_one, index, item, nursery.cancel_scope, name=f"worker {item.worker}"
                )
        final = [
            report
            if report is not None
            else WorkerReport(
                worker=item.worker,
                task=item.task,
                outcome="cancelled",
                error="cancelled: another worker failed (on_worker_error='cancel_siblings')",
            )
            for report, item in zip(reports, tasks, strict=True)
        ]
        if failed:
            first = failed[0]
            raise WorkerFailedError(
                f"worker {first.worker!r} failed ({first.error}); the other workers were "
                "cancelled. Reports: " + msgspec.json.encode(final).decode(),
                reports=tuple(final),
            )
        return final

    return Tool(dispatch, name=name, description=description)


async def _run_worker(
    roster: Mapping[str, Any],
    index: int,
    item: WorkerTask,
    context: ToolContext,
    limiter: trio.CapacityLimiter,
) -> WorkerReport:
    worker = roster.get(item.worker)
    if worker is None:
        await trio.lowlevel.checkpoint()
        return WorkerReport(
            worker=item.worker,
            task=item.task,
            outcome="error",
            error=f"no worker is named {item.worker!r}; workers: {', '.join(roster)}",
        )
    async with limiter:
        parent = context.execution.run
        child_id = f"{parent.run_id}/{context.call_id}/{index}" if parent is not None else None
        try:
            result = await run_subagent(worker, item.task, context, child_run_id=child_id)
            answer = answer_of(worker, result)
        except SubagentError as exc:
            reason = getattr(exc.result, "finish_reason", None)
            return WorkerReport(
                worker=item.worker,
                task=item.task,
                outcome="error",
                error=str(exc),
                finish_reason=str(reason) if reason is not None else None,
            )
        except Exception as exc:
            return WorkerReport(
                worker=item.worker,
                task=item.task,
                outcome="error",
                error=f"{type(exc).__name__}: {exc}",
            )
    finish: FinishReason = result.finish_reason
    return WorkerReport(
        worker=item.worker,
        task=item.task,
        outcome="success",
        answer=answer,
        finish_reason=str(finish),
    )


def create_supervisor(
    *,
    generate: GenerateFunction,
    workers: Mapping[str, RunnableAgent] | Sequence[RunnableAgent],
    instructions: str | None = None,
    name: str = "supervisor",
    max_concurrency: int = 4,
    on_worker_error: OnWorkerError = "isolate",
    tools: Sequence[Any] = (),
    **options: Any,
) -> Agent:
    """An agent whose model plans, dispatches tasks to ``workers`` and aggregates.

    It is :func:`~operative.create_agent` with a :func:`dispatch_tool` (named
    ``dispatch``) next to ``tools``, and default instructions that describe the workers.
    Every other keyword is a ``create_agent`` option (``stop_when``, ``budget``, ...).
    """
    roster = _workers(workers)
    dispatch = dispatch_tool(
        roster, max_concurrency=max_concurrency, on_worker_error=on_worker_error
    )
    if instructions is None:
        instructions = (
            "You are a supervisor. Split the request into tasks, give them to your "
            "workers with one call of the dispatch tool (they run in parallel), then "
            f"answer from their reports. Workers:\n{_roster(roster)}"
        )
    return create_agent(
        generate=generate,
        instructions=instructions,
        tools=[*tools, dispatch],
        name=name,
        **options,
    )
