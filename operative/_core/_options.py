"""Run options: validated once, eagerly, into an immutable ``RunConfig``."""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ..conditions import StopCondition
from ..conversation import Conversation, ConversationHistory
from ..conversation._tool_results import check_history
from ..hooks import HOOK_NAMES, AnyHook, HookRegistry
from ..tools import Toolbox
from ..tools._source import ToolSource, split_tool_sources
from ..tools._toolbox import approving_toolbox
from ._errors import InvalidArgument
from ._extension import Feature
from ._instrument_hook import installed as installed_instrumentation
from ._model import GenerateFunction
from ._output import OutputMode, check_output_mode, output_schema
from ._types import RequestContext

if TYPE_CHECKING:
    from ..backpressure import BackpressureStrategy
    from ..context import ContextManagement
    from ..liveness import StallPolicy
    from ..retry import RetryOptions

__all__ = [
    "RunConfig",
    "config_for_run",
    "configure_run",
    "make_toolbox",
    "new_run_id",
]

DEFAULT_MAXIMUM_STEPS = 25


class Hooks(msgspec.Struct, frozen=True, kw_only=True):
    """Every hook of a run, by kind, in the order they run (resolved once per run)."""

    select_tools: tuple[AnyHook, ...] = ()
    prepare_step: tuple[AnyHook, ...] = ()
    validate_response: tuple[AnyHook, ...] = ()
    before_tool_execution: tuple[AnyHook, ...] = ()
    validate_tool_result: tuple[AnyHook, ...] = ()
    after_tool_execution: tuple[AnyHook, ...] = ()
    on_step: tuple[AnyHook, ...] = ()
    on_run_start: tuple[AnyHook, ...] = ()
    on_run_end: tuple[AnyHook, ...] = ()
    on_error: tuple[AnyHook, ...] = ()
    on_maximum_steps: tuple[AnyHook, ...] = ()


class RunConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one run needs, validated (a frozen record: built once per run in C,
    changed only by ``msgspec.structs.replace``)."""

    generate: GenerateFunction
    toolbox: Toolbox
    stop_when: tuple[StopCondition, ...]
    maximum_steps: int
    hooks: Hooks
    output: Any = None
    output_schema: dict[str, Any] | None = None
    output_mode: OutputMode | None = None
    schema_retries: int = 2
    settings: dict[str, Any] = msgspec.field(default_factory=dict)
    request_context: RequestContext | None = None
    run_id: str = ""
    principal: Any = None
    tool_concurrency: int | None = None
    on_elicitation: Callable[..., Awaitable[Any]] | None = None
    agent_name: str = "(agent)"
    trace_context: Any = None
    abort_on: Callable[[], Awaitable[object]] | None = None
    """Returns when the caller wants the run aborted (``abort_on=``, normalised)."""
    cleanup_timeout: float = 10.0
    retry: RetryOptions | None = None
    backpressure: BackpressureStrategy | None = None
    context_management: ContextManagement | None = None
    steering: Any = None
    """A SteeringGate consulted at every step's entry."""
    selection: Any = None
    """A SelectionGate revalidated at every step's entry."""
    stall_policy: StallPolicy | None = None
    on_approval: Callable[..., Any] | None = None
    """Decides parked approvals while the run stays alive (see the tool phase)."""
    approval_timeout: float | None = None
    concurrent_approvals: bool = False
    """Ask ``on_approval`` about a step's parked calls all at once (default: one at a time)."""
    tool_sources: tuple[ToolSource, ...] = ()
    """Tool sources from ``tools=`` (MCP servers), read when the run starts, before any
    feature wraps it."""
    features: tuple[Feature, ...] = ()
    """What attaches to each run through the extension seam, in order (see
    ``_extension``): the features of ``budget=``, ``guardrails=``, ``extensions=``,
    ``instrumentation=`` and ``durable=``."""

    def feature(self, option: str) -> Any:
        """The feature standing for the run option ``option`` (``"durable"``), if any."""
        for feature in self.features:
            if getattr(feature, "option", None) == option:
                return feature
        return None


def _as_tuple(value: Any, what: str) -> tuple[Any, ...]:
    if value is None:
        return ()
    items = tuple(value) if isinstance(value, list | tuple) else (value,)
    for item in items:
        if not callable(item):
            raise InvalidArgument(f"{what} takes a callable or a list of them, got {item!r}")
    return items


def make_toolbox(
    toolbox: Any, tools: Any, permissions: Any = None, *, on_approval: Any = None
) -> Toolbox:
    """The run's toolbox from ``toolbox=`` or ``tools=`` (never both).

    With an ``on_approval`` handler, ``tools=`` get ``ApprovalPolicy("on-mutation")``
    (the handler decides every call of a mutating tool), and a ``toolbox=`` without an
    approval policy is refused: it would never ask the handler anything.
    """
    if toolbox is not None:
        if tools is not None:
            raise InvalidArgument(
                "pass tools= or toolbox=, not both: a pre-built Toolbox already has its tools"
            )
        if permissions is not None:
            raise InvalidArgument(
                "pass permissions= with tools=, not with toolbox=: configure a pre-built "
                "Toolbox with Toolbox(..., permissions=...)"
            )
        if not isinstance(toolbox, Toolbox):
            raise InvalidArgument(f"toolbox= takes a Toolbox, got {type(toolbox).__name__}")
        if (
            on_approval is not None
            and toolbox.approval_policy is None
            and not any(t.needs_approval for t in toolbox)
        ):
            raise InvalidArgument(
                "on_approval= decides the calls a toolbox parks for approval, and this "
                "toolbox parks none (no approval policy, no tool with needs_approval), so "
                "the handler would never be asked: declare the tools that need a person "
                "with @tool(needs_approval=True), build the toolbox with "
                "Toolbox(..., approval_policy=ApprovalPolicy(mode='on-mutation')), or pass "
                "tools= (on_approval= then asks before every call of a mutating tool)"
            )
        return toolbox
    if tools is None:
        return Toolbox([], permissions=permissions)
    if not isinstance(tools, Sequence | Mapping) or isinstance(tools, str):
        raise InvalidArgument(
            f"tools= takes a list of tools or a name-keyed mapping, got {type(tools).__name__}"
        )
    built = Toolbox(tools, permissions=permissions)
    if on_approval is None:
        return built
    return approving_toolbox(built)


_NO_HOOKS = Hooks()
_OPTION_NAMES = HOOK_NAMES | frozenset(
    # With the hooks, RunOptions' keys (a test holds them equal): the TypedDict itself is
    # typing's and costs half a millisecond to build, so it loads only when asked for.
    (
        "hooks",
        "output",
        "output_mode",
        "schema_retries",
        "settings",
        "request_context",
        "run_id",
        "principal",
        "tool_concurrency",
        "on_elicitation",
        "agent_name",
        "trace_context",
        "abort_on",
        "cleanup_timeout",
        "retry",
        "budget",
        "backpressure",
        "context_management",
        "steering",
        "selection",
        "stall_policy",
        "on_approval",
        "approval_timeout",
        "concurrent_approvals",
        "durable",
        "instrumentation",
        "guardrails",
        "extensions",
        "tool_sources",
    )
)


def _hooks(options: Mapping[str, Any]) -> Hooks:
    registry: HookRegistry | None = options.get("hooks")
    if registry is None and HOOK_NAMES.isdisjoint(options):
        return _NO_HOOKS
    if registry is not None and not isinstance(registry, HookRegistry):
        raise InvalidArgument(f"hooks= takes a HookRegistry, got {type(registry).__name__}")
    merged = registry.copy() if registry is not None else HookRegistry()
    for name in HOOK_NAMES:
        for hook in _as_tuple(options.get(name), f"{name}="):
            merged.add(name, hook)  # type: ignore[call-overload]
    return Hooks(**{name: merged.get(name) for name in HOOK_NAMES})


OPEN_RUN_PARAMETERS = (
    "generate",
    "conversation",
    "toolbox",
    "tools",
    "stop_when",
    "maximum_steps",
)
"""``open_run``'s own parameters (the run options are ``_OPTION_NAMES``)."""


_MODEL_SETTINGS = frozenset(
    {
        "temperature",
        "max_tokens",
        "max_output_tokens",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "reasoning_effort",
    }
)
"""Names a model's settings use, which go in ``settings=`` rather than as options."""


def unknown_options(
    caller: str, given: Iterable[str], parameters: Sequence[str]
) -> InvalidArgument:
    """The error for options ``caller`` does not take: each with the closest names among
    its own ``parameters`` and the run options (did you mean), then every name."""
    import difflib  # only for the error

    known = [*parameters, *sorted(_OPTION_NAMES)]
    unknown = sorted(set(given) - set(known))
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        if not close:
            close = [k for k in known if name.lower() in k][:1]
        if close:
            hint = f" (did you mean {close[0]}=?)"
        elif name in _MODEL_SETTINGS:
            hint = f" (a model setting: pass settings={{{name!r}: ...}})"
        else:
            hint = ""
        hints.append(f"{name}={hint}")
    return InvalidArgument(
        f"{caller} got unknown option{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
        f"it takes {', '.join(parameters)} and the run options "
        f"{', '.join(sorted(_OPTION_NAMES))}"
    )


def configure_run(
    *,
    generate: GenerateFunction,
    conversation: Conversation | ConversationHistory,
    toolbox: Any,
    tools: Any,
    stop_when: StopCondition | Sequence[StopCondition] | None,
    maximum_steps: int,
    **options: Any,
) -> tuple[RunConfig, Conversation]:
    """Validate every option eagerly; returns the config and the run's conversation."""
    if not _OPTION_NAMES.issuperset(options):
        raise unknown_options("open_run()", options, OPEN_RUN_PARAMETERS)
    if not callable(generate):
        raise InvalidArgument(
            "generate= takes an async function GenerateRequest -> GenerateResponse, "
            f"got {generate!r}"
        )
    if isinstance(conversation, Conversation):
        live = conversation
    elif isinstance(conversation, ConversationHistory):
        live = Conversation.from_history(conversation)
    else:
        raise InvalidArgument(
            "conversation= takes a Conversation (shared) or a ConversationHistory "
            f"(snapshotted), got {type(conversation).__name__}"
        )
    if not getattr(options.get("durable"), "resumes_journal", False):
        # Refused here, before anything runs or is sent (a recovered run goes on from
        # its own journal, whose transcript was checked when the run began).
        check_history(live._messages)
    if maximum_steps.__class__ is not int or maximum_steps < 1:
        raise InvalidArgument(f"maximum_steps must be a positive int, got {maximum_steps!r}")
    tools, sources = split_tool_sources(tools)
    # Only the options given are checked: a plain run pays for none of them.
    fields = _checked_options(options) if options else {}
    if sources:
        fields["tool_sources"] = (*fields.get("tool_sources", ()), *sources)
    hooks = _hooks(options) if options else _NO_HOOKS
    if "run_id" not in fields:
        fields["run_id"] = new_run_id()
    fields["features"] = _ordered_features(fields.pop("features", {}))
    config = RunConfig(
        generate=generate,
        toolbox=make_toolbox(toolbox, tools, on_approval=fields.get("on_approval")),
        stop_when=_as_tuple(stop_when, "stop_when="),
        maximum_steps=maximum_steps,
        hooks=hooks,
        **fields,
    )
    return config, live


def config_for_run(template: RunConfig) -> RunConfig:
    """A run's configuration from one validated once (an agent's): a fresh run id, and
    the instrumentation installed now unless the template names its own."""
    features = template.features
    installed = installed_instrumentation()
    if installed is not None and template.feature("instrumentation") is None:
        durable = template.feature("durable")
        features = (
            *(f for f in features if f is not durable),
            installed,
            *(() if durable is None else (durable,)),
        )
    return msgspec.structs.replace(template, run_id=new_run_id(), features=features)


_FEATURE_ORDER = ("budget", "guardrails", "extensions", "instrumentation", "durable")
"""The order a run's features attach in (``extensions=`` holds a tuple of them)."""


def _ordered_features(given: dict[Any, Any]) -> tuple[Feature, ...]:
    """The features of the options given, in attaching order; the instrumentation
    installed process-wide (``operative.instrumentation.install``) when none is given."""
    if given.get("instrumentation") is None:
        installed = installed_instrumentation()
        if installed is not None:
            given = {**given, "instrumentation": installed}
    features: list[Feature] = []
    for option in _FEATURE_ORDER:
        feature = given.get(option)
        if option == "extensions":
            features.extend(feature or ())
        elif feature is not None:
            features.append(feature)
    return tuple(features)


def new_run_id() -> str:
    """A run id: 24 random hex digits (run ids address runs over HTTP and the command
    line, so they are not guessable; each is 96 bits of the OS's random source)."""
    return secrets.token_hex(12)


_NUMBER = (int, float)


def _retry_options() -> type[RetryOptions]:
    from ..retry import RetryOptions

    return RetryOptions


def _stall_policy() -> type[StallPolicy]:
    from ..liveness._watchdog import StallPolicy

    return StallPolicy


_TYPED_OPTIONS: dict[str, tuple[type | Callable[[], type], str]] = {
    "request_context": (RequestContext, "a RequestContext"),
    # Given as a function: the option's type loads when the option is given, not with
    # ``import operative``.
    "retry": (_retry_options, "RetryOptions"),
    "stall_policy": (_stall_policy, "a StallPolicy"),
}
_CALLABLE_OPTIONS = ("on_elicitation", "on_approval")
_PROTOCOL_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "backpressure": (
        ("slot",),
        "a strategy with a slot(request, notify) method (FixedDelay, GenerateLimiter)",
    ),
    "selection": (("get_plan", "revalidate"), "a SelectionGate (get_plan() and revalidate(plan))"),
}


def _checked_options(options: dict[str, Any]) -> dict[str, Any]:
    """The ``RunConfig`` fields for the options given, each checked (defaults elsewhere);
    the features among them under ``"features"``, by option, for ``_ordered_features``."""
    fields: dict[str, Any] = {}
    _check_kinds(options, fields)
    _check_numbers(options, fields)
    _check_identity(options, fields)
    _check_output(options, fields)
    _check_collaborators(options, fields)
    fields["features"] = _checked_features(options)
    for name in ("principal", "agent_name", "trace_context"):
        if name in options:
            fields[name] = options[name]
    return fields


def _check_kinds(options: dict[str, Any], fields: dict[str, Any]) -> None:
    """Options checked by their type, their methods, or being callable."""
    get = options.get
    for name, (kind, what) in _TYPED_OPTIONS.items():
        value = get(name)
        if value is not None:
            if not isinstance(kind, type):
                kind = kind()
            if not isinstance(value, kind):
                raise InvalidArgument(f"{name}= takes {what}, got {type(value).__name__}")
            fields[name] = value
    for name, (methods, what) in _PROTOCOL_OPTIONS.items():
        value = get(name)
        if value is not None:
            if not all(callable(getattr(value, method, None)) for method in methods):
                raise InvalidArgument(f"{name}= takes {what}, got {type(value).__name__}")
            fields[name] = value
    for name in _CALLABLE_OPTIONS:
        value = get(name)
        if value is not None:
            if not callable(value):
                raise InvalidArgument(f"{name}= takes an async callable, got {value!r}")
            fields[name] = value
    abort_on = get("abort_on")
    if abort_on is not None:
        fields["abort_on"] = abort_waiter(abort_on)


def _check_numbers(options: dict[str, Any], fields: dict[str, Any]) -> None:
    """Counts and durations, and the model's settings."""
    get = options.get
    schema_retries = get("schema_retries")
    if schema_retries is not None:
        if not isinstance(schema_retries, int) or schema_retries < 0:
            raise InvalidArgument(f"schema_retries must be an int >= 0, got {schema_retries!r}")
        fields["schema_retries"] = schema_retries
    concurrency = get("tool_concurrency")
    if concurrency is not None:
        if not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgument(
                f"tool_concurrency must be a positive int or None (no limit), got {concurrency!r}"
            )
        fields["tool_concurrency"] = concurrency
    if "cleanup_timeout" in options:
        cleanup_timeout = options["cleanup_timeout"]
        if not isinstance(cleanup_timeout, _NUMBER) or not cleanup_timeout > 0:
            raise InvalidArgument(f"cleanup_timeout must be seconds > 0, got {cleanup_timeout!r}")
        fields["cleanup_timeout"] = float(cleanup_timeout)
    approval_timeout = get("approval_timeout")
    if approval_timeout is not None:
        if (
            approval_timeout.__class__ is bool
            or not isinstance(approval_timeout, _NUMBER)
            or approval_timeout <= 0
        ):
            raise InvalidArgument(
                f"approval_timeout= takes seconds > 0 or None, got {approval_timeout!r}"
            )
        fields["approval_timeout"] = float(approval_timeout)
    if "concurrent_approvals" in options:
        concurrent = options["concurrent_approvals"]
        if concurrent.__class__ is not bool:
            raise InvalidArgument(f"concurrent_approvals= takes True or False, got {concurrent!r}")
        fields["concurrent_approvals"] = concurrent
    settings = get("settings")
    if settings is not None:
        if not isinstance(settings, Mapping):
            raise InvalidArgument(f"settings= takes a mapping, got {type(settings).__name__}")
        if settings:
            fields["settings"] = dict(settings)


def _check_identity(options: dict[str, Any], fields: dict[str, Any]) -> None:
    """The run id: ``run_id=``, or the one a durable routing names (given once)."""
    run_id = options.get("run_id")
    durable_id = getattr(options.get("durable"), "run_id", None)
    if durable_id is not None:
        if run_id not in (None, durable_id):
            raise InvalidArgument(
                f"run_id={run_id!r} and the durable run id {durable_id!r} differ: give the id once"
            )
        run_id = durable_id
    if run_id:
        if not isinstance(run_id, str):
            raise InvalidArgument(f"run_id= takes a str, got {type(run_id).__name__}")
        fields["run_id"] = run_id
    if options.get("steering") is not None:
        if not run_id:
            raise InvalidArgument(
                "steering= needs a run_id=: the run's steering.applied events name it, and "
                "runs on one session de-duplicate by it"
            )
        fields["steering"] = options["steering"]


def _check_output(options: dict[str, Any], fields: dict[str, Any]) -> None:
    """A structured output: its type, its schema, how it is asked for."""
    output = options.get("output")
    if output is not None:
        fields["output"] = output
        fields["output_schema"] = output_schema(output)
    output_mode = options.get("output_mode")
    if output_mode is not None:
        if output is None:
            raise InvalidArgument(
                "output_mode= says how a structured output is asked for: pass output= (the "
                "output type) too"
            )
        fields["output_mode"] = check_output_mode(output_mode)


def _check_collaborators(options: dict[str, Any], fields: dict[str, Any]) -> None:
    """Objects the loop consults: the context manager's options, the tool sources."""
    context_management = options.get("context_management")
    if context_management is not None:
        from ..context import ContextManagement

        if not isinstance(context_management, ContextManagement):
            raise InvalidArgument(
                "context_management= takes a ContextManagement, got "
                f"{type(context_management).__name__}"
            )
        fields["context_management"] = context_management
    tool_sources = options.get("tool_sources")
    if tool_sources:
        for source in tool_sources:
            if not isinstance(source, ToolSource):
                raise InvalidArgument(
                    "tool_sources= takes objects with an async list_tools() method (an "
                    f"operative.mcp.MCPServer), got {source!r}"
                )
        fields["tool_sources"] = tuple(tool_sources)


def _checked_features(options: dict[str, Any]) -> dict[str, Any]:
    """The features the options name, by option (``"extensions"``: a tuple of them)."""
    features: dict[str, Any] = {}
    get = options.get
    durable = get("durable")
    if durable is not None:
        features["durable"] = feature_option(
            "durable",
            durable,
            "operative.durable.Durable(SqliteDurable(path), run_id=...)",
        )
    budget = get("budget")
    if budget is not None:
        # A feature that declares it stands for budget= (checked without the protocol's
        # isinstance, which costs more than everything else here).
        if getattr(budget, "option", None) != "budget" or not callable(
            getattr(budget, "extension", None)
        ):
            raise InvalidArgument(
                f"budget= takes a Budget or a CostBudgetMonitor, got {type(budget).__name__}"
            )
        features["budget"] = budget
    guardrails = get("guardrails")
    if guardrails is not None:
        feature = feature_option(
            "guardrails",
            guardrails,
            "an InputGuardrail, OutputGuardrail or ToolGuardrail, or a list of them",
        )
        if feature is not None:
            features["guardrails"] = feature
    instrumentation = get("instrumentation")
    if instrumentation is not None:
        features["instrumentation"] = feature_option(
            "instrumentation", instrumentation, "an operative.instrumentation.Instrumentation"
        )
    extensions = get("extensions")
    if extensions is not None:
        if not isinstance(extensions, list | tuple):
            extensions = (extensions,)
        for feature in extensions:
            if not isinstance(feature, Feature):
                raise InvalidArgument(
                    "extensions= takes features: objects with an extension(config) method "
                    "that returns an operative.extending.Extension (or None), got "
                    f"{feature!r}"
                )
        if extensions:
            features["extensions"] = tuple(extensions)
    return features


def feature_option(name: str, value: Any, what: str) -> Any:
    """``value`` as the feature an option names (``None``: it asks for nothing).

    A feature declares the option it stands for (``option = "durable"``). An option
    that takes a list of items (``guardrails=[...]``) gets items whose
    ``collect_feature(items)`` builds the one feature, checking every item.
    """
    items = value if isinstance(value, list | tuple) else None
    if items is None and getattr(value, "option", None) == name and isinstance(value, Feature):
        return value
    first = items[0] if items else value
    collect = getattr(first, "collect_feature", None)
    if collect is not None and getattr(first, "option", None) == name:
        return collect(value)
    if items is not None and not items:
        return None
    raise InvalidArgument(f"{name}= takes {what}, got {type(value).__name__}")


def abort_waiter(abort_on: Any) -> Callable[[], Awaitable[object]]:
    """``abort_on=`` as an async function that returns when the run should abort."""
    if isinstance(abort_on, trio.Event):
        return abort_on.wait
    if inspect.isawaitable(abort_on):
        awaitable = abort_on

        async def wait() -> object:
            return await awaitable

        return wait
    if callable(abort_on) and (
        inspect.iscoroutinefunction(abort_on)
        or inspect.iscoroutinefunction(getattr(abort_on, "__call__", None))  # noqa: B004
    ):
        waiter: Callable[[], Awaitable[object]] = abort_on
        return waiter
    raise InvalidArgument(
        "abort_on= takes a trio.Event, an awaitable or an async function of no arguments "
        f"that returns when the run should abort, got {abort_on!r}"
    )
