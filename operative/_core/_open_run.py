"""``open_run``: the task tree of one run, in a nursery the caller can see.

::

    open_run(...)            run nursery: leaving it means every child has ended
    ├── loop task            drive (``_run_task``): the run scope, the step loop, clean-up
    ├── stall watchdog       (stall_policy=) returns once the run's liveness is terminal
    ├── extension tasks      (a durable run's writer, which renews its lease) return
    │                        once the run ends
    └── abort_on watcher     (abort_on=) returns once the run has finished

A model opened per run (``create_agent(model=...)``) encloses the nursery, so its client
lives exactly as long as the run.

``run_to_end`` (what ``agent.run`` uses) has no block for the caller to run beside the
loop: when nothing else must run beside it either, the loop task's work runs in the
caller's task, under the same run scope, and no nursery is opened::

    run_to_end(...)          the caller's task: drive (``_run_task``), then the result
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import msgspec
import trio

from ..conversation import Conversation
from ..liveness import create_stall_watchdog
from ._model import GenerateFunction
from ._options import RunConfig, configure_run
from ._results import RunResult
from ._run import ActiveRun
from ._run_state import CancelReason, is_shutdown, only_cancelled
from ._run_task import drive
from ._types import FinishReason

__all__ = [
    "open_run",
    "run_configured",
    "run_in_nursery",
    "run_to_end",
    "runs_alone",
]

_ABORTED = FinishReason.ABORTED


def open_run(
    *,
    generate: GenerateFunction,
    conversation: Any,
    toolbox: Any = None,
    tools: Any = None,
    stop_when: Any = None,
    maximum_steps: int = 25,
    **options: Any,
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
    return _RunBlock(
        {
            "generate": generate,
            "conversation": conversation,
            "toolbox": toolbox,
            "tools": tools,
            "stop_when": stop_when,
            "maximum_steps": maximum_steps,
            **options,
        }
    )


class _RunBlock:
    """``open_run``'s block: the model opened for the run (when it is), the run's
    nursery, and the caller's block inside both. A class, not generator-based context
    managers: two of those nested cost more than a one-step run's loop."""

    __slots__ = ("_arguments", "_model", "_nursery", "_run")

    def __init__(self, arguments: dict[str, Any]) -> None:
        self._arguments = arguments
        self._model: AbstractAsyncContextManager[Any] | None = None
        self._nursery: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._run: ActiveRun | None = None

    async def __aenter__(self) -> ActiveRun:
        config, live = configure_run(**self._arguments)
        open_for_run = getattr(config.generate, "open_for_run", None)
        if open_for_run is not None:
            model = open_for_run()
            config = msgspec.structs.replace(config, generate=await model.__aenter__())
            self._model = model
        try:
            run = _new_run(config, live)
            manager = trio.open_nursery()
            nursery = await manager.__aenter__()
            try:
                _start(run, nursery)
            except BaseException as exc:
                await manager.__aexit__(type(exc), exc, exc.__traceback__)
                raise
        except BaseException as exc:
            if self._model is not None:
                await self._model.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._nursery = manager
        self._run = run
        return run

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        run, manager = self._run, self._nursery
        assert run is not None, "the block was not entered"
        assert manager is not None
        if exc is not None:
            if is_shutdown(exc):
                # Ctrl-C (or SystemExit) in the block stops the process, not the run:
                # nothing terminal is recorded, and a durable run is left to recover().
                # A cancellation of the caller reaches the run's task by itself.
                if not only_cancelled(exc):
                    run._scope.cancel(
                        CancelReason(
                            _ABORTED,
                            f"interrupted ({type(exc).__name__}): a shutdown, not an abort",
                            shutdown=True,
                        )
                    )
            else:
                run.abort(f"the block running the run raised {type(exc).__name__}: {exc}")
        model = self._model
        # The block's exception was handled above: the nursery waits for the run's
        # tasks as after a block that ended, then the exception goes on (returning
        # False raises it again).
        try:
            await manager.__aexit__(None, None, None)
        except BaseException as error:
            if model is not None:
                await model.__aexit__(type(error), error, error.__traceback__)
            raise
        if model is not None:
            return bool(await model.__aexit__(exc_type, exc, traceback))
        return False


async def _abort_when(run: ActiveRun, wait: Callable[[], Awaitable[object]]) -> None:
    """Abort ``run`` once ``wait()`` returns (``abort_on=``); return when the run ends."""
    async with trio.open_nursery() as watch:

        async def until_ended() -> None:
            await run._scope.wait_ended()
            watch.cancel_scope.cancel()

        watch.start_soon(until_ended)
        try:
            await wait()
        except Exception as exc:
            run.abort(f"the run's abort_on= signal failed ({type(exc).__name__}: {exc})")
        else:
            run.abort("the run's abort_on= signal fired")
        watch.cancel_scope.cancel()


def _new_run(config: RunConfig, live: Conversation) -> ActiveRun:
    """The run's handle, its generate function wrapped, its extensions attached."""
    run = ActiveRun(config, live)
    ext = run._state.ext
    if ext.wrap_generate:
        run.reconfigure(
            msgspec.structs.replace(config, generate=run.wrap_generate(config.generate))
        )
    for extension in ext.attached:
        extension.attached(run)
    return run


def runs_alone(run: ActiveRun) -> bool:
    """True when nothing must run beside the run's loop: no stall watchdog, no
    ``abort_on`` watcher, no extension task (a durable run's writer)."""
    state = run._state
    config = state.config
    return config.stall_policy is None and config.abort_on is None and not state.ext.start_tasks


async def run_to_end(
    *,
    generate: GenerateFunction,
    conversation: Any,
    toolbox: Any = None,
    tools: Any = None,
    stop_when: Any = None,
    maximum_steps: int = 25,
    **options: Any,
) -> RunResult:
    """Run to the end and return the result: what ``async with open_run(...) as run:``
    with an empty block, then ``await run.result()``, does (the same options, events,
    hooks, clean-up and errors), with no block for the caller to run beside the loop.

    When nothing must run beside the loop (no ``stall_policy``, no ``abort_on``, no
    extension task such as a durable run's writer), the loop runs in the caller's
    task, inside the run's cancel scope, and no nursery is opened: a run's fixed cost is
    then mostly its own work. Otherwise the run gets its nursery, as in ``open_run``.
    Either way no task the run started is alive when this returns, and a cancelled
    caller (or Ctrl-C) shuts the run down and propagates as itself.

    Raises:
        CleanupError: the run ended but its clean-up did not finish (as ``result()``).
    """
    config, live = configure_run(
        generate=generate,
        conversation=conversation,
        toolbox=toolbox,
        tools=tools,
        stop_when=stop_when,
        maximum_steps=maximum_steps,
        **options,
    )
    return await run_configured(config, live)


async def run_configured(config: RunConfig, live: Conversation) -> RunResult:
    """``run_to_end`` for a configuration validated already (by ``configure_run``, or
    an agent's, validated once when it was defined and given its run id by
    ``config_for_run``)."""
    open_for_run = getattr(config.generate, "open_for_run", None)
    if open_for_run is not None:
        # A model string's client, opened for this run and closed once it has ended.
        async with open_for_run() as opened:
            return await run_configured(msgspec.structs.replace(config, generate=opened), live)
    run = _new_run(config, live)
    if runs_alone(run):
        # The loop task's work, in the caller's task: ``drive`` enters the run scope,
        # records the result, and raises again what came from outside (a cancelled
        # caller; Ctrl-C in a group, as from a nursery) once the run has ended.
        return await drive(run, alone=True)
    return await run_in_nursery(run)


async def run_in_nursery(run: ActiveRun) -> RunResult:
    """Run ``run`` in a nursery of its own, with what must run beside its loop."""
    async with trio.open_nursery() as nursery:
        _start(run, nursery)
    return run._outcome()


def _start(run: ActiveRun, nursery: trio.Nursery) -> None:
    """Start the run's loop task and what runs beside it in the run's nursery."""
    config = run._state.config
    nursery.start_soon(drive, run, name=f"operative run {run.run_id}")
    if config.stall_policy is not None:
        watchdog = create_stall_watchdog(run._liveness, config.stall_policy, on_abort=run.abort)
        # It returns by itself once the run's liveness is terminal.
        nursery.start_soon(watchdog.run, name=f"operative stall watchdog {run.run_id}")
    if config.abort_on is not None:
        # It returns by itself once the run has ended.
        nursery.start_soon(
            _abort_when, run, config.abort_on, name=f"operative abort_on {run.run_id}"
        )
    for extension in run._state.ext.start_tasks:
        # Each returns by itself once the run has finished (a durable run's writer).
        extension.start_tasks(run, nursery)
