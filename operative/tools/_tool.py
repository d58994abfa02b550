"""``Tool`` and the ``@tool`` decorator: an async (or sync) function a model may call."""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
import sys
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias

import attrs
import msgspec
import trio

from .._core._errors import ToolDefinitionError
from .._core._types import ToolSpec
from ._context import ToolContext
from ._schema import check_tool_name, compile_schema, json_schema, signature_input

__all__ = [
    "ArgumentError",
    "NeedsApproval",
    "Tool",
    "ToolDescriptionWarning",
]

_SCALARS = frozenset({str, int, float, bool, type(None)})

NeedsApproval: TypeAlias = (
    bool
    | Callable[[dict[str, Any]], bool | Awaitable[bool]]
    | Callable[[dict[str, Any], ToolContext], bool | Awaitable[bool]]
)
"""What ``@tool(needs_approval=...)`` takes: a bool, or a callable deciding per call
from the call's arguments (and, if it takes a second parameter, its :class:`ToolContext`)."""

_ApprovalCheck: TypeAlias = Callable[[Mapping[str, Any] | str, ToolContext], Awaitable[bool]]


class ArgumentError(Exception):
    """Internal: a call's arguments did not parse or validate (message for the model)."""


class ToolDescriptionWarning(UserWarning):
    """A tool was defined with no description: no docstring and no ``description=``.

    The model is offered the tool with its name and schema only, so it has to guess
    when to call it. Give the function a docstring, or pass ``@tool(description=...)``
    (``description=""`` says on purpose that the tool has none, and does not warn).
    """


def _warn_no_description(name: str) -> None:
    """Warn, at the line that defined the tool, that tool ``name`` has no description."""
    warnings.warn(
        f"tool {name!r} has no description, so the model is offered it with none and "
        "must guess when to call it: give the function a docstring or pass "
        "@tool(description=...)",
        ToolDescriptionWarning,
        stacklevel=_caller_level(),
    )


_HERE = __name__.rsplit(".", 1)[0] + "."


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside ``operative.tools`` (who defined it)."""
    level = 2  # the caller of _warn_no_description
    frame = sys._getframe(2)
    while frame is not None and str(frame.f_globals.get("__name__", "")).startswith(_HERE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _is_async(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ counts
    return call is not None and inspect.iscoroutinefunction(call)


@attrs.frozen(init=False, eq=False)
class Tool:
    """A function a model may call, with the schema it is offered under.

    ``Tool(fn)`` derives the input from ``fn``'s signature (every parameter annotated;
    a parameter annotated :class:`ToolContext` is filled in by the toolbox, not the
    model). ``Tool(fn, input_type=T)`` validates the arguments as ``T`` (a
    ``msgspec.Struct``, attrs class, dataclass or TypedDict) and passes the value as
    ``fn``'s one non-context argument.

    Sync functions run in a worker thread (``trio.to_thread.run_sync`` with
    ``abandon_on_cancel=True``): a thread cannot be cancelled, so on timeout or abort
    the call is abandoned, the thread runs to its end, and its result is discarded. The
    model is told the call was abandoned and may still be running, a warning is logged
    (``operative.tools``), and the call keeps its ``max_concurrency`` places (the
    tool's and its toolbox's) until the thread really ends.

    ``input_schema=`` (a JSON Schema object) replaces the schema the model is shown, and
    is enforced: each call's arguments are checked against it with ``jsonschema``
    before they are converted, so the model reads an error result with the JSON path of
    whatever broke the schema (imported lazily, only by tools given a schema by hand).
    A ``$ref`` must point inside the schema (``#/$defs/...``): one that would be fetched
    (a URL, a file) is refused when the tool is defined, and nothing is ever fetched.

    ``timeout`` (seconds) bounds each call; the model then reads an error result saying
    the tool timed out. ``max_concurrency`` bounds how many calls of this tool run at
    once across every toolbox holding it. ``version`` is bound into signed approvals:
    change it whenever the tool's behaviour changes so stale approvals are refused.

    ``needs_approval=True`` makes every call wait for a person, in any toolbox (a
    toolbox's ``approval_policy`` can add calls to wait, never exempt one). A callable
    decides per call: it gets the call's validated arguments (a fresh ``dict``) and, if
    it takes a second parameter, the call's :class:`ToolContext`, and returns a bool (or
    an awaitable of one); if it raises, the call does not run. A tool that needs
    approval and has no ``version`` gets one derived from its name, description and
    input schema (``"auto-"`` and 16 hex digits), so an approval given for another
    shape of the tool is refused; pass ``version=`` to decide yourself.

    ``mutates`` has three states. ``mutates=True`` declares that a call changes the
    world: ``ApprovalPolicy("on-mutation")`` (and ``on_approval=``) asks a person first,
    and a :class:`PermissionPolicy` without ``allow_mutation`` refuses it.
    ``mutates=False`` declares that it does not: served over MCP it is the only state
    that says ``readOnlyHint: true``. Undeclared (``None``, the default), operative's own
    policies treat it as not mutating, but over MCP it is not read-only (MCP's default
    is a tool that may change the world), and neither is a tool that needs approval.
    """

    fn: Callable[..., Any]
    name: str
    description: str
    input_type: Any
    input_schema: dict[str, Any]
    output_type: Any
    version: str | None
    mutates: bool | None
    """Whether a call changes the world: True (declared to), False (declared not to),
    None (undeclared, the default). Approval and permission policies treat only True as
    mutating; served over MCP only False is read-only (see :class:`Tool`)."""
    idempotent: bool
    timeout: float | None
    max_concurrency: int | None
    needs_approval: NeedsApproval
    switch: Callable[[str], Any] | None
    """For a tool whose successful call switches the run's configuration (a handoff):
    given the call id, the :class:`~operative.extending.Switch` it asks for. A durable run rebuilt
    from its journal asks it again instead of running the call twice."""
    # Precomputed once so a call does no introspection.
    _spec: ToolSpec
    _decode_json: Callable[[str | bytes], Any]
    _convert: Callable[[Any], Any]
    _invoke: Callable[[Any, ToolContext | None], Awaitable[Any]]
    _thread_call: Callable[[Any, ToolContext | None], Callable[[], Any]] | None
    _wants_context: bool
    _limiter: trio.CapacityLimiter | None
    _given_input_type: Any
    _given_input_schema: Mapping[str, Any] | None
    _check_schema: Callable[[Any], None] | None
    _given_version: str | None
    _approval_check: _ApprovalCheck | None

    def __init__(
        self,
        fn: Callable[..., Any],
        /,
        *,
        name: str | None = None,
        description: str | None = None,
        input_type: Any = None,
        input_schema: Mapping[str, Any] | None = None,
        output_type: Any = None,
        version: str | None = None,
        mutates: bool | None = None,
        idempotent: bool = False,
        timeout: float | None = None,
        max_concurrency: int | None = None,
        needs_approval: NeedsApproval = False,
        switch: Callable[[str], Any] | None = None,
    ) -> None:
        from ._method import ToolMethod  # it builds on Tool (defined when a tool is)

        if isinstance(fn, Tool):
            fn = fn.fn  # another tool's function, defined anew with these options
        elif isinstance(fn, ToolMethod):
            raise ToolDefinitionError(
                f"{fn!r} is a method tool of a class: it is a tool once bound to an "
                "object (obj.method); Tool(fn) takes a function or a bound method"
            )
        if not callable(fn):
            raise ToolDefinitionError(f"a tool wraps a function, not {fn!r}")
        tool_name = check_tool_name(name if name is not None else getattr(fn, "__name__", ""))
        undescribed = description is None
        if description is None:
            description = inspect.cleandoc(getattr(fn, "__doc__", None) or "")
        if version is not None and (not isinstance(version, str) or not version):
            raise ToolDefinitionError(f"tool {tool_name!r}: version must be a non-empty str")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ToolDefinitionError(f"tool {tool_name!r}: timeout must be seconds > 0")
        if timeout is not None and math.isinf(timeout):
            timeout = None
        if max_concurrency is not None and (
            not isinstance(max_concurrency, int) or max_concurrency < 1
        ):
            raise ToolDefinitionError(f"tool {tool_name!r}: max_concurrency must be an int >= 1")

        signature = signature_input(fn, tool_name=tool_name, build_struct=input_type is None)
        context_parameter = signature.context_parameter
        is_async = _is_async(fn)
        if signature.struct is not None:
            target: Any = signature.struct
            invoke, thread_call = _keyword_invoker(
                fn, is_async, context_parameter, positional=signature.positional
            )
        else:
            target = input_type
            if len(signature.value_parameters) != 1:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: with input_type=, the function takes exactly one "
                    f"argument besides a ToolContext, not {signature.value_parameters!r}"
                )
            invoke, thread_call = _single_invoker(fn, is_async, context_parameter)
        decode_json, convert, native = _validators(target)
        check_schema: Callable[[Any], None] | None = None
        if input_schema is not None:
            schema = dict(input_schema)
            check_schema = _schema_checker(schema, tool_name)
        elif native:
            schema = json_schema(target, what=f"input of tool {tool_name!r}")
        else:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: msgspec cannot describe {target!r}; pass "
                "input_schema= (a JSON Schema object) alongside input_type="
            )
        if output_type is not None:
            json_schema(output_type, what=f"output of tool {tool_name!r}", object_only=False)
        approval_check = _approval_checker(needs_approval, tool_name)
        if undescribed and not description:
            _warn_no_description(tool_name)
        given_version = version
        if version is None and needs_approval is not False:
            version = derived_version(tool_name, description, schema)
        self.__attrs_init__(
            fn=fn,
            name=tool_name,
            description=description,
            input_type=target,
            input_schema=schema,
            output_type=output_type,
            version=version,
            mutates=None if mutates is None else bool(mutates),
            idempotent=bool(idempotent),
            timeout=timeout,
            max_concurrency=max_concurrency,
            needs_approval=needs_approval,
            switch=switch,
            spec=ToolSpec(name=tool_name, description=description, input_schema=schema),
            decode_json=decode_json,
            convert=convert,
            invoke=invoke,
            thread_call=thread_call,
            wants_context=context_parameter is not None,
            limiter=trio.CapacityLimiter(max_concurrency) if max_concurrency else None,
            given_input_type=input_type,
            given_input_schema=input_schema,
            check_schema=check_schema,
            given_version=given_version,
            approval_check=approval_check,
        )

    def __repr__(self) -> str:
        version = f" v{self.version}" if self.version is not None else ""
        return f"<Tool {self.name}{version}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself, as if it were not a tool: a sync function returns
        its value, an async one its coroutine (``await tool(...)``). Nothing of the
        tool applies (no validation, timeout, concurrency limit or approval): this is
        for tests and for code that calls the function directly."""
        return self.fn(*args, **kwargs)

    @property
    def __wrapped__(self) -> Callable[..., Any]:
        """The function (``inspect.signature(tool)`` reads its signature)."""
        return self.fn

    @property
    def spec(self) -> ToolSpec:
        """What a model is told about this tool (the same object on every call)."""
        return self._spec

    def renamed(self, name: str) -> Tool:
        """This tool under another name (a toolbox's mapping key renames its tool)."""
        if name == self.name:
            return self
        return Tool(
            self.fn,
            name=name,
            description=self.description,
            input_type=self._given_input_type,
            input_schema=self._given_input_schema,
            output_type=self.output_type,
            version=self._given_version,
            mutates=self.mutates,
            idempotent=self.idempotent,
            timeout=self.timeout,
            max_concurrency=self.max_concurrency,
            needs_approval=self.needs_approval,
            switch=self.switch,
        )

    async def call_needs_approval(
        self, arguments: Mapping[str, Any] | str, context: ToolContext
    ) -> bool:
        """Whether this call (its arguments already validated) waits for a person."""
        check = self._approval_check
        if check is None:
            await trio.lowlevel.checkpoint()
            return self.needs_approval is True
        return await check(arguments, context)

    def parse_arguments(self, raw: Mapping[str, Any] | str) -> Any:
        """Validate a call's arguments (a mapping, or a raw JSON string).

        Raises:
            ArgumentError: with a message the model can act on.
        """
        try:
            if self._check_schema is not None:
                value = msgspec.json.decode(raw) if type(raw) is str else raw
                self._check_schema(value)
                return self._convert(value)
            if type(raw) is str:
                return self._decode_json(raw)
            return self._convert(raw)
        except msgspec.ValidationError as exc:
            raise ArgumentError(
                f"Invalid arguments for tool {self.name!r}: {exc}. "
                "Fix the arguments to match the tool's input schema and call it again."
            ) from None
        except msgspec.DecodeError as exc:
            raise ArgumentError(
                f"The arguments for tool {self.name!r} are not valid JSON ({exc}). "
                "Send the arguments as one JSON object."
            ) from None
        except _StructureError as exc:
            raise ArgumentError(
                f"Invalid arguments for tool {self.name!r}: {exc}. "
                "Fix the arguments to match the tool's input schema and call it again."
            ) from None

    def encode_result(self, value: Any) -> Any:
        """``value`` as JSON-compatible builtins (validated against ``output_type``).

        Raises:
            TypeError, msgspec.ValidationError: the value cannot be sent to a model.
        """
        if type(value) not in _SCALARS:
            value = msgspec.to_builtins(value)
        if self.output_type is not None:
            msgspec.convert(value, self.output_type)
        return value


def derived_version(name: str, description: str, schema: Mapping[str, Any]) -> str:
    """The version a tool that needs approval gets when none is given: a digest of what
    the model is offered, so an approval for another shape of the tool is refused."""
    shape = msgspec.json.encode([name, description, schema], order="sorted")
    return "auto-" + hashlib.sha256(shape).hexdigest()[:16]


def _approval_checker(needs_approval: Any, tool_name: str) -> _ApprovalCheck | None:
    """``needs_approval`` checked; for a callable, an async ``(raw arguments, context)``
    function that calls it with a fresh dict of the arguments (and the context, if it
    takes two parameters)."""
    if isinstance(needs_approval, bool):
        return None
    if not callable(needs_approval):
        raise ToolDefinitionError(
            f"tool {tool_name!r}: needs_approval takes True, False or a callable "
            f"(arguments[, context]) -> bool, not {needs_approval!r}"
        )
    decide: Callable[..., Any] = needs_approval
    try:
        signature = inspect.signature(decide)
    except (TypeError, ValueError):
        signature = None
    with_context = True
    if signature is not None:
        try:
            signature.bind(None, None)
        except TypeError:
            try:
                signature.bind(None)
            except TypeError:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: needs_approval's callable takes the call's "
                    "arguments (a dict) and optionally its ToolContext, as "
                    f"(arguments) or (arguments, context); {decide!r} takes {signature}"
                ) from None
            with_context = False
    else:
        with_context = False

    async def check(raw: Mapping[str, Any] | str, context: ToolContext) -> bool:
        # A copy of its own: what the decider does to it cannot change what runs.
        arguments = msgspec.json.decode(raw) if isinstance(raw, str) else copy.deepcopy(dict(raw))
        verdict = decide(arguments, context) if with_context else decide(arguments)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        else:
            await trio.lowlevel.checkpoint()
        if not isinstance(verdict, bool):
            raise TypeError(
                f"needs_approval of tool {tool_name!r} returned {verdict!r}; return True "
                "(ask a person) or False (run the call)"
            )
        return verdict

    return check


class _StructureError(Exception):
    """The cattrs fallback could not structure the arguments."""


_MAX_SCHEMA_MESSAGE = 300
"""Characters of a schema violation's message the model reads (it may quote the value)."""


def _schema_checker(schema: dict[str, Any], tool_name: str) -> Callable[[Any], None]:
    """A function that raises :class:`ArgumentError` for arguments ``schema`` refuses.

    The schema is checked now (a bad one, or one with a ``$ref`` outside it, is a
    :class:`ToolDefinitionError`), and its validator is built once, by
    :func:`compile_schema`. ``jsonschema`` is imported there, so ``import operative``
    and tools whose schema is derived never load it.
    """
    validator = compile_schema(schema, where=f"tool {tool_name!r}: input_schema")
    from jsonschema.exceptions import best_match

    def check(value: Any) -> None:
        try:
            error = best_match(validator.iter_errors(value))
        except RecursionError:
            raise ArgumentError(
                f"The arguments for tool {tool_name!r} are nested too deeply to check "
                "against its input schema. Send flatter arguments."
            ) from None
        except Exception as exc:
            raise ArgumentError(
                f"The arguments for tool {tool_name!r} could not be checked against its "
                f"input schema ({type(exc).__name__}: {exc}); the call did not run."
            ) from None
        if error is not None:
            message = error.message
            if len(message) > _MAX_SCHEMA_MESSAGE:
                message = message[: _MAX_SCHEMA_MESSAGE - 3] + "..."
            raise ArgumentError(
                f"Invalid arguments for tool {tool_name!r}: {message} - at "
                f"`{error.json_path}`. Fix the arguments to match the tool's input schema "
                "and call it again."
            )

    return check


def _validators(
    target: Any,
) -> tuple[Callable[[str | bytes], Any], Callable[[Any], Any], bool]:
    """(decode JSON, convert a mapping, msgspec handles the type natively)."""
    try:
        decoder = msgspec.json.Decoder(target)
    except TypeError:
        pass
    else:
        convert = functools.partial(msgspec.convert, type=target)
        return decoder.decode, convert, True
    # Only a type msgspec cannot build needs the cattrs converter (loaded once per tool).
    from .._core._convert import describe_error, get_converter

    def structure(value: Any) -> Any:
        try:
            return get_converter().structure(value, target)
        except Exception as exc:
            raise _StructureError(describe_error(exc)) from None

    def decode(raw: str | bytes) -> Any:
        return structure(msgspec.json.decode(raw))

    return decode, structure, False


_Invoke = Callable[[Any, ToolContext | None], Awaitable[Any]]
_ThreadCall = Callable[[Any, ToolContext | None], Callable[[], Any]]


def _in_a_thread(thread_call: _ThreadCall) -> _Invoke:
    """Run a sync tool's call in a worker thread (abandoned, not waited for, on cancel).

    The toolbox does not use this: it starts the thread itself, handing the call's
    capacity places to the thread (see ``CallPlaces`` in ``_places``). This is for
    code that wraps a tool's ``_invoke`` in another tool.
    """

    async def invoke_sync(arguments: Any, context: ToolContext | None) -> Any:
        return await trio.to_thread.run_sync(
            thread_call(arguments, context), abandon_on_cancel=True
        )

    return invoke_sync


def _keyword_invoker(
    fn: Callable[..., Any], is_async: bool, context_parameter: str | None, *, positional: bool
) -> tuple[_Invoke, _ThreadCall | None]:
    asdict = msgspec.structs.asdict
    if is_async:
        if positional:
            astuple = msgspec.structs.astuple

            def invoke_by_position(arguments: Any, context: ToolContext | None) -> Awaitable[Any]:
                return fn(*astuple(arguments))  # type: ignore[no-any-return]

            return invoke_by_position, None
        if context_parameter is None:

            def invoke(arguments: Any, context: ToolContext | None) -> Awaitable[Any]:
                return fn(**asdict(arguments))  # type: ignore[no-any-return]

            return invoke, None

        def invoke_with_context(arguments: Any, context: ToolContext | None) -> Awaitable[Any]:
            return fn(**asdict(arguments), **{context_parameter: context})  # type: ignore[no-any-return]

        return invoke_with_context, None

    def thread_call(arguments: Any, context: ToolContext | None) -> Callable[[], Any]:
        kwargs = asdict(arguments)
        if context_parameter is not None:
            kwargs[context_parameter] = context
        return functools.partial(fn, **kwargs)

    return _in_a_thread(thread_call), thread_call


def _single_invoker(
    fn: Callable[..., Any], is_async: bool, context_parameter: str | None
) -> tuple[_Invoke, _ThreadCall | None]:
    if is_async:
        if context_parameter is None:
            return (lambda value, context: fn(value)), None
        return (lambda value, context: fn(value, **{context_parameter: context})), None

    def thread_call(value: Any, context: ToolContext | None) -> Callable[[], Any]:
        kwargs = {} if context_parameter is None else {context_parameter: context}
        return functools.partial(fn, value, **kwargs)

    return _in_a_thread(thread_call), thread_call
