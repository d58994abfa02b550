"""``ollama_generate``: a ``GenerateFunction`` over Ollama's REST ``/api/chat``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from ..._core._deltas import with_run_sink
from ..._core._errors import InvalidArgument, ProviderError
from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, ToolSpec, Usage
from ...conversation import ImagePart, Message, TextPart
from .._common import (
    Delta,
    DeltaCallback,
    count_of,
    image_base64,
    merge_settings,
    parse_arguments,
)
from .._errors import connection_error, status_error, timeout_error
from .._httpx import HttpxAdapter
from .._output_modes import (
    TOOL_FORMAT,
    OutputFormats,
    output_hint,
    output_tool,
    tool_instruction,
    with_system_text,
)

__all__ = ["OllamaGenerate", "ollama_generate"]

PROVIDER = "ollama"
KEY_VARIABLE = "OLLAMA_API_KEY"

# Request fields that sit at the top level of the body; every other setting is a model
# option (``options``: temperature, num_ctx, top_p, seed, ...).
_TOP_LEVEL = frozenset({"model", "keep_alive", "think", "format", "options", "tools"})


def _images(message: Message) -> list[str]:
    content = message.content
    if isinstance(content, str):
        return []
    images: list[str] = []
    for part in content:
        if isinstance(part, ImagePart):
            if part.data is None:
                raise InvalidArgument(
                    "Ollama takes images as bytes only; download the image and pass "
                    "ImagePart(data=..., media_type=...) instead of a URL"
                )
            images.append(image_base64(part))
        elif not isinstance(part, TextPart):
            raise InvalidArgument(f"Ollama cannot take a {type(part).__name__} in a message")
    return images


def _arguments(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return dict(arguments)


def build_messages(request: GenerateRequest) -> list[dict[str, Any]]:
    """The transcript as ``/api/chat`` messages, in order."""
    wire: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        role = message.role
        entry: dict[str, Any] = {"role": role, "content": message.text}
        if role == "tool":
            if message.tool_name:
                entry["tool_name"] = message.tool_name
        elif role == "assistant" and message.tool_calls:
            entry["tool_calls"] = [
                {"function": {"name": call.name, "arguments": _arguments(call)}}
                for call in message.tool_calls
            ]
        images = _images(message)
        if images:
            entry["images"] = images
        wire.append(entry)
    return wire


def build_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Tool specs in the OpenAI-style function format Ollama reads."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema,
            },
        }
        for spec in tools
    ]


def _call_id(request: GenerateRequest, index: int, name: str) -> str:
    # Ollama sends no call ids. The transcript position makes them unique across turns,
    # and the index within the answer; both are deterministic (a retry gives the same).
    return f"call_{len(request.conversation.messages)}_{index}_{name}"


def _tool_calls(
    request: GenerateRequest, raw: list[Any], start: int
) -> list[tuple[ToolCall, dict[str, Any]]]:
    calls: list[tuple[ToolCall, dict[str, Any]]] = []
    for offset, item in enumerate(raw):
        function = item.get("function") or {}
        name = str(function.get("name", ""))
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            arguments = parse_arguments(arguments)
        if arguments is None:
            arguments = {}
        call_id = item.get("id") or _call_id(request, start + offset, name)
        calls.append((ToolCall(id=str(call_id), name=name, arguments=arguments), item))
    return calls


def _usage(body: Mapping[str, Any]) -> Usage | None:
    if "prompt_eval_count" not in body and "eval_count" not in body:
        return None
    # A negative count is counted as 0, with a ProviderUsageWarning.
    prompt = count_of("ollama", "prompt_eval_count", int(body.get("prompt_eval_count") or 0))
    completion = count_of("ollama", "eval_count", int(body.get("eval_count") or 0))
    return Usage(prompt=prompt, completion=completion, total=prompt + completion)


class _Assembler:
    """Collects NDJSON chunks into one response; the last chunk has ``done: true``."""

    def __init__(self, request: GenerateRequest, on_delta: DeltaCallback | None) -> None:
        self._request = request
        self._on_delta = on_delta
        self.texts: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCall] = []
        self.final: dict[str, Any] = {}
        self.finished = False

    def feed(self, chunk: Mapping[str, Any]) -> None:
        message = chunk.get("message") or {}
        on_delta = self._on_delta
        text = message.get("content") or ""
        if text:
            self.texts.append(text)
            if on_delta is not None:
                on_delta(Delta(kind="text", text=text))
        thought = message.get("thinking") or ""
        if thought:
            self.thinking.append(thought)
            if on_delta is not None:
                on_delta(Delta(kind="thinking", text=thought))
        raw_calls = message.get("tool_calls") or []
        if raw_calls:
            start = len(self.calls)
            for offset, (call, _) in enumerate(_tool_calls(self._request, raw_calls, start)):
                self.calls.append(call)
                if on_delta is not None:
                    on_delta(
                        Delta(
                            kind="tool_arguments",
                            text=json.dumps(call.arguments)
                            if not isinstance(call.arguments, str)
                            else call.arguments,
                            index=start + offset,
                            call_id=call.id,
                            tool_name=call.name,
                        )
                    )
        if chunk.get("done"):
            self.final = dict(chunk)
            self.finished = True

    def response(self) -> GenerateResponse:
        final = self.final
        metadata: dict[str, Any] = {}
        if self.thinking:
            metadata[PROVIDER] = {"thinking": "".join(self.thinking)}
        return GenerateResponse(
            content="".join(self.texts),
            tool_calls=tuple(self.calls),
            usage=_usage(final),
            model=final.get("model"),
            stop_reason=final.get("done_reason"),
            response_id=None,
            metadata=metadata,
        )


def ollama_formats() -> OutputFormats:
    """Ollama's output formats, with a memory of refusals of its own: ``schema``
    (``format`` set to the schema, native), ``json`` (``format: "json"`` and the schema in
    the system prompt; ``output_mode="prompted"`` starts here), ``prompt`` (the schema in
    the system prompt only)."""
    return OutputFormats(
        native="schema",
        fallbacks=("json", "prompt"),
        prompted=("json", "prompt"),
        fields=("format", "json_schema"),
    )


def apply_output_format(body: dict[str, Any], request: GenerateRequest, kind: str | None) -> None:
    """Ask for the request's output in the format ``kind`` (in place); a ``format`` in
    the settings is sent as given. Ollama has no ``tool_choice``: in ``"tool"`` format
    the final-answer tool is offered and asked for in the system prompt."""
    schema = request.output_schema
    if kind is None or schema is None:
        return
    if kind == TOOL_FORMAT:
        body["tools"] = [*body.get("tools", ()), *build_tools((output_tool(request),))]
        body["messages"] = with_system_text(body["messages"], tool_instruction())
        return
    if kind != "schema":
        body["messages"] = with_system_text(body["messages"], output_hint(request))
    if "format" in body or kind == "prompt":
        return
    body["format"] = schema if kind == "schema" else "json"


class OllamaGenerate(HttpxAdapter):
    """The generate function :func:`ollama_generate` returns (callable, closeable)."""

    provider = PROVIDER

    def __repr__(self) -> str:
        return f"ollama_generate(model={self.model!r}, base_url={self.base_url!r})"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._formats = ollama_formats()

    def body(
        self, request: GenerateRequest, output: str | None = None
    ) -> tuple[dict[str, Any], bool]:
        """The JSON body for ``request``, its output asked for in the format ``output``
        (see :func:`ollama_formats`), and whether to stream."""
        settings, stream_setting = merge_settings(self._defaults, request)
        stream = self._stream if stream_setting is None else stream_setting
        body: dict[str, Any] = {"model": settings.pop("model")}
        body["messages"] = build_messages(request)
        options = dict(settings.pop("options", None) or {})
        tools = list(settings.pop("tools", None) or ())
        for key in [k for k in settings if k not in _TOP_LEVEL]:
            options[key] = settings.pop(key)
        body.update(settings)
        if request.tools or tools:
            body["tools"] = build_tools(request.tools) + tools
        apply_output_format(body, request, output)
        if options:
            body["options"] = options
        body["stream"] = stream
        return body, stream

    def _headers(self) -> dict[str, str]:
        key = self._api_key or os.environ.get(KEY_VARIABLE)
        return {"authorization": f"Bearer {key}"} if key else {}

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        """One ``/api/chat`` call for ``request``.

        With an output schema the request goes out in the format its ``output_mode``
        asks for; a server that refuses the format is sent the next one at once.
        """
        model = str(request.settings.get("model") or self.model)
        return await self._formats.send(request, model, self._send)

    async def _send(self, request: GenerateRequest, output: str | None) -> GenerateResponse:
        body, stream = self.body(request, output)
        model = str(body["model"])
        client = self.client
        http_request = client.build_request(
            "POST", f"{self.base_url}/api/chat", json=body, headers=self._headers()
        )
        assembler = _Assembler(request, with_run_sink(self._on_delta) if stream else None)
        try:
            response = await client.send(http_request, stream=True)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise _status_error(response, model, body)
                if not stream:
                    await response.aread()
                    chunk = response.json()
                    _check_chunk(chunk, model)
                    assembler.feed(chunk)
                    return assembler.response()
                # The stream is read to its end even after a failure line (the server
                # ends it there): leaving httpx's nested generators half-read makes
                # them finalize without being closed.
                failure: ProviderError | None = None
                async for line in response.aiter_lines():
                    if failure is not None or not line.strip():
                        continue
                    try:
                        chunk = json.loads(line)
                    except ValueError:
                        failure = connection_error(
                            provider=PROVIDER, model=model, detail=f"a garbled line: {line!r}"
                        )
                        continue
                    try:
                        _check_chunk(chunk, model)
                    except ProviderError as error:
                        failure = error
                        continue
                    assembler.feed(chunk)
                if failure is not None:
                    raise failure
            finally:
                # On an abort this closes the connection at once (no draining).
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await response.aclose()
        except httpx.TimeoutException as error:
            raise timeout_error(provider=PROVIDER, model=model, detail=str(error)) from error
        except httpx.TransportError as error:
            raise connection_error(
                provider=PROVIDER, model=model, detail=f"the connection was cut: {error!r}"
            ) from error
        if not assembler.finished:
            raise connection_error(
                provider=PROVIDER, model=model, detail="the stream ended before done: true"
            )
        return assembler.response()


def _check_chunk(chunk: Any, model: str) -> None:
    if not isinstance(chunk, dict):
        raise ProviderError(
            f"ollama ({model}): unexpected reply {chunk!r}", provider=PROVIDER, model=model
        )
    if "error" in chunk:  # an error reported inside a 200 stream
        raise status_error(
            provider=PROVIDER,
            model=model,
            status=500,
            message=str(chunk["error"]),
            headers={},
            request_id=None,
            key_variable=KEY_VARIABLE,
        )


def _status_error(response: httpx.Response, model: str, body: Mapping[str, Any]) -> ProviderError:
    try:
        message = str(response.json().get("error") or response.text)
    except (ValueError, AttributeError):
        message = response.text or response.reason_phrase
    return status_error(
        provider=PROVIDER,
        model=model,
        status=response.status_code,
        message=message,
        headers=response.headers,
        request_id=response.headers.get("x-request-id"),
        key_variable=KEY_VARIABLE,
        sent_fields=[*body, *(body.get("options") or ())],
    )


def ollama_generate(
    *,
    model: str,
    base_url: str = "http://127.0.0.1:11434",
    http_client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    timeout: float | None = 600.0,
    stream: bool = False,
    on_delta: DeltaCallback | None = None,
    **settings: Any,
) -> OllamaGenerate:
    """A ``GenerateFunction`` that calls Ollama's ``/api/chat``.

    Args:
        model: The model name (``request.settings["model"]`` overrides it per call).
        base_url: The Ollama server (``/api/chat`` is appended).
        http_client: An ``httpx.AsyncClient`` you own and close. Without it the adapter
            makes one on first use and closes it in ``aclose()``.
        api_key: Sent as a bearer token (default: ``OLLAMA_API_KEY`` when set), for
            Ollama's hosted service or a server behind an authenticating proxy.
        timeout: Seconds for the client the adapter makes (connect, each read).
        stream: Stream NDJSON chunks (per call: ``settings["stream"]``); the response is
            the same, and ``on_delta`` sees each text, thinking and tool-call delta.
        on_delta: A sync callable given each :class:`~operative.providers.Delta`.
        **settings: ``keep_alive``, ``think``, ``format`` and ``tools`` go at the top of
            the body; every other setting (``temperature``, ``num_ctx``, ``top_p``,
            ``seed``, ...) goes into ``options``.
    """
    if not isinstance(model, str) or not model:
        raise InvalidArgument(f"ollama_generate() needs a model name, got {model!r}")
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise InvalidArgument(f"base_url must be an http(s) URL, got {base_url!r}")
    if on_delta is not None and not callable(on_delta):
        raise InvalidArgument(f"on_delta must be a callable, got {on_delta!r}")
    if http_client is not None:
        if not isinstance(http_client, httpx.AsyncClient):
            raise InvalidArgument(
                f"http_client must be an httpx.AsyncClient, got {type(http_client).__name__}"
            )
        if timeout != 600.0:
            raise InvalidArgument(
                "timeout= configures the client the adapter makes; set it on yours"
            )
    if "messages" in settings:
        raise InvalidArgument("messages= is built from the conversation; remove it")
    return OllamaGenerate(
        model=model,
        base_url=base_url,
        http_client=http_client,
        api_key=api_key,
        timeout=timeout,
        stream=stream,
        on_delta=on_delta,
        settings=settings,
    )
