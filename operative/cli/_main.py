"""The ``operative`` command: argument parsing, dispatch and exit codes."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import logging
import os
import signal
import sys
import unicodedata
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import trio

from .. import OperativeError
from .. import __version__ as operative_version
from ._defaults import DEMO_PROMPT
from ._errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
    NO_ROOM_WORDS,
    UsageError,
    no_room,
)
from ._interrupt import until_interrupted
from ._invocation import command_line, invocation
from ._mcp import add_mcp_command
from ._output import Output
from ._state import default_data_dir
from ._temporal import add_temporal_options

__all__ = ["build_parser", "main"]

_EPILOG = """\
exit codes: 0 ok, 1 a run failed, 2 bad arguments or input, 130 interrupted (Ctrl-C),
143 terminated (SIGTERM).
A real model is used when ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL is set
(OPERATIVE_MODEL=provider:model picks one); otherwise an offline scripted model.
"""


def _deferred(module: str, name: str) -> Callable[..., Awaitable[int]]:
    """The handler ``name`` of ``module``, imported when its command runs: ``--help``
    and a usage error then load no command's dependencies (stores, providers, servers)."""

    async def handler(*args: Any) -> int:
        function = getattr(importlib.import_module(module, __package__), name)
        code: int = await function(*args)
        return code

    handler.__name__ = handler.__qualname__ = name
    return handler


run_demo = _deferred("._running", "run_demo")
run_chat = _deferred("._running", "run_chat")
run_recover = _deferred("._running", "run_recover")
run_serve = _deferred("._serve", "run_serve")
runs_list = _deferred("._inspect", "runs_list")
runs_show = _deferred("._inspect", "runs_show")
runs_cancel = _deferred("._inspect", "runs_cancel")
sessions_list = _deferred("._inspect", "sessions_list")
sessions_show = _deferred("._inspect", "sessions_show")
sessions_delete = _deferred("._inspect", "sessions_delete")


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so ``main`` returns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port: give 0 to 65535 (0 picks a free one)"
        )
    return port


def _data_dir(text: str) -> Path:
    """A data directory; an empty one is refused (``Path("")`` would be the current
    directory, which nobody means by an empty ``--data-dir``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a directory: give a path (`--data-dir .` for the current "
            "directory), or leave --data-dir out for the default"
        )
    return Path(text)


def _name(text: str) -> str:
    """A run id, session id or agent name as given; one holding a control character (NUL,
    a newline, an escape: nothing an id is made of, and a terminal would act on it) is
    refused before anything is opened."""
    bad = next((c for c in text if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        shown = repr(text) if len(text) <= 60 else repr(text[:57] + "...")
        raise argparse.ArgumentTypeError(
            f"{shown} holds a control character ({bad!r}): ids and names are printable "
            "text (copy an existing one from `runs list` or `sessions list`)"
        )
    return text


def build_parser(env: Mapping[str, str], *, prog: str = "operative") -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--data-dir",
        type=_data_dir,
        default=default_data_dir(env),
        help="where sessions and durable runs are kept (default: %(default)s; "
        "OPERATIVE_DATA_DIR sets it)",
    )
    listing = _Parser(add_help=False)
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    model = _Parser(add_help=False)
    model.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="anthropic:NAME, openai:NAME, ollama:NAME, gemini:NAME, or offline",
    )
    model.add_argument(
        "--offline", action="store_true", help="use the offline scripted model, whatever is set"
    )
    temporal = _Parser(add_help=False)
    add_temporal_options(temporal)

    parser = _Parser(
        prog=prog,
        description="Run and inspect operative agents.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"operative {operative_version}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    demo = commands.add_parser(
        "demo",
        parents=[common, model],
        help="run a tool-using agent as a durable session turn",
        description="Run a tool-using demo agent (weather and arithmetic tools) as one "
        "durable turn of a SQLite-stored session, printing its progress and answer.",
    )
    demo.add_argument("prompt", nargs="?", default=DEMO_PROMPT, help="what to ask")
    demo.add_argument(
        "--session", type=_name, default="demo", help="the session (default: %(default)s)"
    )
    demo.set_defaults(handler=run_demo, needs_stdin=False)

    chat = commands.add_parser(
        "chat",
        parents=[common, model],
        help="chat with an agent, one durable turn per line",
        description="Read lines from standard input and run each as a durable turn of "
        "the session; the reply streams as it arrives, and saving a note asks for your "
        "approval (y/n). /quit or end of input (Ctrl-D) ends the chat.",
    )
    chat.add_argument(
        "--session", type=_name, default="chat", help="the session (default: %(default)s)"
    )
    chat.set_defaults(handler=run_chat, needs_stdin=True)

    runs = commands.add_parser(
        "runs", help="list, show and cancel durable runs (here, or on Temporal)"
    ).add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    runs.required = True
    runs_ls = runs.add_parser(
        "list", parents=[common, listing, temporal], help="list runs, newest first"
    )
    runs_ls.add_argument("--status", choices=("running", "completed", "aborted", "error"))
    runs_ls.add_argument("--agent", type=_name, help="only runs of this agent")
    runs_ls.add_argument("--session", type=_name, help="only runs of this session")
    runs_ls.add_argument("--since", help="created since: '30m', '2h', '7d', 'PT1H' or an ISO time")
    runs_ls.add_argument("--limit", type=int, default=20, help="at most this many (%(default)s)")
    runs_ls.set_defaults(handler=runs_list)
    runs_sh = runs.add_parser(
        "show", parents=[common, listing, temporal], help="one run, step by step"
    )
    runs_sh.add_argument("run_id", metavar="RUN_ID", type=_name)
    runs_sh.add_argument(
        "--html", metavar="FILE", help="write the run's page (timeline, transcript) to FILE"
    )
    runs_sh.set_defaults(handler=runs_show)
    runs_cn = runs.add_parser(
        "cancel",
        parents=[common, listing, temporal],
        help="ask a running run to stop (it ends aborted)",
        description="Cancel a durable run: one nobody holds ends aborted at once; the "
        "worker holding one aborts it (its tool calls in flight cancelled) at its next "
        "lease renewal or journal write, or within a heartbeat on Temporal.",
    )
    runs_cn.add_argument("run_id", metavar="RUN_ID", type=_name)
    runs_cn.add_argument(
        "--reason", default="cancelled", help="why, kept with the run (default: %(default)s)"
    )
    runs_cn.set_defaults(handler=runs_cancel)

    sessions = commands.add_parser("sessions", help="list, show and delete sessions")
    actions = sessions.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    actions.required = True
    sessions_ls = actions.add_parser("list", parents=[common, listing], help="list sessions")
    sessions_ls.add_argument("--agent", type=_name, help="only sessions of this agent")
    sessions_ls.set_defaults(handler=sessions_list)
    for name, handler, what in (
        ("show", sessions_show, "a session's transcript and runs"),
        ("delete", sessions_delete, "delete a session"),
    ):
        action = actions.add_parser(name, parents=[common, listing], help=what)
        action.add_argument("session_id", metavar="ID", type=_name)
        action.set_defaults(handler=handler)

    recover = commands.add_parser(
        "recover",
        parents=[common, model, listing, temporal],
        help="finish the demo's and chat's interrupted durable runs",
        description="Resume every durable run of the demo and chat agents whose process "
        "stopped (Ctrl-C, a crash, kill -9 once its lease expired), and print the outcome.",
    )
    recover.set_defaults(handler=run_recover, needs_stdin=True)

    serve = commands.add_parser(
        "serve",
        parents=[common, model],
        help="serve an agent over HTTP: a chat page, /api/turn, /api/chat, /api/agui, /runs",
        description="Serve an agent (the chat agent, or MODULE:OBJECT, your own) on one "
        "port: a chat page at /, operative's turn protocol at /api/turn, the Vercel AI "
        "SDK's at /api/chat, AG-UI at /api/agui, and the run viewer at /runs. The client "
        "keeps the conversation; a call that needs approval parks and a later request "
        "resumes it. Approvals are signed with $OPERATIVE_APPROVAL_SECRET, else a secret "
        "generated once into the data directory. Only this machine's loopback names are "
        "answered unless --allow-host names others; bound beyond loopback, every request "
        "needs a token (--token, $OPERATIVE_SERVE_TOKEN, or one generated and printed).",
    )
    serve.add_argument(
        "target",
        metavar="MODULE:OBJECT",
        nargs="?",
        help="your agent (made by create_agent; a function returning one is called); "
        "default: the chat agent",
    )
    serve.add_argument(
        "--app-dir",
        type=Path,
        metavar="DIR",
        help="import MODULE from DIR (default: the current directory)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s)")
    serve.add_argument(
        "--port", type=_port, default=8000, help="port, 0 for a free one (default: %(default)s)"
    )
    serve.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests for this Host too (repeatable; '*' for any), e.g. behind a "
        "reverse proxy",
    )
    serve.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let a front end on this origin call the APIs (repeatable), e.g. "
        "http://localhost:5173",
    )
    serve.add_argument(
        "--token",
        help="the bearer token every request needs (default: $OPERATIVE_SERVE_TOKEN; "
        "bound beyond loopback, one is generated and printed)",
    )
    serve.set_defaults(handler=run_serve, needs_stdin=False)
    add_mcp_command(commands, _Parser)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run the command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    env = os.environ if env is None else env
    out = Output(stdout or sys.stdout, stderr or sys.stderr)
    prog = invocation(sys.argv[0] if argv is None else None, env)
    parser = build_parser(env, prog=prog)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    args.invocation = prog
    if hasattr(args, "data_dir"):
        args.data_dir_given = args.data_dir != default_data_dir(env)
    handler = args.handler
    command: Callable[[], Awaitable[int]]
    if getattr(args, "needs_stdin", False):
        command = functools.partial(handler, args, out, env, stdin or sys.stdin)
    elif hasattr(args, "needs_stdin"):
        command = functools.partial(handler, args, out, env)
    else:
        command = functools.partial(handler, args, out)
    with _library_logs(out) as logs:
        code, full = _run_command(out, args, command)
        if not full:
            logs.print_held()
    return code


def _run_command(
    out: Output, args: argparse.Namespace, command: Callable[[], Awaitable[int]]
) -> tuple[int, bool]:
    """The command's exit code, and whether it stopped on a full disk."""
    try:
        code = trio.run(until_interrupted, command)
    except BaseExceptionGroup as group:
        # Ctrl-C reaches the command through whatever nurseries were open: unwrap it.
        if group.split(KeyboardInterrupt)[0] is not None:
            return _interrupted(out), False
        full = no_room(group)
        if full is not None:
            return _disk_full(out, args, full), True
        sole = _sole(group)
        if sole is None or not isinstance(sole, OperativeError):
            raise
        return _failed(out, sole), False
    except KeyboardInterrupt:
        return _interrupted(out), False
    except Exception as exc:
        full = no_room(exc)
        if full is not None:
            return _disk_full(out, args, full), True
        if not isinstance(exc, OperativeError):
            raise
        return _failed(out, exc), False
    if isinstance(code, signal.Signals):
        return _interrupted(out, code), False
    return code, False


def _disk_full(out: Output, args: argparse.Namespace, error: BaseException) -> int:
    """One line naming the full disk and what to do; exit code 2 (the machine's state,
    not a failed run: nothing is wrong with the command or its data)."""
    data_dir = getattr(args, "data_dir", None)
    if isinstance(error, OSError):
        detail = error.strerror or str(error)
        if error.filename is not None:
            target = str(error.filename)
        elif data_dir is not None:
            target = f"to {data_dir} or to the output"
        else:
            target = "to the output"
    else:
        detail = f"SQLite: {error}"
        target = f"to {data_dir}" if data_dir is not None else "to a database"
    todo = "free some space (or pass another --data-dir), then run the command again"
    if getattr(args, "command", None) in ("demo", "chat", "recover", "serve"):
        todo += f"; `{command_line(args, 'recover')}` finishes a durable run it stopped"
    with contextlib.suppress(OSError):  # standard error on the full disk too: nowhere to say it
        out.error(f"the disk is full ({detail}): cannot write {target}: {todo}")
    _drop_unwritten(out)
    return EXIT_USAGE


def _drop_unwritten(out: Output) -> None:
    """Output a full disk would not take is dropped, so the interpreter's last flush of
    standard output does not fail again (with a message of its own) as it exits."""
    stream = out.stdout
    try:
        stream.flush()
    except OSError:
        if stream is sys.stdout:
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)


class _LogLines(logging.Handler):
    """The library's warnings and errors, one ``operative: warning: ...`` line each on
    standard error, never a traceback (an exception is named after the message).

    A record of a full disk waits: the command's last line then says the disk is full,
    and the record is printed only if the command ends otherwise.
    """

    def __init__(self, out: Output) -> None:
        super().__init__(logging.WARNING)
        self._out = out
        self._held: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            error = record.exc_info[1] if record.exc_info else None
            if error is not None:
                text += f" ({type(error).__name__}: {error})"
            # "warning" at every level: the command's own last line says how it ended.
            line = f"warning: {' '.join(text.split())}"
            if (error is not None and no_room(error) is not None) or any(
                words in text for words in NO_ROOM_WORDS
            ):
                self._held.append(line)
            else:
                self._out.warn(line)
        except Exception:  # standard error itself failed: nowhere left to say anything
            pass

    def print_held(self) -> None:
        """Print the records held back."""
        held, self._held = self._held, []
        for line in held:
            with contextlib.suppress(Exception):
                self._out.warn(line)


@contextlib.contextmanager
def _library_logs(out: Output) -> Iterator[_LogLines]:
    """The library's log records as :class:`_LogLines` while the command runs, unless
    logging is configured already (by a program calling :func:`main`, or a test)."""
    handler = _LogLines(out)
    logger = logging.getLogger("operative")
    if logging.getLogger().handlers or logger.handlers:
        yield handler  # never called: the records go where they are configured to
        return
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception a group (of groups) holds, or ``None`` when it holds more."""
    leaves: list[BaseException] = []

    def walk(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                walk(inner)
        else:
            leaves.append(error)

    walk(group)
    return leaves[0] if len(leaves) == 1 else None


def _failed(out: Output, exc: OperativeError) -> int:
    """One line on standard error, and the exit code: 2 for bad input (a usage error, a
    data file that is not a database), 1 for anything else."""
    if isinstance(exc, UsageError):
        out.error(str(exc))
        return EXIT_USAGE
    from .._sql._sqlite_file import DatabaseFileError  # loaded already, if exc is one

    if isinstance(exc, DatabaseFileError):
        out.error(f"{exc} (or pass another --data-dir)")
        return EXIT_USAGE
    out.error(f"{type(exc).__name__}: {exc}")
    return EXIT_FAILED


def _interrupted(out: Output, signum: signal.Signals = signal.SIGINT) -> int:
    """One line, and the shell's code for the signal: 130 for Ctrl-C, 143 for SIGTERM."""
    what = "interrupted" if signum == signal.SIGINT else "terminated"
    out.warn(f"{what}; durable runs in flight were left for `operative recover`")
    return EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED
