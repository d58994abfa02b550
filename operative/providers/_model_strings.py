"""Model strings: ``"provider:model"`` names an adapter, for the library and the command.

``open_model("anthropic:claude-haiku-4-5")`` is ``anthropic_generate(model=...)`` in an
``async with`` block that owns its client; ``create_agent(model=...)`` opens one per run.
The vendor subpackage is imported only when a string is opened (``import operative``
imports no SDK), and a missing SDK or key fails there, before any request.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs

from .._core._errors import InvalidArgument, ProviderAuthenticationError
from .._core._model import (
    GenerateFunction,
    GenerateRequest,
    GenerateResponse,
    did_you_mean_model,
)
from ._common import ClientAdapter

__all__ = [
    "PROVIDERS",
    "ModelString",
    "RunModel",
    "build_model",
    "environment_base_url",
    "open_model",
    "parse_model_string",
]

PROVIDERS = ("anthropic", "openai", "openai-responses", "gemini", "ollama")
"""The prefixes a model string may start with."""

# The extra (and the SDK module it installs) each provider needs; the others need none.
_EXTRAS = {"anthropic": "anthropic", "openai": "openai", "openai-responses": "openai"}
_GEMINI_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


@attrs.frozen(kw_only=True)
class ModelString:
    """A parsed ``"provider:model"``."""

    provider: str
    """One of :data:`PROVIDERS`."""
    model: str
    """Everything after the first colon (``"ollama:qwen3:8b"`` names ``qwen3:8b``)."""

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"

    @property
    def adapter_provider(self) -> str:
        """The ``provider`` attribute of the adapter it opens (``openai`` for both APIs)."""
        return "openai" if self.provider == "openai-responses" else self.provider


def parse_model_string(spec: str) -> ModelString:
    """``"anthropic:claude-haiku-4-5"`` as a :class:`ModelString`, or InvalidArgument."""
    if not isinstance(spec, str):
        raise InvalidArgument(
            f"a model string is a str such as 'anthropic:claude-haiku-4-5', got {spec!r}"
        )
    provider, colon, model = spec.partition(":")
    if provider not in PROVIDERS:
        raise InvalidArgument(
            f"model string {spec!r}: the provider must be one of {', '.join(PROVIDERS)} "
            f"(as in 'anthropic:claude-haiku-4-5'){did_you_mean_model(spec, PROVIDERS)}"
        )
    if not colon or not model.strip():
        raise InvalidArgument(f"model string {spec!r}: name the model, as in '{provider}:MODEL'")
    return ModelString(provider=provider, model=model)


def environment_base_url(parsed: ModelString, env: Mapping[str, str]) -> str | None:
    """The server the environment names: ``OPENAI_BASE_URL`` for ``openai`` and
    ``openai-responses``, ``OLLAMA_HOST`` for ``ollama`` (a bare ``host:port`` is taken
    as ``http://``, as Ollama's own clients do)."""
    if parsed.provider in ("openai", "openai-responses"):
        return env.get("OPENAI_BASE_URL") or None
    if parsed.provider == "ollama":
        url = env.get("OLLAMA_HOST")
        if url and "://" not in url:
            url = f"http://{url}"
        return url or None
    return None


def _missing_sdk(parsed: ModelString, error: ImportError) -> InvalidArgument:
    extra = _EXTRAS[parsed.provider]
    return InvalidArgument(
        f"model string {str(parsed)!r} needs the {extra} SDK ({error.name or extra} is not "
        f"installed): pip install 'operative[{extra}]'"
    )


def build_model(
    spec: str | ModelString,
    settings: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> ClientAdapter[Any]:
    """The adapter a model string names, not yet holding a client.

    ``settings`` go to the provider's factory (``api_key``, ``base_url``, ``stream``,
    ``temperature``, ...). Raises InvalidArgument for a bad string or a missing SDK.
    """
    parsed = spec if isinstance(spec, ModelString) else parse_model_string(spec)
    options = dict(settings or {})
    if "model" in options:
        raise InvalidArgument(
            f"model= is named by the model string {str(parsed)!r}; remove it from the settings"
        )
    if parsed.provider == "openai-responses" and "api" in options:
        raise InvalidArgument(
            "api= is chosen by the prefix: 'openai-responses:' is the Responses API, "
            "'openai:' Chat Completions"
        )
    if not {"base_url", "client", "http_client"} & options.keys():
        url = environment_base_url(parsed, os.environ if env is None else env)
        if url is not None:
            options["base_url"] = url
    provider, model = parsed.provider, parsed.model
    if provider == "anthropic":
        try:
            from .anthropic import anthropic_generate
        except ImportError as error:
            raise _missing_sdk(parsed, error) from error
        return anthropic_generate(model=model, **options)
    if provider in ("openai", "openai-responses"):
        try:
            from .openai import openai_generate
        except ImportError as error:
            raise _missing_sdk(parsed, error) from error
        if provider == "openai-responses":
            options["api"] = "responses"
        return openai_generate(model=model, **options)
    if provider == "gemini":
        from .gemini import gemini_generate

        return gemini_generate(model=model, **options)
    from .ollama import ollama_generate

    return ollama_generate(model=model, **options)


def _check_key(
    parsed: ModelString, generate: ClientAdapter[Any], settings: Mapping[str, Any]
) -> None:
    """Fail now, before any request, when the adapter has no key to send."""
    if parsed.provider == "gemini":
        if settings.get("api_key") or any(os.environ.get(name) for name in _GEMINI_KEYS):
            return
        raise ProviderAuthenticationError(
            "no Gemini API key: set the GEMINI_API_KEY (or GOOGLE_API_KEY) environment "
            "variable, or pass api_key=",
            provider="gemini",
            model=parsed.model,
        )
    # The adapter makes its client now, inside the block; without a key it raises
    # ProviderAuthenticationError naming the variable to set.
    generate.client  # noqa: B018


@asynccontextmanager
async def open_model(model: str, /, **settings: Any) -> AsyncIterator[GenerateFunction]:
    """The generate function a model string names, with its client, for the block.

    ::

        async with open_model("openai:gpt-4o-mini", temperature=0) as generate:
            agent = create_agent(generate=generate)

    ``model`` is ``"anthropic:..."``, ``"openai:..."`` (Chat Completions),
    ``"openai-responses:..."`` (the Responses API), ``"gemini:..."`` or
    ``"ollama:..."``, the strings ``operative --model`` takes. ``settings`` go to the
    provider's factory (``anthropic_generate``, ``openai_generate``, ...): ``api_key``,
    ``base_url``, ``stream``, ``on_delta``, API parameters. Without ``base_url``,
    ``openai``/``openai-responses`` take ``OPENAI_BASE_URL`` and ``ollama`` takes
    ``OLLAMA_HOST`` when they are set.

    The SDK client is made when the block opens and closed when it ends. A bad string
    or a missing SDK raises InvalidArgument (naming the extra to install), a missing
    key ProviderAuthenticationError (naming the variable to set), both before any
    request.
    """
    parsed = parse_model_string(model)
    generate = build_model(parsed, settings)
    async with generate:
        _check_key(parsed, generate, settings)
        yield generate


class RunModel:
    """The generate function of ``create_agent(model=...)``: a model string, opened per run.

    ``open_run`` opens it for each run (``open_for_run``): the client is made when the
    run opens and closed once the run has ended. Called outside a run (a handoff to
    the agent, a direct call), each call opens and closes a client of its own.
    """

    __slots__ = ("model", "model_string", "provider")

    def __init__(self, spec: str) -> None:
        parsed = parse_model_string(spec)
        extra = _EXTRAS.get(parsed.provider)
        if extra is not None and importlib.util.find_spec(extra) is None:
            raise _missing_sdk(parsed, ModuleNotFoundError(name=extra))
        self.model_string = parsed
        self.provider = parsed.adapter_provider
        """The adapter's provider name (for instrumentation)."""
        self.model = parsed.model

    def __repr__(self) -> str:
        return f"RunModel({str(self.model_string)!r})"

    def open_for_run(self) -> AbstractAsyncContextManager[GenerateFunction]:
        """The model, opened for one run."""
        return open_model(str(self.model_string))

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        """One call with a client of its own (outside a run's own opening)."""
        async with open_model(str(self.model_string)) as generate:
            return await generate(request)
