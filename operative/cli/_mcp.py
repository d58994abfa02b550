"""``operative mcp serve MODULE:OBJECT``: operative tools or an agent as an MCP server."""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ._errors import EXIT_OK, UsageError
from ._interrupt import STOPPING_SIGNALS

if TYPE_CHECKING:
    from ._output import Output

__all__ = ["TOKEN_VARIABLE", "add_mcp_command", "load_object", "parse_address", "run_mcp_serve"]

TOKEN_VARIABLE = "OPERATIVE_SERVE_TOKEN"
"""The environment variable ``--token`` defaults to (a command line is visible to ``ps``)."""

_DESCRIPTION = """\
Serve the tools named by MODULE:OBJECT to MCP clients: over standard input and output
(the default: a client such as an IDE starts this command), or over streamable HTTP
with --http HOST:PORT (the endpoint is http://HOST:PORT/mcp). OBJECT is a list of
tools (and agents), a Toolbox, an Agent (served as one tool), or a function returning
one of those (it may be async). MODULE is imported as Python would, from --app-dir
when given and from the current directory too.

Over HTTP every request's Host must name this machine's loopback (any of 127.0.0.0/8,
::1, localhost) or a --allow-host, and a cross-origin request must come from a
--allow-origin, so a web page cannot reach the server. Bound beyond loopback, every
request needs the token (Authorization: Bearer TOKEN): --token, else
$OPERATIVE_SERVE_TOKEN, else one generated and printed; any Host is allowed then, unless
--allow-host names them. A --token given on loopback is required too.
"""


def add_mcp_command(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Declare ``operative mcp serve`` on the command's subparsers."""
    mcp = commands.add_parser("mcp", help="serve operative tools over MCP")
    actions = mcp.add_subparsers(dest="action", metavar="ACTION", parser_class=parser_class)
    actions.required = True
    serve = actions.add_parser(
        "serve",
        help="serve tools, a toolbox or an agent to MCP clients",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("target", metavar="MODULE:OBJECT", help="what to serve")
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        type=parse_address,
        help="serve streamable HTTP there instead of stdio (port 0 picks a free one)",
    )
    serve.add_argument(
        "--name", default="operative", help="the server's name (default: %(default)s)"
    )
    serve.add_argument(
        "--app-dir",
        metavar="DIR",
        type=Path,
        help="import MODULE from DIR (so the command does not depend on where it runs)",
    )
    serve.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        dest="allow_hosts",
        type=_host_argument,
        help="with --http: a host name clients may reach the server by besides the "
        "loopback ones (repeatable; * allows any)",
    )
    serve.add_argument(
        "--allow-origin",
        metavar="ORIGIN",
        action="append",
        dest="allow_origins",
        type=_origin_argument,
        help="with --http: the origin of a browser front end that may call the server, "
        "e.g. https://chat.example.com (repeatable)",
    )
    serve.add_argument(
        "--token",
        help=f"with --http: the token every request must carry (default: ${TOKEN_VARIABLE}; "
        "bound beyond loopback, one is generated and printed)",
    )
    # needs_stdin=False: the handler is given the environment too (for the token).
    serve.set_defaults(handler=run_mcp_serve, needs_stdin=False)


def _host_argument(text: str) -> str:
    from .._edge import host_name

    name = "*" if text.strip() == "*" else host_name(text)
    if not name:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a host name: give e.g. tools.example.com (or * for any)"
        )
    return name


def _origin_argument(text: str) -> str:
    from .._core._errors import InvalidArgument
    from .._edge import EdgePolicy

    try:
        EdgePolicy.build(allowed_origins=[text])
    except InvalidArgument:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an origin: give e.g. https://chat.example.com (a scheme, a "
            "host and an optional port, no path)"
        ) from None
    return text


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair."""
    host, separator, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not separator or not host or not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT: give e.g. 127.0.0.1:8000 (port 0 picks a free one)"
        )
    return host, port


async def load_object(target: str, app_dir: Path | None = None) -> Any:
    """The object ``MODULE:OBJECT`` names; a function is called (and awaited) for it.

    MODULE is imported from ``app_dir`` first when it is given (``--app-dir``), then as
    Python would, the current directory included.

    Raises:
        UsageError: ``target`` is not MODULE:OBJECT, ``app_dir`` is not a directory, or
            the module or the object cannot be found.
    """
    module_name, separator, attribute = target.partition(":")
    if not separator or not module_name or not attribute:
        raise UsageError(f"{target!r} is not MODULE:OBJECT: give e.g. my_tools:tools")
    if "" not in sys.path and os.getcwd() not in sys.path:
        # As `python -m` does: modules next to where the command runs are found.
        sys.path.insert(0, os.getcwd())
    if app_dir is not None:
        directory = await trio.Path(app_dir).absolute()
        if not await directory.is_dir():
            raise UsageError(
                f"--app-dir {str(app_dir)!r} is not a directory: give the directory that "
                f"holds {module_name!r}"
            )
        if str(directory) in sys.path:
            sys.path.remove(str(directory))
        sys.path.insert(0, str(directory))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(
            f"cannot import {module_name!r} ({error}): pass --app-dir with the directory "
            "that holds it, run the command there, or install it"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise UsageError(f"module {module_name!r} has no {attribute!r}") from None
    if callable(found) and not _servable(found):
        found = found()
        if inspect.isawaitable(found):
            found = await found
    return found


def _servable(value: Any) -> bool:
    """Whether ``value`` is served as it is (a tool or an agent is callable too)."""
    from .._agent import RunnableAgent
    from ..tools import Tool, Toolbox

    return isinstance(value, Tool | Toolbox | RunnableAgent)


async def _until_stopped() -> None:
    """Return at the first SIGINT (Ctrl-C) or SIGTERM: hypercorn then shuts down cleanly."""
    with trio.open_signal_receiver(*STOPPING_SIGNALS) as signals:
        async for _ in signals:
            return


async def run_mcp_serve(args: argparse.Namespace, out: Output, env: Mapping[str, str]) -> int:
    """Serve until stdin closes (stdio) or until Ctrl-C or SIGTERM."""
    try:
        from ..mcp import mcp_app, serve_stdio
    except ImportError as error:
        raise UsageError(
            f"`operative mcp serve` needs the MCP SDK ({error}): pip install 'operative[mcp]'"
        ) from None
    from .._core._errors import InvalidArgument
    from ..mcp._server import served_toolbox
    from ._listen import handed_over, listen, server_config

    http_only = [
        flag
        for flag, given in (
            ("--allow-host", args.allow_hosts),
            ("--allow-origin", args.allow_origins),
            ("--token", args.token),
        )
        if given
    ]
    if args.http is None and http_only:
        raise UsageError(
            f"{', '.join(http_only)} only apply to HTTP: add --http HOST:PORT, or leave "
            f"{'them' if len(http_only) > 1 else 'it'} out over stdio"
        )
    try:
        toolbox = served_toolbox(await load_object(args.target, app_dir=args.app_dir))
    except InvalidArgument as error:
        raise UsageError(f"{args.target}: {error}") from None
    if args.http is None:
        # Until stdin closes, or Ctrl-C (SIGINT) or SIGTERM: either way a clean exit.
        async with trio.open_nursery() as nursery:

            async def stop_when_signalled() -> None:
                await _until_stopped()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stop_when_signalled)
            await serve_stdio(toolbox, name=args.name)
            nursery.cancel_scope.cancel()
        return EXIT_OK
    try:
        from hypercorn.trio import serve
    except ImportError:
        raise UsageError(
            "`operative mcp serve --http` needs hypercorn: pip install 'operative[serve]'"
        ) from None
    from .._edge import is_loopback

    host, port = args.http
    allowed_hosts: list[str] = args.allow_hosts or []
    token: str | None = args.token or env.get(TOKEN_VARIABLE) or None
    generated = False
    if not is_loopback(host):
        # Reachable from other machines, so guarded by a token (as Jupyter does), and by
        # any name unless --allow-host names them.
        allowed_hosts = allowed_hosts or ["*"]
        if token is None:
            token = secrets.token_urlsafe(32)
            generated = True
    if token is not None and len(token) < 16:
        raise UsageError(
            f"the token (--token or ${TOKEN_VARIABLE}) must be at least 16 characters: "
            "give a longer one, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    app = mcp_app(
        toolbox,
        name=args.name,
        host=host,
        allowed_hosts=allowed_hosts,
        allowed_origins=args.allow_origins or (),
        token=token,
    )
    sockets = listen(host, port, host_flag="--http", port_flag="--http port")
    try:
        config = server_config(handed_over(sockets))
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                functools.partial(serve, app, config, shutdown_trigger=_until_stopped)
            )
            if generated:
                out.line(f"token: {token}")
                out.line(
                    "clients send it as 'Authorization: Bearer TOKEN'; set "
                    f"{TOKEN_VARIABLE} or pass --token to choose it"
                )
            elif token is not None:
                out.line("clients send the token as 'Authorization: Bearer TOKEN'")
            for bind in binds:
                out.line(f"serving MCP at {bind}/mcp (Ctrl-C stops)", "bold")
    finally:
        for sock in sockets:
            if sock.fileno() != -1:  # not handed over
                sock.close()
    out.line("stopped")
    return EXIT_OK
