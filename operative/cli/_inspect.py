"""``operative runs`` and ``operative sessions``: what the state directory (or, for runs,
a Temporal cluster: see :mod:`._temporal`) holds, and ``runs cancel``."""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import re
import shlex
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import trio

from .._core._errors import InvalidArgument
from ..durable._records import RunRecord
from ..runstore import RunDetail, RunSummary
from ..sessions import parse_duration
from ._errors import EXIT_OK, UsageError
from ._invocation import command_line
from ._output import Output, describe_cost, shorten, tokens
from ._state import DATABASE, check_data_dir, open_state
from ._temporal import (
    list_runs,
    on_temporal,
    open_engine,
    read_detail,
    temporal_command,
    where,
)
from ._viewer import calls_by_step, pending_approvals, render_run

__all__ = [
    "parse_since",
    "runs_cancel",
    "runs_list",
    "runs_show",
    "sessions_delete",
    "sessions_list",
]

_SHORT = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


_EARLIEST = 0.0
"""1970-01-01T00:00Z: no run was created before it, and a time before it is a negative
timestamp, which some platforms (and Temporal's list filter) cannot represent."""
_FORMS = (
    "give a duration ('30m', '2h', '7d', 'PT1H') or an ISO date or time ('2026-11-30', "
    "'2026-11-30T09:00')"
)


def parse_since(text: str, *, now: float | None = None) -> float:
    """``90s``, ``15m``, ``2h``, ``7d``, ``1w``, ``PT1H`` (that long ago) or an ISO date/time.

    The moment must lie between 1970-01-01 (UTC) and ``now``: a date before it (or one
    Python cannot turn into a time, such as ``0001-01-01`` in a zone east of UTC), a
    duration reaching back before it (``99999999d``) or a time in the future
    (``9999-12-31``) is a :class:`UsageError` naming the problem, never a traceback or a
    listing that cannot match.
    """
    now = time.time() if now is None else now
    shown = repr(text) if len(text) <= 60 else repr(text[:57] + "...")
    short = _SHORT.match(text.strip())
    moment: float | None = None
    if short is not None:
        moment = now - float(short.group(1)) * _UNITS[short.group(2)]
    elif text.upper().startswith("P"):
        with contextlib.suppress(InvalidArgument, ValueError, OverflowError):
            moment = now - parse_duration(text)
    duration = moment is not None
    if moment is None:
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise UsageError(f"--since {shown}: {_FORMS}") from None
        try:
            moment = parsed.timestamp()
        except (ValueError, OverflowError, OSError):
            moment = -math.inf  # too far back to be a time on this machine
    if not moment >= _EARLIEST:  # also NaN: a duration too long to be a number
        if duration:
            raise UsageError(
                f"--since {shown} reaches back before 1970-01-01, out of range: give a "
                "shorter duration, or leave the filter out to list every run"
            )
        raise UsageError(
            f"--since {shown} is before 1970-01-01, out of range: give a later date, or "
            "leave the filter out to list every run"
        )
    if moment > now:
        raise UsageError(
            f"--since {shown} is in the future, so no run can match: give a time in the "
            "past, such as '7d' or an earlier date"
        )
    return moment


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


async def _missing(args: argparse.Namespace) -> bool:
    """Nothing stored yet; UsageError when ``--data-dir`` cannot be a data directory."""
    return not await trio.to_thread.run_sync(check_data_dir, args.data_dir)


def _no_data(args: argparse.Namespace, what: str, ident: str) -> UsageError:
    if getattr(args, "temporal", None) is not None:
        listing = temporal_command(args, f"{what}s list")
        return UsageError(f"no {what} {ident!r} on {where(args)}: list them with `{listing}`")
    listing = command_line(args, f"{what}s list")
    if "--data-dir" not in listing:
        listing += f" --data-dir {shlex.quote(str(args.data_dir))}"
    return UsageError(
        f"no {what} {ident!r} in {args.data_dir / DATABASE}: list them with `{listing}`"
    )


def _cost(run: RunSummary) -> str:
    return describe_cost(run.cost_usd, usage=run.usage, unpriced_models=run.unpriced_models)


def _table(out: Output, header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))

    out.line(fmt(header).rstrip(), "bold")
    for row in rows:
        out.line(fmt(row).rstrip())


def _run_row(run: RunSummary) -> tuple[str, ...]:
    return (
        run.run_id,
        run.agent_name,
        run.session_id or "-",
        run.status,
        run.finish_reason or "-",
        str(run.steps),
        tokens(run.usage),
        _cost(run).split(" (", 1)[0],
        _when(run.created_at),
    )


async def runs_list(args: argparse.Namespace, out: Output) -> int:
    since = parse_since(args.since) if args.since else None
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1, got {args.limit}")
    temporal = on_temporal(args)
    items: tuple[RunSummary, ...] = ()
    cursor: str | None = None
    if temporal:
        async with open_engine(args) as engine:
            items, cursor = await list_runs(
                engine,
                status=args.status,
                agent_name=args.agent,
                session_id=args.session,
                since=since,
                limit=args.limit,
            )
    elif not await _missing(args):
        async with open_state(args.data_dir, create=False) as state:
            page = await state.runs.runs(
                status=args.status,
                agent_name=args.agent,
                session_id=args.session,
                since=since,
                limit=args.limit,
            )
        items, cursor = page.items, page.next_cursor
    if args.json:
        out.json({"runs": items, "next_cursor": cursor})
        return EXIT_OK
    if not items:
        place = f"on {where(args, queue=True)}" if temporal else f"in {args.data_dir / DATABASE}"
        out.line(f"no runs {place}")
        return EXIT_OK
    header = ("RUN", "AGENT", "SESSION", "STATUS", "FINISH", "STEPS", "TOKENS", "COST", "CREATED")
    _table(out, header, [_run_row(run) for run in items])
    reasons = dict.fromkeys(
        cost.split(" (", 1)[1][:-1] for cost in map(_cost, items) if cost.startswith("n/a (")
    )
    if reasons:
        out.line(f"(cost n/a: {'; '.join(reasons)})", "dim")
    if cursor is not None:
        out.line(f"(more runs: raise --limit above {args.limit})", "dim")
    return EXIT_OK


async def runs_show(args: argparse.Namespace, out: Output) -> int:
    detail: RunDetail | None = None
    temporal = on_temporal(args)
    if temporal:
        async with open_engine(args) as engine:
            detail = await read_detail(engine, args.run_id)
    elif not await _missing(args):
        async with open_state(args.data_dir, create=False) as state:
            detail = await state.runs.run(args.run_id)
    if detail is None:
        raise _no_data(args, "run", args.run_id)
    if args.html:
        page = render_run(detail, now=time.time())
        target = Path(args.html)
        try:
            await trio.Path(target).write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(
                f"--html {args.html}: cannot write it ({exc}); pick another path"
            ) from None
        if args.json:
            out.json(detail)
        else:
            out.line(f"wrote {target} ({len(page.encode()) // 1024 + 1} KiB): open it in a browser")
        return EXIT_OK
    if args.json:
        out.json(detail)
        return EXIT_OK
    run = detail.summary
    out.line(f"run {run.run_id}", "bold")
    out.line(f"  agent     {run.agent_name}")
    out.line(f"  session   {run.session_id or '-'}")
    waiting = pending_approvals(detail)
    if waiting:
        out.line(
            f"  status    waiting for approval ({', '.join(waiting)}; the run {run.status}: "
            f"{run.finish_reason or 'not finished'})",
            "yellow",
        )
    else:
        out.line(f"  status    {run.status} ({run.finish_reason or 'not finished'})")
    out.line(f"  created   {_when(run.created_at)}; updated {_when(run.updated_at)}")
    out.line(f"  usage     {tokens(run.usage)} tokens, cost {_cost(run)}")
    if run.status == "running":
        if temporal:
            nobody = "no worker yet (any worker of its task queue takes it)"
        else:
            nobody = f"nobody (run `{command_line(args, 'recover')}`)"
        out.line(f"  lease     {run.lease_owner or nobody}")
        if run.cancel_requested:
            out.line(f"  cancel    requested: {run.cancel_reason}", "yellow")
    if run.outcome is not None and run.outcome.error:
        out.line(f"  error     {run.outcome.error}", "red")
    if run.outcome is not None and run.outcome.abort_reason:
        out.line(f"  aborted   {run.outcome.abort_reason}", "yellow")
    for step in detail.steps:
        out.line(f"step {step.step} ({step.state}), {tokens(step.usage)} tokens", "bold")
        if step.content:
            out.line(f"  says: {shorten(step.content, 200)}")
        for result in step.results:
            shown = result.value if result.outcome == "success" else result.error
            out.line(f"  {result.tool_name}: {result.outcome}: {shorten(str(shown))}")
    for calls in calls_by_step(detail).values():
        for call in calls:
            took = f"{call.duration:.3f} s" if call.duration is not None else "-"
            out.line(f"call {call.call_id} {call.tool_name}: {call.outcome}, {took}", "dim")
    if run.outcome is not None and run.outcome.content:
        out.line(f"answer: {run.outcome.content}", "green")
    return EXIT_OK


async def runs_cancel(args: argparse.Namespace, out: Output) -> int:
    """Ask a running run to stop: it ends ``aborted`` (see ``DurableEngine.cancel``)."""
    reason: str = args.reason
    if not reason.strip():
        raise UsageError("--reason takes a few words saying why, not an empty string")
    temporal = on_temporal(args)
    before: RunRecord | None = None
    after: RunRecord | None = None
    if temporal:
        async with open_engine(args) as engine:
            before = await engine.get(args.run_id)
            if before is not None and before.status == "running":
                after = await engine.cancel(args.run_id, reason)
    elif await trio.to_thread.run_sync(
        functools.partial(check_data_dir, writing=True), args.data_dir
    ):
        async with open_state(args.data_dir, create=False) as state:
            before = await state.engine.get(args.run_id)
            if before is not None and before.status == "running":
                after = await state.engine.cancel(args.run_id, reason)
    if before is None:
        raise _no_data(args, "run", args.run_id)
    record = after or before
    if args.json:
        out.json(record)
        return EXIT_OK
    run_id = args.run_id
    outcome = record.outcome
    finish = f" ({outcome.finish_reason})" if outcome is not None else ""
    if after is None:
        out.line(f"run {run_id} had ended already: {before.status}{finish}; nothing to cancel")
    elif after.status == "aborted":
        out.line(f"cancelled run {run_id}: it ended aborted ({reason})")
    elif after.status != "running":
        out.line(f"run {run_id} ended {after.status}{finish} before the cancel reached it")
    elif temporal:
        holder = after.lease_owner
        when = (
            f"the worker running it ({holder}) aborts it within a heartbeat; if that worker "
            "has stopped, the next worker of its task queue ends it"
            if holder is not None
            else "it ends aborted as soon as a worker of its task queue takes it"
        )
        out.line(f"cancel requested for run {run_id} ({reason}): {when}")
    else:
        out.line(
            f"cancel requested for run {run_id} ({reason}): the worker holding it "
            f"({after.lease_owner}) aborts it at its next lease renewal or journal write"
        )
    return EXIT_OK


async def sessions_list(args: argparse.Namespace, out: Output) -> int:
    summaries = []
    if not await _missing(args):
        async with open_state(args.data_dir, create=False) as state:
            summaries = await state.sessions.list(agent_name=args.agent)
    if args.json:
        out.json({"sessions": summaries})
        return EXIT_OK
    if not summaries:
        out.line(f"no sessions in {args.data_dir / DATABASE}")
        return EXIT_OK
    header = ("SESSION", "AGENT", "MESSAGES", "RUNS", "UPDATED")
    rows = [
        (s.id, s.agent_name, str(s.message_count), str(s.run_count), _when(s.updated_at))
        for s in summaries
    ]
    _table(out, header, rows)
    return EXIT_OK


async def sessions_show(args: argparse.Namespace, out: Output) -> int:
    session = None
    if not await _missing(args):
        async with open_state(args.data_dir, create=False) as state:
            session = await state.sessions.load(args.session_id)
    if session is None:
        raise _no_data(args, "session", args.session_id)
    if args.json:
        out.json(session)
        return EXIT_OK
    out.line(f"session {session.id} ({session.agent_name})", "bold")
    out.line(f"  created {_when(session.created_at)}; updated {_when(session.updated_at)}")
    for message in session.conversation_history.messages:
        if message.role == "tool":
            out.line(f"  tool {message.tool_name}: {message.outcome}: {shorten(message.text)}")
            continue
        calls = ", ".join(call.name for call in message.tool_calls)
        text = shorten(message.text, 200) + (f" [calls {calls}]" if calls else "")
        out.line(f"  {message.role}: {text}")
    for ref in session.runs:
        outcome = ref.outcome.finish_reason if ref.outcome else "no outcome stored"
        out.line(f"  run {ref.run_id}: {outcome}", "dim")
    return EXIT_OK


async def sessions_delete(args: argparse.Namespace, out: Output) -> int:
    deleted = False
    if not await _missing(args):
        async with open_state(args.data_dir, create=False) as state:
            deleted = await state.sessions.delete(args.session_id)
    if not deleted:
        raise _no_data(args, "session", args.session_id)
    if args.json:
        out.json({"deleted": args.session_id})
    else:
        out.line(f"deleted session {args.session_id!r}")
    return EXIT_OK
