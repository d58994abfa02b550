"""``anthropic_generate``: a ``GenerateFunction`` over the official ``anthropic`` SDK."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any, Literal, NoReturn

import trio

try:
    import anthropic
    import httpx2
except ImportError as error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "operative.providers.anthropic needs the anthropic SDK: pip install 'operative[anthropic]'"
    ) from error

from ..._core._deltas import with_run_sink
from ..._core._errors import InvalidArgument, ProviderAuthenticationError, ProviderError
from ..._core._model import GenerateRequest, GenerateResponse
from .._common import ClientAdapter, DeltaCallback, merge_settings, split_known
from .._errors import connection_error, status_error, timeout_error
from .._output_modes import OutputFormats
from ._cache import CacheSetting, PromptCache, apply_breakpoints, prompt_cache
from ._convert import apply_output_format, build_messages, build_tools, response_from_message
from ._stream import StreamAssembler

__all__ = ["AnthropicGenerate", "anthropic_generate"]

PROVIDER = "anthropic"
KEY_VARIABLE = "ANTHROPIC_API_KEY"

# The parameters the installed SDK's create() declares; others travel in extra_body.
_KNOWN = frozenset(inspect.signature(anthropic.resources.AsyncMessages.create).parameters)

# What an in-stream ``error`` event's type means, as an HTTP status.
_STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicGenerate(ClientAdapter["anthropic.AsyncAnthropic"]):
    """The generate function :func:`anthropic_generate` returns (callable, closeable)."""

    provider = PROVIDER

    def __init__(
        self,
        *,
        model: str,
        client: anthropic.AsyncAnthropic | None,
        client_options: Mapping[str, Any],
        max_tokens: int,
        stream: bool,
        on_delta: DeltaCallback | None,
        structured_output: Literal["native", "prompt"],
        cache: PromptCache | None,
        settings: Mapping[str, Any],
    ) -> None:
        options = dict(client_options)

        def make_client() -> anthropic.AsyncAnthropic:
            if "api_key" not in options and not os.environ.get(KEY_VARIABLE):
                raise ProviderAuthenticationError(
                    f"no Anthropic API key: set the {KEY_VARIABLE} environment variable, or "
                    "pass api_key= or a configured client=",
                    provider=PROVIDER,
                    model=model,
                )
            return anthropic.AsyncAnthropic(**options)

        super().__init__(client=client, make_client=make_client)
        self.model = model
        self._key_origin = (
            "the client= given to the adapter"
            if client is not None
            else "the api_key= argument"
            if "api_key" in options
            else f"the {KEY_VARIABLE} environment variable"
        )
        self._defaults: dict[str, Any] = {"model": model, "max_tokens": max_tokens, **settings}
        self._stream = stream
        self._on_delta = on_delta
        self._formats = OutputFormats(
            native="json_schema",
            fallbacks=("prompt",),
            prompted=("prompt",),
            fields=("output_config", "json_schema"),
            auto=("json_schema", "prompt") if structured_output == "native" else ("prompt",),
        )
        self.cache = cache
        """Where breakpoints go by themselves (``settings["cache"]`` overrides it per call)."""

    def __repr__(self) -> str:
        return f"anthropic_generate(model={self.model!r})"

    async def _close_client(self, client: anthropic.AsyncAnthropic) -> None:
        await client.close()

    def _params(self, request: GenerateRequest, output: str | None) -> tuple[dict[str, Any], bool]:
        params, stream = merge_settings(self._defaults, request)
        cache = prompt_cache(params.pop("cache")) if "cache" in params else self.cache
        system, messages, hints = build_messages(request, schema_hint=output == "prompt")
        if system:
            given = params.get("system")
            if isinstance(given, str) and given:
                system.insert(0, {"type": "text", "text": given})
            elif isinstance(given, list):
                system[:0] = given
            params["system"] = system
        params["messages"] = messages
        if request.tools:
            params["tools"] = build_tools(request.tools) + list(params.get("tools", ()))
        apply_output_format(params, request, output)
        apply_breakpoints(params, cache, hints)
        return split_known(params, _KNOWN), self._stream if stream is None else stream

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        """One Messages API call for ``request``.

        With an output schema the request goes out in the format its ``output_mode``
        asks for; a server that refuses ``output_config`` is sent the schema in the
        system prompt at once.
        """
        model = str(request.settings.get("model") or self.model)
        return await self._formats.send(request, model, self._send)

    async def _send(self, request: GenerateRequest, output: str | None) -> GenerateResponse:
        params, stream = self._params(request, output)
        model = str(params["model"])
        client = self.client
        try:
            if not stream:
                message = await client.messages.create(**params)
                return response_from_message(message)
            assembler = StreamAssembler(with_run_sink(self._on_delta))
            events = await client.messages.create(**params, stream=True)
            try:
                async for event in events:
                    assembler.feed(event)
            finally:
                # On an abort this closes the connection at once (no draining).
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await events.close()
            if not assembler.finished:
                raise connection_error(
                    provider=PROVIDER,
                    model=model,
                    detail="the stream ended before message_stop",
                )
            return assembler.response()
        except anthropic.AnthropicError as error:
            _raise_mapped(error, model, self._key_origin, [*params, *params.get("extra_body", ())])
        except httpx2.TimeoutException as error:
            raise timeout_error(provider=PROVIDER, model=model, detail=str(error)) from error
        except httpx2.TransportError as error:
            raise connection_error(
                provider=PROVIDER, model=model, detail=f"the connection was cut: {error}"
            ) from error


def _key_sent(response: httpx2.Response, origin: str) -> tuple[bool | None, str]:
    """Whether the request behind ``response`` carried a key, and where it came from and
    went (``None``: the request is not known)."""
    try:
        headers = response.request.headers
    except RuntimeError:  # a response built without its request
        return None, origin
    if headers.get("x-api-key"):
        return True, f"{origin}, sent in the x-api-key header"
    if headers.get("authorization"):
        return True, f"{origin}, sent in the Authorization header (a bearer token)"
    return False, origin


def _raise_mapped(
    error: anthropic.AnthropicError, model: str, key_origin: str, fields: list[str]
) -> NoReturn:
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        if status < 400:  # an error event inside a 200 stream
            status = _STREAM_ERROR_STATUS.get(str(error.type or ""), 500)
        key_sent, key_source = _key_sent(error.response, key_origin)
        raise status_error(
            provider=PROVIDER,
            model=model,
            status=status,
            message=error.api_message or error.message,
            headers=error.response.headers,
            request_id=error.request_id,
            key_variable=KEY_VARIABLE,
            key_sent=key_sent,
            key_source=key_source,
            sent_fields=fields,
        ) from error
    if isinstance(error, anthropic.APITimeoutError):
        raise timeout_error(provider=PROVIDER, model=model) from error
    if isinstance(error, anthropic.APIConnectionError):
        raise connection_error(provider=PROVIDER, model=model, detail=error.message) from error
    if isinstance(error, anthropic.CredentialsError):
        raise ProviderAuthenticationError(
            f"anthropic: {error}; set the {KEY_VARIABLE} environment variable",
            provider=PROVIDER,
            model=model,
        ) from error
    raise ProviderError(f"anthropic ({model}): {error}", provider=PROVIDER, model=model) from error


def anthropic_generate(
    *,
    model: str,
    client: anthropic.AsyncAnthropic | None = None,
    max_tokens: int = 4096,
    stream: bool = False,
    on_delta: DeltaCallback | None = None,
    structured_output: Literal["native", "prompt"] = "native",
    cache: CacheSetting = None,
    api_key: str | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    max_retries: int = 0,
    **settings: Any,
) -> AnthropicGenerate:
    """A ``GenerateFunction`` that calls Anthropic's Messages API.

    Args:
        model: The model name (``request.settings["model"]`` overrides it per call).
        client: An ``anthropic.AsyncAnthropic`` you own and close. Without it the
            adapter makes one on first use (``api_key`` or ``ANTHROPIC_API_KEY``) and
            closes it in ``aclose()``: use ``async with anthropic_generate(...) as g:``.
        max_tokens: The API's required output limit (``settings["max_tokens"]`` wins).
        stream: Stream the answer (per call: ``settings["stream"]``); the response is the
            same as without streaming, and ``on_delta`` sees each text, thinking and
            tool-argument delta as it arrives.
        on_delta: A sync callable given each :class:`~operative.providers.Delta`.
        structured_output: With an ``output_schema`` on a request whose
            ``output_mode`` is unset, ``"native"`` sends it as ``output_config.format``
            (the API constrains the answer; the model must support structured
            outputs), falling back to the schema in the system prompt when the server
            refuses ``output_config``; ``"prompt"`` only adds a system instruction
            with the schema (no guarantee; the loop still validates). A run's
            ``output_mode=`` (``"native"``, ``"tool"``, ``"prompted"``) overrides it.
        cache: Prompt caching. ``"auto"`` (or ``PromptCache()``) marks the system
            prompt, the last tool spec and the latest user turn with
            ``cache_control``; a :class:`PromptCache` chooses which and the TTL; ``None``
            (the default) marks nothing by itself. Either way a message whose
            ``metadata["anthropic.cache_control"]`` is ``True``, ``"5m"``, ``"1h"`` or a
            ``cache_control`` mapping gets a breakpoint on its last block. At most four
            breakpoints are sent. ``settings["cache"]`` overrides it per call.
        api_key, base_url, timeout, max_retries: For the client the adapter makes
            (not allowed with ``client=``). ``max_retries`` defaults to 0 so the run's
            ``RetryOptions`` alone decide on retries.
        **settings: Any other Messages API parameter (``temperature``, ``thinking``,
            ``tool_choice``, ``stop_sequences``, ``metadata``, ...); a request's
            ``settings`` override them.
    """
    if not isinstance(model, str) or not model:
        raise InvalidArgument(f"anthropic_generate() needs a model name, got {model!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgument(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    if on_delta is not None and not callable(on_delta):
        raise InvalidArgument(f"on_delta must be a callable, got {on_delta!r}")
    if structured_output not in ("native", "prompt"):
        raise InvalidArgument(
            f"structured_output must be 'native' or 'prompt', got {structured_output!r}"
        )
    options: dict[str, Any] = {"max_retries": max_retries}
    if api_key is not None:
        options["api_key"] = api_key
    if base_url is not None:
        options["base_url"] = base_url
    if timeout is not None:
        options["timeout"] = timeout
    if client is not None:
        if not isinstance(client, anthropic.AsyncAnthropic):
            raise InvalidArgument(
                f"client must be an anthropic.AsyncAnthropic, got {type(client).__name__}"
            )
        if len(options) > 1 or max_retries != 0:
            raise InvalidArgument(
                "api_key=, base_url=, timeout= and max_retries= configure the client the "
                "adapter makes; set them on your own client= instead"
            )
    cache_policy = prompt_cache(cache)
    for reserved in ("messages", "system_prompt"):
        if reserved in settings:
            raise InvalidArgument(f"{reserved}= is built from the conversation; remove it")
    return AnthropicGenerate(
        model=model,
        client=client,
        client_options=options,
        max_tokens=max_tokens,
        stream=stream,
        on_delta=on_delta,
        structured_output=structured_output,
        cache=cache_policy,
        settings=settings,
    )
