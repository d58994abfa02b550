"""``RunRecorder``: every event of every run a test starts, by run id."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._core._results import RunResult
from .._core._run import ActiveRun
from ..hooks import on_run_created
from ._invariants import check_run_invariants

__all__ = ["RunRecorder"]


class RunRecorder:
    """Collects the events of the runs it is attached to, in order, per run.

    Attach explicitly with :meth:`attach` at the top of the ``open_run`` block, or let
    :meth:`capture_all` attach to every run started while it is active (this is what the
    ``run_recorder`` fixture's ``capture_all()`` does for the rest of a test).
    """

    __test__ = False

    def __init__(self) -> None:
        self.runs: dict[str, list[Any]] = {}
        """Each run's events, by run id, in the order runs started."""
        self._removers: list[Callable[[], None]] = []
        self._stop_capture: Callable[[], None] | None = None

    def attach(self, run: ActiveRun) -> ActiveRun:
        """Record every event of ``run`` from now on; returns ``run``.

        Call it at the top of the ``open_run`` block (before the block first yields
        control) so that ``run.started`` is recorded too.
        """
        if not isinstance(run, ActiveRun):
            raise TypeError(f"attach takes an ActiveRun, not {run!r}")
        if run.run_id in self.runs:
            return run
        events: list[Any] = []
        self.runs[run.run_id] = events
        self._removers.append(run.add_listener("*", events.append))
        return run

    @property
    def events(self) -> list[Any]:
        """Every recorded event of every run (runs one after another, in start order)."""
        return [event for events in self.runs.values() for event in events]

    def events_of(self, run: ActiveRun | RunResult | str) -> list[Any]:
        """The events of one run (an ``ActiveRun``, its result, or its id)."""
        run_id = run if isinstance(run, str) else run.run_id
        if run_id not in self.runs:
            raise KeyError(f"no run {run_id!r} was recorded; attach it with run_recorder.attach")
        return self.runs[run_id]

    def types(self, run: ActiveRun | RunResult | str | None = None) -> list[str]:
        """The event types of one run (default: the only recorded run)."""
        return [event.type for event in self._one(run)]

    def check(self, result: RunResult, **options: Any) -> None:
        """:func:`check_run_invariants` for ``result`` against its recorded events."""
        check_run_invariants(result, self.events_of(result), **options)

    def _one(self, run: ActiveRun | RunResult | str | None) -> list[Any]:
        if run is not None:
            return self.events_of(run)
        if len(self.runs) != 1:
            raise ValueError(f"{len(self.runs)} runs were recorded; say which one")
        return next(iter(self.runs.values()))

    def capture_all(self) -> _Capture:
        """Attach to every run created from now on in this task and the tasks it starts
        (any agent), through :func:`operative.hooks.on_run_created`.

        Stop with :meth:`stop_capture`, or use the return value as a ``with`` block.
        """
        if self._stop_capture is None:
            self._stop_capture = on_run_created(self.attach)
        return _Capture(self)

    def stop_capture(self) -> None:
        """Stop attaching to new runs (runs already attached keep being recorded)."""
        if self._stop_capture is not None:
            self._stop_capture()
            self._stop_capture = None

    def detach(self) -> None:
        """Stop recording every run (what was recorded stays)."""
        for remove in self._removers:
            remove()
        self._removers.clear()


class _Capture:
    """What :meth:`RunRecorder.capture_all` returns: a ``with`` block stops the capture."""

    def __init__(self, recorder: RunRecorder) -> None:
        self._recorder = recorder

    def __enter__(self) -> RunRecorder:
        return self._recorder

    def __exit__(self, *exc: object) -> None:
        self._recorder.stop_capture()
