"""Liveness: a synchronous, side-effect-free view of how a run is doing.

``ActiveRun.snapshot()`` returns a :class:`LivenessSnapshot`: reading it never starts
work, never blocks and never changes the run. ``revision`` grows whenever the status,
the step, the declared wait, the missed-pulse count or the reachability changes (and on
every progress pulse), so an observer can tell two snapshots apart cheaply.

A :class:`LivenessTracker` owns one run's (or one session's) liveness state. The code
doing the work feeds it *pulses*; a stall watchdog (:func:`create_stall_watchdog`)
reads them on trio's clock and moves the status to ``stalled`` and then ``unreachable``
when they stop. Observers subscribe with :meth:`LivenessTracker.subscribe_snapshot` (a
plain callback) or iterate :meth:`LivenessTracker.snapshots`.

Three kinds of pulse, because "alive" and "getting somewhere" are different claims:

``"progress"``
    The work moved forward (a step began, a model answered, tools settled). Resets the
    stall clock and the missed-pulse count.
``"heartbeat"``
    The worker is alive but did not necessarily move forward (a long tool reporting in).
    Keeps the run *reachable*; it does not reset the stall clock.
``"host-reachability"``
    The host reached the work (a session monitor's poll tick). As in the
    specification it stamps activity, heartbeat and progress together.

A *declared wait* (an approval, an elicitation, a steering pause, a review, a signal)
says "silence is expected here": while one is active the status is ``waiting`` and the
watchdog is paused, so waiting never counts as stalling. A wait with a ``deadline``
excuses silence only until that deadline.

:func:`serve_heartbeat` and :class:`Heartbeat` pulse on a timer while host-side work
goes on (a long tool, a wait on another system). :func:`open_diagnostic_run` gives work
that is not an agent run (a tool-only job) a run handle's liveness.
"""

import importlib
import typing

from ._snapshots import PULSE_KINDS as PULSE_KINDS
from ._snapshots import TERMINAL_STATUSES as TERMINAL_STATUSES
from ._snapshots import WAIT_REASONS as WAIT_REASONS
from ._snapshots import DeclaredWait as DeclaredWait
from ._snapshots import LivenessSnapshot as LivenessSnapshot
from ._snapshots import LivenessStatus as LivenessStatus
from ._snapshots import PulseKind as PulseKind
from ._snapshots import Reachability as Reachability
from ._snapshots import SnapshotObserver as SnapshotObserver
from ._snapshots import SnapshotStream as SnapshotStream
from ._snapshots import SnapshotSubscription as SnapshotSubscription
from ._snapshots import WaitReason as WaitReason
from ._snapshots import terminal_status as terminal_status
from ._tracker import LivenessTracker as LivenessTracker
from ._tracker import create_stall_watchdog as create_stall_watchdog

if typing.TYPE_CHECKING:
    from ._diagnostic import DiagnosticRun as DiagnosticRun
    from ._diagnostic import open_diagnostic_run as open_diagnostic_run
    from ._heartbeat import Heartbeat as Heartbeat
    from ._heartbeat import serve_heartbeat as serve_heartbeat
    from ._watchdog import StallPolicy as StallPolicy
    from ._watchdog import StallWatchdog as StallWatchdog

__all__ = [
    "PULSE_KINDS",
    "TERMINAL_STATUSES",
    "WAIT_REASONS",
    "DeclaredWait",
    "DiagnosticRun",
    "Heartbeat",
    "LivenessSnapshot",
    "LivenessStatus",
    "LivenessTracker",
    "PulseKind",
    "Reachability",
    "SnapshotObserver",
    "SnapshotStream",
    "SnapshotSubscription",
    "StallPolicy",
    "StallWatchdog",
    "WaitReason",
    "create_stall_watchdog",
    "open_diagnostic_run",
    "serve_heartbeat",
    "terminal_status",
]


# Diagnostic runs and heartbeats load on first use; an agent run needs neither.
_LAZY = {
    "DiagnosticRun": "._diagnostic",
    "open_diagnostic_run": "._diagnostic",
    "Heartbeat": "._heartbeat",
    "serve_heartbeat": "._heartbeat",
}
# So does the stall watchdog, which only a run with a stall policy starts; these names
# stay listed by dir(), as when they were bound at import.
_DEFERRED = {
    "StallPolicy": "._watchdog",
    "StallWatchdog": "._watchdog",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name) or _DEFERRED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_DEFERRED))
