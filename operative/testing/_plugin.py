"""The pytest plugin, loaded through the ``pytest11`` entry point.

Fixtures:

``scripted_model``
    A factory: ``scripted_model(["hi"], delay=1.0)`` builds a :class:`ScriptedModel`.
``run_recorder``
    A :class:`RunRecorder` for the test: ``run_recorder.attach(run)`` records one run;
    ``run_recorder.capture_all()`` records every run the rest of the test starts.
``operative_clock``
    A fresh ``trio.testing.MockClock(autojump_threshold=0)``. With pytest-trio, asking
    for it makes it the test's clock (pytest-trio's own ``autojump_clock`` is the same
    thing; ask for one of them, not both); without, pass it to ``trio.run(...,
    clock=operative_clock)``.

Nothing here imports hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pytest
import trio.testing

from ._recorder import RunRecorder
from ._scripted import ScriptedModel, ScriptFunction, ScriptItem

__all__ = ["operative_clock", "run_recorder", "scripted_model"]


@pytest.fixture
def scripted_model() -> Callable[..., ScriptedModel]:
    """A factory of :class:`ScriptedModel` (same arguments)."""

    def make(script: Iterable[ScriptItem] | ScriptFunction, *, delay: float = 0.0) -> ScriptedModel:
        return ScriptedModel(script, delay=delay)

    return make


@pytest.fixture
def run_recorder() -> Iterator[RunRecorder]:
    """Records the events of runs in this test (``attach(run)`` or ``capture_all()``)."""
    recorder = RunRecorder()
    try:
        yield recorder
    finally:
        recorder.stop_capture()
        recorder.detach()


@pytest.fixture
def operative_clock() -> trio.testing.MockClock:
    """A ``MockClock`` that jumps ahead whenever every task sleeps."""
    return trio.testing.MockClock(autojump_threshold=0)
