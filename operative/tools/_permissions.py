"""Headless permissions: which tools a run without a person watching may call."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._core._errors import InvalidArgument
from ._tool import Tool

__all__ = ["PermissionPolicy"]


def _names(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise InvalidArgument(
            f"tool names are a collection of names, not the single string {value!r}; "
            f"write ({value!r},)"
        )
    return frozenset(value)


def _denied(value: Iterable[str] | None) -> frozenset[str]:
    return _names(value) or frozenset()


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    """Deny by default: a tool runs only if it is allowed here.

    A tool is allowed when its name is in ``allowed_tools`` (``None`` allows every
    name), it is not in ``denied_tools``, and it is not declared ``mutates=True``
    unless ``allow_mutation`` is set (a tool whose ``mutates`` is undeclared is not
    refused for it: name the tools a run may call in ``allowed_tools``). A call to any
    other tool settles as ``denied``, with a message the model can read, and never runs.
    """

    allowed_tools: frozenset[str] | None = attrs.field(default=frozenset(), converter=_names)
    denied_tools: frozenset[str] = attrs.field(default=frozenset(), converter=_denied)
    allow_mutation: bool = False

    def refusal(self, tool: Tool) -> str | None:
        """Why ``tool`` may not run under this policy, or ``None`` when it may."""
        name = tool.name
        if name in self.denied_tools or (
            self.allowed_tools is not None and name not in self.allowed_tools
        ):
            return (
                f"Tool {name!r} is not permitted in this run. Do not call it again; "
                "continue without it or tell the user what you could not do."
            )
        if tool.mutates is True and not self.allow_mutation:
            return (
                f"Tool {name!r} changes state, and this run may not make changes. Do not "
                "call it again; tell the user what change you would have made."
            )
        return None
