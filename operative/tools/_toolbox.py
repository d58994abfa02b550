"""``Toolbox``: the tools a run may call, and how each call settles into a result."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

import attrs
import msgspec
import trio

from .._core._errors import ApprovalError, InvalidArgument, ToolDefinitionError
from .._core._types import PendingApproval, RequestContext, ToolCall, ToolResult, ToolSpec
from ._context import EMPTY_CONTEXT, ExecutionContext, ToolContext
from ._method import ToolMethod
from ._places import CallPlaces, timed_out
from ._settle import describe, failed, settled
from ._tool import ArgumentError, Tool

if TYPE_CHECKING:
    # Loaded on first use: a toolbox that never parks a call needs none of them.
    from ..kvstore._protocol import ConditionalTextValueStore
    from ._approvals import ApprovalDecider, ApprovalPolicy, Approvals
    from ._permissions import PermissionPolicy

__all__ = ["Toolbox", "approving_toolbox"]


def wall_clock() -> float:
    """Seconds since the epoch (approvals cross processes, so not trio's clock)."""
    return time.time()


def _collect(tools: Iterable[Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    collected: dict[str, Tool] = {}
    if isinstance(tools, Mapping):
        items: Iterable[tuple[object, Any]] = tools.items()
    elif isinstance(tools, Tool | str | bytes):
        raise InvalidArgument("Toolbox takes a list of tools or a name-keyed mapping")
    else:
        items = ((getattr(t, "name", None), t) for t in tools)
    for key, item in items:
        if not isinstance(item, Tool):
            if isinstance(item, ToolMethod):
                raise InvalidArgument(
                    f"{item!r} is a method tool taken from its class: pass the tool of one "
                    f"object, obj.{item.attribute} (its self is that object)"
                )
            raise InvalidArgument(
                f"{item!r} is not a Tool; decorate the function with @tool or wrap it in Tool(fn)"
            )
        if isinstance(tools, Mapping):
            if not isinstance(key, str):
                raise InvalidArgument(f"tool mapping keys are names (str), not {key!r}")
            entry = item.renamed(key)
        else:
            entry = item
        if entry.name in collected:
            raise ToolDefinitionError(
                f"two tools are named {entry.name!r}; give one of them another name="
            )
        collected[entry.name] = entry
    return collected


@attrs.frozen(init=False, eq=False)
class Toolbox:
    """The tools offered to a model, and the one place their calls are executed.

    ``tools`` is a list of :class:`Tool` or a name-keyed mapping (the key is the name the
    model sees). :meth:`execute` never raises for a bad call: unknown tools, malformed or
    invalid arguments, failures, timeouts and unencodable results all become typed
    :class:`ToolResult`\\ s the model can read.

    Approvals: calls of a tool declared ``needs_approval`` (where its callable says so),
    and calls ``approval_policy`` selects, do not run; they settle as
    ``action-required`` with a signed :class:`PendingApproval`. The policy adds calls
    to wait, never exempts a tool's own. Resume it with :meth:`resume_approval` (or
    refuse it with :meth:`deny_approval`), in this or a later request. Without
    ``approval_secret`` a random secret is drawn per toolbox, so its approvals resume
    only on this same instance (all an in-process ``on_approval=`` handler needs); to
    resume in other processes give every toolbox the same secret (32+ bytes) and the
    same durable ``approval_state`` store. A mode policy refuses unversioned tools it
    could park when the toolbox is built.
    """

    tools: Mapping[str, Tool]
    approval_policy: ApprovalPolicy | ApprovalDecider | None
    permissions: PermissionPolicy | None
    max_concurrency: int | None
    _specs: tuple[ToolSpec, ...]
    _unknown_hint: str
    _refusals: Mapping[str, str]
    _parked: frozenset[str]
    _per_call: frozenset[str]
    _decide: ApprovalDecider | None
    _approval_secret: str | bytes | None
    _approval_state: ConditionalTextValueStore | None
    _approval_ttl: float
    _clock: Callable[[], float]
    _made_approvals: Approvals | None
    _limiter: trio.CapacityLimiter | None
    _gives_context: bool

    def __init__(
        self,
        tools: Iterable[Tool] | Mapping[str, Tool] = (),
        *,
        approval_policy: ApprovalPolicy | ApprovalDecider | None = None,
        approval_secret: str | bytes | None = None,
        approval_state: ConditionalTextValueStore | None = None,
        approval_ttl: float = 24 * 3600.0,
        permissions: PermissionPolicy | None = None,
        max_concurrency: int | None = None,
        clock: Callable[[], float] = wall_clock,
    ) -> None:
        collected = _collect(tools)
        if max_concurrency is not None and (
            not isinstance(max_concurrency, int) or max_concurrency < 1
        ):
            raise InvalidArgument(
                f"max_concurrency must be None or an int >= 1, not {max_concurrency!r}"
            )
        if not approval_ttl > 0:
            raise InvalidArgument(f"approval_ttl must be seconds > 0, not {approval_ttl!r}")
        parked: frozenset[str] = frozenset()
        decide: ApprovalDecider | None = None
        if approval_policy is not None and _is_policy(approval_policy):
            parked = frozenset(n for n, t in collected.items() if approval_policy.requires(t))
            unversioned = sorted(n for n in parked if collected[n].version is None)
            if unversioned:
                raise ToolDefinitionError(
                    f"approval policy {approval_policy.mode!r} can park calls to "
                    f"{', '.join(map(repr, unversioned))}, which have no version; give "
                    "them one (e.g. @tool(version='1')) so stale approvals can be refused"
                )
        elif approval_policy is not None:
            if not callable(approval_policy):
                raise InvalidArgument(
                    "approval_policy is an ApprovalPolicy or a callable "
                    f"(call, tool, request_context) -> bool, not {approval_policy!r}"
                )
            decide = approval_policy
        # A tool's own needs_approval holds whatever the policy says.
        parked |= {n for n, t in collected.items() if t.needs_approval is True}
        per_call = frozenset(n for n, t in collected.items() if t._approval_check is not None)
        refusals: dict[str, str] = {}
        if permissions is not None:
            for name, item in collected.items():
                refusal = permissions.refusal(item)
                if refusal is not None:
                    refusals[name] = refusal
        names = ", ".join(sorted(collected)) or "(none)"
        approval_ttl = float(approval_ttl)
        approvals: Approvals | None = None
        if approval_secret is not None:  # checked now, not at the first approval
            approvals = _new_approvals(approval_secret, approval_state, approval_ttl, clock)
        self.__attrs_init__(
            tools=collected,
            approval_policy=approval_policy,
            permissions=permissions,
            max_concurrency=max_concurrency,
            specs=tuple(t.spec for t in collected.values()),
            unknown_hint=f"Available tools: {names}.",
            refusals=refusals,
            parked=parked,
            per_call=per_call - parked,
            decide=decide,
            approval_secret=approval_secret,
            approval_state=approval_state,
            approval_ttl=approval_ttl,
            clock=clock,
            made_approvals=approvals,
            limiter=trio.CapacityLimiter(max_concurrency) if max_concurrency else None,
            gives_context=any(t._wants_context for t in collected.values()) or bool(per_call),
        )

    def extended(self, tools: Iterable[Tool]) -> Toolbox:
        """This toolbox with ``tools`` added (what a tool source such as an MCP server
        offers when a run starts): the same approval policy, permissions and limits, and
        the same approvals (secret and state), so a signed approval resumes on either.

        Raises:
            ToolDefinitionError: an added tool has the name of one already here.
        """
        extra = list(tools)
        if not extra:
            return self
        extended = Toolbox(
            [*self.tools.values(), *extra],
            approval_policy=self.approval_policy,
            permissions=self.permissions,
            max_concurrency=self.max_concurrency,
        )
        object.__setattr__(extended, "_made_approvals", self._approvals)
        object.__setattr__(extended, "_clock", self._clock)
        object.__setattr__(extended, "_limiter", self._limiter)
        return extended

    @property
    def gives_context(self) -> bool:
        """True when a call may be handed a :class:`ToolContext` (a tool that declares
        one, or a per-call ``needs_approval`` check), and through it the run: a run whose
        tools can reach it can be aborted from inside, so it needs its cancel scope."""
        return self._gives_context

    @property
    def _approvals(self) -> Approvals:
        """The signed approvals (secret, state store) of this toolbox, made on first use:
        a toolbox whose calls never park never loads the approvals machinery."""
        approvals = self._made_approvals
        if approvals is None:
            approvals = _new_approvals(
                self._approval_secret, self._approval_state, self._approval_ttl, self._clock
            )
            object.__setattr__(self, "_made_approvals", approvals)
        return approvals

    def __repr__(self) -> str:
        return f"<Toolbox {', '.join(self.tools) or '(empty)'}>"

    def specs(self) -> tuple[ToolSpec, ...]:
        """What the model is offered: the same tuple of the same specs on every call."""
        return self._specs

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or ``None``."""
        return self.tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self.tools

    def __len__(self) -> int:
        return len(self.tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools.values())

    async def execute(self, call: ToolCall, context: ExecutionContext | None = None) -> ToolResult:
        """Run one tool call and settle it as a :class:`ToolResult`.

        Never raises for anything the call or the tool did; only cancellation (and other
        ``BaseException``\\ s) propagate. It is a cancellation point on entry, and yields
        to the scheduler when the tool does (a tool that never waits gives its step no
        scheduling round).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        tool = self.tools.get(call.name)
        if tool is None:
            await trio.lowlevel.checkpoint()
            return ToolResult(
                call_id=call.id,
                tool_name=call.name,
                outcome="error",
                error=f"Unknown tool {call.name!r}. {self._unknown_hint}",
            )
        if self._refusals:
            refusal = self._refusals.get(tool.name)
            if refusal is not None:
                await trio.lowlevel.checkpoint()
                return ToolResult(
                    call_id=call.id, tool_name=tool.name, outcome="denied", error=refusal
                )
        try:
            arguments = tool.parse_arguments(call.arguments)
        except ArgumentError as exc:
            await trio.lowlevel.checkpoint()
            return ToolResult(call_id=call.id, tool_name=tool.name, outcome="error", error=str(exc))
        if context is None:
            context = EMPTY_CONTEXT
        request = context.request_context
        deadline = request.deadline if request is not None else None
        if deadline is not None and self._clock() >= deadline:
            await trio.lowlevel.checkpoint()
            return ToolResult(
                call_id=call.id,
                tool_name=tool.name,
                outcome="denied",
                error=f"The request this call to {tool.name!r} acts for passed its "
                "deadline; the call did not run.",
            )
        if self._parked or self._per_call or self._decide is not None:
            parked = await self._park_if_needed(tool, call, context)
            if parked is not None:
                return parked
        return await self._run(tool, call, arguments, context)

    async def _park_if_needed(
        self, tool: Tool, call: ToolCall, context: ExecutionContext
    ) -> ToolResult | None:
        request = context.request_context
        try:
            needed = tool.name in self._parked
            if not needed and tool.name in self._per_call:
                needed = await tool.call_needs_approval(
                    call.arguments, _tool_context(tool, call, context)
                )
            if not needed and self._decide is not None:
                needed = await self._approvals.needs_approval(self._decide, call, tool, request)
            if not needed:
                return None
            raw = call.arguments
            arguments = msgspec.json.decode(raw) if isinstance(raw, str) else dict(raw)
            approval = self._approvals.issue(call, tool, arguments, request)
        except Exception as exc:
            await trio.lowlevel.checkpoint()
            return ToolResult(
                call_id=call.id,
                tool_name=tool.name,
                outcome="error",
                error=f"The call to {tool.name!r} could not be sent for approval.",
                detail=describe(exc),
            )
        await trio.lowlevel.checkpoint()
        return ToolResult(
            call_id=call.id,
            tool_name=tool.name,
            outcome="action-required",
            error=(
                f"This call to {tool.name!r} is waiting for a person's approval "
                f"(approval {approval.approval_id}); it has not run yet."
            ),
            pending_approval=approval,
        )

    async def _run(
        self,
        tool: Tool,
        call: ToolCall,
        arguments: Any,
        context: ExecutionContext,
        before_invoke: Callable[[], Awaitable[None]] | None = None,
    ) -> ToolResult:
        tool_context = _tool_context(tool, call, context) if tool._wants_context else None
        timeout = tool.timeout
        try:
            if (
                self._limiter is None
                and tool._limiter is None
                and before_invoke is None
                and tool._thread_call is None
            ):
                if timeout is None:
                    value = await tool._invoke(arguments, tool_context)
                else:
                    with trio.move_on_after(timeout) as scope:
                        value = await tool._invoke(arguments, tool_context)
                    if scope.cancelled_caught:
                        return timed_out(tool, call)
            else:
                places = CallPlaces(tool.name, call.id, self._limiter, tool._limiter)
                await places.acquire()
                try:
                    if before_invoke is not None:
                        # Runs once the call holds its places: it starts right after.
                        await before_invoke()
                    with trio.move_on_after(timeout if timeout is not None else math.inf) as scope:
                        if tool._thread_call is None:
                            value = await tool._invoke(arguments, tool_context)
                        else:
                            # The thread takes the call's places over and gives them
                            # back when it really ends, also if it is abandoned.
                            value = await trio.to_thread.run_sync(
                                tool._thread_call(arguments, tool_context),
                                abandon_on_cancel=True,
                                # A CapacityLimiter-like object, as trio documents.
                                limiter=places,  # type: ignore[arg-type]
                                thread_name=f"operative tool {tool.name} {call.id}",
                            )
                finally:
                    places.release()
                if scope.cancelled_caught:
                    return timed_out(tool, call, places)
        except ApprovalError:
            raise
        except Exception as exc:
            return failed(tool, call, exc)
        return settled(tool, call, value)

    async def resume_approval(
        self,
        approval: PendingApproval,
        *,
        request_context: RequestContext | None = None,
        context: ExecutionContext | None = None,
    ) -> ToolResult:
        """Run a parked call a person approved, exactly once.

        ``request_context`` is the resuming request's own (fresh deadline, same identity
        as bound into the approval; defaults to ``context.request_context``). Returns
        the call's result, which replaces the ``action-required`` result in the
        transcript (:func:`operative.conversation.resolve_tool_result`).

        Raises:
            ApprovalError: the approval was altered, expired, already used, is resumed
                for another identity, or its tool is gone or changed version. A rejected
                approval is not consumed.
            ApprovalStateError: the approval-state store failed while the approval was
                being used up (``reason`` ``"state-unavailable"``): the call did not run
                and the approval is still usable; resume it again once the store answers.
        """
        if request_context is None and context is not None:
            request_context = context.request_context
        checked = self._approvals.verify(approval, request_context)
        tool = self.tools.get(checked.tool_name)
        if tool is None:
            raise ApprovalError(
                f"approval {checked.approval_id} is for tool {checked.tool_name!r}, which "
                f"this toolbox does not have. {self._unknown_hint}",
                reason="unknown-tool",
            )
        if tool.version != checked.tool_version:
            raise ApprovalError(
                f"approval {checked.approval_id} was given for version "
                f"{checked.tool_version!r} of tool {tool.name!r}, which is now "
                f"{tool.version!r}; the model has to ask again",
                reason="version-changed",
            )
        call = ToolCall(id=checked.call_id, name=tool.name, arguments=checked.arguments)
        refusal = self._refusals.get(tool.name)
        if refusal is not None:
            await trio.lowlevel.checkpoint()
            return ToolResult(call_id=call.id, tool_name=tool.name, outcome="denied", error=refusal)
        if context is None:
            context = ExecutionContext(
                run_id=checked.run_id, agent_id=checked.agent_id, request_context=request_context
            )
        else:
            context = msgspec.structs.replace(context, request_context=request_context)
        try:
            arguments = tool.parse_arguments(call.arguments)
        except ArgumentError as exc:
            await self._approvals.consume(checked, "approved")
            return ToolResult(call_id=call.id, tool_name=tool.name, outcome="error", error=str(exc))

        async def claim() -> None:
            # Consumed only when the call can start at once (its capacity is held), so a
            # resume cancelled while waiting leaves the approval usable.
            await self._approvals.consume_or_release(checked, "approved")

        return await self._run(tool, call, arguments, context, before_invoke=claim)

    async def deny_approval(
        self,
        approval: PendingApproval,
        *,
        reason: str = "",
        request_context: RequestContext | None = None,
    ) -> ToolResult:
        """Refuse a parked call: it never runs, and the result says a person denied it.

        Raises:
            ApprovalError: as :meth:`resume_approval` (except for tool changes, which do
                not matter to a refusal).
            ApprovalStateError: as :meth:`resume_approval`: the store failed, the call
                is not denied yet, and the approval can be denied (or resumed) again.
        """
        checked = self._approvals.verify(approval, request_context)
        await self._approvals.consume(checked, "denied")
        why = f": {reason}" if reason else "."
        return ToolResult(
            call_id=checked.call_id,
            tool_name=checked.tool_name,
            outcome="denied",
            error=f"A person denied this call to {checked.tool_name!r}{why}",
        )


def _is_policy(value: object) -> TypeGuard[ApprovalPolicy]:
    from ._approvals import ApprovalPolicy

    return isinstance(value, ApprovalPolicy)


def _new_approvals(
    secret: str | bytes | None,
    state: ConditionalTextValueStore | None,
    ttl: float,
    clock: Callable[[], float],
) -> Approvals:
    from ..kvstore._memory import MemoryStore
    from ._approvals import Approvals

    return Approvals(
        secret, state=state if state is not None else MemoryStore(), ttl=ttl, clock=clock
    )


def _tool_context(tool: Tool, call: ToolCall, context: ExecutionContext) -> ToolContext:
    return ToolContext(
        call_id=call.id,
        tool_name=tool.name,
        run_id=context.run_id,
        step=context.step,
        agent_id=context.agent_id,
        request_context=context.request_context,
        execution=context,
    )


def approving_toolbox(toolbox: Toolbox) -> Toolbox:
    """``toolbox``'s tools under ``ApprovalPolicy("on-mutation")``: what ``tools=`` become
    next to an ``on_approval=`` handler, so the handler is asked before every call of a
    tool declared ``mutates=True`` instead of being silently ignored.

    Raises:
        ToolDefinitionError: a tool declared ``mutates=True`` has no version (an
            approval binds it).
    """
    unversioned = sorted(t.name for t in toolbox if t.mutates is True and t.version is None)
    if unversioned:
        raise ToolDefinitionError(
            "on_approval= asks a person before every call of a tool declared "
            "mutates=True, and an approval binds the tool's version: give "
            f"{', '.join(map(repr, unversioned))} a version (e.g. @tool(version='1', "
            "mutates=True)), or declare @tool(needs_approval=True), which derives one"
        )
    from ._approvals import ApprovalPolicy

    return Toolbox(
        toolbox.tools,
        approval_policy=ApprovalPolicy(mode="on-mutation"),
        permissions=toolbox.permissions,
        max_concurrency=toolbox.max_concurrency,
    )
