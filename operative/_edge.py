"""Who may reach an operative HTTP app: one guard in front of every ASGI app we ship.

A browser on this machine can be made to talk to a loopback server by any web page
(DNS rebinding, cross-origin ``POST``), so every app is guarded the same way:

- ``Host`` must name an allowed host. By default those are the loopback names (all of
  127.0.0.0/8, ``::1``, ``localhost``); ``allowed_hosts`` adds others (``"*"``: any).
- A cross-origin ``Origin`` is refused (same origin is ``Origin``'s host and port equal to
  ``Host``'s); ``allowed_origins`` names front ends on other origins that may call in.
- With a ``token``, every request but the icons needs it: ``Authorization: Bearer T``,
  or the cookie that ``GET /?token=T`` sets (as Jupyter does, so a browser can open the
  printed address).
- A request that changes state (``POST``, ``PUT``, ``PATCH``) must be JSON: a simple
  HTML form cannot send it.
- The request body must arrive within ``body_seconds``, and each write to the client must
  be taken within ``write_seconds``; a slow or non-reading client has its request (and its
  run) cancelled.
- Every response carries the anti-framing and no-sniff headers.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import attrs
import trio

from ._asgi import Receive, Scope, Send, respond_json_error

__all__ = [
    "TOKEN_COOKIE",
    "EdgePolicy",
    "guarded",
    "host_name",
    "is_loopback",
]

TOKEN_COOKIE = "operative_token"

_SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH"})
_OPEN_PATHS = frozenset({"/favicon.ico", "/favicon.svg"})


def host_name(host: str) -> str:
    """The name in a ``Host`` header or bind address, lower-cased, without port or
    brackets: ``[::1]:8000`` → ``::1``, ``Example.COM:80`` → ``example.com``."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end != -1 else host[1:]
    if host.count(":") == 1:  # name:port (a bare IPv6 address has several colons)
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def is_loopback(host: str) -> bool:
    """True for every spelling of this machine's loopback: 127.0.0.0/8 (``127.1``,
    ``127.0.0.2``, ``2130706433`` as ``inet_aton`` reads them), ``::1``, an IPv4-mapped
    loopback, ``localhost`` and names under ``.localhost``."""
    name = host_name(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        address = _inet_aton(name)
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _inet_aton(name: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address the C resolver reads from a short or numeric form (``127.1``,
    ``0x7f.1``, ``2130706433``), or None."""
    import socket

    if not name or not all(c in "0123456789abcdefx." for c in name):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None


@attrs.frozen(kw_only=True)
class EdgePolicy:
    """Who may reach an app: see the module's docstring."""

    allowed_hosts: frozenset[str] = frozenset()
    """Host names allowed besides the loopback ones (lower case, no port); ``"*"``: any."""
    allowed_origins: frozenset[str] = frozenset()
    """Origins (``scheme://host[:port]``) allowed besides the request's own."""
    token: str | None = None
    """The bearer token every request needs; None: none."""
    body_seconds: float = 15.0
    """How long a request body may take to arrive, from the request's start."""
    write_seconds: float = 30.0
    """How long one write to the client may wait for it to read."""

    @classmethod
    def build(
        cls,
        *,
        allowed_hosts: Iterable[str] | None = None,
        allowed_origins: Iterable[str] | None = None,
        token: str | None = None,
        body_seconds: float = 15.0,
        write_seconds: float = 30.0,
    ) -> EdgePolicy:
        """A policy from user-given values, checked: a bad one raises ``InvalidArgument``."""
        from ._core._errors import InvalidArgument

        if isinstance(allowed_hosts, str) or isinstance(allowed_origins, str):
            raise InvalidArgument(
                "allowed_hosts= and allowed_origins= take a list of names, not one str"
            )
        hosts = frozenset(
            "*" if name.strip() == "*" else host_name(name) for name in allowed_hosts or ()
        )
        if "" in hosts:
            raise InvalidArgument("allowed_hosts= holds an empty name")
        origins = frozenset(_origin(o) for o in allowed_origins or ())
        if None in origins:
            raise InvalidArgument(
                "allowed_origins= takes origins such as 'https://chat.example.com' "
                "(a scheme, a host and an optional port, no path)"
            )
        if token is not None and len(token) < 16:
            raise InvalidArgument(
                "token= must be at least 16 characters; use secrets.token_urlsafe()"
            )
        if body_seconds <= 0 or write_seconds <= 0:
            raise InvalidArgument("body_seconds= and write_seconds= must be positive")
        return cls(
            allowed_hosts=hosts,
            allowed_origins=frozenset(o for o in origins if o is not None),
            token=token,
            body_seconds=body_seconds,
            write_seconds=write_seconds,
        )

    def host_allowed(self, host: str) -> bool:
        return (
            "*" in self.allowed_hosts or is_loopback(host) or host_name(host) in self.allowed_hosts
        )


def _origin(value: str) -> str | None:
    """``scheme://host[:port]`` lower-cased, or None when ``value`` is not an origin."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _cookie(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if not raw:
        return None
    for part in raw.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _refusal(scope: Scope, policy: EdgePolicy) -> tuple[int, str] | None:
    """Why the request is refused (status and message), or None."""
    host = _header(scope, b"host")
    if host is None:
        return 400, "the request has no Host header"
    if not policy.host_allowed(host):
        return 403, (
            f"Host {host_name(host)!r} is not allowed here (only this machine's loopback "
            "names by default): the server's operator can allow it with allowed_hosts= "
            "or --allow-host"
        )
    origin = _header(scope, b"origin")
    if origin is not None:
        normal = _origin(origin)
        same = normal is not None and urlsplit(normal).netloc == host.strip().lower()
        if not same and normal not in policy.allowed_origins:
            return 403, (
                f"cross-origin request from {origin!r} refused: the server's operator can "
                "allow a front end with allowed_origins= or --allow-origin"
            )
    if scope["type"] == "http" and scope["method"] in _STATE_CHANGING:
        # A form's types (urlencoded, multipart, text/plain) are what a cross-site page
        # can send without asking; with none, the endpoint refuses a body it cannot read.
        given = _header(scope, b"content-type")
        kind = (given or "application/json").split(";")[0].strip().lower()
        if kind != "application/json":
            return 415, f"send {scope['method']} requests as Content-Type: application/json"
    return None


def _token_ok(scope: Scope, token: str) -> bool:
    given = None
    authorization = _header(scope, b"authorization")
    if authorization is not None and authorization[:7].lower() == "bearer ":
        given = authorization[7:].strip()
    if given is None:
        given = _cookie(scope, TOKEN_COOKIE)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _query_token(scope: Scope) -> tuple[str | None, str]:
    """The ``token`` query parameter and the query string without it."""
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    given = query.pop("token", [None])[-1]
    return given, urlencode(query, doseq=True)


def guarded(app: Any, policy: EdgePolicy | None = None) -> Any:
    """``app`` behind ``policy`` (the default: loopback names only, no token)."""
    checked = policy if policy is not None else EdgePolicy()

    async def edge(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            refusal = _refusal(scope, checked)
            if refusal is not None or (
                checked.token is not None and not _token_ok(scope, checked.token)
            ):
                await send({"type": "websocket.close", "code": 1008})
                return
            await app(scope, receive, send)
            return
        await _http(app, checked, scope, receive, send)

    return edge


async def _http(app: Any, policy: EdgePolicy, scope: Scope, receive: Receive, send: Send) -> None:
    # A response sent before the request's body was read ends the connection (and says
    # so): the unread body would otherwise be taken for the next request's start.
    unread = {"body": _has_body(scope)}

    async def secured(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            closing = [(b"connection", b"close")] if unread["body"] else []
            message["headers"] = [*message.get("headers", ()), *_SECURITY_HEADERS, *closing]
        await send(message)

    refusal = _refusal(scope, policy)
    if refusal is not None:
        await respond_json_error(secured, *refusal)
        return
    if policy.token is not None and scope["path"] not in _OPEN_PATHS:
        given, rest = _query_token(scope)
        if given is not None and scope["method"] in ("GET", "HEAD"):
            if not hmac.compare_digest(given.encode(), policy.token.encode()):
                await respond_json_error(
                    secured, 401, "the token in the address is not this server's"
                )
                return
            # Keep the token in a cookie, and take it out of the address bar and history.
            location = scope["path"] + (f"?{rest}" if rest else "")
            cookie = f"{TOKEN_COOKIE}={policy.token}; Path=/; HttpOnly; SameSite=Strict"
            await secured(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [
                        (b"location", location.encode()),
                        (b"set-cookie", cookie.encode()),
                        (b"content-length", b"0"),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await secured({"type": "http.response.body", "body": b""})
            return
        if not _token_ok(scope, policy.token):
            await respond_json_error(
                secured,
                401,
                "this server needs its token: send 'Authorization: Bearer TOKEN', or open "
                "the address it printed (…/?token=TOKEN) in the browser",
            )
            return
    await _bounded(app, policy, scope, receive, secured, unread)


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() != "0"
    return _header(scope, b"transfer-encoding") is not None


async def _bounded(
    app: Any,
    policy: EdgePolicy,
    scope: Scope,
    receive: Receive,
    send: Send,
    unread: dict[str, bool],
) -> None:
    """Run ``app`` with the body and write deadlines: missing one cancels the request.

    The app's writes go to the client through a small buffer and a writer task, so a
    client that stops reading never blocks the app where it cannot be cancelled (a
    server's own write may wait in a shield); once a write has waited ``write_seconds``
    for room, the request (and its run) is cancelled, what it had not written yet is
    dropped, and the response is ended: a server waits for a response's end before it
    reads further (a pipelined request, the client's close), so one left open would hold
    the connection.
    """
    body_deadline = trio.current_time() + policy.body_seconds
    state = {"body_done": False, "started": False, "ended": False, "timed_out": ""}
    request = trio.CancelScope()
    outgoing, writes = trio.open_memory_channel[MutableMapping[str, Any]](_WRITE_BUFFER)

    async def bounded_receive() -> Mapping[str, Any]:
        if state["body_done"]:
            return await receive()
        with trio.move_on_at(body_deadline):
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
                unread["body"] = False
            return message
        state["timed_out"] = "body"
        request.cancel()
        await trio.lowlevel.checkpoint()  # raises Cancelled: the request scope is cancelled
        raise AssertionError("unreachable")  # pragma: no cover

    async def bounded_send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            state["started"] = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            state["ended"] = True
        with trio.move_on_after(policy.write_seconds):
            await outgoing.send(message)
            return
        state["timed_out"] = "write"
        request.cancel()
        await trio.lowlevel.checkpoint()
        raise AssertionError("unreachable")  # pragma: no cover

    async def writer() -> None:
        async with writes:
            async for message in writes:
                if state["timed_out"] == "write" and message is not _END:
                    continue  # the client is not reading: drop what the app had written
                await send(message)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        async with outgoing:
            with request:
                await app(scope, bounded_receive, bounded_send)
            if state["timed_out"] == "body" and not state["started"]:
                with trio.move_on_after(policy.write_seconds):
                    await respond_json_error(
                        outgoing.send,
                        408,
                        f"the request body did not arrive within {policy.body_seconds:g} s",
                    )
            elif state["started"] and not state["ended"]:
                # Cut short (a write deadline, a failure): end the response, so the
                # server goes on to the connection's next request or its close.
                await outgoing.send(_END)


_END: MutableMapping[str, Any] = {"type": "http.response.body", "body": b"", "more_body": False}
"""The end of a response the app did not end."""

_WRITE_BUFFER = 16
"""Writes an app may have in flight to a client before its next write waits."""
