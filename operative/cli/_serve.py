"""``operative serve``: the stateless chat host on hypercorn's Trio worker."""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from ..storage import SqliteStore
from ..tools import ApprovalPolicy, Toolbox
from ._agents import _INSTRUCTIONS, _note_tool, calculate, get_weather
from ._chat_host import ChatHost
from ._chat_page import PAGE
from ._errors import EXIT_OK, UsageError
from ._models import choose_model, open_generate
from ._output import Output
from ._state import DATABASE

__all__ = ["SECRET_FILE", "approval_secret", "build_host", "run_serve"]

SECRET_FILE = "approval-secret"
SECRET_ENV = "OPERATIVE_APPROVAL_SECRET"


def approval_secret(data_dir: Path, env: Mapping[str, str]) -> bytes:
    """``$OPERATIVE_APPROVAL_SECRET``, else the data directory's, generated on first use.

    Every process that resumes the host's approvals must sign with the same secret.
    """
    named = env.get(SECRET_ENV)
    if named:
        if len(named.encode()) < 32:
            raise UsageError(
                f"{SECRET_ENV} must be at least 32 bytes; generate one with "
                "`python -c 'import secrets; print(secrets.token_hex(32))'`"
            )
        return named.encode()
    path = data_dir / SECRET_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        secret = path.read_text(encoding="ascii").strip()
        if len(secret) < 32:
            raise UsageError(
                f"{path} holds no usable approval secret: delete it (parked approvals "
                "signed with it will no longer resume) or set {SECRET_ENV}"
            ) from None
        return secret.encode()
    with os.fdopen(fd, "w", encoding="ascii") as file:
        file.write(secrets.token_hex(32) + "\n")
    return path.read_text(encoding="ascii").strip().encode()


def build_host(generate: Any, *, secret: bytes, approval_state: Any, notes: Path) -> ChatHost:
    """The chat host: the demo's tools and ``save_note``, which needs the user's yes."""
    toolbox = Toolbox(
        [get_weather, calculate, _note_tool(notes)],
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        approval_secret=secret,
        approval_state=approval_state,
    )
    instructions = _INSTRUCTIONS.format(kind="chat", notes=" and save_note to save notes")
    return ChatHost(generate=generate, toolbox=toolbox, instructions=instructions, page=PAGE)


async def _until_stopped() -> None:
    """Return at the first SIGINT (Ctrl-C) or SIGTERM: hypercorn then shuts down cleanly."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


async def run_serve(args: argparse.Namespace, out: Output, env: Mapping[str, str]) -> int:
    """Serve the chat page and ``POST /api/turn`` until interrupted."""
    try:
        from hypercorn.config import Config
        from hypercorn.trio import serve
    except ImportError:
        raise UsageError(
            "`operative serve` needs hypercorn: pip install 'operative[serve]'"
        ) from None
    choice = choose_model(args.model, offline=args.offline, env=env)
    data_dir: Path = args.data_dir
    secret = approval_secret(data_dir, env)
    config = Config()
    config.bind = [f"{args.host}:{args.port}"]
    config.accesslog = None
    config.errorlog = None
    async with SqliteStore(data_dir / DATABASE) as state, open_generate(choice) as generate:
        host = build_host(
            generate, secret=secret, approval_state=state, notes=data_dir / "notes.txt"
        )
        out.line(f"model: {choice.label}", "bold yellow" if choice.offline else "bold")
        app: Any = host  # an ASGI callable; hypercorn's protocol types are narrower
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                functools.partial(serve, app, config, shutdown_trigger=_until_stopped)
            )
            for bind in binds:
                out.line(f"serving the chat page at {bind}/ (Ctrl-C stops)", "bold")
    out.line("stopped")
    return EXIT_OK
