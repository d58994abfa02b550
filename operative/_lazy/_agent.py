"""Lazy agents and lazy generate functions: load the definition on first use.

``create_lazy_agent(loader)`` returns an agent whose definition (instructions, tools,
output type, model) is loaded by ``loader`` the first time a run needs it; the load is
shared by concurrent runs and cached once it succeeds. A failed load is forgotten, so
the next run calls the loader again (:class:`~operative.errors.AsyncDefinitionLoadError`); a
load that produced something that is not an agent is cached as a broken definition
(:class:`~operative.errors.AgentContractError`), because loading again would not fix it.

A lazy agent runs wherever an agent does: ``open_run(..., durable=...)``, session turns
(plain and durable), :func:`~operative.durable.recover` and ``serve_durable_runs``.
Hosts that need the definition before a run (a session stores its instructions first;
recovery loads before it resumes a claimed run) call :func:`resolve_agent`, which
awaits ``load()`` on any agent: an :class:`~operative.Agent` is loaded already.

``create_lazy_generate(loader)`` is the narrower case: only the ``generate`` function
is loaded (``create_agent(generate=create_lazy_generate(loader), ...)``).
"""

from __future__ import annotations

import inspect
import logging
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs
import trio

from .._agent import AgentInput, AgentRunContext, RunnableAgent
from .._core._errors import InvalidArgument, RunFailed
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from .._core._options import abort_waiter
from .._core._results import RunResult
from .._core._run_block import check_trio
from .._core._types import FinishReason
from ..conversation import ConversationHistory
from ._errors import AgentContractError, AsyncDefinitionLoadError
from ._run import LoadingRun as LoadingRun

__all__ = [
    "LazyAgent",
    "LazyGenerate",
    "LoadingRun",
    "create_lazy_agent",
    "create_lazy_generate",
    "resolve_agent",
]

logger = logging.getLogger("operative.lazy")

T = TypeVar("T")

Loader = Callable[[], Any]
"""A callable taking no arguments that returns (or, when async, resolves to) the
definition, or a module-like object whose ``default`` is the definition."""


# -- single-flight loading ------------------------------------------------------------


class _Flight:
    """One call of the loader that concurrent callers share."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: AsyncDefinitionLoadError | None = None


class _SingleFlight(Generic[T]):
    """Load once; share an in-flight load; forget a failed one; remember a broken one."""

    __slots__ = ("_broken", "_check", "_flight", "_loaded", "_loader", "_value", "loads")

    def __init__(self, loader: Loader, check: Callable[[Any], T]) -> None:
        self._loader = loader
        self._check = check
        self._flight: _Flight | None = None
        self._loaded = False
        self._value: T | None = None
        self._broken: str | None = None
        self.loads = 0
        """How many times the loader was called."""

    @property
    def value(self) -> T | None:
        return self._value if self._loaded else None

    async def get(self) -> T:
        while True:
            if self._loaded:
                await trio.lowlevel.checkpoint()
                return self._value  # type: ignore[return-value]
            if self._broken is not None:
                await trio.lowlevel.checkpoint()
                raise AgentContractError(self._broken)
            flight = self._flight
            if flight is not None:
                await flight.done.wait()
                if flight.error is not None:
                    # A fresh error per waiter (one exception object raised in many
                    # tasks would collect all their tracebacks).
                    raise AsyncDefinitionLoadError(str(flight.error)) from flight.error.__cause__
                continue  # loaded, broken, or the loading task was cancelled: look again
            return await self._load()

    async def _load(self) -> T:
        flight = self._flight = _Flight()
        self.loads += 1
        try:
            try:
                loaded = self._loader()
                if inspect.isawaitable(loaded):
                    loaded = await loaded
            except Exception as exc:
                error = AsyncDefinitionLoadError(
                    f"the loader {_describe(self._loader)} raised {type(exc).__name__}: {exc}; "
                    "the load is not cached, so the next run calls the loader again"
                )
                flight.error = error
                raise error from exc
            try:
                value = self._check(loaded)
            except AgentContractError as exc:
                self._broken = str(exc)
                raise
            self._value = value
            self._loaded = True
            await trio.lowlevel.checkpoint()  # a sync loader did not; the value is kept
            return value
        finally:
            # Cancelled mid-load: nothing is recorded, and a waiter loads again itself.
            self._flight = None
            flight.done.set()


def _describe(loader: object) -> str:
    return getattr(loader, "__qualname__", None) or repr(loader)


def _unwrap_module(value: Any, fits: Callable[[Any], bool]) -> Any:
    if fits(value):
        return value
    default = getattr(value, "default", None)
    if default is not None and (isinstance(value, types.ModuleType) or fits(default)):
        return default
    return value


def _as_agent(value: Any) -> RunnableAgent:
    candidate = _unwrap_module(value, lambda v: isinstance(v, RunnableAgent))
    if isinstance(candidate, RunnableAgent) and callable(getattr(candidate, "open_run", None)):
        return candidate
    raise AgentContractError(
        f"the lazy agent's loader produced {type(value).__name__}, which is not a "
        "RunnableAgent (name, has_output, run and open_run, e.g. from create_agent) nor a "
        "module whose `default` is one"
    )


def _as_generate(value: Any) -> GenerateFunction:
    candidate = _unwrap_module(value, lambda v: callable(v) and not isinstance(v, type))
    if callable(candidate) and not isinstance(candidate, type):
        function: GenerateFunction = candidate
        return function
    raise AgentContractError(
        f"the lazy generate's loader produced {type(value).__name__}, which is not a "
        "GenerateFunction (async def generate(request) -> GenerateResponse) nor a module "
        "whose `default` is one"
    )


def _check_loader(loader: object) -> None:
    if not callable(loader):
        raise InvalidArgument(
            f"the loader must be a callable taking no arguments (sync or async), got {loader!r}"
        )


# -- lazy generate --------------------------------------------------------------------


class LazyGenerate:
    """A ``GenerateFunction`` whose real function is loaded on the first call."""

    __slots__ = ("_flight",)

    def __init__(self, loader: Loader) -> None:
        self._flight: _SingleFlight[GenerateFunction] = _SingleFlight(loader, _as_generate)

    @property
    def loaded(self) -> GenerateFunction | None:
        """The loaded function, or None before the first successful load."""
        return self._flight.value

    @property
    def loads(self) -> int:
        """How many times the loader was called."""
        return self._flight.loads

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        generate = await self._flight.get()
        return await generate(request)


def create_lazy_generate(loader: Callable[[], Any]) -> LazyGenerate:
    """A ``GenerateFunction`` that loads the real one (``loader()``) on first use.

    Raises (from the call, not here):
        AsyncDefinitionLoadError: the loader raised (the next call loads again).
        AgentContractError: it produced something that is not callable.
    """
    _check_loader(loader)
    return LazyGenerate(loader)


# -- lazy agent -----------------------------------------------------------------------


class LazyAgent:
    """A :class:`~operative.RunnableAgent` whose definition is loaded on first run."""

    __slots__ = ("_clock", "_flight", "_has_output", "_name")

    def __init__(
        self,
        loader: Loader,
        *,
        has_output: bool,
        name: str | None,
        runtime: Callable[[], float] | None = None,
    ) -> None:
        self._flight: _SingleFlight[RunnableAgent] = _SingleFlight(loader, _as_agent)
        self._has_output = has_output
        self._name = name
        self._clock: Callable[[], float] = runtime if runtime is not None else trio.current_time
        """What a run's snapshots read the time from until its agent loaded."""

    def __repr__(self) -> str:
        state = "loaded" if self._flight.value is not None else "not loaded"
        return f"<LazyAgent {self.name} ({state})>"

    @property
    def name(self) -> str:
        """``name=`` when given; otherwise the loaded agent's name once loaded."""
        if self._name is not None:
            return self._name
        loaded = self._flight.value
        return loaded.name if loaded is not None else "(lazy agent)"

    @property
    def has_output(self) -> bool:
        """The loaded agent's ``has_output``; ``has_output=`` (provisional) before that."""
        loaded = self._flight.value
        return loaded.has_output if loaded is not None else self._has_output

    @property
    def loaded(self) -> RunnableAgent | None:
        """The loaded agent, or None before the first successful load."""
        return self._flight.value

    @property
    def loads(self) -> int:
        """How many times the loader was called."""
        return self._flight.loads

    async def load(self) -> RunnableAgent:
        """Load now (or wait for the load in flight) and return the agent."""
        return await self._flight.get()

    def open_run(
        self,
        input: AgentInput,
        *,
        context: AgentRunContext | None = None,
        durable: Any = None,
        abort_on: Any = None,
    ) -> LoadingRun:
        """Start a run; use as ``async with agent.open_run(...) as run:``.

        ``input`` and ``context`` are snapshotted now. Entering the block loads the
        definition (or waits for the load in flight) and gives the loaded agent's run:
        the same :class:`~operative.ActiveRun` its ``open_run`` gives, before its loop
        starts. Until then the returned :class:`LoadingRun` answers ``snapshot()``
        (``starting``), follows the run with ``subscribe_snapshot()`` and
        ``snapshots()``, and takes ``abort()``: aborted before the definition loaded,
        the agent is never run, and the block gets a run that ended aborted at once.
        A loader that fails (:class:`~operative.errors.AsyncDefinitionLoadError`), or
        produces no agent (:class:`~operative.errors.AgentContractError`), gives a run
        that ended in ``"error"`` with that error.

        ``durable=`` (an :class:`operative.durable.Durable`) is passed to the loaded
        agent's ``open_run``, as for an :class:`~operative.Agent`. A run that
        :func:`~operative.durable.recover` resumes raises a failed load from the
        ``async with`` instead, and leaves the run as it was (claimable again once its
        lease expires).

        ``abort_on=`` (or ``context.abort_on``; the keyword wins) aborts the run once it
        is set or returns: before the agent loaded, the agent is never run; after, the
        loaded agent's run watches it.
        """
        check_trio()  # the loading state reads trio's clock: refuse asyncio first
        snapshot = _snapshot_input(input)
        if context is not None and not isinstance(context, AgentRunContext):
            raise InvalidArgument(
                f"context= takes an AgentRunContext, got {type(context).__name__}"
            )
        if abort_on is not None:
            context = attrs.evolve(context or AgentRunContext(), abort_on=abort_on)
        wait: Callable[[], Awaitable[object]] | None = None
        if context is not None and context.abort_on is not None:
            wait = abort_waiter(context.abort_on)
        run_id = context.run_id if context is not None else None
        recovering = False
        if durable is not None:
            durable_id, recovering = _durable_routing(durable)
            if durable_id is not None:
                if run_id not in (None, durable_id):
                    raise InvalidArgument(
                        f"context.run_id={run_id!r} and the durable run id {durable_id!r} "
                        "differ: give one of them"
                    )
                run_id = durable_id
        fired: trio.Event | None = None
        if context is not None:
            if wait is not None:
                # Watched once, by the loading run; the loaded agent's run watches this
                # event instead.
                fired = trio.Event()
                context = attrs.evolve(context, abort_on=fired)
            else:
                context = attrs.evolve(context)
        return LoadingRun(
            self,
            snapshot,
            context,
            durable=durable,
            run_id=run_id,
            recovering=recovering,
            abort_on=None if wait is None or fired is None else (wait, fired),
            clock=self._clock,
        )

    async def run(
        self, input: AgentInput, *, context: AgentRunContext | None = None, abort_on: Any = None
    ) -> RunResult:
        """Run to the end and return the result (``abort_on=``: see :meth:`open_run`).

        Raises:
            RunFailed: the run ended with ``finish_reason == "error"`` (a loader that
                failed too); its :class:`RunResult` is ``.result``, the error that ended
                it ``__cause__``, as for :meth:`Agent.run <operative.Agent.run>`.
            CleanupError: the run ended but its clean-up did not finish.
        """
        async with self.open_run(input, context=context, abort_on=abort_on) as run:
            result: RunResult = await run.result()
        if result.finish_reason is FinishReason.ERROR:
            raise RunFailed.of(result) from result.error
        return result


async def resolve_agent(agent: RunnableAgent) -> RunnableAgent:
    """The agent whose definition runs use: ``agent.load()``, followed through lazy
    agents that load lazy agents, down to one that is its own (an :class:`Agent`).

    An agent without ``load`` is returned as it is. Hosts that need a definition before
    a run (a session's instructions, recovery) call this on whatever agent they got.

    Raises:
        AsyncDefinitionLoadError: a loader raised (nothing is cached; the next call
            loads again).
        AgentContractError: a load produced something that is not an agent.
    """
    for _ in range(_MAX_LAZY_DEPTH):
        load = getattr(agent, "load", None)
        if not callable(load):
            await trio.lowlevel.checkpoint()
            return agent
        loaded: object = await load()
        if loaded is agent:
            return agent
        if not isinstance(loaded, RunnableAgent):
            raise AgentContractError(
                f"{type(agent).__name__}.load() returned {type(loaded).__name__}, which is "
                "not a RunnableAgent"
            )
        agent = loaded
    raise AgentContractError(
        f"lazy agents load lazy agents more than {_MAX_LAZY_DEPTH} levels deep (a cycle?)"
    )


_MAX_LAZY_DEPTH = 32


def _durable_routing(durable: object) -> tuple[str | None, bool]:
    """``durable``'s run id, and whether it resumes a recovered run; checks its type."""
    if getattr(durable, "option", None) != "durable" or not callable(
        getattr(durable, "extension", None)
    ):
        raise InvalidArgument(
            "durable= takes operative.durable.Durable(backend, run_id=...), over "
            f"SqliteDurable(path) or PostgresDurable(dsn); got {type(durable).__name__}"
        )
    run_id = getattr(durable, "run_id", None)
    return run_id, bool(getattr(durable, "resumes_journal", False))


def create_lazy_agent(
    loader: Callable[[], Any],
    *,
    has_output: bool = False,
    name: str | None = None,
    runtime: Callable[[], float] | None = None,
) -> LazyAgent:
    """An agent whose definition ``loader()`` produces on first run.

    ``loader`` takes no arguments and returns (sync) or resolves to (async) a
    :class:`~operative.RunnableAgent`, or a module whose ``default`` is one. The first
    successful load is cached and shared by concurrent runs. ``has_output`` is the
    provisional answer to ``agent.has_output`` until the definition is loaded; after
    that ``agent.has_output`` reads the loaded agent's (a live attribute).

    ``runtime`` is the clock (a callable returning seconds) a run's snapshots read
    ``started_at`` and ``observed_at`` from while its definition loads (the
    specification's ``runtime``); the loaded agent's run has its own. Default: trio's.
    """
    _check_loader(loader)
    if runtime is not None and not callable(runtime):
        raise InvalidArgument(
            f"runtime= takes a clock, a callable returning seconds, got {runtime!r}"
        )
    if not isinstance(has_output, bool):
        raise InvalidArgument(f"has_output= takes a bool, got {has_output!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgument(f"name= takes a non-empty str, got {name!r}")
    return LazyAgent(loader, has_output=has_output, name=name, runtime=runtime)


def _snapshot_input(input: object) -> AgentInput:
    if isinstance(input, str | ConversationHistory):
        return input  # immutable already
    if isinstance(input, Sequence):
        return tuple(input)
    raise InvalidArgument(
        "agent input takes a str, a list of content parts or a ConversationHistory, "
        f"got {type(input).__name__}"
    )
