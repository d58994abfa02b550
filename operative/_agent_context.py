"""``AgentRunContext``: what a caller passes to one run of an agent (see ``_agent``)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["AgentRunContext"]


@attrs.frozen(kw_only=True)
class AgentRunContext:
    """Per-run context a caller (a host, a parent agent) passes to ``agent.run``."""

    agent_name: str | None = None
    """Overrides the name stamped on the run's events."""
    trace_context: Any = None
    """The parent trace context, for nested tracing."""
    principal: Any = None
    """Who the run acts for; forwarded unchanged to the run (and its hooks)."""
    run_id: str | None = None
    """This run's identity (required for an agent with ``steering=``)."""
    abort_on: Any = None
    """The caller's abort signal for this run (the specification's ``signal``): a
    ``trio.Event``, an awaitable or an async function of no arguments; once it is set
    or returns, the run ends with ``finish_reason == "aborted"``. See ``abort_on=``."""
