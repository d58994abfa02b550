"""What ``open_run(...)`` returns: the run's block, to enter with ``async with``.

Used any other way (awaited, a run's attribute read off it, entered with a plain
``with`` or twice) it says how to use it. Leaving it, a ``KeyboardInterrupt`` or
``SystemExit`` that reached one of the run's tasks goes on as itself, not in a group.
A run started outside Trio (from asyncio) is refused with what to do, and so is a
``generate`` that is not an async function.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, NoReturn, TypeVar

import sniffio
import trio

from ._errors import InvalidArgument, TrioRequiredError

__all__ = ["RunBlock", "as_itself", "check_generate", "check_trio"]

Handle = TypeVar("Handle")


class RunBlock(AbstractAsyncContextManager[Handle], Generic[Handle]):
    """``async with`` it gives the run's handle; leaving it waits for the run."""

    __slots__ = ("_block", "_entered")

    def __init__(self, block: AbstractAsyncContextManager[Handle]) -> None:
        self._block = block
        self._entered = False

    async def __aenter__(self) -> Handle:
        if self._entered:
            raise InvalidArgument(
                "this open_run(...) block was entered already: a run is entered once; "
                "call agent.open_run(...) again for another run"
            )
        self._entered = True
        check_trio()
        try:
            return await self._block.__aenter__()
        except BaseExceptionGroup as group:
            raise as_itself(group) from None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        try:
            return await self._block.__aexit__(exc_type, exc, traceback)
        except BaseExceptionGroup as group:
            raise as_itself(group) from None

    def __await__(self) -> NoReturn:
        raise InvalidArgument(
            "open_run(...) is not awaited: use async with agent.open_run(...) as run: "
            "(and await run.result() in the block), or result = await agent.run(...) to "
            "run to the end"
        )

    def __aiter__(self) -> NoReturn:
        raise InvalidArgument(
            "open_run(...) is not iterated: use async with agent.open_run(...) as run: "
            "and async for event in run.events() in the block"
        )

    def __enter__(self) -> NoReturn:
        raise InvalidArgument(
            "open_run(...) is entered with async with, not with: use async with "
            "agent.open_run(...) as run:"
        )

    def __exit__(self, *exc_info: object) -> None:
        return None  # never reached: __enter__ raises

    def __getattr__(self, name: str) -> NoReturn:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"open_run(...) has no {name!r}: it makes a block, and the run is what the "
            f"block gives: use async with agent.open_run(...) as run: then run.{name}"
        )

    def __repr__(self) -> str:
        return "<open_run block: use async with agent.open_run(...) as run:>"


def as_itself(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """``group``, or the one ``KeyboardInterrupt``/``SystemExit`` it holds (a Ctrl-C that
    reached one of a run's tasks leaves the run as itself); cancellations beside it are
    dropped, as the interrupt goes on past every cancel scope anyway."""
    shutdown: BaseException | None = None
    for leaf in _leaves(group):
        if isinstance(leaf, KeyboardInterrupt | SystemExit) and shutdown is None:
            shutdown = leaf
        elif not isinstance(leaf, trio.Cancelled):
            return group
    return group if shutdown is None else shutdown


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found


def check_trio() -> None:
    """Refuse a run started outside Trio (from asyncio), before anything touches Trio."""
    try:
        library: str | None = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        library = None
    if library != "trio":
        started = f"from {library}" if library else "outside Trio"
        raise TrioRequiredError(
            f"operative runs under Trio, and this run was started {started}: start the "
            "program with trio.run(main) instead of asyncio.run(main()); from an asyncio "
            "program, call operative through trio-asyncio (trio_asyncio.trio_as_aio) or "
            "in a thread of its own with trio.run"
        )


def check_generate(generate: Any) -> None:
    """Refuse a ``generate`` that is not callable, or is a plain (sync) function: the
    loop awaits what it returns, so it must be an ``async def`` (or an object whose
    ``__call__`` is one)."""
    if not callable(generate):
        raise InvalidArgument(
            "generate= takes an async function GenerateRequest -> GenerateResponse "
            f"(async def generate(request): ...), got {generate!r}"
        )
    function = _sync_function(generate)
    if function is not None:
        name = getattr(function, "__qualname__", None) or repr(function)
        raise InvalidArgument(
            f"generate= takes an async function, and {name} is a plain function: define "
            "it with async def (async def generate(request): ... return "
            "GenerateResponse(...)); the loop awaits every call"
        )


def _sync_function(generate: Any) -> Any:
    """The plain function ``generate`` is (or whose ``__call__`` it runs), or ``None``
    when it is async, or a callable whose kind cannot be told."""
    if inspect.iscoroutinefunction(generate):
        return None  # an async function, or a callable marked as one (AsyncMock)
    target = generate
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        if isinstance(target, type):
            return None
        call = getattr(type(target), "__call__", None)  # noqa: B004
        if not inspect.isfunction(call):
            return None  # a builtin or C-implemented callable: no way to tell
        target = call
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        return None
    unwrapped = inspect.unwrap(target)
    if unwrapped is not target and inspect.iscoroutinefunction(unwrapped):
        return None  # a decorator's wrapper around an async function
    return target
