"""``RunOptions``: the keyword options of :func:`~operative.open_run` and ``agent.run``,
for type checkers (``**options: Unpack[RunOptions]``). Loaded on first use: a
``TypedDict`` costs half a millisecond to build, and a run checks option names against
``_options._OPTION_NAMES`` instead."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from ..hooks import (
    AfterToolExecutionHook,
    BeforeToolExecutionHook,
    HookRegistry,
    OnErrorHook,
    OnMaximumStepsHook,
    OnRunEndHook,
    OnRunStartHook,
    OnStepHook,
    PrepareStepHook,
    SelectToolsHook,
    ValidateResponseHook,
    ValidateToolResultHook,
)
from ._extension import Feature
from ._output import OutputMode
from ._types import RequestContext

if TYPE_CHECKING:
    from ..backpressure import BackpressureStrategy
    from ..context import ContextManagement
    from ..liveness import StallPolicy
    from ..retry import RetryOptions

__all__ = ["RunOptions"]


class RunOptions(TypedDict, total=False):
    """Options of :func:`open_run` beyond the required ones (each hook: one or a list)."""

    prepare_step: PrepareStepHook | Sequence[PrepareStepHook] | None
    select_tools: SelectToolsHook | Sequence[SelectToolsHook] | None
    validate_response: ValidateResponseHook | Sequence[ValidateResponseHook] | None
    before_tool_execution: BeforeToolExecutionHook | Sequence[BeforeToolExecutionHook] | None
    validate_tool_result: ValidateToolResultHook | Sequence[ValidateToolResultHook] | None
    after_tool_execution: AfterToolExecutionHook | Sequence[AfterToolExecutionHook] | None
    on_step: OnStepHook | Sequence[OnStepHook] | None
    on_run_start: OnRunStartHook | Sequence[OnRunStartHook] | None
    on_run_end: OnRunEndHook | Sequence[OnRunEndHook] | None
    on_error: OnErrorHook | Sequence[OnErrorHook] | None
    on_maximum_steps: OnMaximumStepsHook | Sequence[OnMaximumStepsHook] | None
    hooks: HookRegistry | None
    output: Any
    output_mode: OutputMode | None
    schema_retries: int
    settings: Mapping[str, Any] | None
    request_context: RequestContext | None
    run_id: str | None
    principal: Any
    tool_concurrency: int | None
    on_elicitation: Callable[..., Awaitable[Any]] | None
    agent_name: str
    trace_context: Any
    abort_on: Any
    cleanup_timeout: float
    retry: RetryOptions | None
    budget: Feature | None
    backpressure: BackpressureStrategy | None
    context_management: ContextManagement | None
    steering: Any
    selection: Any
    stall_policy: StallPolicy | None
    on_approval: Callable[..., Any] | None
    approval_timeout: float | None
    concurrent_approvals: bool
    durable: Any
    instrumentation: Any
    guardrails: Any
    extensions: Any
    tool_sources: Any
