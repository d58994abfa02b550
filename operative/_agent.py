"""``create_agent``: a reusable definition whose runs are ``open_run`` with its options."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, Unpack, runtime_checkable

import attrs
import msgspec
import trio

from ._core._errors import InvalidArgument, RunFailed
from ._core._event_hub import Listener, Overflow
from ._core._model import GenerateFunction, open_model_string
from ._core._open_run import open_configured, run_configured
from ._core._options import (
    _OPTION_NAMES,
    DEFAULT_MAXIMUM_STEPS,
    RunConfig,
    config_for_run,
    configure_run,
    make_toolbox,
    unknown_options,
)
from ._core._results import RunResult
from ._core._run import ActiveRun
from ._core._run_block import RunBlock, as_itself, check_generate, check_trio
from ._core._types import FinishReason
from .conditions import StopCondition, no_tool_calls
from .conversation import ContentPart, Conversation, ConversationHistory, Message, new_message_id
from .conversation._tool_results import check_history
from .liveness import LivenessSnapshot, SnapshotObserver, SnapshotStream, SnapshotSubscription
from .tools import Toolbox
from .tools._source import split_tool_sources

if TYPE_CHECKING:
    from ._agent_context import AgentRunContext
    from ._core._run_options import RunOptions

__all__ = ["Agent", "AgentInput", "AgentRunContext", "RunHandle", "RunnableAgent", "create_agent"]

AgentInput = str | Sequence[ContentPart] | ConversationHistory
"""A fresh user message (text or multi-modal parts), or a history to continue."""


@runtime_checkable
class RunHandle(Protocol):
    """What every run handle offers (an ``ActiveRun``, a lazy agent's run, ...)."""

    @property
    def run_id(self) -> str: ...

    def abort(self, reason: str = "aborted") -> None: ...

    def add_listener(self, type: str, listener: Listener) -> Callable[[], None]: ...

    def once(self, type: str, listener: Listener) -> Callable[[], None]: ...

    def remove_listener(self, type: str, listener: Listener) -> None: ...

    def events(
        self, *types: str, capacity: int = 256, overflow: Overflow = "block"
    ) -> AsyncIterator[Any]: ...

    def snapshot(self) -> LivenessSnapshot: ...

    def subscribe_snapshot(self, observer: SnapshotObserver) -> SnapshotSubscription: ...

    def snapshots(self, *, capacity: int = 16) -> SnapshotStream: ...

    async def result(self) -> RunResult: ...

    async def closed(self) -> None: ...

    async def aclose(self) -> None: ...

    async def unwrap(self) -> RunResult: ...

    async def output(self) -> Any: ...


@runtime_checkable
class RunnableAgent(Protocol):
    """What lazy agents and multi-agent patterns need from an agent."""

    @property
    def name(self) -> str: ...

    @property
    def has_output(self) -> bool: ...

    async def run(
        self, input: AgentInput, *, context: AgentRunContext | None = None
    ) -> RunResult: ...

    def open_run(
        self, input: AgentInput, *, context: AgentRunContext | None = None
    ) -> AbstractAsyncContextManager[RunHandle]: ...


@attrs.frozen(kw_only=True)
class Agent:
    """An agent definition. Reusable and immutable: every run gets its own state."""

    generate: GenerateFunction
    toolbox: Toolbox
    name: str = "(agent)"
    instructions: str | None = None
    stop_when: tuple[StopCondition, ...] = ()
    maximum_steps: int = DEFAULT_MAXIMUM_STEPS
    options: Mapping[str, Any] = attrs.Factory(dict)
    _template: RunConfig | None = attrs.field(default=None, init=False, eq=False, repr=False)
    """Every run's configuration but its id, validated once by :func:`create_agent`
    (``None`` for an agent built otherwise, or whose runs need per-run options)."""

    @property
    def has_output(self) -> bool:
        """True when runs validate a structured ``output``."""
        return self.options.get("output") is not None

    def _conversation(self, input: AgentInput) -> Conversation:
        if input.__class__ is not str:  # a str (the common case) skips the ABC checks
            if isinstance(input, ConversationHistory):
                # Snapshot: the caller's history object is never touched, and
                # instructions are not re-appended (the history carries its own system
                # context).
                return Conversation.from_history(input)
            if not isinstance(input, Sequence):
                raise InvalidArgument(
                    "agent input takes a str, a list of content parts or a "
                    f"ConversationHistory, got {type(input).__name__} (to share a live "
                    "Conversation, use open_run)"
                )
        conversation = Conversation()
        if self.instructions:
            conversation.append_system_message(self.instructions)
        if input.__class__ is str:
            # What append_user_message does for a str, without its checks.
            conversation._append_built(Message(id=new_message_id(), role="user", content=input))
        else:
            conversation.append_user_message(input)
        return conversation

    def open_run(
        self,
        input: AgentInput,
        *,
        context: AgentRunContext | None = None,
        durable: Any = None,
        abort_on: Any = None,
    ) -> AbstractAsyncContextManager[ActiveRun]:
        """Start a run of this agent; use as ``async with agent.open_run(...) as run:``.

        ``durable=`` (an :class:`operative.durable.Durable`) routes this run through a
        durable engine, overriding any the agent was defined with. ``abort_on=`` (a
        ``trio.Event``, an awaitable or an async function) aborts the run once it is set
        or returns; it overrides ``context.abort_on``. The input is checked here, when
        the block is made.
        """
        return RunBlock(open_configured(*self._configured(input, context, durable, abort_on)))

    def _configured(
        self, input: AgentInput, context: AgentRunContext | None, durable: Any, abort_on: Any
    ) -> tuple[RunConfig, Conversation]:
        """A run's configuration and conversation: the agent's, validated when it was
        defined, with a run id of its own; or, with per-run options, validated now."""
        template = self._template
        if template is None or context is not None or durable is not None or abort_on is not None:
            return configure_run(**self._run_options(input, context, durable, abort_on))
        conversation = self._conversation(input)
        if isinstance(input, ConversationHistory):
            check_history(conversation._messages)
        return config_for_run(template), conversation

    def _run_options(
        self, input: AgentInput, context: AgentRunContext | None, durable: Any, abort_on: Any
    ) -> dict[str, Any]:
        """What ``open_run`` is given for a run of this agent."""
        conversation = self._conversation(input)
        options = dict(self.options)
        if durable is not None:
            options["durable"] = durable
        options.setdefault("agent_name", self.name)
        if context is not None:
            if context.agent_name is not None:
                options["agent_name"] = context.agent_name
            if context.trace_context is not None:
                options["trace_context"] = context.trace_context
            if context.principal is not None:
                options["principal"] = context.principal
            if context.run_id is not None:
                options["run_id"] = context.run_id
            if context.abort_on is not None:
                options["abort_on"] = context.abort_on
        if abort_on is not None:
            options["abort_on"] = abort_on
        return {
            "generate": self.generate,
            "conversation": conversation,
            "toolbox": self.toolbox,
            "tools": None,
            "stop_when": self.stop_when,
            "maximum_steps": self.maximum_steps,
            **options,
        }

    async def run(
        self, input: AgentInput, *, context: AgentRunContext | None = None, abort_on: Any = None
    ) -> RunResult:
        """Run to the end and return the result: ``await agent.run(input)`` is what
        ``async with agent.open_run(input) as run`` with an empty block, then
        ``await run.result()``, does (``abort_on=``: see :meth:`open_run`). The same
        run, driven in this task (there is no block to run beside it).

        Raises:
            RunFailed: the run ended with ``finish_reason == "error"``; its
                :class:`RunResult` is ``.result``, the error that ended it ``__cause__``.
                (``run.result()`` in an ``open_run`` block returns such a result.)
            CleanupError: the run ended but its clean-up did not finish.
        """
        configured = self._configured(input, context, None, abort_on)
        check_trio()
        try:
            result = await run_configured(*configured)
        except BaseExceptionGroup as group:
            raise as_itself(group) from None
        if result.finish_reason is _ERROR:
            raise RunFailed.of(result) from result.error
        return result

    async def load(self) -> Agent:
        """This agent, whose definition is loaded already.

        A lazy agent's ``load()`` loads its definition; hosts that need the definition
        before a run (a session stores the instructions first, recovery loads before it
        resumes) await ``load()`` on whatever agent they were given.
        """
        await trio.lowlevel.checkpoint()
        return self


_ERROR = FinishReason.ERROR


def create_agent(
    *,
    generate: GenerateFunction | None = None,
    model: str | None = None,
    instructions: str | None = None,
    tools: Sequence[Any] | Mapping[str, Any] | None = None,
    toolbox: Toolbox | None = None,
    permissions: Any = None,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    maximum_steps: int = DEFAULT_MAXIMUM_STEPS,
    name: str = "(agent)",
    **options: Unpack[RunOptions],
) -> Agent:
    """Define an agent. ``stop_when`` defaults to ``stop_when.no_tool_calls()``.

    The model is ``generate=`` (a generate function) or ``model=`` (a model string such
    as ``"anthropic:claude-haiku-4-5"``; see :func:`operative.providers.open_model`),
    not both. With ``model=`` each run opens the provider's client when it starts and
    closes it once it has ended; the string is checked, and the provider's SDK looked
    for, here.
    ``tools=`` (a list, or a name-keyed mapping whose keys are canonical) and
    ``toolbox=`` are mutually exclusive; ``permissions=`` goes with ``tools=``.
    ``on_approval=`` with ``tools=`` asks the handler before every call of a tool that
    needs approval (``@tool(needs_approval=...)``) or is declared ``mutates=True``
    (``ApprovalPolicy("on-mutation")``); with ``toolbox=`` the toolbox must have an
    approval policy or a tool that needs approval.
    Any other :func:`open_run` option (hooks, ``output``, ``settings``, ...) applies to
    every run of the agent.
    """
    if not _OPTION_NAMES.issuperset(options):
        raise unknown_options("create_agent()", options, _CREATE_AGENT_PARAMETERS)
    if model is not None:
        if generate is not None:
            raise InvalidArgument(
                "generate= and model= are mutually exclusive: pass a generate function or "
                "a model string such as 'anthropic:claude-haiku-4-5', not both"
            )
        generate = open_model_string(model)
    elif generate is None:
        raise InvalidArgument(
            "create_agent() needs a model: generate= (a generate function) or model= (a "
            "model string such as 'anthropic:claude-haiku-4-5')"
        )
    else:
        check_generate(generate)
    if instructions is not None and not isinstance(instructions, str):
        raise InvalidArgument(f"instructions= takes a str, got {type(instructions).__name__}")
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"name= takes a non-empty str, got {name!r}")
    if "run_id" in options:
        raise InvalidArgument("run_id= is per run: pass it to open_run, not to an agent")
    if "abort_on" in options:
        raise InvalidArgument(
            "abort_on= is per run: pass it to agent.open_run(..., abort_on=...) or "
            "agent.run(..., abort_on=...), not to an agent"
        )
    if getattr(options.get("durable"), "run_id", None) is not None:
        raise InvalidArgument(
            "an agent's durable= must not name a run_id (every run needs its own): pass "
            "Durable(run_id=...) to agent.open_run(..., durable=...) instead"
        )
    tools, sources = split_tool_sources(tools)
    if sources:
        # Read when each run starts (an MCP server's tools may change between runs).
        options["tool_sources"] = (*options.get("tool_sources", ()), *sources)
    built = make_toolbox(toolbox, tools, permissions, on_approval=options.get("on_approval"))
    conditions: tuple[StopCondition, ...]
    if stop_when is None:
        conditions = (no_tool_calls(),)
    elif isinstance(stop_when, Sequence):
        conditions = tuple(stop_when)
    else:
        conditions = (stop_when,)
    # Validate every option now, once, so a bad agent fails where it is defined (a
    # steered agent's runs name their run_id per run, through AgentRunContext).
    checked: dict[str, Any] = dict(options)
    if checked.get("steering") is not None:
        checked["run_id"] = "(validated per run)"
    validated, _ = configure_run(
        generate=generate,
        conversation=Conversation(),
        toolbox=built,
        tools=None,
        stop_when=conditions,
        maximum_steps=maximum_steps,
        **{"agent_name": name, **checked},
    )
    agent = Agent(
        generate=generate,
        toolbox=built,
        name=name,
        instructions=instructions,
        stop_when=conditions,
        maximum_steps=maximum_steps,
        options=dict(options),
    )
    if _PER_RUN.isdisjoint(options):
        # ``agent.run`` reuses this configuration, with a run id of its own each run
        # (and the instrumentation installed when it starts, unless one was given).
        installed = validated.feature("instrumentation")
        if "instrumentation" not in options and installed is not None:
            features = tuple(f for f in validated.features if f is not installed)
            validated = msgspec.structs.replace(validated, features=features)
        object.__setattr__(agent, "_template", validated)
    return agent


_CREATE_AGENT_PARAMETERS = (
    "generate",
    "model",
    "instructions",
    "tools",
    "toolbox",
    "permissions",
    "stop_when",
    "maximum_steps",
    "name",
)
"""``create_agent``'s own parameters (the run options are ``_OPTION_NAMES``)."""

_PER_RUN = frozenset({"durable", "steering"})
"""Options whose runs are configured run by run (each run validates its options)."""


def __getattr__(name: str) -> object:
    # A per-run context is only built by callers that pass one (hosts, parent agents,
    # lazy agents): its class loads on first use, not with ``import operative``.
    if name == "AgentRunContext":
        from ._agent_context import AgentRunContext

        return AgentRunContext
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
