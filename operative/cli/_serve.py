"""``operative serve [MODULE:OBJECT]``: an agent (the chat agent, or the user's own) on
hypercorn's Trio worker: the chat page and ``POST /api/turn``, the Vercel AI SDK's
``POST /api/chat``, AG-UI's ``POST /api/agui``, and the run viewer (``/runs``) over the
data directory's durable runs, on one port, behind one guard (:mod:`operative._edge`)."""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from .._agent import Agent
from .._edge import is_loopback
from ..kvstore import SqliteStore
from ..runstore import SqliteRunStore
from ..ui import UIApp, asgi_app
from ._agents import chat_agent
from ._chat_page import FAVICON_ICO, FAVICON_SVG, page
from ._errors import EXIT_OK, UsageError
from ._interrupt import STOPPING_SIGNALS
from ._listen import handed_over, listen, server_config
from ._mcp import load_object
from ._models import ModelChoice, choose_model, open_generate
from ._output import Output
from ._state import DATABASE, check_data_dir, make_data_dir
from ._viewer_app import RunsApp

__all__ = [
    "SECRET_FILE",
    "SERVE_AGENT",
    "approval_secret",
    "build_app",
    "run_serve",
    "served_chat_agent",
    "with_request_log",
]

SECRET_FILE = "approval-secret"
SECRET_ENV = "OPERATIVE_APPROVAL_SECRET"
TOKEN_ENV = "OPERATIVE_SERVE_TOKEN"
SERVE_AGENT = "operative-serve"
OFFLINE = ModelChoice(provider="offline", model="offline", why="--offline")
ICONS = {
    "/favicon.ico": (FAVICON_ICO, "image/x-icon"),
    "/favicon.svg": (FAVICON_SVG, "image/svg+xml"),
}


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


def served_chat_agent(generate: Any, *, notes: Path) -> Agent:
    """The agent ``operative serve`` serves when it is given none: the chat agent, whose
    ``save_note`` parks for the user's yes (the page answers it)."""
    return chat_agent(generate, approver=None, notes=notes, name=SERVE_AGENT)


def build_app(
    agent: Agent,
    *,
    secret: bytes,
    approval_state: Any,
    model: ModelChoice | None = OFFLINE,
    runs: Any = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
    token: str | None = None,
) -> UIApp:
    """The one app ``serve`` runs: ``agent`` on the chat page, ``/api/turn``,
    ``/api/chat`` and ``/api/agui``, and the run viewer over ``runs``.

    The page names ``model`` (and says so plainly when it is the offline stand-in), or the
    agent when the agent brought its own model (``model=None``).
    """
    label = model.label if model is not None else f"the agent {agent.name!r}"
    return asgi_app(
        agent,
        approval_secret=secret,
        approval_state=approval_state,
        capabilities=("notes:write",),
        page=page(label, offline=model is not None and model.offline),
        icons=dict(ICONS),
        runs=RunsApp(store=runs) if runs is not None else None,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        token=token,
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
    """Serve an agent (the chat agent, or ``MODULE:OBJECT``) on the chat page,
    ``/api/turn``, ``/api/chat``, ``/api/agui`` and the run viewer until interrupted.

    Everything that can be checked is, before anything is created: the agent or the
    model (its SDK and key), the data directory, the address and port (bound here), the
    token.
    """
    try:
        from hypercorn.trio import serve
    except ImportError:
        raise UsageError(
            "`operative serve` needs hypercorn: pip install 'operative[serve]'"
        ) from None
    data_dir: Path = args.data_dir
    target: str | None = args.target
    user_agent = await _load_agent(target, args.app_dir) if target is not None else None
    choice = (
        None if user_agent is not None else choose_model(args.model, offline=args.offline, env=env)
    )
    token = _token(args, env)
    async with open_generate(choice, env) if choice is not None else _nothing() as generate:
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
                agent = user_agent or served_chat_agent(generate, notes=data_dir / "notes.txt")
                loopback = is_loopback(args.host)
                if not loopback and token is None:
                    token = secrets.token_urlsafe(32)
                hosts = list(args.allow_host) or ([] if loopback else ["*"])
                app = build_app(
                    agent,
                    secret=secret,
                    approval_state=state,
                    model=choice,
                    runs=runs,
                    allowed_hosts=hosts,
                    allowed_origins=args.allow_origin,
                    token=token,
                )
                if choice is not None:
                    out.line(f"model: {choice.label}", "bold yellow" if choice.offline else "bold")
                else:
                    out.line(f"agent: {agent.name} ({target})", "bold")
                logged = with_request_log(app, lambda line: out.line(line, "dim"))
                config = server_config(handed_over(sockets))
                async with trio.open_nursery() as nursery:
                    binds = await nursery.start(
                        functools.partial(serve, logged, config, shutdown_trigger=_until_stopped)
                    )
                    for bind in binds:
                        url = _browsable(bind, args.host)
                        entry = f"{url}/?token={token}" if token is not None else f"{url}/"
                        out.line(f"serving the chat page at {entry} (Ctrl-C stops)", "bold")
                        out.line(f"the runs of {data_dir} at {url}/runs")
                    if token is not None:
                        out.line(
                            "every request needs the token: Authorization: Bearer "
                            f"{token} (the address above sets it in the browser)"
                        )
        finally:
            for sock in sockets:
                if sock.fileno() != -1:  # not handed over
                    sock.close()
    out.line("stopped")
    return EXIT_OK


def _browsable(bind: str, host: str) -> str:
    """The address to print: ``http://0.0.0.0:8000`` names no host a browser can open,
    so an unspecified address prints as this machine's loopback."""
    if host in ("0.0.0.0", "::", ""):
        port = bind.rsplit(":", 1)[1]
        return f"http://127.0.0.1:{port}" if host != "::" else f"http://[::1]:{port}"
    return bind


def _token(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """``--token``, else ``$OPERATIVE_SERVE_TOKEN``; UsageError when it is too short."""
    token: str | None = args.token or env.get(TOKEN_ENV) or None
    if token is not None and len(token) < 16:
        raise UsageError(
            f"the token must be at least 16 characters (--token or {TOKEN_ENV}); generate "
            "one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    return token


async def _load_agent(target: str, app_dir: Path | None) -> Agent:
    """The agent ``MODULE:OBJECT`` names (a lazy agent is loaded first)."""
    found = await load_object(target, app_dir=app_dir)
    load = getattr(found, "load", None)
    if not isinstance(found, Agent) and callable(load):
        found = await load()
    if not isinstance(found, Agent):
        raise UsageError(
            f"{target} is a {type(found).__name__}, not an agent: point it at an agent made "
            "with create_agent(...) (to serve tools, use `operative mcp serve`)"
        )
    return found


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    await trio.lowlevel.checkpoint()
    yield None


async def _probe(state: SqliteStore, path: Path) -> None:
    """Open (and check) the database now, not at the first request."""
    try:
        await state.get("operative.serve")
    except sqlite3.Error as error:
        raise UsageError(
            f"cannot open the database {path} (SQLite: {error}): pass another --data-dir"
        ) from None
