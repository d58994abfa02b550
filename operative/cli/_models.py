"""Which model the command talks to: ``--model provider:model``, or found in the environment."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import attrs

from .._core._errors import InvalidArgument, ProviderAuthenticationError
from ..providers._model_strings import (
    PROVIDERS,
    environment_base_url,
    open_model,
    parse_model_string,
)
from ._agents import offline_generate
from ._errors import UsageError

__all__ = ["PROVIDERS", "ModelChoice", "choose_model", "open_generate"]

DEFAULT_MODELS = {
    "anthropic": "claude-haiku-4-5",
    "openai": "gpt-4o-mini",
    "openai-responses": "gpt-4o-mini",
}


@attrs.frozen(kw_only=True)
class ModelChoice:
    """A model to use: ``provider`` is ``"offline"`` for the scripted stand-in."""

    provider: str
    model: str
    why: str
    """How it was chosen, for the banner."""
    base_url: str | None = None

    @property
    def offline(self) -> bool:
        return self.provider == "offline"

    @property
    def label(self) -> str:
        if self.offline:
            return "OFFLINE scripted model (a stand-in, not an LLM; no API key used)"
        where = f" at {self.base_url}" if self.base_url else ""
        return f"{self.provider}:{self.model}{where}"


def parse_model(spec: str, env: Mapping[str, str]) -> ModelChoice:
    """``offline`` or ``provider:model`` (``provider`` alone takes its default model).

    The string is the library's model string (``operative.providers.open_model``),
    parsed by the same parser.
    """
    if spec == "offline":
        return ModelChoice(provider="offline", model="offline", why="--model offline")
    provider, _, model = spec.partition(":")
    if provider in PROVIDERS and not model:
        model = env.get("OPERATIVE_MODEL") or DEFAULT_MODELS.get(provider, "")
        if not model:
            raise UsageError(f"--model {spec!r}: name the model, as in '{provider}:MODEL'")
        spec = f"{provider}:{model}"
    try:
        parsed = parse_model_string(spec)
    except InvalidArgument as exc:
        raise UsageError(f"--model: {exc}, or 'offline' for the scripted model") from None
    return ModelChoice(
        provider=parsed.provider,
        model=parsed.model,
        why="--model",
        base_url=environment_base_url(parsed, env),
    )


def choose_model(spec: str | None, *, offline: bool, env: Mapping[str, str]) -> ModelChoice:
    """The model for a command: ``--offline``, ``--model``, else the environment's.

    ``ANTHROPIC_API_KEY`` picks Anthropic, ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` (an
    OpenAI-compatible server) picks OpenAI; ``OPERATIVE_MODEL`` names the model. With
    none of them set, the offline scripted model is used.
    """
    if offline:
        return ModelChoice(provider="offline", model="offline", why="--offline")
    if spec:
        return parse_model(spec, env)
    named = env.get("OPERATIVE_MODEL")
    if named and ":" in named:
        return parse_model(named, env)
    if env.get("ANTHROPIC_API_KEY"):
        model = named or DEFAULT_MODELS["anthropic"]
        return ModelChoice(provider="anthropic", model=model, why="ANTHROPIC_API_KEY is set")
    if env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"):
        why = "OPENAI_BASE_URL is set" if env.get("OPENAI_BASE_URL") else "OPENAI_API_KEY is set"
        return ModelChoice(
            provider="openai",
            model=named or DEFAULT_MODELS["openai"],
            why=why,
            base_url=env.get("OPENAI_BASE_URL") or None,
        )
    return ModelChoice(
        provider="offline",
        model="offline",
        why="no ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENAI_BASE_URL is set",
    )


_KEYS = {
    "anthropic": ("an Anthropic", ("ANTHROPIC_API_KEY",)),
    "openai": ("an OpenAI", ("OPENAI_API_KEY",)),
    "openai-responses": ("an OpenAI", ("OPENAI_API_KEY",)),
    "gemini": ("a Gemini", ("GEMINI_API_KEY", "GOOGLE_API_KEY")),
}
"""Each provider's name and the environment variables its key may come from."""

_SDKS = {
    "anthropic": ("anthropic", "httpx2"),
    "openai": ("openai", "httpx2"),
    "openai-responses": ("openai", "httpx2"),
    "gemini": ("httpx",),
}
"""The packages each provider's adapter imports (the extra that brings them)."""


def _keyless(choice: ModelChoice, env: Mapping[str, str]) -> bool:
    """True when ``env`` holds no key for ``choice``'s provider (and, for OpenAI, no
    ``--base-url``/``OPENAI_BASE_URL`` server that may need none)."""
    return choice.provider in _KEYS and not (
        any(env.get(name) for name in _KEYS[choice.provider][1])
        or (choice.base_url and choice.provider.startswith("openai"))
    )


def _installed(choice: ModelChoice) -> bool:
    """True when the packages ``choice``'s adapter imports are installed (found, not
    imported: an SDK takes about a second to import)."""
    return all(importlib.util.find_spec(name) is not None for name in _SDKS[choice.provider])


def _no_key(choice: ModelChoice) -> UsageError:
    vendor, names = _KEYS[choice.provider]
    variables = " (or ".join(names) + ")" * (len(names) - 1)
    server = (
        " (or OPENAI_BASE_URL, for an OpenAI-compatible server that needs none)"
        if choice.provider.startswith("openai")
        else ""
    )
    return UsageError(
        f"model {choice.provider}:{choice.model} needs {vendor} API key: set the "
        f"{variables} environment variable{server}, pass another --model, or use --offline"
    )


def _missing_package(error: BaseException) -> str | None:
    """The module an ImportError somewhere in ``error``'s causes could not import."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ImportError) and seen.name:
            return seen.name
        seen = seen.__cause__ or seen.__context__
    return None


def _no_sdk(choice: ModelChoice, error: InvalidArgument) -> UsageError:
    package = _missing_package(error)
    if package is None:
        return UsageError(f"model {choice.provider}:{choice.model}: {error}, or use --offline")
    extra = "openai" if choice.provider.startswith("openai") else choice.provider
    return UsageError(
        f"model {choice.provider}:{choice.model} needs the {extra} SDK, and the "
        f"package {package!r} is not installed: pip install 'operative[{extra}]', or use "
        "--offline (or pass another --model)"
    )


@asynccontextmanager
async def open_generate(
    choice: ModelChoice, env: Mapping[str, str] | None = None
) -> AsyncIterator[Any]:
    """The ``GenerateFunction`` for ``choice``; a provider's client is closed on exit.

    A provider's adapter is the library's ``open_model`` for ``provider:model``,
    streaming, at ``choice.base_url`` when there is one. A missing SDK or key (in
    ``env``, default ``os.environ``) is a UsageError saying what to set or install,
    raised here, before any request or turn.
    """
    if choice.offline:
        yield offline_generate
        return
    env = os.environ if env is None else env
    keyless = _keyless(choice, env)
    if keyless and _installed(choice):
        # Said before the SDK loads (a second), as it would be said after: the key is
        # what is missing. A missing SDK is found by importing it, below.
        raise _no_key(choice)
    settings: dict[str, Any] = {"stream": True}
    if choice.base_url:
        settings["base_url"] = choice.base_url
    async with AsyncExitStack() as stack:
        try:
            generate = await stack.enter_async_context(
                open_model(f"{choice.provider}:{choice.model}", **settings)
            )
        except InvalidArgument as exc:  # a missing SDK: the extra to install
            raise _no_sdk(choice, exc) from None
        except ProviderAuthenticationError:  # no key where the adapter looks
            raise _no_key(choice) from None
        if keyless:
            raise _no_key(choice)  # the command's environment (the adapter reads os.environ)
        yield generate
