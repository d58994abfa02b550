"""``open_run``: the task tree of one run, in a nursery the caller can see.

::

    open_run(...)            run nursery: leaving it means every child has ended
    ├── loop task            drive (``_run_task``): the run scope, the step loop, clean-up
    ├── stall watchdog       (stall_policy=) returns once the run's liveness is terminal
    ├── extension tasks      (a durable run's writer, which renews its lease) return
    │                        once the run ends
    └── abort_on watcher     (abort_on=) returns once the run has finished

A model opened per run (``create_agent(model=...)``) encloses the nursery, so its client
lives exactly as long as the run. Every run is made this way: ``agent.run`` is this block
and the run's result.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Unpack

import msgspec
import trio

from ..conversation import Conversation, ConversationHistory
from ..liveness import create_stall_watchdog
from ._control import RunControl
from ._model import GenerateFunction
from ._options import RunConfig, configure_run
from ._results import RunResult
from ._run import ActiveRun
from ._run_block import RunBlock, check_generate
from ._run_state import CancelReason, is_shutdown, only_cancelled
from ._run_task import drive
from ._types import FinishReason

if TYPE_CHECKING:
    from ..conditions import StopCondition
    from ..tools import Toolbox
    from ._run_options import RunOptions

__all__ = ["open_configured", "open_run", "run_configured"]

_ABORTED = FinishReason.ABORTED


def open_run(
    *,
    generate: GenerateFunction,
    conversation: Conversation | ConversationHistory,
    toolbox: Toolbox | None = None,
    tools: Sequence[Any] | Mapping[str, Any] | None = None,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    maximum_steps: int = 25,
    **options: Unpack[RunOptions],
) -> AbstractAsyncContextManager[ActiveRun]:
    """Run the loop in a nursery the caller can see; yields the :class:`ActiveRun`.

    Leaving the block waits for the run to end, like a nursery (call ``run.abort()``
    first to stop it early). An exception raised in the block aborts the run and
    propagates once the run has ended; ``KeyboardInterrupt`` or ``SystemExit`` shuts it
    down instead (nothing terminal is recorded: a durable run is left to ``recover()``)
    and propagates as itself. See :func:`configure_run` for every option.

    A ``generate`` with an ``open_for_run()`` method (what ``create_agent(model=...)``
    makes) is opened for this run: ``async with generate.open_for_run() as opened``
    encloses the run's nursery, and ``opened`` answers every call of the run.
    """
    check_generate(generate)
    config, live = configure_run(
        generate=generate,
        conversation=conversation,
        toolbox=toolbox,
        tools=tools,
        stop_when=stop_when,
        maximum_steps=maximum_steps,
        **options,
    )
    return RunBlock(open_configured(config, live))


@asynccontextmanager
async def open_configured(config: RunConfig, live: Conversation) -> AsyncIterator[ActiveRun]:
    """:func:`open_run` for a configuration validated already (by ``configure_run``, or
    an agent's, validated once when it was defined and given its run id)."""
    async with _model_for_run(config.generate) as generate:
        handle = _made(config, live, generate)
        run = handle._control
        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, run, name=f"operative run {run.run_id}")
            _start_beside(run, nursery)
            try:
                yield handle
            except BaseException as exc:
                # The run is stopped, and the nursery waits for it as after a block that
                # ended (not cancelled, which would cut its clean-up); then the
                # exception goes on.
                _stop_for(run, exc)
                failure = exc
        if failure is not None:
            raise failure


async def run_configured(config: RunConfig, live: Conversation) -> RunResult:
    """Run to the end in this task and return the result: what ``agent.run`` awaits,
    ``open_configured`` with nothing for the caller to do beside the loop. The loop is
    the same ``drive``; what runs beside it (a watchdog, an ``abort_on`` watcher, a
    durable run's writer) gets the run's nursery, and a run with none needs none."""
    async with _model_for_run(config.generate) as generate:
        handle = _made(config, live, generate)
        run = handle._control
        if _needs_tasks_beside(run):
            async with trio.open_nursery() as nursery:
                _start_beside(run, nursery)
                await drive(run)
        else:
            await drive(run)
    return handle._outcome()


def _made(config: RunConfig, live: Conversation, generate: Any) -> ActiveRun:
    """The run's handle, with its generate function opened for the run."""
    if generate is not config.generate:
        config = msgspec.structs.replace(config, generate=generate)
    return ActiveRun(config, live)


def _model_for_run(generate: Any) -> AbstractAsyncContextManager[Any]:
    """What answers the run's model calls, as long as the run lasts: ``generate`` itself,
    or a model string's client, opened for this run and closed once it has ended."""
    open_for_run = getattr(generate, "open_for_run", None)
    if open_for_run is None:
        return contextlib.nullcontext(generate)
    opened: AbstractAsyncContextManager[Any] = open_for_run()
    return opened


def _stop_for(run: RunControl, exc: BaseException) -> None:
    """The block running ``run`` raised ``exc``: abort the run, or shut it down."""
    if not is_shutdown(exc):
        run.abort(f"the block running the run raised {type(exc).__name__}: {exc}")
    elif not only_cancelled(exc):
        # Ctrl-C (or SystemExit) in the block stops the process, not the run: nothing
        # terminal is recorded, and a durable run is left to recover(). A cancellation
        # of the caller reaches the run's task by itself.
        run.scope.cancel(
            CancelReason(
                _ABORTED,
                f"interrupted ({type(exc).__name__}): a shutdown, not an abort",
                shutdown=True,
            )
        )


async def _abort_when(run: RunControl, wait: Callable[[], Awaitable[object]]) -> None:
    """Abort ``run`` once ``wait()`` returns (``abort_on=``); return when the run ends."""
    async with trio.open_nursery() as watch:

        async def until_ended() -> None:
            await run.scope.wait_ended()
            watch.cancel_scope.cancel()

        watch.start_soon(until_ended)
        try:
            await wait()
        except Exception as exc:
            run.abort(f"the run's abort_on= signal failed ({type(exc).__name__}: {exc})")
        else:
            run.abort("the run's abort_on= signal fired")
        watch.cancel_scope.cancel()


def _needs_tasks_beside(run: RunControl) -> bool:
    """Whether anything runs beside the run's loop (see :func:`_start_beside`)."""
    config = run.state.config
    return (
        config.stall_policy is not None or config.abort_on is not None or bool(run.state.ext.attach)
    )


def _start_beside(run: RunControl, nursery: trio.Nursery) -> None:
    """Start what runs beside the run's loop in the run's nursery: the stall watchdog,
    the ``abort_on`` watcher; attach the extensions (a durable run's writer starts
    here). Each task returns by itself once the run has ended."""
    config = run.state.config
    if config.stall_policy is not None:
        watchdog = create_stall_watchdog(run.liveness, config.stall_policy, on_abort=run.abort)
        nursery.start_soon(watchdog.run, name=f"operative stall watchdog {run.run_id}")
    if config.abort_on is not None:
        nursery.start_soon(
            _abort_when, run, config.abort_on, name=f"operative abort_on {run.run_id}"
        )
    for extension in run.state.ext.attach:
        extension.attach(run, nursery)
