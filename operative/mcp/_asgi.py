"""Operative tools served over MCP's streamable HTTP transport, as an ASGI app."""

from __future__ import annotations

from typing import Any

from ._server import ServedTools, build_server

__all__ = ["mcp_app"]


def mcp_app(
    tools: ServedTools, *, name: str = "operative", path: str = "/mcp", host: str = "127.0.0.1"
) -> Any:
    """An ASGI app serving ``tools`` over MCP's streamable HTTP transport at ``path``.

    Serve it with any ASGI server that sends lifespan events (the app's sessions live in
    its lifespan); hypercorn's Trio worker is what ``operative mcp serve --http`` uses::

        from hypercorn.config import Config
        from hypercorn.trio import serve

        config = Config()
        config.bind = ["127.0.0.1:8000"]
        await serve(mcp_app(tools), config)

    Each client gets a session of its own (``Mcp-Session-Id``); a call's progress,
    elicitation and approval requests travel on the stream that answers the call.

    Args:
        tools: what to serve, as for :func:`serve_stdio`.
        name: the server's name, as the client's ``initialize`` reads it.
        path: where the MCP endpoint is.
        host: the address it listens on. On a loopback address (the default) requests
            whose ``Host`` or ``Origin`` is not loopback are refused, so a web page
            cannot reach it through DNS rebinding; on any other address that check is
            off (put the app behind whatever checks your network needs).
    """
    server = build_server(tools, name=name)
    # The SDK turns the Host/Origin check on for a loopback host, off for any other.
    return server.streamable_http_app(streamable_http_path=path, host=host)
