"""An MCP server's ``elicitation/create`` answered by the run's ``on_elicitation``.

The handler gets an :class:`~operative.tools.ElicitationRequest` whose ``schema`` is the
server's requested schema (form mode) or whose ``url`` is the page to visit (URL mode),
and whose ``tool_call_id`` names the call that asked (when it is known: see
``_routing``). It answers as for any tool: an :class:`~operative.tools.ElicitationResponse`
accepts, ``None`` declines. An accepted form gets the schema's defaults for every field
the answer leaves out (what the MCP conformance scenario
``elicitation-sep1034-client-defaults`` checks), and is validated against the schema
before it is sent. The form's schema is compiled before the handler is asked: one that is
not valid JSON Schema, or whose ``$ref`` points outside it (nothing is ever fetched), is
answered with an error and the handler is not asked. A run without a handler declines;
so does an elicitation nobody can be sure belongs to the run. If every call the request
may belong to ends while the handler still thinks, the server is told the person
cancelled.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio
from pydantic import ValidationError

from .._core._errors import ElicitationError
from .._core._events import ElicitationRequested, ElicitationResolved
from ..tools import ElicitationRequest, ElicitationResponse
from ..tools._schema import compile_schema
from ._routing import Route

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = ["answer_elicitation", "elicitation_request", "form_validator", "with_defaults"]

_logger = logging.getLogger("operative.mcp")


async def answer_elicitation(
    route: Route, params: types.ElicitRequestParams, *, label: str
) -> types.ElicitResult | types.ErrorData:
    """What to answer the server's elicitation request."""
    context = route.context
    handler = context.execution.on_elicitation if context is not None else None
    if context is None or handler is None:
        why = route.why if context is None else "the run has no on_elicitation handler"
        _logger.info("declined an elicitation from the MCP server %s: %s", label, why)
        return types.ElicitResult(action="decline")
    request = elicitation_request(params, route.tool_call_id)
    validator = None
    if request.url is None:
        try:
            validator = form_validator(request.schema, label=label)
        except ElicitationError as refused:
            _logger.warning("refused an elicitation from the MCP server %s: %s", label, refused)
            return _error(str(refused))
    emit = context.execution.emit
    if emit is not None:
        await emit(
            ElicitationRequested(
                run_id=context.run_id,
                step=context.step,
                time=trio.current_time(),
                request_id=request.request_id,
                tool_call_id=request.tool_call_id,
                message=request.message,
                schema=request.schema,
            )
        )
    answers: list[object] = []
    failures: list[Exception] = []
    async with trio.open_nursery() as nursery:

        async def ask() -> None:
            try:
                answers.append(await handler(request))
            except Exception as exc:
                failures.append(exc)
            nursery.cancel_scope.cancel()

        nursery.start_soon(ask)
        await route.wait_abandoned()
        nursery.cancel_scope.cancel()
    if failures:
        exc = failures[0]
        _logger.error("the elicitation handler failed on a request of %s", label, exc_info=exc)
        return _error(f"the client's elicitation handler failed ({type(exc).__name__}: {exc})")
    answered = bool(answers)
    if not answered:
        result = types.ElicitResult(action="cancel")
    else:
        try:
            result = _result(request, answers[0], validator)
        except ValueError as exc:
            _logger.warning("refused an elicitation answer for %s: %s", label, exc)
            return _error(str(exc))
    if emit is not None and answered:
        await emit(
            ElicitationResolved(
                run_id=context.run_id,
                step=context.step,
                time=trio.current_time(),
                request_id=request.request_id,
                tool_call_id=request.tool_call_id,
                declined=result.action != "accept",
            )
        )
    return result


def elicitation_request(
    params: types.ElicitRequestParams, tool_call_id: str | None
) -> ElicitationRequest:
    """The handler's view of a server's elicitation (form or URL mode)."""
    if isinstance(params, types.ElicitRequestURLParams):
        return ElicitationRequest(
            request_id=params.elicitation_id or os.urandom(12).hex(),
            tool_call_id=tool_call_id,
            message=params.message,
            schema={},
            url=params.url,
        )
    return ElicitationRequest(
        request_id=os.urandom(12).hex(),
        tool_call_id=tool_call_id,
        message=params.message,
        schema=dict(params.requested_schema),
    )


def form_validator(schema: Mapping[str, Any], *, label: str) -> Validator:
    """The validator of a server's form schema.

    Raises:
        ElicitationError: the schema is not valid JSON Schema, or a ``$ref`` in it points
            outside it (it is never fetched).
    """
    return compile_schema(
        schema,
        where=f"the form schema the MCP server {label} sent with its elicitation",
        error=ElicitationError,
    )


def _result(
    request: ElicitationRequest, response: object, validator: Validator | None
) -> types.ElicitResult:
    if response is None:
        return types.ElicitResult(action="decline")
    if not isinstance(response, ElicitationResponse):
        raise ValueError(
            f"on_elicitation returned {type(response).__name__}; return an "
            "ElicitationResponse, or None to decline"
        )
    if response.request_id != request.request_id or response.tool_call_id != request.tool_call_id:
        raise ValueError(
            f"the elicitation response is for request {response.request_id!r} (tool call "
            f"{response.tool_call_id!r}), not {request.request_id!r} (tool call "
            f"{request.tool_call_id!r}); echo the request's identity"
        )
    if request.url is not None or validator is None:
        return types.ElicitResult(action="accept")
    data = response.data if response.data is not None else {}
    if not isinstance(data, Mapping):
        raise ValueError(
            f"the elicitation answer is {type(data).__name__}; answer a form with an object "
            "holding the schema's fields"
        )
    content = with_defaults(request.schema, data)
    _check(validator, content)
    try:
        return types.ElicitResult(action="accept", content=content)
    except ValidationError as exc:
        raise ValueError(
            "the elicitation answer holds values a form cannot carry (only strings, "
            f"numbers, booleans, lists of strings and null): {exc.errors()[0]['msg']}"
        ) from None


def with_defaults(schema: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the schema's default for every top-level field it leaves out."""
    content = dict(data)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, field in properties.items():
            if name not in content and isinstance(field, Mapping) and "default" in field:
                content[name] = field["default"]
    return content


def _check(validator: Validator, content: dict[str, Any]) -> None:
    # jsonschema is loaded by form_validator: only hosts that answer MCP forms load it.
    from jsonschema.exceptions import best_match

    try:
        error = best_match(validator.iter_errors(content))
    except RecursionError:
        raise ValueError("the elicitation answer is nested too deeply to check") from None
    except Exception as exc:  # a reference the schema could not resolve, among others
        raise ValueError(
            f"the elicitation answer could not be checked against the requested schema: {exc}"
        ) from None
    if error is not None:
        raise ValueError(
            f"the elicitation answer does not match the requested schema: {error.message} - at "
            f"`{error.json_path}`; the handler must return data shaped like request.schema"
        )


def _error(message: str) -> types.ErrorData:
    return types.ErrorData(code=types.INTERNAL_ERROR, message=message)
