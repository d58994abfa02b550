"""``openai_generate``: a ``GenerateFunction`` over the official ``openai`` SDK.

Both APIs (Chat Completions and Responses) stream by reading the SSE body themselves
(see ``_stream.py`` for why) and share the error mapping below.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from typing import Any, Literal, NoReturn

try:
    import httpx2
    import openai
    from openai.resources.chat.completions import AsyncCompletions
    from openai.resources.responses import AsyncResponses
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "operative.providers.openai needs the openai SDK: pip install 'operative[openai]'"
    ) from error

import msgspec

from ..._core._deltas import with_run_sink
from ..._core._errors import InvalidArgument, ProviderAuthenticationError, ProviderError
from ..._core._model import GenerateRequest, GenerateResponse
from .._common import ClientAdapter, DeltaCallback, estimate_usage, merge_settings, split_known
from .._errors import connection_error, status_error, timeout_error
from . import _responses
from ._convert import (
    apply_output_format,
    build_messages,
    build_tools,
    chat_formats,
    response_from_completion,
)
from ._responses_stream import ResponsesAssembler
from ._stream import SseLines, StreamAssembler

__all__ = ["OpenAIGenerate", "openai_generate"]

PROVIDER = "openai"
KEY_VARIABLE = "OPENAI_API_KEY"

# The parameters the installed SDK's create() declares; others travel in extra_body.
_KNOWN = frozenset(inspect.signature(AsyncCompletions.create).parameters)
_KNOWN_RESPONSES = frozenset(inspect.signature(AsyncResponses.create).parameters)
_ENCRYPTED_REASONING = "reasoning.encrypted_content"


class OpenAIGenerate(ClientAdapter["openai.AsyncOpenAI"]):
    """The generate function :func:`openai_generate` returns (callable, closeable)."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        model: str,
        client: openai.AsyncOpenAI | None,
        api: Literal["chat", "responses"],
        client_options: Mapping[str, Any],
        stream: bool,
        on_delta: DeltaCallback | None,
        strict_output: bool,
        settings: Mapping[str, Any],
    ) -> None:
        options = dict(client_options)

        def make_client() -> openai.AsyncOpenAI:
            if "api_key" not in options:
                key = os.environ.get(KEY_VARIABLE)
                if key:
                    options["api_key"] = key
                elif "base_url" in options:
                    options["api_key"] = "unused"  # local OpenAI-compatible servers
                else:
                    raise ProviderAuthenticationError(
                        f"no OpenAI API key: set the {KEY_VARIABLE} environment variable, or "
                        "pass api_key= or a configured client=",
                        provider=PROVIDER,
                        model=model,
                    )
            return openai.AsyncOpenAI(**options)

        super().__init__(client=client, make_client=make_client)
        self.model = model
        self.api = api
        if api == "responses":
            settings = _responses.normalise_settings(settings)
        self._defaults: dict[str, Any] = {"model": model, **settings}
        self._stream = stream
        self._on_delta = on_delta
        self._strict = strict_output
        self._formats = _responses.responses_formats() if api == "responses" else chat_formats()

    def __repr__(self) -> str:
        return f"openai_generate(model={self.model!r}, api={self.api!r})"

    async def _close_client(self, client: openai.AsyncOpenAI) -> None:
        await client.close()

    def _params(self, request: GenerateRequest, output: str | None) -> tuple[dict[str, Any], bool]:
        params, stream = merge_settings(self._defaults, request)
        params["messages"] = build_messages(request)
        if request.tools:
            params["tools"] = build_tools(request.tools) + list(params.get("tools", ()))
        apply_output_format(params, request, output, strict=self._strict)
        stream = self._stream if stream is None else stream
        if stream:
            options = dict(params.get("stream_options") or {})
            options.setdefault("include_usage", True)
            params["stream_options"] = options
        return split_known(params, _KNOWN), stream

    def _responses_params(
        self, request: GenerateRequest, output: str | None
    ) -> tuple[dict[str, Any], bool]:
        if request.settings:
            settings = _responses.normalise_settings(request.settings)
            request = msgspec.structs.replace(request, settings=settings)
        params, stream = merge_settings(self._defaults, request)
        stateless = params.get("store") is False
        params["input"] = _responses.build_input(request, stateless=stateless)
        if stateless:
            include = list(params.get("include") or ())
            if _ENCRYPTED_REASONING not in include:
                params["include"] = [*include, _ENCRYPTED_REASONING]
        if request.tools:
            params["tools"] = _responses.build_tools(request.tools) + list(params.get("tools", ()))
        _responses.apply_output_format(params, request, output, strict=self._strict)
        stream = self._stream if stream is None else stream
        return split_known(params, _KNOWN_RESPONSES), stream

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        """One Chat Completions (or Responses) call for ``request``.

        With an output schema the request goes out in the format its ``output_mode``
        asks for; a server that refuses that format is sent the next one at once (see
        :class:`~operative.providers._output_modes.OutputFormats`).
        """
        model = str(request.settings.get("model") or self.model)
        return await self._formats.send(request, model, self._send)

    async def _send(self, request: GenerateRequest, output: str | None) -> GenerateResponse:
        responses = self.api == "responses"
        if responses:
            params, stream = self._responses_params(request, output)
        else:
            params, stream = self._params(request, output)
        model = str(params["model"])
        try:
            if responses:
                answer = await self._responses_call(params, stream, model)
            else:
                answer = await self._chat_call(params, stream, model)
        except openai.OpenAIError as error:
            _raise_mapped(error, model, _sent_fields(params))
        except httpx2.TimeoutException as error:
            raise timeout_error(provider=PROVIDER, model=model, detail=str(error)) from error
        except httpx2.TransportError as error:
            raise connection_error(
                provider=PROVIDER, model=model, detail=f"the connection was cut: {error}"
            ) from error
        # A server that reports no usage (llama.cpp's streams) gets an estimate, flagged.
        return estimate_usage(request, answer)

    async def _chat_call(
        self, params: dict[str, Any], stream: bool, model: str
    ) -> GenerateResponse:
        client = self.client
        if not stream:
            completion = await client.chat.completions.create(**params)
            return response_from_completion(completion)
        assembler = StreamAssembler(with_run_sink(self._on_delta))
        sse = SseLines()
        async with client.chat.completions.with_streaming_response.create(
            **params, stream=True
        ) as response:
            http = response.http_response
            request_id = response.request_id
            whole = _is_json(http.headers.get("content-type"))
            if whole:
                # A server may answer a streamed request with the complete answer, as JSON
                # (llama-cpp-python's server does, for some requests).
                body = await http.aread()
            else:
                # Read to the end (never break): the body's generators then all finish.
                async for data in http.aiter_bytes():
                    for event in sse.feed(data):
                        assembler.feed_data(event)
        if whole:
            try:
                decoded = json.loads(body)
            except ValueError as error:
                raise connection_error(
                    provider=PROVIDER,
                    model=model,
                    detail=f"the JSON answer to a streamed request is not valid JSON: {error}",
                    request_id=request_id,
                ) from error
            assembler.feed_completion(decoded)
        if assembler.error is not None:
            raise _stream_error(assembler.error, model, request_id)
        if assembler.stop_reason is None:
            raise connection_error(
                provider=PROVIDER,
                model=model,
                detail=(
                    "the JSON answer to a streamed request has no finish_reason"
                    if whole
                    else "the stream ended before finish_reason"
                ),
                request_id=request_id,
            )
        return assembler.response()

    async def _responses_call(
        self, params: dict[str, Any], stream: bool, model: str
    ) -> GenerateResponse:
        """``POST /responses``; the same SSE reading as the chat path when streaming."""
        client = self.client
        if not stream:
            answer = await client.responses.create(**params)
            body = answer.to_dict(mode="json")
            if body.get("status") == "failed":
                error = body.get("error")
                request_id = answer._request_id
                raise _stream_error(error if isinstance(error, Mapping) else {}, model, request_id)
            return _responses.response_from_body(body)
        assembler = ResponsesAssembler(with_run_sink(self._on_delta))
        sse = SseLines()
        async with client.responses.with_streaming_response.create(
            **params, stream=True
        ) as response:
            http = response.http_response
            request_id = response.request_id
            # Read to the end (never break): the body's generators then all finish.
            async for data in http.aiter_bytes():
                for event in sse.feed(data):
                    assembler.feed_data(event)
        if assembler.error is not None:
            raise _stream_error(assembler.error, model, request_id)
        if not assembler.finished:
            raise connection_error(
                provider=PROVIDER,
                model=model,
                detail="the stream ended before response.completed",
                request_id=request_id,
            )
        return assembler.response()


def _is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` names JSON (``application/json``, ``...+json``)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _stream_error(error: Mapping[str, Any], model: str, request_id: str | None) -> ProviderError:
    """An error object sent inside a 200 answer (a stream's error event, a failed
    response): a server-side failure, retryable."""
    code = f"{error.get('code') or ''} {error.get('type') or ''}"
    return status_error(
        provider=PROVIDER,
        model=model,
        status=429 if "rate_limit" in code else 500,
        message=str(error.get("message") or "an error occurred during streaming"),
        headers={},
        request_id=request_id,
        key_variable=KEY_VARIABLE,
    )


def _sent_fields(params: Mapping[str, Any]) -> list[str]:
    """The body's top-level fields (those in ``extra_body`` too)."""
    extra = params.get("extra_body")
    return [*params, *(extra if isinstance(extra, Mapping) else ())]


def _raise_mapped(error: openai.OpenAIError, model: str, fields: list[str]) -> NoReturn:
    if isinstance(error, openai.APIStatusError):
        body = error.body
        message = error.message
        if isinstance(body, Mapping) and isinstance(body.get("message"), str):
            message = body["message"]
        raise status_error(
            provider=PROVIDER,
            model=model,
            status=error.status_code,
            message=message,
            headers=error.response.headers,
            request_id=error.request_id,
            key_variable=KEY_VARIABLE,
            sent_fields=fields,
        ) from error
    if isinstance(error, openai.APITimeoutError):
        raise timeout_error(provider=PROVIDER, model=model) from error
    if isinstance(error, openai.APIConnectionError):
        raise connection_error(provider=PROVIDER, model=model, detail=error.message) from error
    if isinstance(error, openai.APIResponseValidationError):
        raise ProviderError(
            f"openai ({model}): {error.message}", provider=PROVIDER, model=model
        ) from error
    raise ProviderError(f"openai ({model}): {error}", provider=PROVIDER, model=model) from error


def openai_generate(
    *,
    model: str,
    client: openai.AsyncOpenAI | None = None,
    api: Literal["chat", "responses"] = "chat",
    stream: bool = False,
    on_delta: DeltaCallback | None = None,
    strict_output: bool = False,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    max_retries: int = 0,
    **settings: Any,
) -> OpenAIGenerate:
    """A ``GenerateFunction`` that calls OpenAI's Chat Completions or Responses API.

    Works with any OpenAI-compatible server through ``base_url`` (vLLM, llama.cpp's
    server, LM Studio, ...).

    Args:
        model: The model name (``request.settings["model"]`` overrides it per call).
        client: An ``openai.AsyncOpenAI`` you own and close. Without it the adapter
            makes one on first use (``api_key`` or ``OPENAI_API_KEY``; with ``base_url``
            and no key, a placeholder key) and closes it in ``aclose()``: use
            ``async with openai_generate(...) as g:``.
        api: ``"chat"`` (``POST /chat/completions``) or ``"responses"``
            (``POST /responses``). With ``"responses"`` the conversation goes out as
            ``input`` items (messages, ``function_call`` and ``function_call_output``),
            tools as flat ``function`` tools, an output schema as ``text.format``.
            Reasoning items the model returns are kept in the answer's
            ``metadata["openai"]["output"]`` (so on the assistant message) and sent
            back, with their ``encrypted_content``, before the calls they led to;
            with ``store=False`` item ids are left out and ``include`` asks for
            ``reasoning.encrypted_content``. ``max_tokens`` is sent as
            ``max_output_tokens`` and ``reasoning_effort`` as ``reasoning.effort``.
        stream: Stream the answer (per call: ``settings["stream"]``); the response is the
            same as without streaming, and ``on_delta`` sees each text and tool-argument
            delta as it arrives (and reasoning summaries, as ``"thinking"``, from the
            Responses API). Chat usage is requested with ``stream_options``.
        on_delta: A sync callable given each :class:`~operative.providers.Delta`.
        strict_output: With an ``output_schema`` on the request, the schema goes out as
            ``response_format`` (Chat) or ``text.format`` (Responses), ``json_schema``
            (the native format of the run's ``output_mode``; a server that refuses it
            gets JSON mode and the schema in the prompt instead, unless the mode is
            ``"native"``); ``strict_output=True`` asks for OpenAI's strict mode (the
            schema must then meet its rules).
        api_key, base_url, timeout, max_retries: For the client the adapter makes
            (not allowed with ``client=``). ``max_retries`` defaults to 0 so the run's
            ``RetryOptions`` alone decide on retries.
        **settings: Any other parameter of the chosen API (``temperature``,
            ``max_completion_tokens``, ``tool_choice``, ``reasoning_effort``;
            ``instructions``, ``reasoning``, ``store``, ``include`` for Responses, ...);
            a request's ``settings`` override them.
    """
    if api not in ("chat", "responses"):
        raise InvalidArgument(f"api must be 'chat' or 'responses', got {api!r}")
    if not isinstance(model, str) or not model:
        raise InvalidArgument(f"openai_generate() needs a model name, got {model!r}")
    if on_delta is not None and not callable(on_delta):
        raise InvalidArgument(f"on_delta must be a callable, got {on_delta!r}")
    options: dict[str, Any] = {"max_retries": max_retries}
    if api_key is not None:
        options["api_key"] = api_key
    if base_url is not None:
        options["base_url"] = base_url
    if timeout is not None:
        options["timeout"] = timeout
    if client is not None:
        if not isinstance(client, openai.AsyncOpenAI):
            raise InvalidArgument(
                f"client must be an openai.AsyncOpenAI, got {type(client).__name__}"
            )
        if len(options) > 1 or max_retries != 0:
            raise InvalidArgument(
                "api_key=, base_url=, timeout= and max_retries= configure the client the "
                "adapter makes; set them on your own client= instead"
            )
    if "messages" in settings:
        raise InvalidArgument("messages= is built from the conversation; remove it")
    return OpenAIGenerate(
        model=model,
        client=client,
        api=api,
        client_options=options,
        stream=stream,
        on_delta=on_delta,
        strict_output=strict_output,
        settings=settings,
    )
