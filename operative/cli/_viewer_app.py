"""The run viewer's routes for ``operative serve``: ``GET /runs``, ``/runs/{id}`` and their
JSON, ``/api/runs`` and ``/api/runs/{id}`` (the shapes of ``runs list --json`` and
``runs show --json``). The app that serves the agent routes these paths here."""

from __future__ import annotations

import re
import time
from typing import Any, get_args
from urllib.parse import parse_qs, unquote

import attrs
import msgspec

from .._core._errors import OperativeError
from ..durable._records import RunStatus
from ..runstore import RunStore
from ._errors import UsageError
from ._inspect import parse_since
from ._viewer import render_run, render_runs

__all__ = ["RunsApp"]

_STATUSES = get_args(RunStatus)
_MAX_LIMIT = 500
_ROUTE = re.compile(r"^(?P<api>/api)?/runs(?:/|/(?P<run_id>[^/]+))?$")


class _BadQuery(Exception):
    """A filter the store cannot take; its message says which and what to send."""


@attrs.frozen(kw_only=True)
class RunsApp:
    """ASGI: the run viewer's pages and JSON over ``store`` (paths :meth:`serves` says)."""

    store: RunStore

    @staticmethod
    def serves(path: str) -> bool:
        """True for the viewer's own paths."""
        return _ROUTE.match(path) is not None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        route = _ROUTE.match(scope.get("path", ""))
        if route is None:
            await _send(send, 404, b"not a run viewer path\n", "text/plain")
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _send(send, 405, b"GET it\n", "text/plain", allow=True)
            return
        api = route.group("api") is not None
        run_id = unquote(route.group("run_id")) if route.group("run_id") else None
        query = {
            key: values[-1]
            for key, values in parse_qs(
                bytes(scope.get("query_string", b"")).decode("utf-8", "replace")
            ).items()
        }
        try:
            if run_id is not None and (not run_id.isprintable() or len(run_id) > 512):
                raise _BadQuery(
                    f"run id {run_id!r} is not one: run ids are printable and at most 512 "
                    "characters; see /runs for the runs"
                )
            if run_id is None:
                await self._list(send, query, api=api)
            else:
                await self._one(send, run_id, query, api=api)
        except (_BadQuery, OperativeError) as exc:
            body = msgspec.json.encode({"error": str(exc)}) + b"\n"
            await _send(send, 400, body, "application/json")

    async def _list(self, send: Any, query: dict[str, str], *, api: bool) -> None:
        status = query.get("status") or None
        if status is not None and status not in _STATUSES:
            raise _BadQuery(f"status={status!r}: send one of {', '.join(_STATUSES)}")
        try:
            since = parse_since(query["since"]) if query.get("since") else None
        except UsageError as exc:
            raise _BadQuery(str(exc).replace("--since", "since=")) from None
        try:
            limit = int(query.get("limit") or 20)
        except ValueError:
            raise _BadQuery(f"limit={query['limit']!r}: send a whole number") from None
        if not 1 <= limit <= _MAX_LIMIT:
            raise _BadQuery(f"limit={limit}: send 1 to {_MAX_LIMIT}")
        page = await self.store.runs(
            status=status,  # type: ignore[arg-type]  # checked against RunStatus above
            agent_name=query.get("agent") or None,
            session_id=query.get("session") or None,
            since=since,
            limit=limit,
            after=query.get("after") or None,
        )
        if api:
            body = msgspec.json.encode({"runs": page.items, "next_cursor": page.next_cursor})
            await _send(send, 200, body + b"\n", "application/json")
            return
        filters = {k: query.get(k) for k in ("status", "agent", "session", "since")}
        html = render_runs(page.items, filters=filters, next_cursor=page.next_cursor, live=True)
        await _send(send, 200, html.encode(), "text/html; charset=utf-8")

    async def _one(self, send: Any, run_id: str, query: dict[str, str], *, api: bool) -> None:
        detail = await self.store.run(run_id)
        if detail is None:
            message = f"no run {run_id!r} in {self.store.database}: see /runs for the runs"
            if api:
                body = msgspec.json.encode({"error": message}) + b"\n"
                await _send(send, 404, body, "application/json")
            else:
                await _send(send, 404, message.encode() + b"\n", "text/plain; charset=utf-8")
            return
        if api:
            await _send(send, 200, msgspec.json.encode(detail) + b"\n", "application/json")
            return
        html = render_run(detail, now=time.time(), live=True, runs_href="/runs")
        await _send(send, 200, html.encode(), "text/html; charset=utf-8")


async def _send(send: Any, status: int, body: bytes, kind: str, *, allow: bool = False) -> None:
    headers = [
        (b"content-type", kind.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if allow:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
