"""``operative runs ... --temporal HOST:PORT``: the runs a Temporal cluster holds.

``runs list``, ``runs show`` and ``runs cancel`` work on runs held by Temporal as they do
on the data directory's. A run's record, steps, tool calls and transcript are read from
its workflow history (:meth:`TemporalEngine.history`, no worker needed) and put together
by the run store's own rules, so ``--json`` prints the same records. ``temporalio`` is
imported only when ``--temporal`` is given. ``operative recover`` refuses it: Temporal
hands its runs to workers itself.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from .._core._errors import OperativeError
from ._errors import UsageError
from ._invocation import command_line

if TYPE_CHECKING:
    from temporalio.service import RPCError

    from ..durable._records import RunStatus
    from ..runstore import RunDetail, RunSummary
    from ..temporal import TemporalEngine

__all__ = [
    "add_temporal_options",
    "list_runs",
    "on_temporal",
    "open_engine",
    "read_detail",
    "refuse_recover",
    "temporal_command",
    "where",
]

DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "operative"


def add_temporal_options(parent: argparse.ArgumentParser) -> None:
    """``--temporal HOST:PORT``, ``--namespace`` and ``--task-queue``, on a parent parser."""
    group = parent.add_argument_group("runs on Temporal")
    group.add_argument(
        "--temporal",
        metavar="HOST:PORT",
        help="the Temporal frontend holding the runs (e.g. 127.0.0.1:7233), instead of "
        "the data directory",
    )
    group.add_argument(
        "--namespace", help=f"with --temporal: the namespace (default: {DEFAULT_NAMESPACE})"
    )
    group.add_argument(
        "--task-queue",
        help="with --temporal: the task queue the runs were started on, which `runs list` "
        f"lists (default: {DEFAULT_TASK_QUEUE})",
    )


def on_temporal(args: argparse.Namespace) -> bool:
    """Whether the command is pointed at Temporal; UsageError for flags that do not fit."""
    target = getattr(args, "temporal", None)
    given = [
        (flag, value)
        for flag, value in (("--namespace", args.namespace), ("--task-queue", args.task_queue))
        if value is not None
    ]
    if target is None:
        if given:
            flags = " and ".join(flag for flag, _ in given)
            verb = "go" if len(given) > 1 else "goes"
            raise UsageError(
                f"{flags} {verb} with --temporal HOST:PORT (the Temporal server that holds "
                "the runs)"
            )
        return False
    if not target.strip():
        raise UsageError("--temporal takes the Temporal frontend's HOST:PORT, e.g. 127.0.0.1:7233")
    for flag, value in given:
        if not value.strip():
            raise UsageError(f"{flag} takes a name, not an empty string")
    if getattr(args, "data_dir_given", False):
        raise UsageError(
            "--temporal and --data-dir name two places where runs are kept: pass one of them"
        )
    return True


def _namespace(args: argparse.Namespace) -> str:
    return str(args.namespace or DEFAULT_NAMESPACE)


def _task_queue(args: argparse.Namespace) -> str:
    return str(args.task_queue or DEFAULT_TASK_QUEUE)


def where(args: argparse.Namespace, *, queue: bool = False) -> str:
    """``Temporal at HOST:PORT (namespace N)``, with the task queue when ``queue``."""
    inside = f"namespace {_namespace(args)}"
    if queue:
        inside += f", task queue {_task_queue(args)}"
    return f"Temporal at {args.temporal} ({inside})"


def temporal_command(args: argparse.Namespace, words: str) -> str:
    """``words`` as a command line pointed at the same Temporal server, queue and namespace."""
    line = f"{command_line(args, words)} --temporal {shlex.quote(args.temporal)}"
    if args.namespace is not None:
        line += f" --namespace {shlex.quote(args.namespace)}"
    if args.task_queue is not None:
        line += f" --task-queue {shlex.quote(args.task_queue)}"
    return line


def refuse_recover(args: argparse.Namespace) -> None:
    """``operative recover --temporal`` is a UsageError: there is nothing for it to do."""
    if all(getattr(args, name, None) is None for name in ("temporal", "namespace", "task_queue")):
        return
    raise UsageError(
        "operative recover does not take --temporal: Temporal dispatches its runs itself, "
        "and any worker of the run's task queue resumes a run whose worker stopped. Run a "
        "worker (operative.temporal.serve_temporal_worker) for the agents, and watch the "
        f"runs with `{command_line(args, 'runs list')} --temporal HOST:PORT`"
    )


@asynccontextmanager
async def open_engine(args: argparse.Namespace) -> AsyncIterator[TemporalEngine]:
    """A connected engine for ``--temporal``; the server's errors become one-line
    UsageErrors (exit code 2) that say what to do."""
    try:
        from temporalio.service import RPCError

        from ..temporal import TemporalEngine
    except ImportError as exc:
        raise UsageError(
            f"--temporal needs the Temporal SDK ({exc.name or 'temporalio'} cannot be "
            "imported): pip install 'operative[temporal]'"
        ) from None
    engine = TemporalEngine(args.temporal, namespace=_namespace(args), task_queue=_task_queue(args))
    async with AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(engine)
        except OperativeError as exc:
            cause = " ".join(str(exc.__cause__ or exc).split())
            raise UsageError(
                f"cannot connect to Temporal at {args.temporal}: {cause}. Start the server "
                "(`temporal server start-dev` runs one here), or pass another --temporal "
                "HOST:PORT"
            ) from None
        try:
            yield engine
        except RPCError as exc:
            raise _server_error(args, exc) from None


def _server_error(args: argparse.Namespace, exc: RPCError) -> UsageError:
    from temporalio.service import RPCStatusCode

    message = " ".join((exc.message or str(exc)).split())
    if exc.status == RPCStatusCode.NOT_FOUND and "namespace" in message.lower():
        return UsageError(
            f"the Temporal server at {args.temporal} has no namespace "
            f"{_namespace(args)!r}: pass --namespace NAME "
            "(`temporal operator namespace list` lists them)"
        )
    return UsageError(
        f"the Temporal server at {args.temporal} failed: {message} ({exc.status.name}): "
        "check that it is running and reachable, then try again"
    )


async def read_detail(engine: TemporalEngine, run_id: str) -> RunDetail | None:
    """What ``runs show`` prints for a run on Temporal (one read of its history)."""
    from ..durable import RunNotFoundError

    try:
        state = await engine.history(run_id)
    except RunNotFoundError:
        return None
    from .._pricing import DEFAULT_PRICES
    from ..runstore._assemble import build_detail

    return build_detail(state.record(), state.journal(), DEFAULT_PRICES)


async def list_runs(
    engine: TemporalEngine,
    *,
    status: RunStatus | None,
    agent_name: str | None,
    session_id: str | None,
    since: float | None,
    limit: int,
) -> tuple[tuple[RunSummary, ...], str | None]:
    """The newest ``limit`` runs of the engine's task queue, and a cursor when there are
    more (the run store's cursor: the last run's creation time and id)."""
    # engine.list names a run that continued as new once per Temporal execution of it:
    # keep each run once, and ask for more while the duplicates crowd out the page.
    wanted = limit + 1
    while True:
        found = await engine.list(
            status=status, agent_name=agent_name, session_id=session_id, since=since, limit=wanted
        )
        records = list({record.run_id: record for record in found}.values())
        if len(records) > limit or len(found) < wanted:
            break
        wanted *= 2
    summaries = []
    for record in records[:limit]:
        detail = await read_detail(engine, record.run_id)
        if detail is not None:  # None: removed meanwhile (the namespace's retention)
            summaries.append(detail.summary)
    cursor = None
    if len(records) > limit:
        last = records[limit - 1]
        from ..runstore._assemble import encode_cursor

        cursor = encode_cursor("runs", last.created_at, last.run_id)
    return tuple(summaries), cursor
