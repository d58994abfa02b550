"""``operative demo``, ``operative chat`` and ``operative recover``: commands that run agents."""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Mapping
from typing import IO, Any

import trio

from .. import RunResult
from .._core._errors import OperativeError
from ..durable import recover
from ..sessions import LeaseHeldError, SessionPersistenceError, open_session
from ..tools import ApprovalDecision, PendingApproval
from ._agents import CHAT_AGENT, DEMO_AGENT, chat_agent, demo_agent
from ._errors import EXIT_FAILED, EXIT_OK, UsageError, no_room
from ._invocation import command_line
from ._models import ModelChoice, choose_model, open_generate
from ._output import Observed, Output, Progress, describe_cost, shorten, tokens
from ._state import State, check_data_dir, open_state
from ._temporal import refuse_recover

__all__ = ["LineReader", "run_chat", "run_demo", "run_recover"]


class LineReader:
    """Lines from a text stream, read in a worker thread so the run goes on meanwhile."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        try:
            self.echo = not stream.isatty()
        except (AttributeError, ValueError):
            self.echo = True
        """Piped input is not shown by a terminal: the caller writes it out itself."""

    async def readline(self) -> str | None:
        """The next line without its newline, or ``None`` at end of input."""
        line = await trio.to_thread.run_sync(self._stream.readline, abandon_on_cancel=True)
        return None if line == "" else line.rstrip("\r\n")


def _banner(out: Output, choice: ModelChoice) -> None:
    out.line(f"model: {choice.label}", "bold yellow" if choice.offline else "bold")
    if choice.offline:
        out.line(
            f"  ({choice.why}; set ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL, "
            "or pass --model provider:model, to use a real model)",
            "dim",
        )


def _failed(result: RunResult) -> bool:
    return str(result.finish_reason) != "stop-condition"


def _explain(out: Output, result: RunResult) -> None:
    error = f": {result.error}" if result.error is not None else ""
    out.error(f"the run ended with {result.finish_reason}{error}")


def _choice(args: argparse.Namespace, env: Mapping[str, str]) -> ModelChoice:
    return choose_model(getattr(args, "model", None), offline=args.offline, env=env)


async def _cost(state: State, run_id: str, progress: Progress) -> str:
    """The run's cost as ``runs show`` reports it (from the run store)."""
    try:
        detail = await state.runs.run(run_id)
    except OperativeError:
        detail = None
    if detail is None:
        return progress.totals().split("cost ", 1)[1]
    run = detail.summary
    return describe_cost(run.cost_usd, usage=run.usage, unpriced_models=run.unpriced_models)


async def run_demo(args: argparse.Namespace, out: Output, env: Mapping[str, str]) -> int:
    """One durable session turn of the demo agent, with live progress."""
    choice = _choice(args, env)
    _banner(out, choice)
    progress = Progress(out)
    # The model first: a missing SDK or key is found before anything is stored.
    async with open_generate(choice, env) as generate, open_state(args.data_dir) as state:
        out.line(f"data: {state.database}", "dim")
        agent = Observed(demo_agent(generate), progress)
        async with open_session(
            args.session,
            store=state.sessions,
            agent_name=DEMO_AGENT,
            agent=agent,
            durable=state.durable,
        ) as session:
            out.line(f"you: {args.prompt}", "bold")
            async with progress.showing():
                try:
                    result = await session.run(args.prompt)
                except SessionPersistenceError as exc:
                    progress.end_line()
                    if no_room(exc) is not None:
                        raise  # the command says the disk is full (see _main)
                    out.error(f"the run ended but could not be stored: {exc}")
                    return EXIT_FAILED
            run_id = session.session.runs[-1].run_id
        cost = await _cost(state, run_id, progress)
    progress.end_line()
    if result.content:
        out.line(f"answer: {result.content}", "bold green")
    out.line(
        f"{len(result.steps)} steps, {tokens(result.usage)} tokens, cost {cost}; "
        f"durable run {run_id} in session {args.session!r}",
        "dim",
    )
    out.line(f"  (see it with: {command_line(args, f'runs show {run_id}')})", "dim")
    if _failed(result):
        _explain(out, result)
        return EXIT_FAILED
    return EXIT_OK


def _approver(out: Output, progress: Progress, reader: LineReader) -> Any:
    async def ask(pending: PendingApproval) -> ApprovalDecision:
        progress.end_line()
        arguments = ", ".join(f"{k}={v!r}" for k, v in pending.arguments.items())
        out.write(f"approve {pending.tool_name}({shorten(arguments, 200)})? [y/N] ")
        answer = await reader.readline()
        if reader.echo:
            out.write(f"{answer or ''}\n")
        if answer is None:
            return ApprovalDecision(approved=False, reason="nobody answered (end of input)")
        if answer.strip().lower() in ("y", "yes"):
            return ApprovalDecision(approved=True)
        return ApprovalDecision(approved=False, reason="the user declined")

    return ask


async def run_chat(
    args: argparse.Namespace, out: Output, env: Mapping[str, str], stdin: IO[str]
) -> int:
    """Read lines, run each as a durable turn of session ``--session``, stream the reply."""
    choice = _choice(args, env)
    _banner(out, choice)
    progress = Progress(out, stream_text=True)
    reader = LineReader(stdin)
    failed = False
    async with open_generate(choice, env) as generate, open_state(args.data_dir) as state:
        agent = chat_agent(generate, approver=_approver(out, progress, reader), notes=state.notes)
        await _check_owner(state, args.session, CHAT_AGENT)
        async with open_session(
            args.session,
            store=state.sessions,
            agent=Observed(agent, progress),
            durable=state.durable,
        ) as session:
            async with progress.showing():
                try:
                    recovered = await session.recover()
                except LeaseHeldError as held:
                    recovered = None
                    out.line(_held(args, held), "yellow")
                if recovered is not None:
                    out.line(f"resuming the interrupted turn {recovered.run_id}", "yellow")
                    failed |= _failed(await recovered.result())
            count = len(session.session.conversation_history.messages)
            out.line(
                f"session {args.session!r} ({count} messages so far). Type /quit or end the "
                "input (Ctrl-D) to leave.",
                "dim",
            )
            while True:
                out.write("you> ")
                line = await reader.readline()
                if reader.echo:
                    out.write(f"{line or ''}\n")
                if line is None:
                    break
                text = line.strip()
                if text in ("/quit", "/exit"):
                    break
                if not text:
                    continue
                progress.reset()
                unstored: SessionPersistenceError | None = None
                async with progress.showing():
                    try:
                        result = await session.run(text)
                    except SessionPersistenceError as exc:
                        unstored = exc
                progress.end_line()
                if unstored is not None:
                    if no_room(unstored) is not None:
                        raise unstored  # every later turn would fail too: see _main
                    out.error(f"the turn ran but could not be stored: {unstored}")
                    failed = True
                    continue
                if result.content and not progress.answered:
                    out.line(f"assistant: {result.content}", "bold green")
                cost = await _cost(state, session.session.runs[-1].run_id, progress)
                out.line(f"  this turn: {tokens(result.usage)} tokens, cost {cost}", "dim")
                if _failed(result):
                    _explain(out, result)
                    failed = True
    return EXIT_FAILED if failed else EXIT_OK


async def _check_owner(state: State, session_id: str, agent_name: str) -> None:
    existing = await state.sessions.load(session_id)
    if existing is not None and existing.agent_name != agent_name:
        raise UsageError(
            f"session {session_id!r} belongs to the agent {existing.agent_name!r}, not "
            f"{agent_name!r}: pick another --session name"
        )


async def run_recover(
    args: argparse.Namespace, out: Output, env: Mapping[str, str], stdin: IO[str]
) -> int:
    """Finish the demo's and chat's durable runs whose process stopped."""
    refuse_recover(args)
    if not await trio.to_thread.run_sync(check_data_dir, args.data_dir):
        if args.json:
            out.json({"resumed": [], "still_running": []})
        else:
            out.line(f"nothing to recover: no data in {args.data_dir} yet")
        return EXIT_OK
    choice = _choice(args, env)
    if not args.json:
        _banner(out, choice)
    progress = Progress(out if not args.json else Output(io.StringIO(), out.stderr))
    reader = LineReader(stdin)
    resumed: list[tuple[str, str | None, RunResult]] = []
    async with open_generate(choice, env) as generate, open_state(args.data_dir) as state:
        agents = {
            DEMO_AGENT: Observed(demo_agent(generate), progress),
            CHAT_AGENT: Observed(
                chat_agent(generate, approver=_approver(out, progress, reader), notes=state.notes),
                progress,
            ),
        }
        async with progress.showing():
            # Session turns first: resuming them through the session stores their outcome.
            for summary in await state.sessions.list():
                if summary.agent_name not in agents:
                    continue
                record = await state.sessions.load(summary.id)
                if record is None or all(ref.outcome is not None for ref in record.runs):
                    continue
                async with open_session(
                    summary.id,
                    store=state.sessions,
                    agent=agents[summary.agent_name],
                    durable=state.durable,
                ) as session:
                    try:
                        recovered = await session.recover()
                    except LeaseHeldError:
                        recovered = None  # listed below, with the runs still running
                    if recovered is not None:
                        _say(
                            out, args, f"resuming run {recovered.run_id} of session {summary.id!r}"
                        )
                        resumed.append((recovered.run_id, summary.id, await recovered.result()))
            # Then durable runs outside sessions.
            for run_id, result in (await recover(state.durable, agents=agents)).items():
                resumed.append((run_id, None, result))
        still = (await state.runs.runs(status="running", limit=100)).items
    progress.end_line()
    if args.json:
        out.json(
            {
                "resumed": [
                    {
                        "run_id": run_id,
                        "session_id": session_id,
                        "finish_reason": str(result.finish_reason),
                        "content": result.content,
                        "steps": len(result.steps),
                        "usage": result.usage,
                    }
                    for run_id, session_id, result in resumed
                ],
                "still_running": [run for run in still if run.agent_name in agents],
            }
        )
    else:
        for run_id, session_id, result in resumed:
            where = f" (session {session_id!r})" if session_id else ""
            out.line(
                f"resumed {run_id}{where}: {result.finish_reason}: {shorten(result.content)}",
                "green" if not _failed(result) else "red",
            )
        for run in still:
            if run.agent_name in agents:
                holder = run.lease_owner or "nobody"
                out.line(
                    f"still running: {run.run_id} ({run.agent_name}), held by {holder}; "
                    f"run `{command_line(args, 'recover')}` again once its lease expires",
                    "yellow",
                )
        if not resumed:
            out.line("nothing to recover: no interrupted runs of the demo or chat agents")
        else:
            out.line(f"resumed {len(resumed)} run(s)")
    return EXIT_FAILED if any(_failed(result) for *_, result in resumed) else EXIT_OK


def _held(args: argparse.Namespace, held: LeaseHeldError) -> str:
    """What to tell the user about a turn another process holds."""
    until = time.strftime("%H:%M:%S", time.localtime(held.expires_at))
    return (
        f"the interrupted turn {held.run_id} is held by {held.holder} until {until}: if "
        f"that process stopped, run `{command_line(args, 'recover')}` after {until} to "
        "finish it"
    )


def _say(out: Output, args: argparse.Namespace, text: str) -> None:
    if not args.json:
        out.line(text, "yellow")
