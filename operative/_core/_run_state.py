"""The state the parts of one run share: its configuration, step, spend and steps.

A run (``RunControl``) is composed of parts, each owning what it writes (see ``_control``). What
several of them write — the configuration (a switch), the step counter, the spend, the
steps so far, the step in flight, a pending switch — lives here, in one small object they
all hold, and each field says who writes it. So do the run's fixed wiring (its event hub,
liveness tracker and extensions), which no part writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..hooks import HookContext
from ._types import NO_USAGE, FinishReason, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    from ..conversation import Conversation
    from ..liveness import LivenessTracker
    from ._event_hub import EventHub
    from ._extension import Extensions, ResumePoint, Settle, Switch
    from ._final_answer import FinalAnswer
    from ._model import GenerateResponse
    from ._options import RunConfig
    from ._results import StepResult

__all__ = [
    "NO_USAGE",
    "CancelReason",
    "Inflight",
    "RunState",
    "is_shutdown",
    "only_cancelled",
    "run_clock",
]


def only_cancelled(exc: BaseException | None) -> bool:
    """True for a ``trio.Cancelled``, or an exception group holding nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


def is_shutdown(exc: BaseException | None) -> bool:
    """True when ``exc`` stops the process rather than the run: a ``trio.Cancelled``, a
    ``KeyboardInterrupt`` (Ctrl-C), a ``SystemExit``, or a group holding nothing else.

    A run that meets one records nothing terminal: a durable run releases its lease and
    is finished by whoever recovers it.
    """
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(_SHUTDOWN)[1] is None
    return isinstance(exc, _SHUTDOWN)


_SHUTDOWN = (trio.Cancelled, KeyboardInterrupt, SystemExit)


def run_clock() -> Callable[[], float]:
    """Trio's clock, bound once (one call less per reading than ``trio.current_time``)."""
    try:
        return trio.lowlevel.current_clock().current_time
    except RuntimeError:  # built outside ``trio.run``: look the clock up on each reading
        return trio.current_time


class CancelReason(msgspec.Struct, frozen=True):
    """Why the run scope was cancelled; the first reason recorded wins.

    ``shutdown`` marks a cancellation that ends the process, not the run (Ctrl-C in
    the block running it): nothing terminal is recorded.
    """

    finish_reason: FinishReason
    message: str
    shutdown: bool = False
    describe: Callable[[], str] | None = None
    """For a deadline: says why once it has ended the run (a budget tells how far past
    its limit the run went); the run reports that instead of ``message``."""


class Inflight(msgspec.Struct, gc=False):
    """The step in progress: what clean-up needs to repair if the step is cut.

    One per run, begun at each step's entry (:meth:`begin`): a method call costs less
    than making an object. Untracked by the cyclic GC (``gc=False``): it holds only the
    step's records (calls, results, usage: untracked themselves, their values JSON), so
    it can be in no reference cycle, and a collection has one object fewer per run in
    flight to visit.
    """

    step: int = 0
    generated: bool = False
    settled: bool = False
    """The step's tool results are in the transcript (clean-up must not add them)."""
    completed: bool = False
    stop_reason: str | None = None
    content: Any = ""
    calls: tuple[ToolCall, ...] = ()
    results: Sequence[ToolResult | None] = ()
    """The step's results, in call order (the tool phase sets its list)."""
    usage: Usage = NO_USAGE

    def begin(self, step: int) -> None:
        """Start ``step`` afresh: nothing generated, run or completed yet."""
        self.step = step
        self.generated = False
        self.settled = False
        self.completed = False
        self.stop_reason = None
        self.content = ""
        self.calls = ()
        self.results = ()
        self.usage = NO_USAGE


class RunState:
    """What the parts of a run share. Each mutable field names the parts that write it;
    every other part only reads it. The rest is set once, here."""

    __slots__ = (
        "answer",
        "config",
        "conversation",
        "ext",
        "hub",
        "inflight",
        "liveness",
        "now",
        "recorded_answer",
        "resume",
        "run_id",
        "started_at",
        "step",
        "steps",
        "switch",
        "to_settle",
        "usage",
    )

    def __init__(
        self,
        config: RunConfig,
        run_id: str,
        conversation: Conversation,
        now: Callable[[], float],
        hub: EventHub,
        liveness: LivenessTracker,
        ext: Extensions,
    ) -> None:
        self.config = config
        """The run's configuration. Written by ``RunControl.reconfigure`` (a switch)."""
        self.run_id = run_id
        """The run's id (``config.run_id``)."""
        self.conversation = conversation
        """The run's live transcript (shared with the caller when one was passed)."""
        self.now = now
        """The run's clock (trio's)."""
        self.hub = hub
        """Where the run's events go."""
        self.liveness = liveness
        """How the run is doing (progress, declared waits), for snapshots and watchdogs."""
        self.ext = ext
        """The features attached to the run, by the boundaries they override."""
        self.started_at: float | None = None
        """When the loop task started, on the run's clock. Written by the loop task (``drive``)."""
        self.step = 0
        """The step in progress (0 before the first). Written by ``StepLoop``."""
        self.usage = NO_USAGE
        """What the run spent so far. Written by ``GeneratePhase`` (model calls),
        ``StepLoop`` (a compaction's summary) and ``RunControl.charge``/``resume``."""
        self.steps: list[StepResult] = []
        """The steps completed. Appended by ``StepLoop``, the loop task (a step cut short)
        and ``RunControl.resume`` (a journal's steps)."""
        self.inflight: Inflight | None = None
        """The step in progress. Set by ``StepLoop``, taken by the loop task at the end."""
        self.switch: Switch | None = None
        """A switch a tool asked for in this step (``RunControl.request_switch``), applied
        and cleared by ``StepLoop`` at the step's end."""
        self.to_settle: tuple[Settle, ...] = ()
        """What extensions asked to do about the step's answer's spend once the answer
        is recorded. Written by ``GeneratePhase``, awaited and cleared by ``StepLoop``."""
        self.resume: ResumePoint | None = None
        """Where a run rebuilt from a journal goes on. Set by ``RunControl.resume``."""
        self.recorded_answer: GenerateResponse | None = None
        """The coming step's answer, recorded before a crash. Set by
        ``RunControl.answer_with``, taken by ``StepLoop``."""
        self.answer: FinalAnswer | None = None
        """What the run answers where its last step's content does not say it (an
        answer replaced, a structured output): made on first use (``answer_of``)."""

    def hook_context(self) -> HookContext:
        """What a hook is told about the run, now."""
        config = self.config
        return HookContext(
            run_id=self.run_id,
            agent_name=config.agent_name,
            step=self.step,
            conversation=self.conversation.current,
            request_context=config.request_context,
            principal=config.principal,
        )
