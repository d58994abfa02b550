"""Hypothesis strategies for property-testing agents (needs ``hypothesis``).

- :func:`messages`, :func:`histories`: transcripts the runtime accepts.
- :func:`tool_calls`: calls whose arguments are valid (or invalid) against a tool's
  JSON Schema.
- :func:`usages`: token usage with a consistent total.
- :func:`fault_plans`: fault plans (which call fails,
  stalls, hangs or times out, and when the run is aborted) for
  :func:`~operative.testing.faulty_tool` and :func:`~operative.testing.faulty_generate`.
- :func:`model_scripts` with :func:`scripted_model` and :func:`scripted_tools`: what a
  model says step by step, played against tools that follow the script's behaviours and
  count their executions (so a test can check that no call ran twice);
  :func:`interruptions` says where an abort or a caller's cancellation lands.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import msgspec
import trio
from hypothesis import strategies as st

from .._core._errors import InvalidArgument
from .._core._model import GenerateRequest, GenerateResponse
from .._core._types import ToolCall, ToolOutcome, ToolResult, ToolSpec, Usage
from ..conversation import (
    ContentPart,
    ConversationHistory,
    FilePart,
    ImagePart,
    Message,
    TextPart,
    new_message_id,
    tool_result_message,
)
from ..tools import Tool, ToolContext, tool
from ._faults import Fault, FaultPlan, InjectedError
from ._schema_values import SchemaValues, json_types_of
from ._scripted import ScriptedModel

__all__ = [
    "Interruption",
    "ScriptedCall",
    "Step",
    "ToolBehaviour",
    "fault_plans",
    "histories",
    "interruptions",
    "json_values",
    "messages",
    "model_scripts",
    "scripted_model",
    "scripted_tools",
    "tool_calls",
    "usages",
]

ToolBehaviour = Literal["ok", "fail", "slow", "hang", "bad-json", "bad-args", "unknown", "sync"]
"""``sync``: a call of a sync tool, run in a worker thread (abandoned if it overruns)."""


@attrs.frozen
class ScriptedCall:
    """One tool call in a script and how it behaves."""

    behaviour: ToolBehaviour
    seconds: float = 0.0


@attrs.frozen
class Step:
    """One model response: an answer, calls, a generate error or a hang."""

    kind: Literal["answer", "calls", "error", "hang"]
    calls: tuple[ScriptedCall, ...] = ()
    usage: Usage | None = None
    text: str = ""


@attrs.frozen
class Interruption:
    """Where the run is interrupted, at ``at`` s: ``abort()``, cancelling the caller, or
    ``KeyboardInterrupt`` raised in the block running the run (Ctrl-C: a shutdown)."""

    kind: Literal["none", "abort", "cancel", "interrupt"]
    at: float = 0.0


def usages() -> st.SearchStrategy[Usage]:
    """Usage values with a consistent total."""
    return st.builds(Usage.of, prompt=st.integers(0, 10_000), completion=st.integers(0, 10_000))


_calls = st.builds(
    ScriptedCall,
    behaviour=st.sampled_from(
        ["ok", "fail", "slow", "hang", "bad-json", "bad-args", "unknown", "sync"]
    ),
    seconds=st.sampled_from([0.0, 0.5, 3.0, 30.0]),
)

_steps = st.one_of(
    st.builds(Step, kind=st.just("answer"), usage=st.none() | usages(), text=st.text(max_size=20)),
    st.builds(
        Step,
        kind=st.just("calls"),
        calls=st.lists(_calls, min_size=1, max_size=4).map(tuple),
        usage=st.none() | usages(),
    ),
    st.builds(Step, kind=st.sampled_from(["error", "hang"])),
)


def model_scripts(max_steps: int = 8) -> st.SearchStrategy[list[Step]]:
    """Scripts of model responses: answers, tool calls, errors and hangs."""
    return st.lists(_steps, min_size=1, max_size=max_steps)


def interruptions() -> st.SearchStrategy[Interruption]:
    """No interruption, or an abort, a caller cancellation or a ``KeyboardInterrupt``
    in the block at some virtual time."""
    return st.one_of(
        st.just(Interruption("none")),
        st.builds(
            Interruption,
            kind=st.sampled_from(["abort", "cancel", "interrupt"]),
            at=st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0, 100.0]),
        ),
    )


def scripted_model(script: list[Step], *, think: float = 1.0) -> ScriptedModel:
    """A model that plays ``script`` (each call takes ``think`` s of virtual time).

    Past the end of the script it answers ``"done"``.
    """

    async def generate(request: GenerateRequest) -> GenerateResponse:
        await trio.sleep(think)
        index = request.step - 1
        if index >= len(script):
            return GenerateResponse(content="done")
        step = script[index]
        if step.kind == "hang":
            await trio.sleep_forever()
        if step.kind == "error":
            raise RuntimeError(f"scripted failure at step {request.step}")
        if step.kind == "answer":
            return GenerateResponse(content=step.text, usage=step.usage)
        calls = tuple(_tool_call(call, f"s{request.step}c{i}") for i, call in enumerate(step.calls))
        return GenerateResponse(tool_calls=calls, usage=step.usage)

    return ScriptedModel(generate)


def _tool_call(call: ScriptedCall, call_id: str) -> ToolCall:
    behaviour = call.behaviour
    if behaviour == "bad-json":
        return ToolCall(id=call_id, name="work", arguments='{"seconds": ')
    if behaviour == "bad-args":
        return ToolCall(id=call_id, name="work", arguments={"seconds": "soon"})
    if behaviour == "unknown":
        return ToolCall(id=call_id, name="no_such_tool", arguments={})
    if behaviour == "fail":
        return ToolCall(id=call_id, name="fail", arguments={})
    if behaviour == "hang":
        return ToolCall(id=call_id, name="hang", arguments={})
    if behaviour == "sync":
        return ToolCall(id=call_id, name="compute", arguments={"n": 3})
    seconds = call.seconds if behaviour == "slow" else 0.0
    return ToolCall(id=call_id, name="work", arguments={"seconds": seconds})


def scripted_tools(executions: dict[str, int]) -> Mapping[str, Tool]:
    """The tools a script calls; each execution is counted in ``executions`` by call id."""

    @tool
    async def work(seconds: float, ctx: ToolContext) -> str:
        """Work for ``seconds``."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        await trio.sleep(seconds)
        return "worked"

    @tool
    async def fail(ctx: ToolContext) -> str:
        """Always fails."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        raise RuntimeError("scripted tool failure")

    @tool
    async def hang(ctx: ToolContext) -> str:
        """Never returns."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    @tool(timeout=5)
    def compute(n: int, ctx: ToolContext) -> int:
        """Compute, in a worker thread (a sync tool)."""
        executions[ctx.call_id] = executions.get(ctx.call_id, 0) + 1
        return n * n

    return {"work": work, "fail": fail, "hang": hang, "compute": compute}


# -- JSON, messages and histories ------------------------------------------------------

_short_text = st.text(max_size=12)


def json_values(*, max_leaves: int = 6) -> st.SearchStrategy[Any]:
    """JSON-encodable values: scalars, lists and string-keyed objects."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**53), max_value=2**53)
        | st.floats(allow_nan=False, allow_infinity=False)
        | _short_text
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(_short_text, children, max_size=3)
        ),
        max_leaves=max_leaves,
    )


_content_parts: st.SearchStrategy[ContentPart] = st.one_of(
    st.builds(TextPart, text=_short_text),
    st.builds(ImagePart, url=st.just("https://example.com/a.png")),
    st.builds(ImagePart, data=st.binary(min_size=1, max_size=8), media_type=st.just("image/png")),
    st.builds(FilePart, file_id=st.text(min_size=1, max_size=8)),
)
_contents: st.SearchStrategy[str | tuple[ContentPart, ...]] = _short_text | st.lists(
    _content_parts, min_size=1, max_size=3
).map(tuple)
_call_numbers = itertools.count()
_OUTCOMES: tuple[ToolOutcome, ...] = ("success", "error", "denied", "action-required", "cancelled")
Role = Literal["system", "user", "assistant"]


def _call_id() -> str:
    return f"call_{next(_call_numbers)}"


_history_calls = st.builds(
    ToolCall,
    id=st.builds(_call_id),
    name=st.sampled_from(["search", "fetch", "write_file"]),
    arguments=st.dictionaries(_short_text, json_values(max_leaves=3), max_size=3),
)


def messages(
    *, roles: Sequence[Role] = ("system", "user", "assistant"), tool_calls: bool = False
) -> st.SearchStrategy[Message]:
    """Single messages of the given roles, with text or multi-modal content.

    With ``tool_calls=True`` assistant messages may carry calls (which then dangle
    until a tool message answers them: the runtime answers dangling calls with a
    ``cancelled`` result when a run starts).
    """
    if not roles or any(role not in ("system", "user", "assistant") for role in roles):
        raise InvalidArgument(
            f"roles are 'system', 'user' and 'assistant', not {roles!r} (tool messages "
            "come with their calls: use histories())"
        )

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        role = draw(st.sampled_from(list(roles)))
        calls = (
            tuple(draw(st.lists(_history_calls, max_size=3)))
            if tool_calls and role == "assistant"
            else ()
        )
        return Message(id=new_message_id(), role=role, content=draw(_contents), tool_calls=calls)

    return build()


@st.composite
def _result_for(draw: st.DrawFn, call: ToolCall) -> ToolResult:
    outcome = draw(st.sampled_from(_OUTCOMES))
    if outcome == "success":
        return ToolResult(
            call_id=call.id, tool_name=call.name, outcome=outcome, value=draw(json_values())
        )
    return ToolResult(
        call_id=call.id, tool_name=call.name, outcome=outcome, error=draw(_short_text)
    )


@st.composite
def _turn(draw: st.DrawFn, complete: bool) -> list[Message]:
    message = draw(messages(tool_calls=True))
    calls = list(message.tool_calls)
    answered = calls if complete else [c for c in calls if draw(st.booleans())]
    if len(answered) > 1:
        answered = list(draw(st.permutations(answered)))
    return [message, *(tool_result_message(draw(_result_for(c))) for c in answered)]


def histories(
    *, complete: bool = True, max_turns: int = 6
) -> st.SearchStrategy[ConversationHistory]:
    """Transcripts of up to ``max_turns`` turns; assistant turns may call tools.

    With ``complete=True`` every call has its result (in any order after the call);
    otherwise some calls dangle, as after a crash (runs repair them when they start).
    """

    @st.composite
    def build(draw: st.DrawFn) -> ConversationHistory:
        turns = draw(st.lists(_turn(complete), max_size=max_turns))
        return ConversationHistory(messages=tuple(m for turn in turns for m in turn))

    return build()


# -- tool calls from a schema ----------------------------------------------------------


class _DrawSource:
    """The schema generator's choices, drawn from hypothesis (so they shrink)."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def integer(self, low: int, high: int) -> int:
        return self._draw(st.integers(low, high))

    def real(self, low: float, high: float, *, exclude_low: bool, exclude_high: bool) -> float:
        return self._draw(
            st.floats(
                low,
                high,
                exclude_min=exclude_low,
                exclude_max=exclude_high,
                allow_nan=False,
                allow_infinity=False,
            )
        )

    def text(self, min_size: int, max_size: int) -> str:
        return self._draw(st.text(min_size=min_size, max_size=max_size))


_NOT_JSON = ('{"', "{", "not json", "", '{"a": 1,}')
_NOT_OBJECTS = ("[]", "1", '"text"', "null", "[{}]")
_WRONG_VALUES: tuple[Any, ...] = ("not-what-you-want", 7, 7.5, True, [], {}, None)


def tool_calls(
    schema: Tool | ToolSpec | Mapping[str, Any],
    *,
    name: str | None = None,
    valid: bool = True,
) -> st.SearchStrategy[ToolCall]:
    """Calls to one tool whose arguments match its JSON Schema, or break it.

    ``schema`` is a :class:`~operative.Tool`, a :class:`~operative.tools.ToolSpec` or a JSON
    Schema mapping (then ``name`` names the tool; default ``"tool"``). Arguments are
    drawn with the same generator as :class:`~operative.testing.ToolCallingModel`
    (``pattern`` is not honoured), sent as a mapping or as a JSON string.

    With ``valid=False`` each call breaks the schema one way: arguments that are not
    JSON, JSON that is not an object, a required property missing, a property of the
    wrong type, or a property the schema does not allow. The toolbox answers every such
    call with an ``error`` result the model can read, never an exception.
    """
    if isinstance(schema, Tool | ToolSpec):
        name = name or schema.name
        body: Mapping[str, Any] = (
            schema.input_schema if isinstance(schema, ToolSpec) else schema.spec.input_schema
        )
    elif isinstance(schema, Mapping):
        body = schema
        name = name or "tool"
    else:
        raise InvalidArgument(f"schema is a Tool, a ToolSpec or a JSON Schema, not {schema!r}")
    values = SchemaValues(body)
    tool_name = name
    ids = st.builds(_call_id)

    @st.composite
    def build(draw: st.DrawFn) -> ToolCall:
        arguments: Any = values.draw(_DrawSource(draw))
        if not valid:
            arguments = _break(draw, values, arguments)
        if isinstance(arguments, dict) and draw(st.booleans()):
            arguments = msgspec.json.encode(arguments).decode()
        return ToolCall(id=draw(ids), name=tool_name, arguments=arguments)

    return build()


def _break(draw: st.DrawFn, values: SchemaValues, arguments: Any) -> Any:
    root = values.resolve(values.schema)
    properties: Mapping[str, Any] = root.get("properties", {})
    required = [n for n in root.get("required", ()) if isinstance(arguments, dict)]
    ways = ["not-json", "not-object"]
    if required:
        ways.append("missing")
    typed = {}
    for prop, schema in properties.items():
        allowed = values.allowed_types(schema)
        if allowed is None:
            continue
        wrong = [v for v in _WRONG_VALUES if not json_types_of(v) & allowed]
        if wrong:
            typed[prop] = wrong
    if typed:
        ways.append("wrong-type")
    if root.get("additionalProperties") is False:
        ways.append("unknown")
    way = draw(st.sampled_from(ways))
    if way == "not-json":
        return draw(st.sampled_from(_NOT_JSON))
    if way == "not-object":
        return draw(st.sampled_from(_NOT_OBJECTS))
    broken = dict(arguments)
    if way == "missing":
        broken.pop(draw(st.sampled_from(required)), None)
    elif way == "wrong-type":
        prop = draw(st.sampled_from(sorted(typed)))
        broken[prop] = draw(st.sampled_from(typed[prop]))
    else:
        extra = draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in properties))
        broken[extra] = draw(json_values(max_leaves=2))
    return broken


# -- fault plans -----------------------------------------------------------------------

_FAULT_SECONDS = (0.5, 3.0, 30.0, 600.0)
_ABORT_TIMES = (0.0, 0.5, 1.0, 2.0, 5.0, 20.0, 100.0)


def _default_errors() -> st.SearchStrategy[BaseException]:
    return st.sampled_from(
        [InjectedError, RuntimeError, ConnectionError, ValueError, TimeoutError]
    ).map(lambda kind: kind("injected by a fault plan"))


def fault_plans(
    *,
    max_faults: int = 3,
    max_calls: int = 6,
    max_step: int = 6,
    call_ids: Sequence[str] = (),
    actions: Sequence[Literal["fail", "delay", "hang", "timeout"]] = (
        "fail",
        "delay",
        "hang",
        "timeout",
    ),
    errors: st.SearchStrategy[BaseException] | None = None,
    abort: bool = True,
) -> st.SearchStrategy[FaultPlan]:
    """Plans of up to ``max_faults`` faults and, with ``abort``, maybe an abort time.

    Each fault hits one call index below ``max_calls``, one step up to ``max_step``,
    one of ``call_ids`` (when given) or every call. ``fail`` raises a fresh error from
    ``errors`` (default: :class:`InjectedError`, ``RuntimeError``, ``ConnectionError``,
    ``ValueError`` or ``TimeoutError``). A plan may hang a call forever: bound the run
    with ``abort_at``, a tool ``timeout`` or ``trio.fail_after``.
    """
    if max_faults < 0 or max_calls < 1 or max_step < 1:
        raise InvalidArgument("max_faults >= 0, max_calls >= 1 and max_step >= 1")
    error_strategy = errors if errors is not None else _default_errors()
    selectors: list[st.SearchStrategy[dict[str, Any]]] = [
        st.integers(0, max_calls - 1).map(lambda i: {"call": i}),
        st.integers(1, max_step).map(lambda s: {"step": s}),
        st.just({}),
    ]
    if call_ids:
        selectors.append(st.sampled_from(list(call_ids)).map(lambda c: {"call_id": c}))

    @st.composite
    def fault(draw: st.DrawFn) -> Fault:
        where = draw(st.one_of(selectors))
        action = draw(st.sampled_from(list(actions)))
        if action == "fail":
            return Fault.fail(draw(error_strategy), **where)
        if action == "hang":
            return Fault.hang(**where)
        seconds = draw(st.sampled_from(_FAULT_SECONDS))
        if action == "delay":
            return Fault.delay(seconds, **where)
        return Fault.timeout(seconds, **where)

    abort_at = st.none() | st.sampled_from(_ABORT_TIMES) if abort else st.none()
    return st.builds(
        FaultPlan,
        faults=st.lists(fault(), max_size=max_faults).map(tuple),
        abort_at=abort_at,
    )
