"""``ActiveRun``: the caller's handle on one run.

::

    open_run(...)            run nursery (``_open_run``): every child has ended on leaving
    └── loop task            ``drive`` (``_run_task``): the run scope (``RunScope``): abort,
        │                    deadline, budgets; the run's end and its result
        └── step k           ``StepLoop``: generate → assistant message → tools → stop?
            ├── generate     ``GeneratePhase``: attempts, retries, backpressure, spend
            └── tool nursery ``ToolPhase``: one child task per call

The handle holds what a caller uses: the result, events and listeners, abort, liveness
snapshots, closing. The run itself — its parts and what features may do to it — is the
:class:`~operative.extending.RunControl` behind it, which callers never see.
"""

from __future__ import annotations

from typing import Any

from ..conversation import Conversation
from ..hooks import run_created_callbacks
from ..liveness import LivenessSnapshot, SnapshotObserver, SnapshotStream, SnapshotSubscription
from ._control import RunControl
from ._errors import CleanupError, InvalidArgument, OutputValidationError
from ._event_hub import EventStream, Listener, Overflow
from ._options import RunConfig
from ._results import RunResult
from ._run_state import CancelReason
from ._types import FinishReason

__all__ = ["ActiveRun", "control_of"]


_ABORTED = FinishReason.ABORTED
_ERROR = FinishReason.ERROR


class ActiveRun:
    """A run in progress, yielded by :func:`open_run` (and ``agent.open_run``).

    Attach listeners or start iterating events right after entering the block: the loop
    starts only once the block first yields control, so nothing is missed.
    """

    __slots__ = ("_control", "conversation", "run_id")

    def __init__(self, config: RunConfig, conversation: Conversation) -> None:
        control = self._control = RunControl(config, conversation)
        self.run_id: str = control.run_id
        """The run's id."""
        self.conversation: Conversation = conversation
        """The run's live conversation (shared with the caller when one was passed)."""
        for created in run_created_callbacks():
            created(self)

    def __repr__(self) -> str:
        control = self._control
        return f"<ActiveRun {self.run_id} {control.liveness.status} step={control.state.step}>"

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Ask the run to stop; it ends with ``finish_reason == "aborted"``.

        Synchronous: it takes effect at the run's next checkpoint. Unfinished tool calls
        get ``cancelled`` results. Calling it again, or after the run ended, does nothing.
        """
        self._control.scope.cancel(CancelReason(_ABORTED, reason or "aborted"))

    def complete(self) -> None:
        """End every event stream now, without stopping the run (listeners stay)."""
        self._control.hub.close()

    # -- observing -------------------------------------------------------------------

    def add_listener(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for every event of ``type`` (``"*"``: every event).

        Listeners are plain callables, called in the run's task; one that raises is
        logged and counted, never allowed to break the run. Returns a remover.
        """
        return self._control.hub.add_listener(type, listener)

    def once(self, type: str, listener: Listener) -> Any:
        """Call ``listener(event)`` for the first event of ``type`` only, then drop it.

        Returns a remover, like :meth:`add_listener`; :meth:`remove_listener` also
        removes it before it fired.
        """
        return self._control.hub.once(type, listener)

    def remove_listener(self, type: str, listener: Listener) -> None:
        """Remove ``listener`` for ``type`` (one registration, by :meth:`add_listener` or
        :meth:`once`); a listener that is not registered is ignored."""
        self._control.hub.remove_listener(type, listener)

    def events(self, *types: str, capacity: int = 256, overflow: Overflow = "block") -> EventStream:
        """Iterate the run's events (all, or only ``types``) until the terminal one."""
        return self._control.hub.stream(types, capacity=capacity, overflow=overflow)

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing now; never blocks, never changes anything."""
        return self._control.liveness.snapshot()

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change.

        The terminal snapshot is delivered exactly once, then the subscription ends.
        Returns a handle with ``unsubscribe()`` (also usable as a ``with`` block).
        """
        return self._control.liveness.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one."""
        return self._control.liveness.snapshots(capacity=capacity)

    @property
    def is_durably_started(self) -> bool:
        """True once this run's durable record is committed (never for in-memory runs)."""
        durable: Any = self._control.state.ext.durable
        return durable is not None and bool(durable.is_durably_started())

    async def wait_durably_started(self) -> None:
        """Return once the durable run record is committed (the run id is then safe to
        acknowledge: the run survives any later crash). Raises what stopped the write.

        Raises:
            InvalidArgument: the run is not durable (no ``durable=`` was given).
        """
        durable: Any = self._control.state.ext.durable
        if durable is None:
            raise InvalidArgument(
                "this run is not durable: pass durable=Durable(SqliteDurable(path)) "
                "(from operative.durable) to open_run to make it so"
            )
        await durable.wait_durably_started()

    def statistics(self) -> dict[str, int]:
        """Counters for debugging: steps so far, listener failures."""
        return {
            "steps": len(self._control.state.steps),
            "listener_errors": self._control.hub.listener_errors,
        }

    # -- outcome ---------------------------------------------------------------------

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result (cached).

        Completed, errored and aborted runs all return a result; ``finish_reason`` says
        which (a failing ``on_run_end`` hook, the place where hosts commit the outcome,
        turns it into ``"error"``).

        Raises:
            CleanupError: the run ended but its clean-up did not finish (the durable
                terminal commit failed or timed out, ``on_run_end`` hooks overran
                ``cleanup_timeout``): an uncommitted run never reads as a success.
                Raised again on every call; ``.result`` is the run's own result.
        """
        await self._control.scope.wait_ended()
        return self._outcome()

    def _outcome(self) -> RunResult:
        """The recorded result (the run has ended), or its clean-up's failure raised."""
        result = self._control.scope.result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error
        return result

    async def closed(self) -> None:
        """Wait for the run's clean-up to finish: the transcript repaired, ``on_run_end``
        hooks run, a durable run's terminal record committed, the terminal event sent.

        The specification's cleanup acknowledgement, apart from ``result()``: it returns
        once the clean-up succeeded. Bound the wait with ``trio.fail_after`` if need be.

        Raises:
            CleanupError: the clean-up did not finish (the acknowledgement failed).
        """
        await self._control.scope.wait_ended()
        result = self._control.scope.result
        assert result is not None
        if result.error.__class__ is CleanupError:
            raise result.error

    async def aclose(self) -> None:
        """Abort the run, end its event streams and wait until it has ended.

        The specification's dispose (``using``): for hosts that want leaving a scope to
        stop a run rather than wait for it, as leaving ``async with`` does. Calling it
        after the run ended only waits. It does not raise for a failed clean-up; call
        :meth:`closed` for that.
        """
        self.abort("the run was closed")
        self.complete()
        await self._control.scope.wait_ended()

    async def unwrap(self) -> RunResult:
        """The result, or the run's error raised when it ended with one."""
        result = await self.result()
        if result.finish_reason is _ERROR and result.error is not None:
            raise result.error
        return result

    async def output(self) -> Any:
        """The validated structured output.

        Raises:
            InvalidArgument: the run has no ``output`` type.
            OutputValidationError: the final answer never validated.
        """
        if self._control.state.config.output is None:
            raise InvalidArgument("this run has no output type: pass output= to get one")
        result = await self.unwrap()
        validation = result.schema_validation
        if validation is None or not validation.success:
            detail = validation.error if validation is not None else "no final answer"
            raise OutputValidationError(
                f"the run's final answer did not match the output type: {detail}. "
                "Raise schema_retries, or inspect result.content."
            )
        return result.output


def control_of(run: object) -> RunControl | None:
    """The run behind ``run`` when it is an :class:`ActiveRun` (for the package's own
    features that hold a child run's handle: a subagent settles its spend)."""
    return run._control if isinstance(run, ActiveRun) else None
