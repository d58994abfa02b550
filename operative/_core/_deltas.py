"""How a streaming provider adapter reaches the run it serves: a context variable.

The loop sets a sink around a generate call when someone listens for
``generate.delta`` (and ``None`` otherwise: an adapter then need not stream); an adapter
that streams passes each piece to :func:`current_delta_sink` (besides its own
``on_delta``). A context variable crosses
any layers in between (fallover, routing, caching wrappers) without changing the
``GenerateFunction`` signature, and child tasks inherit it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

__all__ = ["current_delta_sink", "deliver_deltas", "with_run_sink"]

DeltaSink = Callable[[Any], None]

_sink: ContextVar[DeltaSink | None] = ContextVar("operative_delta_sink", default=None)


def current_delta_sink() -> DeltaSink | None:
    """The sink of the run being served, when it listens for deltas."""
    return _sink.get()


class deliver_deltas:
    """``with deliver_deltas(sink):`` routes streamed deltas of the generate calls made
    inside the block to ``sink`` (a class, not a generator: it runs once per step)."""

    __slots__ = ("_sink", "_token")

    def __init__(self, sink: DeltaSink | None) -> None:
        self._sink = sink
        self._token: Token[DeltaSink | None] | None = None

    def __enter__(self) -> None:
        self._token = _sink.set(self._sink)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _sink.reset(self._token)
            self._token = None


def with_run_sink(own: DeltaSink | None) -> DeltaSink | None:
    """``own`` combined with the current run's sink (either may be absent)."""
    run_sink = _sink.get()
    if run_sink is None:
        return own
    if own is None:
        return run_sink

    def both(delta: Any) -> None:
        own(delta)
        run_sink(delta)

    return both
