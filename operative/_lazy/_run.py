"""What a lazy agent's ``open_run`` returns: the run's block, which loads the definition.

``async with lazy.open_run(input) as run`` loads the definition in ``__aenter__`` and
gives the loaded agent's own run (an :class:`~operative.ActiveRun` for an agent made by
``create_agent``), before its loop starts. Until then, :class:`LoadingRun` is the run's
loading state: other tasks may read ``snapshot()`` (``starting``), subscribe to it, or
``abort()`` the run, which then never runs the agent. Once the real run exists, each of
these goes to it.

A run that ends before its agent ran (aborted while loading, a loader that failed, a
definition that is not an agent) is still a run: the block gets an ``ActiveRun`` that
ends at once, without calling any model, with the input as its transcript, no steps,
``run.started`` and one terminal event (``run.aborted`` or ``run.error``).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import trio

from .._agent import AgentInput, AgentRunContext, RunnableAgent
from .._core._errors import InvalidArgument
from .._core._model import GenerateRequest, GenerateResponse
from .._core._open_run import open_run
from .._core._run_block import RunBlock
from .._core._types import FinishReason
from ..conversation import Conversation, ConversationHistory
from ..hooks import HookContext
from ..liveness import LivenessSnapshot, SnapshotObserver, SnapshotStream, SnapshotSubscription
from ._errors import AgentContractError, AsyncDefinitionLoadError
from ._liveness import LazyLiveness

if TYPE_CHECKING:
    from ._agent import LazyAgent

__all__ = ["LoadingRun", "check_durable"]

logger = logging.getLogger("operative.lazy")

_HANDLE_MEMBERS = ("run_id", "abort", "result", "events", "add_listener", "snapshot")


def check_durable(agent: RunnableAgent) -> RunnableAgent:
    """``agent`` if its ``open_run`` takes ``durable=``; AgentContractError otherwise."""
    try:
        parameters = inspect.signature(agent.open_run).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin: let the call tell
        return agent
    if "durable" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    ):
        return agent
    raise AgentContractError(
        f"the lazy agent loaded {type(agent).__name__}, whose open_run() takes no "
        "durable=: a durable run needs an agent that can run durably (create_agent)"
    )


class LoadingRun(AbstractAsyncContextManager[Any]):
    """A lazy agent's run, to enter with ``async with``: it loads the definition there.

    Entering it gives the loaded agent's run (the ``ActiveRun`` of an agent made by
    ``create_agent``). Before that, and from other tasks while the definition loads, it
    is the run's loading state: ``snapshot()`` says ``starting`` (read on the lazy
    agent's ``runtime=`` clock), ``subscribe_snapshot()`` and ``snapshots()`` follow the
    run across the load to its end, and ``abort()`` ends the run without running the
    agent. A block is entered once.
    """

    __slots__ = (
        "_abort_on",
        "_abort_reason",
        "_agent",
        "_block",
        "_clock",
        "_context",
        "_durable",
        "_ended",
        "_forwarded_abort",
        "_input",
        "_liveness",
        "_load_scope",
        "_opened_at",
        "_provisional_id",
        "_real",
        "_recovering",
    )

    def __init__(
        self,
        agent: LazyAgent,
        input: AgentInput,
        context: AgentRunContext | None,
        *,
        durable: Any = None,
        run_id: str | None = None,
        recovering: bool = False,
        abort_on: tuple[Callable[[], Awaitable[object]], trio.Event] | None = None,
        clock: Callable[[], float],
    ) -> None:
        self._agent = agent
        self._input = input
        self._context = context
        self._durable = durable
        """The ``durable=`` routing passed on to the loaded agent's ``open_run``."""
        self._recovering = recovering
        """A recovered durable run: its record is running, so it is never ended here."""
        self._abort_on = abort_on
        self._clock = clock
        """The clock of the snapshots before the agent loaded (``runtime=``)."""
        self._provisional_id = run_id or os.urandom(12).hex()
        self._real: Any = None
        self._abort_reason: str | None = None
        self._forwarded_abort = False
        self._load_scope = trio.CancelScope()
        self._ended = trio.Event()
        """Set once the block has been left (the run has ended)."""
        self._block: AbstractAsyncContextManager[Any] | None = None
        self._opened_at = clock()
        self._liveness = LazyLiveness(self._provisional_id, self.snapshot, clock=clock)

    def __repr__(self) -> str:
        return f"<LoadingRun {self.run_id} {self.snapshot().status}>"

    if not TYPE_CHECKING:  # misuse says what to do; a type checker flags it anyway

        def __await__(self) -> NoReturn:
            raise InvalidArgument(
                "open_run(...) is not awaited: use async with agent.open_run(...) as run: "
                "(and await run.result() in the block), or result = await agent.run(...) "
                "to run to the end"
            )

        def __getattr__(self, name: str) -> NoReturn:
            if name.startswith("_"):
                raise AttributeError(name)
            raise AttributeError(
                f"a lazy agent's open_run(...) has no {name!r}: the run is what its block "
                f"gives: use async with agent.open_run(...) as run: then run.{name}"
            )

    @property
    def run_id(self) -> str:
        """The loaded agent's run id once its run exists; the id it will have before
        (a durable run's id, ``context.run_id``, or a provisional one)."""
        real = self._real
        return real.run_id if real is not None else self._provisional_id

    @property
    def run(self) -> Any:
        """The loaded agent's run once it exists (what the block is given), else None."""
        return self._real

    # -- control ---------------------------------------------------------------------

    def abort(self, reason: str = "aborted") -> None:
        """Stop the run. Before the agent loaded, the agent is never run at all; after,
        the loaded agent's run is aborted (once)."""
        reason = reason or "aborted"
        real = self._real
        if real is not None:
            if not self._forwarded_abort:
                self._forwarded_abort = True
                real.abort(reason)
            return
        if self._abort_reason is None and not self._ended.is_set():
            self._abort_reason = reason
            if not self._recovering:
                self._load_scope.cancel()
            # else: the run's record is running already: its definition loads, its run
            # opens and is aborted at once, so that its journal records the abort.

    # -- observing -------------------------------------------------------------------

    def snapshot(self) -> LivenessSnapshot:
        """How the run is doing: ``starting`` while the definition loads, the loaded
        agent's run's once it exists; never blocks, never changes anything."""
        real = self._real
        if real is not None:
            snapshot: LivenessSnapshot = real.snapshot()
            return snapshot
        durability: Literal["process-local", "durable"] = (
            "process-local" if self._durable is None else "durable"
        )
        final = self._liveness.final
        if final is None:
            return LivenessSnapshot(
                id=self._provisional_id,
                status="starting",
                revision=0,
                started_at=self._opened_at,
                observed_at=self._clock(),
                durability=durability,
            )
        return LivenessSnapshot(
            id=self._provisional_id,
            status="failed" if final is FinishReason.ERROR else "aborted",
            revision=1,
            started_at=self._opened_at,
            observed_at=self._clock(),
            finish_reason=final,
            durability=durability,
        )

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription:
        """Call ``observer(snapshot)`` now, then on every revision change, across the
        load to the run's end: ``starting`` at once while loading, then the loaded
        agent's run's snapshots with no new subscription. The terminal snapshot is
        delivered exactly once, then the subscription ends. An observer that raises is
        logged and counted. Returns a handle with ``unsubscribe()`` (also a ``with``
        block), which works before and after the load."""
        return self._liveness.subscribe_snapshot(observer)

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream:
        """Iterate snapshots as they change, ending after the terminal one: ``starting``
        while loading, then the run's. A consumer ``capacity`` behind misses the oldest,
        never the newest or the terminal one."""
        return self._liveness.snapshots(capacity=capacity)

    # -- the block -------------------------------------------------------------------

    async def __aenter__(self) -> Any:
        if self._block is not None:
            raise InvalidArgument(
                "this lazy agent's open_run(...) block was entered already: a run is "
                "entered once; call open_run(...) again for another run"
            )
        # The kernel's block: it leaves a KeyboardInterrupt or SystemExit as itself.
        block = self._block = RunBlock(self._opened())
        return await block.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._block is not None
        return await self._block.__aexit__(exc_type, exc, traceback)

    @asynccontextmanager
    async def _opened(self) -> AsyncIterator[Any]:
        if self._abort_on is None:
            try:
                async with self._run() as run:
                    yield run
            finally:
                self._ended.set()
            return
        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            # It returns by itself once the block has been left.
            nursery.start_soon(
                self._abort_when, *self._abort_on, name=f"operative abort_on {self.run_id}"
            )
            try:
                async with self._run() as run:
                    yield run
            except BaseException as exc:
                failure = exc
            finally:
                self._ended.set()
        if failure is not None:
            raise failure

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[Any]:
        """Load, then run the loaded agent; or, when the run ended before, say so."""
        agent, error = await self._load()
        if agent is not None and (self._abort_reason is None or self._recovering):
            manager, error = self._manager(agent)
            if manager is not None:
                bound = False
                real: Any = None
                try:
                    async with manager as real:
                        missing = [name for name in _HANDLE_MEMBERS if not hasattr(real, name)]
                        if missing:
                            abort = getattr(real, "abort", None)
                            if callable(abort):
                                abort("the run handle broke the agent contract")
                            error = AgentContractError(
                                f"{type(agent).__name__}.open_run() yielded "
                                f"{type(real).__name__}, which lacks {', '.join(missing)}: "
                                "it is not a run handle"
                            )
                        else:
                            self._bind(real)
                            bound = True
                            yield real
                finally:
                    if bound:
                        await self._settle(real)
                if bound:
                    return
        async with self._ended_run(error) as run:
            yield run

    async def _load(self) -> tuple[RunnableAgent | None, BaseException | None]:
        """The definition, or why the run ends before it runs (an error, or ``None``
        for an abort); raises what came from outside (the caller cancelled)."""
        flight = self._agent._flight
        if self._recovering:
            # A recovered run's record is running and leased to this worker: a failed
            # load raises here and leaves the run as it was, instead of ending it with a
            # result its record does not hold.
            return check_durable(await flight.get()), None
        if self._abort_reason is not None:
            await trio.lowlevel.checkpoint()
            return None, None
        try:
            with self._load_scope:
                return await flight.get(), None
        except (AsyncDefinitionLoadError, AgentContractError) as exc:
            return None, exc
        except BaseException:
            # Cancelled (or interrupted) while loading: nothing ran.
            self._abort_reason = self._abort_reason or "the run's caller was cancelled"
            self._liveness.close(FinishReason.ABORTED)
            raise
        return None, None  # aborted while loading: the load was abandoned

    def _manager(
        self, agent: RunnableAgent
    ) -> tuple[AbstractAsyncContextManager[Any] | None, BaseException | None]:
        """The loaded agent's run block, or why there is none."""
        try:
            if self._durable is None:
                manager: Any = agent.open_run(self._input, context=self._context)
            else:
                manager = check_durable(agent).open_run(  # type: ignore[call-arg]
                    self._input, context=self._context, durable=self._durable
                )
        except Exception as exc:
            return None, exc
        if not (hasattr(manager, "__aenter__") and hasattr(manager, "__aexit__")):
            return None, AgentContractError(
                f"{type(agent).__name__}.open_run() returned {type(manager).__name__}, "
                "not an async context manager yielding a run handle"
            )
        return manager, None

    def _bind(self, real: Any) -> None:
        """The loaded agent's run exists and its loop has not started: it takes over."""
        self._real = real
        self._liveness.bind(real)
        if self._abort_reason is not None:  # aborted while a recovered run loaded
            self.abort(self._abort_reason)

    async def _settle(self, real: Any) -> None:
        """The loaded agent's block has been left: its run has ended."""
        result = getattr(real, "ended_result", None)
        if result is None:
            with trio.CancelScope(shield=True):
                try:
                    result = await real.result()
                except Exception:
                    result = None
        self._liveness.close(FinishReason.ERROR if result is None else result.finish_reason)

    @asynccontextmanager
    async def _ended_run(self, error: BaseException | None) -> AsyncIterator[Any]:
        """A run that ends at once without calling a model: aborted (``error`` is None)
        or failed with ``error``, the input its transcript."""
        reason = self._abort_reason or "aborted"

        async def started(context: HookContext) -> None:
            if error is not None:
                raise error
            await trio.lowlevel.checkpoint()  # the abort asked for below lands here

        self._liveness.close(FinishReason.ABORTED if error is None else FinishReason.ERROR)
        context = self._context
        name = context.agent_name if context is not None else None
        async with open_run(
            generate=_not_loaded,
            conversation=_input_conversation(self._input),
            run_id=self._provisional_id,
            agent_name=name or self._agent.name,
            on_run_start=started,
        ) as run:
            if error is None:
                run.abort(reason)
            yield run

    async def _abort_when(self, wait: Callable[[], Awaitable[object]], fired: trio.Event) -> None:
        """Set ``fired`` once ``wait()`` returns, and abort a run whose agent has not
        loaded yet (the loaded agent's run watches ``fired`` itself); return once the
        block has been left."""
        async with trio.open_nursery() as watch:

            async def until_ended() -> None:
                await self._ended.wait()
                watch.cancel_scope.cancel()

            watch.start_soon(until_ended)
            try:
                await wait()
            except Exception as exc:
                reason = f"the run's abort_on= signal failed ({type(exc).__name__}: {exc})"
            else:
                reason = "the run's abort_on= signal fired"
            fired.set()
            if self._real is None:
                self.abort(reason)
            watch.cancel_scope.cancel()


async def _not_loaded(request: GenerateRequest) -> GenerateResponse:  # pragma: no cover
    raise AssertionError("a lazy run that ended before its agent loaded calls no model")


def _input_conversation(input: AgentInput) -> Conversation:
    if isinstance(input, ConversationHistory):
        return Conversation.from_history(input)
    conversation = Conversation()
    conversation.append_user_message(input)
    return conversation
