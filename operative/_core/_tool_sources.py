"""The kernel's own extension: tool sources read when a run starts.

``tools=[..., server]`` with a :class:`~operative.tools.ToolSource` in it gives the run
this extension first, so the run's toolbox holds the sources' tools before anything
else looks at it (guardrails, tracing, a durable run's fingerprint and journal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ._extension import Extension, ResumePoint

if TYPE_CHECKING:
    from ..tools import ToolSource
    from ._run import ActiveRun

__all__ = ["ToolSources"]


class ToolSources(Extension):
    """Reads each tool source once per run, when it starts."""

    __slots__ = ("_sources",)

    def __init__(self, sources: tuple[ToolSource, ...]) -> None:
        self._sources = sources

    def __repr__(self) -> str:
        return f"ToolSources({self._sources!r})"

    async def run_started(self, run: ActiveRun) -> ResumePoint | None:
        tools = []
        for source in self._sources:
            tools.extend(await source.list_tools())
        config = run.config
        run.reconfigure(msgspec.structs.replace(config, toolbox=config.toolbox.extended(tools)))
        return None
