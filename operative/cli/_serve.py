"""``operative serve``: the stateless chat host on hypercorn's Trio worker, with the
Vercel AI SDK (``POST /api/chat``) and AG-UI (``POST /api/agui``) endpoints beside it,
and the run viewer (``/runs``) over the data directory's durable runs."""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from ..kvstore import SqliteStore
from ..runstore import SqliteRunStore
from ..tools import ApprovalPolicy, Toolbox
from ._agents import _INSTRUCTIONS, _note_tool, calculate, get_weather
from ._chat_host import ChatHost
from ._chat_page import page
from ._errors import EXIT_OK, UsageError
from ._interrupt import STOPPING_SIGNALS
from ._listen import handed_over, listen
from ._models import ModelChoice, choose_model, open_generate
from ._output import Output
from ._state import DATABASE, check_data_dir, make_data_dir
from ._viewer_app import RunsApp

__all__ = ["SECRET_FILE", "approval_secret", "build_host", "run_serve", "with_request_log"]

SECRET_FILE = "approval-secret"
SECRET_ENV = "OPERATIVE_APPROVAL_SECRET"
OFFLINE = ModelChoice(provider="offline", model="offline", why="--offline")


def named_secret(env: Mapping[str, str]) -> bytes | None:
    """``$OPERATIVE_APPROVAL_SECRET`` when it is set; UsageError when it is too short."""
    named = env.get(SECRET_ENV)
    if not named:
        return None
    if len(named.encode()) < 32:
        raise UsageError(
            f"{SECRET_ENV} must be at least 32 bytes; generate one with "
            "`python -c 'import secrets; print(secrets.token_hex(32))'`"
        )
    return named.encode()


def approval_secret(data_dir: Path, env: Mapping[str, str]) -> bytes:
    """``$OPERATIVE_APPROVAL_SECRET``, else the data directory's, generated on first use.

    Every process that resumes the host's approvals must sign with the same secret.
    """
    named = named_secret(env)
    if named is not None:
        return named
    path = data_dir / SECRET_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            secret = path.read_text(encoding="ascii", errors="replace").strip()
        else:
            with os.fdopen(fd, "w", encoding="ascii") as file:
                file.write(secrets.token_hex(32) + "\n")
            secret = path.read_text(encoding="ascii").strip()
    except OSError as error:
        raise UsageError(
            f"cannot read or create the approval secret {path} ({error.strerror}): fix or "
            f"delete it (parked approvals signed with it will no longer resume), or set "
            f"{SECRET_ENV}"
        ) from None
    if len(secret) < 32 or not secret.isascii():
        raise UsageError(
            f"{path} holds no usable approval secret: delete it (parked approvals "
            f"signed with it will no longer resume) or set {SECRET_ENV}"
        )
    return secret.encode()


def build_host(
    generate: Any,
    *,
    secret: bytes,
    approval_state: Any,
    notes: Path,
    model: ModelChoice = OFFLINE,
) -> ChatHost:
    """The chat host: the demo's tools and ``save_note``, which needs the user's yes.

    The page names ``model``, and says so plainly when it is the offline stand-in.
    """
    toolbox = Toolbox(
        [get_weather, calculate, _note_tool(notes)],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=secret,
        approval_state=approval_state,
    )
    instructions = _INSTRUCTIONS.format(kind="chat", notes=" and save_note to save notes")
    return ChatHost(
        generate=generate,
        toolbox=toolbox,
        instructions=instructions,
        page=page(model.label, offline=model.offline),
    )


def with_request_log(app: Any, log: Callable[[str], None]) -> Any:
    """``app``, writing one line per HTTP request once it is answered:
    ``14:02:31 POST /api/turn 200 153.2 ms`` (status ``-`` when the client left first)."""

    async def logged(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        started = time.monotonic()
        status: list[int] = []

        async def send_noting_status(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await app(scope, receive, send_noting_status)
        finally:
            took = (time.monotonic() - started) * 1000
            path = scope["path"] + (
                f"?{scope['query_string'].decode()}" if scope.get("query_string") else ""
            )
            log(
                f"{time.strftime('%H:%M:%S')} {scope['method']} {path} "
                f"{status[0] if status else '-'} {took:.1f} ms"
            )

    return logged


async def _until_stopped() -> None:
    """Return at the first SIGINT (Ctrl-C) or SIGTERM: hypercorn then shuts down cleanly."""
    with trio.open_signal_receiver(*STOPPING_SIGNALS) as signals:
        async for _ in signals:
            return


async def run_serve(args: argparse.Namespace, out: Output, env: Mapping[str, str]) -> int:
    """Serve the chat page, ``POST /api/turn``, ``/api/chat`` and ``/api/agui`` until
    interrupted.

    Everything that can be checked is, before anything is created: the model (its SDK
    and key), the data directory, the address and port (bound here).
    """
    try:
        from hypercorn.config import Config
        from hypercorn.trio import serve
    except ImportError:
        raise UsageError(
            "`operative serve` needs hypercorn: pip install 'operative[serve]'"
        ) from None
    choice = choose_model(args.model, offline=args.offline, env=env)
    data_dir: Path = args.data_dir
    async with open_generate(choice, env) as generate:
        named_secret(env)
        await trio.to_thread.run_sync(functools.partial(check_data_dir, data_dir, writing=True))
        sockets = listen(args.host, args.port, host_flag="--host", port_flag="--port")
        try:
            await trio.to_thread.run_sync(make_data_dir, data_dir)
            secret = await trio.to_thread.run_sync(approval_secret, data_dir, env)
            async with (
                SqliteStore(data_dir / DATABASE) as state,
                SqliteRunStore(data_dir / DATABASE) as runs,
            ):
                await _probe(state, data_dir / DATABASE)
                config = Config()
                config.bind = handed_over(sockets)
                config.accesslog = None
                config.errorlog = None
                host = build_host(
                    generate,
                    secret=secret,
                    approval_state=state,
                    notes=data_dir / "notes.txt",
                    model=choice,
                )
                out.line(f"model: {choice.label}", "bold yellow" if choice.offline else "bold")
                from ..ui import UIApp  # the front ends' endpoints beside the page's

                app = with_request_log(
                    RunsApp(app=UIApp(host=host), store=runs), lambda line: out.line(line, "dim")
                )
                async with trio.open_nursery() as nursery:
                    binds = await nursery.start(
                        functools.partial(serve, app, config, shutdown_trigger=_until_stopped)
                    )
                    for bind in binds:
                        out.line(f"serving the chat page at {bind}/ (Ctrl-C stops)", "bold")
                        out.line(f"the runs of {data_dir} at {bind}/runs")
        finally:
            for sock in sockets:
                if sock.fileno() != -1:  # not handed over
                    sock.close()
    out.line("stopped")
    return EXIT_OK


async def _probe(state: SqliteStore, path: Path) -> None:
    """Open (and check) the database now, not at the first request."""
    try:
        await state.get("operative.serve")
    except sqlite3.Error as error:
        raise UsageError(
            f"cannot open the database {path} (SQLite: {error}): pass another --data-dir"
        ) from None
