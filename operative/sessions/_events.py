"""Events a session handle emits besides ``session.loaded`` / ``session.saved``."""

from __future__ import annotations

from typing import Literal

from .._core._events import Event

__all__ = ["RecoverStage", "SessionRecoverFailed"]

RecoverStage = Literal["lookup", "load", "claim", "resume", "reconcile"]


class SessionRecoverFailed(Event, frozen=True, kw_only=True, tag="session.recover"):
    """``SessionHandle.recover()`` could not recover or settle one open turn.

    ``run_id`` is the turn's. ``stage`` says what failed: ``"lookup"`` (reading the
    engine's record), ``"load"`` (loading a lazy agent's definition), ``"claim"``
    (claiming the run or reading its journal), ``"resume"`` (the resumed run did not
    start) or ``"reconcile"`` (storing a finished run's outcome on the session: a
    persistence failure). The turn stays open; a later ``recover()`` tries again.
    """

    session_id: str
    stage: RecoverStage
    error_type: str
    message: str
