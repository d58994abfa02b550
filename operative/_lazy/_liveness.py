"""Snapshot subscriptions of a lazy agent's run, across the switch to the real run.

A :class:`~operative._lazy._run.LoadingRun` reports ``starting`` by itself until its
agent's definition loads. :class:`LazyLiveness` holds the subscriptions made meanwhile
and, once the real run exists, forwards each one to the real run's own subscriptions:
the caller's :class:`~operative.liveness.SnapshotSubscription` stays the same object,
keeps receiving every revision change and gets the terminal snapshot exactly once. A run
that ends before its agent loaded delivers its own terminal snapshot instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from .._core._errors import InvalidArgument
from .._core._types import FinishReason
from ..liveness import (
    LivenessSnapshot,
    LivenessTracker,
    SnapshotObserver,
    SnapshotSubscription,
    terminal_status,
)

__all__ = ["LazyLiveness"]

logger = logging.getLogger("operative.lazy")


class LazyLiveness(LivenessTracker):
    """The subscriptions of one lazy run: held, then forwarded to the real run.

    It is a :class:`LivenessTracker` only so that the existing subscription and stream
    classes work with it unchanged; it is never pulsed. ``read`` is the lazy run's own
    ``snapshot()`` (``starting`` while loading, the real run's once it exists, a
    terminal one once the run ended before loading).
    """

    __slots__ = ("_final", "_forwards", "_read", "_source")

    def __init__(
        self,
        id: str,
        read: Callable[[], LivenessSnapshot],
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(id, clock=clock)
        self._read = read
        self._source: Any = None
        """The real run handle, once it exists."""
        self._forwards: dict[SnapshotSubscription, SnapshotSubscription] = {}
        """Caller's subscription -> its subscription on the real run."""
        self._final: FinishReason | None = None
        """Set once the lazy run is over (its finish reason)."""

    @property
    def final(self) -> FinishReason | None:
        """How the lazy run ended (``None`` while it goes on)."""
        return self._final

    def snapshot(self) -> LivenessSnapshot:
        """The lazy run's snapshot now; never blocks, never changes anything."""
        return self._read()

    def statistics(self) -> dict[str, int]:
        """As for a tracker; ``subscriptions`` counts held and forwarded ones."""
        statistics = super().statistics()
        statistics["subscriptions"] += len(self._forwards)
        return statistics

    # -- subscribing -----------------------------------------------------------------

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then once per revision change, across the
        switch to the real run; the terminal snapshot exactly once."""
        checked: object = observer
        if not callable(checked):
            raise InvalidArgument(f"observer must be callable, got {observer!r}")
        subscription = SnapshotSubscription(self, observer)
        if self._final is not None:
            subscription._deliver(self._terminal_snapshot(self._final))
        elif self._source is not None:
            self._forward(subscription, self._source)
        else:
            snapshot = self._read()
            if not snapshot.terminal:
                self._add_subscription(subscription)
            subscription._deliver(snapshot)
        return subscription

    def _drop(self, subscription: SnapshotSubscription) -> None:
        super()._drop(subscription)
        forwarded = self._forwards.pop(subscription, None)
        if forwarded is not None:
            _let_go(forwarded)

    def _forward(self, subscription: SnapshotSubscription, source: Any) -> None:
        subscribe = getattr(source, "subscribe_snapshot", None)
        forwarded: SnapshotSubscription | None = None
        if callable(subscribe):

            def deliver(snapshot: LivenessSnapshot) -> None:
                subscription._deliver(snapshot)
                if not subscription.active:
                    self._forwards.pop(subscription, None)

            try:
                forwarded = subscribe(deliver)
            except Exception:
                logger.exception("subscribe_snapshot() of the run %r raised", source)
        if forwarded is None:
            # A run handle without subscriptions: its snapshot now, the terminal one at
            # the end of the run.
            subscription._deliver(source.snapshot())
            if subscription.active:
                self._add_subscription(subscription)
        elif subscription.active:
            self._forwards[subscription] = forwarded
        else:  # unsubscribed from inside its first delivery, or the run already ended
            _let_go(forwarded)

    # -- the lazy run's side ---------------------------------------------------------

    def bind(self, source: Any) -> None:
        """The real run exists: forward every subscription held so far to it."""
        self._source = source
        held, self._subscriptions = self._subscriptions, []
        for subscription in held:
            if subscription.active:
                self._forward(subscription, source)

    def close(self, finish_reason: FinishReason) -> None:
        """The lazy run is over: whoever still waits gets the terminal snapshot, once."""
        if self._final is not None:
            return
        self._final = finish_reason
        waiting = [*self._subscriptions, *self._forwards]
        self._subscriptions = []
        if not waiting:
            return
        terminal = self._terminal_snapshot(finish_reason)
        for subscription in waiting:
            forwarded = self._forwards.pop(subscription, None)
            if forwarded is not None:
                _let_go(forwarded)
            subscription._deliver(terminal)

    def _terminal_snapshot(self, finish_reason: FinishReason) -> LivenessSnapshot:
        snapshot = self._read()
        if snapshot.terminal:
            return snapshot
        # Only a run handle that never reported its own end gets here.
        return msgspec.structs.replace(
            snapshot,
            status=terminal_status(finish_reason),
            revision=snapshot.revision + 1,
            finish_reason=finish_reason,
        )


def _let_go(forwarded: SnapshotSubscription) -> None:
    """End a subscription on the real run (a foreign handle's may misbehave: logged)."""
    try:
        forwarded.unsubscribe()
    except Exception:
        logger.exception("unsubscribing from the run's snapshots raised")
