"""Hooks: typed extension points of the loop, in a priority-ordered registry.

Each hook may be a plain function or an ``async`` one. Hooks of one kind run one after
another, highest ``priority`` first (ties in registration order); a hook that returns a
value replaces what the next hook (and the loop) sees, ``None`` leaves it as it is.

| hook | called with | may return |
| --- | --- | --- |
| ``select_tools`` | the offered ``ToolSpec``s, the request | the specs (or names) to offer |
| ``prepare_step`` | the ``GenerateRequest`` about to be sent | a replacement request |
| ``validate_response`` | the response, the request | a replacement; raise to reject |
| ``before_tool_execution`` | the step's ``ToolCall``s, a ``HookContext`` | the calls to run |
| ``validate_tool_result`` | one ``ToolResult``, a ``HookContext`` | a replacement result |
| ``after_tool_execution`` | the step's ``ToolResult``s, a ``HookContext`` | replacement results |
| ``on_step`` | the ``StepResult``, a ``HookContext`` | nothing |
| ``on_run_start`` | a ``HookContext`` | nothing |
| ``on_run_end`` | the ``RunResult`` | nothing |
| ``on_error`` | the exception, a ``HookContext`` | a final answer (``str``) to end well |
| ``on_maximum_steps`` | a ``HookContext`` | content that replaces the final answer |

A hook that raises ends the run with ``finish_reason == "error"``.

Beside the hooks of one run, :func:`on_run_created` tells a caller of every run made in
its task and the tasks it starts (what a test kit's recorder attaches with).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, overload

import msgspec

from ._core._errors import InvalidArgument
from ._core._model import GenerateRequest, GenerateResponse
from ._core._results import StepResult
from ._core._types import RequestContext, ToolCall, ToolResult, ToolSpec
from .conversation import ConversationHistory

if TYPE_CHECKING:
    from ._core._results import RunResult

__all__ = [
    "HOOK_NAMES",
    "HookContext",
    "HookName",
    "HookRegistry",
    "call_hook",
    "on_run_created",
]

_RUN_CREATED: ContextVar[tuple[Callable[[Any], object], ...]] = ContextVar(
    "operative_run_created", default=()
)
"""Who is told of each run made in this context (see :func:`on_run_created`)."""


def on_run_created(callback: Callable[[Any], object]) -> Callable[[], None]:
    """Call ``callback(run)`` with the ``ActiveRun`` of every run created from now on in
    this task and the tasks it starts, before the run starts (a listener attached then
    misses nothing). Returns what stops it. ``operative.testing.RunRecorder.capture_all``
    attaches its recorder this way.

    The callbacks live in a context variable, not in the process: a run made in
    another task tree is not seen.
    """
    _RUN_CREATED.set((*_RUN_CREATED.get(), callback))

    def stop() -> None:
        _RUN_CREATED.set(tuple(c for c in _RUN_CREATED.get() if c is not callback))

    return stop


def run_created_callbacks() -> tuple[Callable[[Any], object], ...]:
    """The callbacks :func:`on_run_created` registered in this context."""
    return _RUN_CREATED.get()


T = TypeVar("T")

HookName: TypeAlias = Literal[
    "select_tools",
    "prepare_step",
    "validate_response",
    "before_tool_execution",
    "validate_tool_result",
    "after_tool_execution",
    "on_step",
    "on_run_start",
    "on_run_end",
    "on_error",
    "on_maximum_steps",
]
HOOK_NAMES: frozenset[str] = frozenset(HookName.__args__)  # type: ignore[attr-defined]


class HookContext(msgspec.Struct, frozen=True, kw_only=True):
    """Where a hook is called from: the run, the step, the transcript so far."""

    run_id: str
    agent_name: str
    step: int
    conversation: ConversationHistory
    request_context: RequestContext | None = None
    principal: Any = None


MaybeAwaitable: TypeAlias = T | Awaitable[T]

SelectToolsHook: TypeAlias = Callable[
    [tuple[ToolSpec, ...], GenerateRequest], MaybeAwaitable[Sequence[ToolSpec | str] | None]
]
PrepareStepHook: TypeAlias = Callable[[GenerateRequest], MaybeAwaitable[GenerateRequest | None]]
ValidateResponseHook: TypeAlias = Callable[
    [GenerateResponse, GenerateRequest], MaybeAwaitable[GenerateResponse | None]
]
BeforeToolExecutionHook: TypeAlias = Callable[
    [tuple[ToolCall, ...], HookContext], MaybeAwaitable[Sequence[ToolCall] | None]
]
ValidateToolResultHook: TypeAlias = Callable[
    [ToolResult, HookContext], MaybeAwaitable[ToolResult | None]
]
AfterToolExecutionHook: TypeAlias = Callable[
    [tuple[ToolResult, ...], HookContext], MaybeAwaitable[Sequence[ToolResult] | None]
]
OnStepHook: TypeAlias = Callable[[StepResult, HookContext], MaybeAwaitable[None]]
OnRunStartHook: TypeAlias = Callable[[HookContext], MaybeAwaitable[None]]
OnRunEndHook: TypeAlias = Callable[["RunResult"], MaybeAwaitable[None]]
OnErrorHook: TypeAlias = Callable[[BaseException, HookContext], MaybeAwaitable[str | None]]
OnMaximumStepsHook: TypeAlias = Callable[[HookContext], MaybeAwaitable[str | None]]

AnyHook: TypeAlias = Callable[..., Any]


async def call_hook(hook: AnyHook, *args: Any) -> Any:
    """Call a sync or async hook and return its (awaited) value."""
    value = hook(*args)
    if inspect.isawaitable(value):
        value = await value
    return value


class HookRegistry:
    """Hooks by kind, highest priority first. Registration returns a remover."""

    __slots__ = ("_counter", "_entries", "_sorted")

    def __init__(self) -> None:
        self._entries: dict[str, list[tuple[int, int, AnyHook]]] = {}
        self._sorted: dict[str, tuple[AnyHook, ...]] = {}
        self._counter = itertools.count()

    @overload
    def add(
        self, name: Literal["select_tools"], hook: SelectToolsHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["prepare_step"], hook: PrepareStepHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["validate_response"], hook: ValidateResponseHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self,
        name: Literal["before_tool_execution"],
        hook: BeforeToolExecutionHook,
        *,
        priority: int = 0,
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self,
        name: Literal["validate_tool_result"],
        hook: ValidateToolResultHook,
        *,
        priority: int = 0,
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self,
        name: Literal["after_tool_execution"],
        hook: AfterToolExecutionHook,
        *,
        priority: int = 0,
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["on_step"], hook: OnStepHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["on_run_start"], hook: OnRunStartHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["on_run_end"], hook: OnRunEndHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["on_error"], hook: OnErrorHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    @overload
    def add(
        self, name: Literal["on_maximum_steps"], hook: OnMaximumStepsHook, *, priority: int = 0
    ) -> Callable[[], None]: ...
    def add(self, name: str, hook: AnyHook, *, priority: int = 0) -> Callable[[], None]:
        """Register ``hook`` under ``name``; returns a function that removes it."""
        if name not in HOOK_NAMES:
            raise InvalidArgument(
                f"unknown hook {name!r}; hooks are: {', '.join(sorted(HOOK_NAMES))}"
            )
        if not callable(hook):
            raise InvalidArgument(f"a {name} hook must be callable, got {hook!r}")
        if not isinstance(priority, int):
            raise InvalidArgument(f"priority must be an int, got {priority!r}")
        entry = (priority, next(self._counter), hook)
        self._entries.setdefault(name, []).append(entry)
        self._sorted.pop(name, None)

        def remove() -> None:
            entries = self._entries.get(name, [])
            if entry in entries:
                entries.remove(entry)
                self._sorted.pop(name, None)

        return remove

    def get(self, name: str) -> tuple[AnyHook, ...]:
        """The hooks registered under ``name``, in the order they run."""
        hooks = self._sorted.get(name)
        if hooks is None:
            entries = sorted(self._entries.get(name, ()), key=lambda e: (-e[0], e[1]))
            hooks = self._sorted[name] = tuple(e[2] for e in entries)
        return hooks

    def __bool__(self) -> bool:
        return any(self._entries.values())

    def copy(self) -> HookRegistry:
        """An independent registry with the same hooks."""
        clone = HookRegistry()
        for name, entries in self._entries.items():
            for priority, _, hook in sorted(entries, key=lambda e: e[1]):
                clone.add(name, hook, priority=priority)  # type: ignore[call-overload]
        return clone
