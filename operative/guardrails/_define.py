"""What a guardrail is: a named check and the verdict it returns.

Three kinds, by what they look at and when they run:

- :class:`InputGuardrail` looks at the run's input (the last user message) before the
  first generate call, or — with ``run_in_parallel=True`` — while it runs.
- :class:`OutputGuardrail` looks at the final answer before the run accepts it.
- :class:`ToolGuardrail` looks at a tool call before it executes (``on_call``) and at its
  result afterwards (``on_result``).

A check is a plain or async callable returning a :class:`Verdict` (``allow()``,
``rewrite(value)``, ``trip(reason)``) or ``None`` (allow).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import attrs

from .._core._errors import InvalidArgument, OperativeError

if TYPE_CHECKING:
    from .._core._extension import Extension

__all__ = [
    "GuardrailTripped",
    "Guardrails",
    "InputGuardrail",
    "OutputGuardrail",
    "ToolGuardrail",
    "Verdict",
    "allow",
    "collect_guardrails",
    "rewrite",
    "trip",
]


class GuardrailTripped(OperativeError):
    """A guardrail tripped: the run ended with ``finish_reason == "error"`` and this error.

    ``guardrail`` names it, ``kind`` says what it checked (``"input"``, ``"output"``,
    ``"tool-call"`` or ``"tool-result"``), ``reason`` is what it said and ``call_id`` the
    tool call it stopped (tool guardrails). Nothing is retried: change the input, or the
    guardrail if it tripped wrongly.
    """

    def __init__(
        self, guardrail: str, kind: str, reason: str, *, call_id: str | None = None
    ) -> None:
        where = f" on call {call_id!r}" if call_id is not None else ""
        super().__init__(f"guardrail {guardrail!r} ({kind}{where}) tripped: {reason}")
        self.guardrail = guardrail
        self.kind = kind
        self.reason = reason
        self.call_id = call_id

    def __reduce__(self) -> Any:
        return (_rebuild_guardrail_tripped, (self.guardrail, self.kind, self.reason, self.call_id))


def _rebuild_guardrail_tripped(
    guardrail: str, kind: str, reason: str, call_id: str | None
) -> GuardrailTripped:
    return GuardrailTripped(guardrail, kind, reason, call_id=call_id)


Action = Literal["allow", "rewrite", "trip"]


@attrs.frozen(kw_only=True)
class Verdict:
    """What a guardrail decided. Build it with :func:`allow`, :func:`rewrite`, :func:`trip`."""

    action: Action
    """``"allow"``, ``"rewrite"`` or ``"trip"``."""
    value: Any = None
    """The replacement, for a rewrite (text, arguments, a ToolCall or a ToolResult)."""
    reason: str = ""
    """Why the guardrail tripped (or rewrote): it reaches the event and the error."""


_ALLOW = Verdict(action="allow")


def allow() -> Verdict:
    """Let the input, answer, call or result through unchanged (same as returning None)."""
    return _ALLOW


def rewrite(value: Any, *, reason: str = "") -> Verdict:
    """Let it through, replaced by ``value``.

    ``value`` is the new input text (input guardrails), the new final answer (output
    guardrails), the call's new arguments — a mapping — or a ``ToolCall`` with the same
    id and name (``on_call``), or a ``ToolResult`` for the same call (``on_result``).
    """
    return Verdict(action="rewrite", value=value, reason=reason)


def trip(reason: str) -> Verdict:
    """Stop the run: it ends with ``finish_reason == "error"`` and a ``GuardrailTripped``."""
    if not isinstance(reason, str) or not reason:
        raise InvalidArgument(f"trip() takes a non-empty reason (a str), got {reason!r}")
    return Verdict(action="trip", reason=reason)


def _name_of(check: Any) -> str:
    name = getattr(check, "__name__", None)
    if name == "<lambda>":
        raise InvalidArgument(
            "a guardrail made from a lambda needs a name= (the name is what a trip reports)"
        )
    return name if isinstance(name, str) and name else type(check).__name__


def _check_callable(what: str) -> Callable[[Any, Any, Any], None]:
    def validate(instance: Any, attribute: Any, value: Any) -> None:
        if value is not None and not callable(value):
            raise InvalidArgument(f"{what} takes a callable (plain or async), got {value!r}")

    return validate


def _check_name(instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"a guardrail's name= takes a non-empty str, got {value!r}")


class _Item:
    """What ``guardrails=`` items share: the option they stand for, and how a list of
    them becomes the run's feature (see ``_core._extension``)."""

    option: ClassVar[str] = "guardrails"

    def collect_feature(self, items: Any) -> Guardrails | None:
        return collect_guardrails(items)


@attrs.frozen
class InputGuardrail(_Item):
    """Checks the run's input: ``check(text, context) -> Verdict | None``.

    ``text`` is the text of the input conversation's last user message ("" when there is
    none); ``context`` is a :class:`~operative.hooks.HookContext` (run id, agent name,
    conversation snapshot, request context). A rewrite replaces that message's content.

    With ``run_in_parallel=True`` the check races the first generate call instead of
    delaying it: if it trips, the generate call is cancelled and its answer discarded;
    tools of the first answer and the final answer wait until it has passed. Such a
    guardrail cannot rewrite (the model has already seen the input).
    """

    check: Callable[..., Any] = attrs.field(validator=_check_callable("InputGuardrail(check)"))
    name: str = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda self: _name_of(self.check), takes_self=True),
        validator=_check_name,
    )
    run_in_parallel: bool = attrs.field(kw_only=True, default=False)

    def __attrs_post_init__(self) -> None:
        if self.check is None:
            raise InvalidArgument("InputGuardrail takes a check callable")
        if not isinstance(self.run_in_parallel, bool):
            raise InvalidArgument(
                f"run_in_parallel= takes a bool, got {type(self.run_in_parallel).__name__}"
            )


@attrs.frozen
class OutputGuardrail(_Item):
    """Checks the final answer before the run accepts it: ``check(content, context)``.

    Runs once, when a stop condition holds or the run reaches ``maximum_steps``. A
    rewrite replaces the run's ``content`` and the last assistant message of the
    transcript (with an ``output=`` type, the new answer is validated again).
    """

    check: Callable[..., Any] = attrs.field(validator=_check_callable("OutputGuardrail(check)"))
    name: str = attrs.field(
        kw_only=True,
        default=attrs.Factory(lambda self: _name_of(self.check), takes_self=True),
        validator=_check_name,
    )

    def __attrs_post_init__(self) -> None:
        if self.check is None:
            raise InvalidArgument("OutputGuardrail takes a check callable")


def _tool_names(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset((value,))
    names = frozenset(value)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidArgument(
            f"ToolGuardrail(tools=) takes tool names (a str or a list of str), got {value!r}"
        )
    return names


@attrs.frozen
class ToolGuardrail(_Item):
    """Checks tool calls before they execute and their results after.

    ``on_call(call, context)`` sees the :class:`~operative.ToolCall` before the tool
    runs; a rewrite gives new arguments (a mapping, or a ToolCall with the same id and
    name); a trip stops the run and the call gets a ``denied`` result.
    ``on_result(call, result, context)`` sees the :class:`~operative.ToolResult`; a
    rewrite replaces it (same ``call_id``); a trip stops the run and the model never
    sees the result (the call gets an ``error`` result saying it was withheld).

    ``tools`` limits the guardrail to those tool names (default: every tool).
    """

    on_call: Callable[..., Any] | None = attrs.field(
        default=None, validator=_check_callable("ToolGuardrail(on_call)")
    )
    on_result: Callable[..., Any] | None = attrs.field(
        default=None, kw_only=True, validator=_check_callable("ToolGuardrail(on_result=)")
    )
    name: str = attrs.field(
        kw_only=True,
        default=attrs.Factory(
            lambda self: _name_of(self.on_call if self.on_call is not None else self.on_result),
            takes_self=True,
        ),
        validator=_check_name,
    )
    tools: frozenset[str] | None = attrs.field(kw_only=True, default=None, converter=_tool_names)

    def __attrs_post_init__(self) -> None:
        if self.on_call is None and self.on_result is None:
            raise InvalidArgument("ToolGuardrail needs on_call=, on_result= or both")

    def applies_to(self, tool_name: str) -> bool:
        """True when this guardrail checks calls of ``tool_name``."""
        return self.tools is None or tool_name in self.tools


AnyGuardrail = InputGuardrail | OutputGuardrail | ToolGuardrail


@attrs.frozen(kw_only=True)
class Guardrails:
    """A run's guardrails, sorted by kind (built once by :func:`collect_guardrails`):
    the feature ``guardrails=`` attaches."""

    option: ClassVar[str] = "guardrails"

    input: tuple[InputGuardrail, ...] = ()
    """Input guardrails that run before the first generate call, in order."""
    parallel_input: tuple[InputGuardrail, ...] = ()
    """Input guardrails that race the first generate call."""
    output: tuple[OutputGuardrail, ...] = ()
    tool_call: tuple[ToolGuardrail, ...] = ()
    """Tool guardrails with an ``on_call`` check."""
    tool_result: tuple[ToolGuardrail, ...] = ()
    """Tool guardrails with an ``on_result`` check."""

    def extension(self, config: Any) -> Extension:
        """The run's guardrail runner (one per run)."""
        from ._runner import GuardrailRunner

        return GuardrailRunner(self)


def collect_guardrails(guardrails: Any) -> Guardrails | None:
    """Validate ``guardrails=`` (one guardrail or a list); None when there are none."""
    if isinstance(guardrails, InputGuardrail | OutputGuardrail | ToolGuardrail):
        items: Iterable[Any] = (guardrails,)
    elif isinstance(guardrails, list | tuple):
        items = guardrails
    else:
        raise InvalidArgument(
            "guardrails= takes an InputGuardrail, OutputGuardrail or ToolGuardrail, or a "
            f"list of them, got {type(guardrails).__name__}"
        )
    sequential: list[InputGuardrail] = []
    parallel: list[InputGuardrail] = []
    output: list[OutputGuardrail] = []
    tool_call: list[ToolGuardrail] = []
    tool_result: list[ToolGuardrail] = []
    for item in items:
        if isinstance(item, InputGuardrail):
            (parallel if item.run_in_parallel else sequential).append(item)
        elif isinstance(item, OutputGuardrail):
            output.append(item)
        elif isinstance(item, ToolGuardrail):
            if item.on_call is not None:
                tool_call.append(item)
            if item.on_result is not None:
                tool_result.append(item)
        else:
            raise InvalidArgument(
                f"guardrails= got {item!r}: wrap a check in InputGuardrail(check), "
                "OutputGuardrail(check) or ToolGuardrail(on_call=..., on_result=...)"
            )
    if not (sequential or parallel or output or tool_call or tool_result):
        return None
    return Guardrails(
        input=tuple(sequential),
        parallel_input=tuple(parallel),
        output=tuple(output),
        tool_call=tuple(tool_call),
        tool_result=tuple(tool_result),
    )
