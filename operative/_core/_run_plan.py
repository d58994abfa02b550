"""``RunPlan``: what a run works out from its configuration when it starts, worked out
once for an agent whose configuration names no feature.

A run's configuration decides how its steps go: whether its generate and tool phases
run in the step's frame (``GeneratePhase.plain_for``, ``ToolPhase.plain_for``), whether
anything must run beside its loop (``runs_alone``), and whether anything but its caller
can cancel it (``nothing_cancels``). An agent's runs share one configuration, validated
when the agent was defined; only the run id differs. When that configuration names no
feature, no run attaches an extension (extensions are made per run), so every run gets
the same answers: ``agent.run`` reads them from the agent's plan, and its runs share the
configuration itself, each keeping its own id (``RunState.run_id``; nothing without an
extension reads ``config.run_id``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ._extension import NO_EXTENSIONS, has_features
from ._generate_phase import GeneratePhase
from ._options import RunConfig
from ._run_scope import nothing_cancels
from ._tool_phase import ToolPhase

if TYPE_CHECKING:
    from ._extension import Extensions

__all__ = ["RunPlan", "derive_plan", "plan_for"]


class RunPlan(msgspec.Struct, frozen=True, gc=False):
    """The answers every run of one feature-less configuration gets."""

    plain_generate: bool
    plain_tools: bool
    context_free: bool
    alone: bool
    """Nothing must run beside the loop: no stall watchdog, ``abort_on`` watcher or
    extension task."""
    sealable: bool
    """Run in its caller's task, nothing but the caller can cancel it."""


def plan_for(config: RunConfig) -> RunPlan | None:
    """The plan of ``config``'s runs; ``None`` when it names a feature (its runs attach
    extensions of their own, so each works its answers out when it starts)."""
    if has_features(config):
        return None
    return derive_plan(config, NO_EXTENSIONS)


def derive_plan(config: RunConfig, ext: Extensions) -> RunPlan:
    """The answers of a run of ``config`` with the extensions ``ext`` attached (the one
    place they are worked out: for an agent's plan, and by a run that has none)."""
    return RunPlan(
        plain_generate=GeneratePhase.plain_for(config, ext),
        plain_tools=ToolPhase.plain_for(config, ext),
        context_free=ToolPhase.context_free(config),
        alone=config.stall_policy is None and config.abort_on is None and not ext.start_tasks,
        sealable=nothing_cancels(config, ext),
    )
