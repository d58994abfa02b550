"""``gemini_generate``: a ``GenerateFunction`` over Gemini's REST ``generateContent``."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx
import trio

from ..._core._deltas import with_run_sink
from ..._core._errors import InvalidArgument, ProviderAuthenticationError, ProviderError
from ..._core._model import GenerateRequest, GenerateResponse
from ..._core._types import ToolCall, ToolSpec, Usage
from ...conversation import ContentPart, FilePart, ImagePart, Message, TextPart
from .._common import (
    Delta,
    DeltaCallback,
    cached_within,
    count_of,
    image_base64,
    is_error_outcome,
    merge_settings,
    parse_arguments,
)
from .._errors import connection_error, status_error, timeout_error
from .._httpx import HttpxAdapter
from .._output_modes import (
    OUTPUT_TOOL_NAME,
    TOOL_FORMAT,
    OutputFormats,
    output_hint,
    output_tool,
)
from ._schema import gemini_schema

__all__ = ["GeminiGenerate", "gemini_generate"]

PROVIDER = "gemini"
KEY_VARIABLES = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
KEY_VARIABLE = "GEMINI_API_KEY (or GOOGLE_API_KEY)"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
METADATA_KEY = "gemini"
"""Key of the adapter's entry in ``GenerateResponse.metadata``: the thought signatures
Gemini asks to get back (``{"signatures": {call_id: sig}, "text_signature": sig}``), the
call ids the API itself sent (``"api_ids"``), and any thought summary (``"thoughts"``)."""

# Settings that sit at the top level of the body; every other one is generation config.
_TOP_LEVEL = {
    "safety_settings": "safetySettings",
    "safetySettings": "safetySettings",
    "tool_config": "toolConfig",
    "toolConfig": "toolConfig",
    "cached_content": "cachedContent",
    "cachedContent": "cachedContent",
    "labels": "labels",
}
_ALIASES = {"max_tokens": "maxOutputTokens", "stop": "stopSequences"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def _part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    if isinstance(part, ImagePart):
        if part.url is not None:
            data: dict[str, Any] = {"fileUri": part.url}
            if part.media_type:
                data["mimeType"] = part.media_type
            return {"fileData": data}
        return {"inlineData": {"mimeType": part.media_type, "data": image_base64(part)}}
    assert isinstance(part, FilePart)
    data = {"fileUri": part.file_id}
    if part.media_type:
        data["mimeType"] = part.media_type
    return {"fileData": data}


def _parts(message: Message) -> list[dict[str, Any]]:
    content = message.content
    if isinstance(content, str):
        return [{"text": content}] if content else []
    return [_part(p) for p in content if not (isinstance(p, TextPart) and not p.text)]


def _model_parts(message: Message, api_ids: set[str]) -> list[dict[str, Any]]:
    extra = message.metadata.get(METADATA_KEY)
    extra = extra if isinstance(extra, Mapping) else {}
    signatures = extra.get("signatures") or {}
    parts = _parts(message)
    text_signature = extra.get("text_signature")
    if text_signature and parts:
        parts[0]["thoughtSignature"] = text_signature
    sent_ids = set(extra.get("api_ids") or ())
    api_ids.update(sent_ids)
    for call in message.tool_calls:
        arguments = call.arguments
        if isinstance(arguments, str):
            parsed = parse_arguments(arguments)
            arguments = parsed if isinstance(parsed, dict) else {}
        function: dict[str, Any] = {"name": call.name, "args": dict(arguments)}
        if call.id in sent_ids:
            function["id"] = call.id
        part: dict[str, Any] = {"functionCall": function}
        signature = signatures.get(call.id)
        if signature:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def _function_response(
    message: Message, names: Mapping[str, str], api_ids: set[str]
) -> dict[str, Any]:
    call_id = message.tool_call_id or ""
    key = "error" if is_error_outcome(message.outcome) else "result"
    response: dict[str, Any] = {
        "name": message.tool_name or names.get(call_id, ""),
        "response": {key: message.text},
    }
    if call_id in api_ids:
        response["id"] = call_id
    return {"functionResponse": response}


def build_contents(
    request: GenerateRequest,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """``(systemInstruction, contents)``: consecutive same-role turns are merged."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    api_ids: set[str] = set()
    for message in request.conversation.messages:
        role = message.role
        if role == "system":
            if message.text:
                system.append({"text": message.text})
            continue
        if role == "assistant":
            names.update((call.id, call.name) for call in message.tool_calls)
            parts = _model_parts(message, api_ids)
            wire_role = "model"
        elif role == "tool":
            parts = [_function_response(message, names, api_ids)]
            wire_role = "user"
        else:
            parts = _parts(message)
            wire_role = "user"
        if not parts:
            continue
        if turns and turns[-1]["role"] == wire_role:
            turns[-1]["parts"].extend(parts)
        else:
            turns.append({"role": wire_role, "parts": parts})
    return ({"parts": system} if system else None), turns


def build_tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Tool specs as one ``functionDeclarations`` tool (schemas converted)."""
    declarations: list[dict[str, Any]] = []
    for spec in tools:
        declaration: dict[str, Any] = {"name": spec.name, "description": spec.description}
        parameters = gemini_schema(spec.input_schema)
        if parameters.get("properties") or parameters.get("type", "object") != "object":
            declaration["parameters"] = parameters
        declarations.append(declaration)
    return [{"functionDeclarations": declarations}]


def usage_from(metadata: Mapping[str, Any] | None) -> Usage | None:
    """``usageMetadata``: cached tokens come out of the prompt; thoughts count as output.
    Counts that cannot be right are clamped (a negative count is 0, the cached tokens at
    most ``promptTokenCount``), with a ``ProviderUsageWarning``."""
    if not metadata:
        return None

    def count(field: str) -> int:
        return count_of("gemini", f"usageMetadata.{field}", int(metadata.get(field) or 0))

    prompt = count("promptTokenCount")
    cached = cached_within(
        "gemini",
        "usageMetadata.cachedContentTokenCount",
        count("cachedContentTokenCount"),
        "usageMetadata.promptTokenCount",
        prompt,
    )
    prompt += count("toolUsePromptTokenCount") - cached
    thoughts = count("thoughtsTokenCount")
    completion = count("candidatesTokenCount") + thoughts
    return Usage(
        prompt=prompt,
        completion=completion,
        total=prompt + completion + cached,
        cache_read=cached,
        reasoning=thoughts,
    )


class _Assembler:
    """Collects ``GenerateContentResponse`` chunks (one, or many when streaming)."""

    def __init__(self, request: GenerateRequest, on_delta: DeltaCallback | None) -> None:
        self._prefix = f"call_{len(request.conversation.messages)}"
        self._on_delta = on_delta
        self.texts: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[ToolCall] = []
        self.signatures: dict[str, str] = {}
        self.text_signature: str | None = None
        self.api_ids: list[str] = []
        self.usage: Mapping[str, Any] | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.finish_reason: str | None = None
        self.finished = False

    def feed(self, chunk: Mapping[str, Any]) -> None:
        self.model = chunk.get("modelVersion") or self.model
        self.response_id = chunk.get("responseId") or self.response_id
        if chunk.get("usageMetadata"):
            self.usage = chunk["usageMetadata"]
        candidates = chunk.get("candidates") or []
        if not candidates:
            feedback = chunk.get("promptFeedback") or {}
            if feedback.get("blockReason"):
                self.finish_reason = str(feedback["blockReason"])
                self.finished = True
            return
        candidate = candidates[0]
        on_delta = self._on_delta
        for part in (candidate.get("content") or {}).get("parts") or ():
            signature = part.get("thoughtSignature")
            call = part.get("functionCall")
            if call is not None:
                index = len(self.calls)
                name = str(call.get("name", ""))
                call_id = call.get("id")
                if call_id:
                    self.api_ids.append(str(call_id))
                else:
                    call_id = f"{self._prefix}_{index}_{name}"
                arguments = call.get("args") or {}
                self.calls.append(ToolCall(id=str(call_id), name=name, arguments=arguments))
                if signature:
                    self.signatures[str(call_id)] = signature
                if on_delta is not None:
                    on_delta(
                        Delta(
                            kind="tool_arguments",
                            text=json.dumps(arguments),
                            index=index,
                            call_id=str(call_id),
                            tool_name=name,
                        )
                    )
                continue
            text = part.get("text")
            if part.get("thought"):
                if text:
                    self.thoughts.append(text)
                    if on_delta is not None:
                        on_delta(Delta(kind="thinking", text=text))
                continue
            if signature and self.text_signature is None:
                self.text_signature = signature
            if text:
                self.texts.append(text)
                if on_delta is not None:
                    on_delta(Delta(kind="text", text=text))
        if candidate.get("finishReason"):
            self.finish_reason = str(candidate["finishReason"])
            self.finished = True

    def response(self) -> GenerateResponse:
        extra: dict[str, Any] = {}
        if self.signatures:
            extra["signatures"] = self.signatures
        if self.text_signature:
            extra["text_signature"] = self.text_signature
        if self.api_ids:
            extra["api_ids"] = self.api_ids
        if self.thoughts:
            extra["thoughts"] = "".join(self.thoughts)
        return GenerateResponse(
            content="".join(self.texts),
            tool_calls=tuple(self.calls),
            usage=usage_from(self.usage),
            model=self.model,
            stop_reason=self.finish_reason,
            response_id=self.response_id,
            metadata={METADATA_KEY: extra} if extra else {},
        )


def gemini_formats() -> OutputFormats:
    """Gemini's output formats, with a memory of refusals of its own: ``schema``
    (``responseMimeType`` JSON and ``responseSchema``, native), ``json`` (JSON mode and
    the schema in the system instruction; ``output_mode="prompted"`` starts here),
    ``prompt`` (the schema in the system instruction only)."""
    return OutputFormats(
        native="schema",
        fallbacks=("json", "prompt"),
        prompted=("json", "prompt"),
        fields=("responseSchema", "response_schema", "responseMimeType", "response_mime_type"),
    )


def apply_output_format(
    body: dict[str, Any], config: dict[str, Any], request: GenerateRequest, kind: str | None
) -> None:
    """Ask for the request's output in the format ``kind``, in ``body`` and its
    ``generationConfig`` (``config``). ``"tool"``: the final-answer function, and
    (unless the settings give a ``tool_config``) ``functionCallingConfig`` mode ``ANY``,
    limited to it when it is the only function."""
    schema = request.output_schema
    if kind is None or schema is None:
        return
    if kind == TOOL_FORMAT:
        (final,) = build_tools((output_tool(request),))[0]["functionDeclarations"]
        tools = list(body.get("tools") or ())
        others = False
        for index, entry in enumerate(tools):
            if isinstance(entry, Mapping) and "functionDeclarations" in entry:
                declared = entry["functionDeclarations"]
                others = bool(declared)
                tools[index] = {**entry, "functionDeclarations": [*declared, final]}
                break
        else:
            tools.append({"functionDeclarations": [final]})
        body["tools"] = tools
        if "toolConfig" not in body:
            calling: dict[str, Any] = {"mode": "ANY"}
            if not others:
                calling["allowedFunctionNames"] = [OUTPUT_TOOL_NAME]
            body["toolConfig"] = {"functionCallingConfig": calling}
        return
    if kind == "schema":
        config["responseMimeType"] = "application/json"
        config["responseSchema"] = gemini_schema(schema)
        return
    system = body.get("systemInstruction") or {"parts": []}
    hint = {"text": output_hint(request)}
    body["systemInstruction"] = {**system, "parts": [*system["parts"], hint]}
    if kind == "json":
        config["responseMimeType"] = "application/json"


class GeminiGenerate(HttpxAdapter):
    """The generate function :func:`gemini_generate` returns (callable, closeable)."""

    provider = PROVIDER

    def __repr__(self) -> str:
        return f"gemini_generate(model={self.model!r})"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._formats = gemini_formats()

    def body(
        self, request: GenerateRequest, output: str | None = None
    ) -> tuple[str, dict[str, Any], bool]:
        """``(model, body, stream)`` for ``request``, its output asked for in the format
        ``output`` (see :func:`gemini_formats`)."""
        settings, stream_setting = merge_settings(self._defaults, request)
        stream = self._stream if stream_setting is None else stream_setting
        model = str(settings.pop("model"))
        body: dict[str, Any] = {}
        system, contents = build_contents(request)
        if system is not None:
            body["systemInstruction"] = system
        body["contents"] = contents
        tools = list(settings.pop("tools", None) or ())
        if request.tools:
            tools[:0] = build_tools(request.tools)
        if tools:
            body["tools"] = tools
        config = dict(settings.pop("generation_config", None) or {})
        config.update(settings.pop("generationConfig", None) or {})
        for key, value in settings.items():
            if key in _TOP_LEVEL:
                body[_TOP_LEVEL[key]] = value
            else:
                config[_ALIASES.get(key) or _camel(key)] = value
        apply_output_format(body, config, request, output)
        if config:
            body["generationConfig"] = config
        return model, body, stream

    def _key(self, model: str) -> str:
        key = self._api_key
        for variable in KEY_VARIABLES:
            key = key or os.environ.get(variable)
        if not key:
            raise ProviderAuthenticationError(
                "no Gemini API key: set the GEMINI_API_KEY (or GOOGLE_API_KEY) environment "
                "variable, or pass api_key=",
                provider=PROVIDER,
                model=model,
            )
        return key

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        """One ``generateContent`` (or ``streamGenerateContent``) call for ``request``.

        With an output schema the request goes out in the format its ``output_mode``
        asks for; a server that refuses ``responseSchema`` is sent the next format at
        once.
        """
        model = str(request.settings.get("model") or self.model)
        return await self._formats.send(request, model, self._send)

    async def _send(self, request: GenerateRequest, output: str | None) -> GenerateResponse:
        model, body, stream = self.body(request, output)
        key = self._key(model)
        client = self.client
        name = model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        http_request = client.build_request(
            "POST",
            f"{self.base_url}/v1beta/{name}:{method}",
            json=body,
            headers={"x-goog-api-key": key},
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
                    reply = response.json()
                    if not isinstance(reply, dict):
                        raise ProviderError(
                            f"gemini ({model}): unexpected reply {reply!r}",
                            provider=PROVIDER,
                            model=model,
                        )
                    assembler.feed(reply)
                    return assembler.response()
                failure = await _read_events(response, assembler, model)
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
                provider=PROVIDER, model=model, detail="the stream ended before a finishReason"
            )
        return assembler.response()


async def _read_events(
    response: httpx.Response, assembler: _Assembler, model: str
) -> ProviderError | None:
    # Read to the end even after a failure (the server ends the stream there): leaving
    # httpx's nested generators half-read makes them finalize without being closed.
    failure: ProviderError | None = None
    async for line in response.aiter_lines():
        if failure is not None or not line.startswith("data:"):
            continue
        data = line[5:].strip()
        try:
            chunk = json.loads(data)
        except ValueError:
            failure = connection_error(
                provider=PROVIDER, model=model, detail=f"a garbled event: {data!r}"
            )
            continue
        if not isinstance(chunk, dict):
            continue
        error = chunk.get("error")
        if isinstance(error, Mapping):
            failure = status_error(
                provider=PROVIDER,
                model=model,
                status=int(error.get("code") or 500),
                message=str(error.get("message", error)),
                headers={},
                request_id=None,
                key_variable=KEY_VARIABLE,
            )
            continue
        assembler.feed(chunk)
    return failure


def _status_error(response: httpx.Response, model: str, body: Mapping[str, Any]) -> ProviderError:
    message = response.text or response.reason_phrase
    try:
        error = response.json().get("error")
        if isinstance(error, Mapping):
            status = error.get("status")
            message = str(error.get("message") or message)
            if status:
                message = f"{status}: {message}"
    except (ValueError, AttributeError):
        pass
    return status_error(
        provider=PROVIDER,
        model=model,
        status=response.status_code,
        message=message,
        headers=response.headers,
        request_id=response.headers.get("x-request-id"),
        key_variable=KEY_VARIABLE,
        sent_fields=[*body, *(body.get("generationConfig") or ())],
    )


def gemini_generate(
    *,
    model: str,
    api_key: str | None = None,
    base_url: str = DEFAULT_BASE_URL,
    http_client: httpx.AsyncClient | None = None,
    timeout: float | None = 600.0,
    stream: bool = False,
    on_delta: DeltaCallback | None = None,
    **settings: Any,
) -> GeminiGenerate:
    """A ``GenerateFunction`` that calls Gemini's ``generateContent`` REST method.

    Args:
        model: The model name, e.g. ``"gemini-2.5-flash"`` (``request.settings["model"]``
            overrides it per call).
        api_key: Sent in ``x-goog-api-key``; default ``GEMINI_API_KEY``, then
            ``GOOGLE_API_KEY`` (read at each call).
        base_url: The API root (``/v1beta/models/{model}:generateContent`` is appended).
        http_client: An ``httpx.AsyncClient`` you own and close. Without it the adapter
            makes one on first use and closes it in ``aclose()``.
        timeout: Seconds for the client the adapter makes (connect, each read).
        stream: Use ``streamGenerateContent?alt=sse`` (per call: ``settings["stream"]``);
            the response is the same, and ``on_delta`` sees each text, thought and
            function-call delta.
        on_delta: A sync callable given each :class:`~operative.providers.Delta`.
        **settings: ``safety_settings``, ``tool_config``, ``cached_content`` and
            ``labels`` go at the top of the body, ``tools`` are added to the function
            declarations; every other setting goes into ``generationConfig`` with its
            name in camelCase (``temperature``, ``max_output_tokens`` or ``max_tokens``,
            ``top_p``, ``thinking_config``, ...), as does a ``generation_config`` dict.
    """
    if not isinstance(model, str) or not model:
        raise InvalidArgument(f"gemini_generate() needs a model name, got {model!r}")
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
    for reserved in ("contents", "system_instruction", "systemInstruction"):
        if reserved in settings:
            raise InvalidArgument(f"{reserved}= is built from the conversation; remove it")
    return GeminiGenerate(
        model=model,
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        timeout=timeout,
        stream=stream,
        on_delta=on_delta,
        settings=settings,
    )
