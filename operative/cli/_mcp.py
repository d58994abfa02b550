"""``operative mcp serve MODULE:OBJECT``: operative tools or an agent as an MCP server."""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import sys
from typing import TYPE_CHECKING, Any

import trio

from ._errors import EXIT_OK, UsageError

if TYPE_CHECKING:
    from ._output import Output

__all__ = ["add_mcp_command", "load_object", "parse_address", "run_mcp_serve"]

_DESCRIPTION = """\
Serve the tools named by MODULE:OBJECT to MCP clients: over standard input and output
(the default: a client such as an IDE starts this command), or over streamable HTTP
with --http HOST:PORT (the endpoint is http://HOST:PORT/mcp). OBJECT is a list of
tools (and agents), a Toolbox, an Agent (served as one tool), or a function returning
one of those (it may be async). MODULE is imported as Python would, from the current
directory too.
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
    serve.set_defaults(handler=run_mcp_serve)


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


async def load_object(target: str) -> Any:
    """The object ``MODULE:OBJECT`` names; a function is called (and awaited) for it."""
    module_name, separator, attribute = target.partition(":")
    if not separator or not module_name or not attribute:
        raise UsageError(f"{target!r} is not MODULE:OBJECT: give e.g. my_tools:tools")
    if "" not in sys.path and os.getcwd() not in sys.path:
        # As `python -m` does: modules next to where the command runs are found.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(
            f"cannot import {module_name!r} ({error}): run the command where the module "
            "is, or install it"
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


async def run_mcp_serve(args: argparse.Namespace, out: Output) -> int:
    """Serve until stdin closes (stdio) or until Ctrl-C or SIGTERM."""
    try:
        from ..mcp import mcp_app, serve_stdio
    except ImportError as error:
        raise UsageError(
            f"`operative mcp serve` needs the MCP SDK ({error}): pip install 'operative[mcp]'"
        ) from None
    from .._core._errors import InvalidArgument
    from ..mcp._server import served_toolbox
    from ._listen import handed_over, listen
    from ._serve import _until_stopped

    try:
        toolbox = served_toolbox(await load_object(args.target))
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
        from hypercorn.config import Config
        from hypercorn.trio import serve
    except ImportError:
        raise UsageError(
            "`operative mcp serve --http` needs hypercorn: pip install 'operative[serve]'"
        ) from None
    host, port = args.http
    app = mcp_app(toolbox, name=args.name, host=host)
    sockets = listen(host, port, host_flag="--http", port_flag="--http port")
    try:
        config = Config()
        config.bind = handed_over(sockets)
        config.accesslog = None
        config.errorlog = None
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                functools.partial(serve, app, config, shutdown_trigger=_until_stopped)
            )
            for bind in binds:
                out.line(f"serving MCP at {bind}/mcp (Ctrl-C stops)", "bold")
    finally:
        for sock in sockets:
            if sock.fileno() != -1:  # not handed over
                sock.close()
    out.line("stopped")
    return EXIT_OK
