"""Binding the command's HTTP servers' address before anything else starts.

One socket of our own per address, closed again when the bind is refused (hypercorn's
``Config.create_sockets`` leaves the socket of a refused bind open), then handed to
hypercorn by file descriptor. A port in use, an address this machine lacks or a
privileged port is a :class:`UsageError` that says what to do.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from ._errors import UsageError

__all__ = ["handed_over", "listen", "server_config"]


WRITE_SECONDS = 30
"""How long data sent to a client may wait unacknowledged (a client that stopped
reading) before the kernel drops the connection (``TCP_USER_TIMEOUT``, which accepted
connections inherit): a server's own write may wait in a shield no deadline reaches."""


def listen(host: str, port: int, *, host_flag: str, port_flag: str) -> list[socket.socket]:
    """Bind ``host:port`` now; ``host_flag``/``port_flag`` name the options a refusal
    tells the user to change (``--host``/``--port``, or ``--http``). Connections accepted
    on it are dropped once a client leaves data unread for :data:`WRITE_SECONDS`."""
    where = f"{host}:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as error:
        raise UsageError(
            f"{host_flag} {host!r} is not an address of this machine ({error.strerror}): give "
            "an IP address such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        ) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, WRITE_SECONDS * 1000)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            why = (
                f"port {port} on {host} is in use: stop what holds it, or pass another "
                f"{port_flag} (port 0 picks a free one)"
            )
        elif error.errno == errno.EADDRNOTAVAIL:
            why = (
                f"{host_flag} {host!r} is not an address of this machine: give one it has, "
                "such as 127.0.0.1 or 0.0.0.0"
            )
        elif error.errno == errno.EACCES:
            why = f"ports below 1024 need privileges; pass a {port_flag} above 1023"
        else:
            why = f"{error.strerror}; pass another {host_flag} or {port_flag}"
        raise UsageError(f"cannot listen on {where}: {why}") from None
    return [sock]


def handed_over(sockets: list[socket.socket]) -> list[str]:
    """Binds that give hypercorn the sockets already bound (it takes over their fds)."""
    return [f"fd://{sock.detach()}" for sock in sockets]


KEEP_ALIVE_SECONDS = 5


def server_config(binds: list[str]) -> Any:
    """hypercorn's settings for the command's servers: no access or error log of its own
    (the command logs what it serves), and the timeouts that bound what an idle or slow
    client holds. No ``read_timeout``: a browser says nothing while a reply streams; a
    slow body is the app's body deadline, and a client that stops reading, the sockets'
    ``TCP_USER_TIMEOUT``."""
    from hypercorn.config import Config

    config = Config()
    config.bind = binds
    config.accesslog = None
    config.errorlog = None
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS  # an idle connection, or slow headers
    config.graceful_timeout = 5  # requests in flight at Ctrl-C (their runs are cancelled)
    return config
