"""``@tool``: a function, or a method in a class body, made a :class:`Tool`.

On a function it makes the tool itself; on a method it makes a :class:`ToolMethod`, a
descriptor whose ``obj.method`` is the tool of that object.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, overload

from ._tool import NeedsApproval, Tool

__all__ = ["ToolMethod", "tool"]


class ToolMethod:
    """``@tool`` on a method, in a class body: ``obj.method`` is a :class:`Tool` of that
    object (its function the bound method, ``self`` not in its schema).

    An object's tool is built on first access and kept in the object's ``__dict__``, so
    ``obj.method`` is the same tool every time (a class with ``__slots__`` and no
    ``__dict__`` gets a new one at each access: bind it once). ``Class.method`` is this
    descriptor, which calls the function as it is (``Class.method(obj, ...)``) but is
    no tool: give an agent ``obj.method``. The definition is checked when the class body
    runs, as a function's is.
    """

    __slots__ = ("__dict__", "_attribute", "_options", "_template", "fn")

    def __init__(self, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
        self.fn = fn
        # Checked (and warned about) now, against the function bound to no object.
        self._template = Tool(types.MethodType(fn, _UNBOUND), **options)
        self._options = {
            **options,
            "name": self._template.name,
            "description": self._template.description,
        }
        self._attribute: str | None = None
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<ToolMethod {getattr(self.fn, '__qualname__', self._template.name)}>"

    @property
    def name(self) -> str:
        """The name the bound tools are offered under."""
        return self._template.name

    @property
    def attribute(self) -> str:
        """The attribute of the class that holds it (its function's name until the class
        body assigns it)."""
        if self._attribute is not None:
            return self._attribute
        return str(getattr(self.fn, "__name__", self._template.name))

    def __set_name__(self, owner: type, name: str) -> None:
        self._attribute = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> ToolMethod: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Tool: ...
    def __get__(self, obj: object, owner: type | None = None) -> Tool | ToolMethod:
        if obj is None:
            return self
        bound = Tool(types.MethodType(self.fn, obj), **self._options)
        attribute = self._attribute
        namespace = getattr(obj, "__dict__", None)
        if attribute is not None and isinstance(namespace, dict):
            namespace[attribute] = bound  # found before this descriptor from now on
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function itself (``Class.method(obj, ...)``)."""
        return self.fn(*args, **kwargs)


class _Unbound:
    """What a method tool's function is bound to while its definition is checked."""

    def __repr__(self) -> str:
        return "<no object>"


_UNBOUND = _Unbound()


def _is_method(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is a function whose first parameter is an unannotated ``self``
    (a method, defined in a class body)."""
    if not inspect.isfunction(fn):
        return False
    code = fn.__code__
    if code.co_argcount < 1 or code.co_varnames[0] != "self":
        return False
    return "self" not in getattr(fn, "__annotations__", {})


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...  # a ToolMethod for a method (see below)
@overload
def tool(
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
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
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
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` of a function: ``@tool`` or ``@tool(version="1", ...)``.

    The name defaults to the function's name, the description to its docstring, and
    the input schema to its signature. A tool with neither a docstring nor
    ``description=`` is offered to the model with no description: that warns
    (:class:`ToolDescriptionWarning`) when the tool is defined.
    ``@tool(needs_approval=True)`` makes every call wait for a person;
    ``needs_approval=lambda arguments: ...`` decides per call (see :class:`Tool`).

    The tool stays callable as the function: ``search("q")`` calls ``search`` and
    returns what it returns (``await search("q")`` for an async one), which is how a
    unit test calls it. On a method (a first parameter ``self``) in a class body it
    makes a :class:`ToolMethod`: ``obj.method`` is the tool of that object, its schema
    without ``self``, so an agent takes ``tools=[obj.method]``.
    """

    def wrap(function: Callable[..., Any]) -> Tool:
        if _is_method(function):
            # Typed as the Tool that obj.method is.
            return ToolMethod(function, options)  # type: ignore[return-value]
        return Tool(function, **options)

    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "input_type": input_type,
        "input_schema": input_schema,
        "output_type": output_type,
        "version": version,
        "mutates": mutates,
        "idempotent": idempotent,
        "timeout": timeout,
        "max_concurrency": max_concurrency,
        "needs_approval": needs_approval,
    }
    if fn is not None:
        return wrap(fn)
    return wrap
