"""The run loop's quick progress pulse (``LivenessTracker._progress``) records only its
time while the work runs plainly, and folds it into the pulse times later. Whatever
happens around it, every snapshot, every delivered snapshot and what the stall
watchdog reads must be what the full pulse would have produced."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from operative import Usage
from operative.liveness import LivenessTracker


class _SlowTracker(LivenessTracker):
    """The reference: a tracker whose progress pulses always take the full path."""

    @property
    def _quick(self) -> bool:
        return False

    @_quick.setter
    def _quick(self, value: bool) -> None:
        pass


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


_PLAIN_OPS = [
    "heartbeat",
    "host-reachability",
    "progress-pulse",
    "wait",
    "clear",
    "subscribe",
    "unsubscribe",
    "missed",
    "unreachable",
    "snapshot",
    "watch",
]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("progress"), st.integers(1, 5), st.integers(0, 9)),
        st.tuples(st.just("tick"), st.integers(1, 30), st.just(0)),
        st.tuples(st.sampled_from(_PLAIN_OPS), st.just(0), st.just(0)),
    ),
    max_size=40,
)


def _play(
    tracker: LivenessTracker, clock: _Clock, ops: list[tuple[str, int, int]], end: bool
) -> list[Any]:
    seen: list[Any] = []
    waits: list[Any] = []
    subscriptions: list[Any] = []
    tracker.start()
    for op, a, b in ops:
        if op == "progress":
            tracker._progress(a, Usage.of(b, 1))
        elif op in ("heartbeat", "host-reachability"):
            tracker.pulse(op)  # type: ignore[arg-type]
        elif op == "progress-pulse":
            tracker.pulse("progress")
        elif op == "tick":
            clock.now += a
        elif op == "wait":
            waits.append(tracker.declare_wait("approval"))
        elif op == "clear" and waits:
            tracker.clear_wait(waits.pop())
        elif op == "subscribe":
            subscriptions.append(tracker.subscribe_snapshot(seen.append))
        elif op == "unsubscribe" and subscriptions:
            subscriptions.pop().unsubscribe()
        elif op == "missed":
            tracker._mark_missed(tracker._missed + 1)
        elif op == "unreachable":
            tracker._mark_unreachable()
        elif op == "snapshot":
            seen.append(tracker.snapshot())
        elif op == "watch":
            # What the stall watchdog reads before it decides.
            tracker._fold()
            seen.append((tracker._quiet_since, tracker._heard_since, tracker._missed))
    if end:
        tracker.finish("completed", step=9)
    seen.append(tracker.snapshot())
    return seen


@settings(max_examples=300, deadline=None)
@given(ops=_OPS, end=st.booleans())
def test_quick_pulses_are_indistinguishable_from_full_ones(
    ops: list[tuple[str, int, int]], end: bool
) -> None:
    fast_clock, slow_clock = _Clock(), _Clock()
    fast = _play(LivenessTracker("r", clock=fast_clock), fast_clock, ops, end)
    slow = _play(_SlowTracker("r", clock=slow_clock), slow_clock, ops, end)
    assert fast == slow


def _unfolded(tracker: LivenessTracker) -> float | None:
    return tracker._progress_at


def test_a_quick_pulse_is_taken_while_the_run_runs_plainly() -> None:
    """The property above compares against a tracker that never takes the quick path;
    this checks the quick path is the one a plain run takes (so the property tests it)."""
    clock = _Clock()
    tracker = LivenessTracker("r", clock=clock)
    tracker.start()
    clock.now += 1
    tracker._progress(1, Usage.of(1, 1))
    assert tracker._progress_at == 101.0
    assert tracker.snapshot().last_progress_at == 101.0
    assert _unfolded(tracker) is None
    tracker.declare_wait("approval")
    clock.now += 1
    tracker._progress(2, Usage.of(1, 1))
    assert _unfolded(tracker) is None  # a wait in force: the full path
    assert tracker.snapshot().last_progress_at == 102.0
