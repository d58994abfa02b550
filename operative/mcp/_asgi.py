"""Operative tools served over MCP's streamable HTTP transport, as an ASGI app."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from .._edge import EdgePolicy, guarded, is_loopback
from ._server import ServedTools, build_server

__all__ = ["mcp_app"]


def mcp_app(
    tools: ServedTools,
    *,
    name: str = "operative",
    path: str = "/mcp",
    host: str = "127.0.0.1",
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    token: str | None = None,
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

    Every request is checked before the MCP server sees it, so a web page cannot reach
    the app through DNS rebinding or a cross-origin request: its ``Host`` must be one of
    this machine's loopback names (any of 127.0.0.0/8, ``::1``, ``localhost``) or one
    of ``allowed_hosts``, and an ``Origin`` other than the request's own must be one of
    ``allowed_origins``; a refused request is answered 403.

    Args:
        tools: what to serve, as for :func:`serve_stdio`.
        name: the server's name, as the client's ``initialize`` reads it.
        path: where the MCP endpoint is.
        host: the address it listens on. Bound beyond loopback with a ``token`` and no
            ``allowed_hosts``, any ``Host`` is allowed (the token guards the app);
            without either, only the loopback names are.
        allowed_hosts: host names clients may reach the app by besides the loopback
            ones (``["tools.example.com"]``; ``["*"]``: any).
        allowed_origins: origins of browser front ends that may call it
            (``["https://chat.example.com"]``).
        token: a secret every request must carry (``Authorization: Bearer TOKEN``), at
            least 16 characters (``secrets.token_urlsafe(32)`` makes one).

    Raises:
        InvalidArgument: ``allowed_hosts``, ``allowed_origins`` or ``token`` is malformed.
    """
    hosts = allowed_hosts
    if hosts is None and token is not None and not is_loopback(host):
        hosts = ("*",)
    policy = EdgePolicy.build(allowed_hosts=hosts, allowed_origins=allowed_origins, token=token)
    server = build_server(tools, name=name)
    # The guard checks Host and Origin for every loopback spelling; the SDK's own check
    # (which it turns on only for the spellings it knows) would refuse what it allows.
    off = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(streamable_http_path=path, transport_security=off)
    return guarded(app, policy)
