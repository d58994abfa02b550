"""Output modes in the adapters: which structured-output format a request goes out
with, the final-answer tool, and the fallback when a server refuses a format.

A request with an ``output_schema`` is sent in one of an adapter's *formats*: its
native one (OpenAI's ``json_schema``, Anthropic's ``output_config``, ...), a JSON mode
with the schema in the system prompt, the prompt alone, or ``"tool"`` (the schema as
the parameters of a :data:`OUTPUT_TOOL_NAME` tool the model is made to call). The
request's ``output_mode`` picks the formats it may use, in order
(:class:`OutputFormats`); when the server refuses one (an HTTP error whose message
names the format's fields), the next is tried at once, and the adapter remembers, per
model, to start there.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from .._core._errors import InvalidArgument, ProviderError, ProviderRequestError
from .._core._model import GenerateRequest, GenerateResponse
from .._core._output import OutputMode, check_output_mode
from .._core._types import ToolSpec
from ._common import output_schema_hint
from ._errors import names_field

__all__ = [
    "OUTPUT_TOOL_NAME",
    "TOOL_FORMAT",
    "OutputFormats",
    "final_answer",
    "output_hint",
    "output_tool",
    "tool_instruction",
    "with_system_text",
]

OUTPUT_TOOL_NAME = "final_result"
"""The final-answer tool of ``output_mode="tool"``."""

TOOL_FORMAT = "tool"
"""The format of ``output_mode="tool"`` (the same in every adapter)."""

_WRAPPED = "response"
"""The one property an output tool's parameters have when the output is no object."""

_DESCRIPTION = (
    "Give your final answer: the arguments of this call are the answer. Call it once, "
    "when you have everything you need, instead of answering in text."
)


def _tool_parameters(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``(parameters, wrapped)``: the output schema as a tool's parameters (an object
    at the top, its root ``$ref`` inlined); an output that is not an object (a list, a
    number, a union) becomes the ``response`` property of one."""
    parameters = dict(schema)
    defs = dict(parameters.pop("$defs", None) or {})
    ref = parameters.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(parameters) == 1:
        target = defs.get(ref.removeprefix("#/$defs/"))
        if isinstance(target, Mapping):
            parameters = dict(target)
            parameters.pop("title", None)
    wrapped = parameters.get("type") != "object"
    if wrapped:
        parameters = {
            "type": "object",
            "properties": {_WRAPPED: parameters},
            "required": [_WRAPPED],
        }
    if defs:
        parameters["$defs"] = defs
    return parameters, wrapped


def output_tool(request: GenerateRequest) -> ToolSpec:
    """The final-answer tool for ``request``'s output schema.

    Raises:
        InvalidArgument: a tool of the run already has the name.
    """
    assert request.output_schema is not None
    if any(spec.name == OUTPUT_TOOL_NAME for spec in request.tools):
        raise InvalidArgument(
            f"output_mode='tool' offers the output as a tool named {OUTPUT_TOOL_NAME!r}, "
            "and a tool of the run has that name: rename that tool, or use "
            "output_mode='native' or 'prompted'"
        )
    parameters, _ = _tool_parameters(request.output_schema)
    return ToolSpec(name=OUTPUT_TOOL_NAME, description=_DESCRIPTION, input_schema=parameters)


def final_answer(response: GenerateResponse, request: GenerateRequest) -> GenerateResponse:
    """``response`` with a call of the final-answer tool made its text.

    The call's arguments (unwrapped, for an output that is no object) become the
    answer's ``content``, as JSON, for the loop to validate as any final answer. The
    answer then has no tool calls: calls made beside the final answer are not run (the
    model said it was done), and text written beside it is replaced. Without such a
    call the response is returned as it is (a text answer is validated as one).
    """
    chosen = next((call for call in response.tool_calls if call.name == OUTPUT_TOOL_NAME), None)
    if chosen is None or request.output_schema is None:
        return response
    arguments = chosen.arguments
    if isinstance(arguments, str):
        text = arguments  # not a JSON object: the loop tells the model what is wrong
    else:
        _, wrapped = _tool_parameters(request.output_schema)
        value = arguments[_WRAPPED] if wrapped and _WRAPPED in arguments else arguments
        text = json.dumps(value, ensure_ascii=False)
    return msgspec.structs.replace(response, content=text, tool_calls=())


def output_hint(request: GenerateRequest) -> str:
    """The system-prompt text that asks for the output (prompted formats)."""
    assert request.output_schema is not None
    return output_schema_hint(request.output_schema)


def tool_instruction() -> str:
    """The system-prompt text for a final-answer tool the API cannot force."""
    return (
        f"When you give your final answer, call the {OUTPUT_TOOL_NAME} tool with it as the "
        "arguments, instead of answering in text."
    )


def with_system_text(
    messages: list[dict[str, Any]], text: str, *, item: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """``messages`` (``role``/``content`` dicts) with ``text`` in the system message.

    Added to a first system message whose content is text, else as a system message of
    its own at the front (``item`` holds any other fields such a message needs), so
    chat templates that allow one system message, first, still take it.
    """
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        content = first.get("content")
        if isinstance(content, str):
            joined = f"{content}\n\n{text}" if content else text
            return [{**first, "content": joined}, *messages[1:]]
    return [{**(item or {}), "role": "system", "content": text}, *messages]


class OutputFormats:
    """The structured-output formats one adapter sends, and its memory of refusals.

    Args:
        native: The native format's name.
        fallbacks: What ``output_mode=None`` falls back to, in order, after ``native``
            is refused (the adapter's ``auto`` list is ``native`` then these, unless
            ``auto`` is given).
        prompted: The formats of ``output_mode="prompted"``, in order.
        fields: The request fields (and values) a refusal of a format names, e.g.
            ``("response_format", "json_schema", "json_object")``.
        auto: The formats of ``output_mode=None``, when not ``native`` + ``fallbacks``.
    """

    def __init__(
        self,
        *,
        native: str,
        fallbacks: tuple[str, ...],
        prompted: tuple[str, ...],
        fields: tuple[str, ...],
        auto: tuple[str, ...] | None = None,
    ) -> None:
        self.native = native
        self._orders: dict[OutputMode | None, tuple[str, ...]] = {
            None: auto if auto is not None else (native, *fallbacks),
            "native": (native,),
            "prompted": prompted,
            "tool": (TOOL_FORMAT,),
        }
        self._fields = fields
        self._start: dict[tuple[OutputMode | None, str], int] = {}

    def first(self, request: GenerateRequest, model: str) -> str | None:
        """The format to send ``request`` in (``None``: it asks for no output)."""
        if request.output_schema is None:
            return None
        mode = request.output_mode
        order = self._orders.get(mode)
        if order is None:  # a request built by hand (runs check the option)
            check_output_mode(mode)
            raise AssertionError(mode)  # pragma: no cover - check_output_mode raised
        return order[self._start.get((mode, model), 0)]

    async def send(
        self,
        request: GenerateRequest,
        model: str,
        send: Callable[[GenerateRequest, str | None], Awaitable[GenerateResponse]],
    ) -> GenerateResponse:
        """``send(request, format)`` in the format :meth:`first` picks, then in each
        next one while the server refuses the format; a ``final_result`` call of the
        tool format becomes the answer's text."""
        output = self.first(request, model)
        while True:
            try:
                answer = await send(request, output)
            except ProviderError as error:
                output = self.after(error, request, model, output)
                if output is None:
                    raise
                continue
            return final_answer(answer, request) if output == TOOL_FORMAT else answer

    def refused(self, error: ProviderError) -> bool:
        """Whether ``error`` is a server refusing the format's fields."""
        status = error.status
        return (
            status is not None
            and status >= 400
            and status not in (401, 403, 408, 429)
            and names_field(str(error), self._fields)
        )

    def after(
        self, error: ProviderError, request: GenerateRequest, model: str, sent: str | None
    ) -> str | None:
        """The format to try after ``error`` answered ``sent``; ``None``: give up.

        The next format is remembered for the model. An explicit
        ``output_mode="native"`` never falls back: its refusal is raised as a
        :class:`~operative.ProviderRequestError` that says what to use instead.
        """
        if sent is None or sent == TOOL_FORMAT or not self.refused(error):
            return None
        mode = request.output_mode
        order = self._orders[mode]
        index = order.index(sent) + 1 if sent in order else len(order)
        if index < len(order):
            self._start[(mode, model)] = index
            return order[index]
        if mode == "native":
            raise ProviderRequestError(
                f"{error}; the server refused the native structured-output format, and "
                "output_mode='native' allows no other: pass output_mode='prompted' (the "
                "schema in the prompt) or 'tool' (a final-answer tool), or leave "
                "output_mode unset to fall back by itself",
                provider=error.provider,
                model=error.model,
                status=error.status,
                request_id=error.request_id,
                retryable=False,
            ) from error
        return None
