"""Which model the command talks to: ``--model provider:model``, or found in the environment."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs

from ._agents import offline_generate
from ._errors import UsageError

__all__ = ["PROVIDERS", "ModelChoice", "choose_model", "open_generate"]

PROVIDERS = ("anthropic", "openai", "ollama", "gemini")

DEFAULT_MODELS = {
    "anthropic": "claude-haiku-4-5",
    "openai": "gpt-4o-mini",
}

_EXTRAS = {"anthropic": "anthropic", "openai": "openai"}


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
    """``offline`` or ``provider:model`` (``provider`` alone takes its default model)."""
    if spec == "offline":
        return ModelChoice(provider="offline", model="offline", why="--model offline")
    provider, _, model = spec.partition(":")
    if provider not in PROVIDERS:
        raise UsageError(
            f"--model {spec!r}: the provider must be one of {', '.join(PROVIDERS)} (as in "
            "'anthropic:claude-haiku-4-5'), or 'offline' for the scripted model"
        )
    if not model:
        model = env.get("OPERATIVE_MODEL") or DEFAULT_MODELS.get(provider, "")
        if not model:
            raise UsageError(f"--model {spec!r}: name the model, as in '{provider}:MODEL'")
    base_url = None
    if provider == "openai":
        base_url = env.get("OPENAI_BASE_URL") or None
    elif provider == "ollama":
        base_url = env.get("OLLAMA_HOST") or None
    return ModelChoice(provider=provider, model=model, why="--model", base_url=base_url)


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


def _adapter(choice: ModelChoice) -> Any:
    try:
        if choice.provider == "anthropic":
            from ..providers.anthropic import anthropic_generate

            return anthropic_generate(model=choice.model, stream=True)
        if choice.provider == "openai":
            from ..providers.openai import openai_generate

            return openai_generate(model=choice.model, base_url=choice.base_url, stream=True)
        if choice.provider == "ollama":
            from ..providers.ollama import ollama_generate

            if choice.base_url:
                return ollama_generate(model=choice.model, base_url=choice.base_url, stream=True)
            return ollama_generate(model=choice.model, stream=True)
        from ..providers.gemini import gemini_generate

        return gemini_generate(model=choice.model, stream=True)
    except ImportError as exc:
        extra = _EXTRAS.get(choice.provider, choice.provider)
        raise UsageError(
            f"the {choice.provider} provider needs its SDK ({exc.name} is not installed): "
            f"pip install 'operative[{extra}]', or use --offline"
        ) from None


@asynccontextmanager
async def open_generate(choice: ModelChoice) -> AsyncIterator[Any]:
    """The ``GenerateFunction`` for ``choice``; a provider's client is closed on exit."""
    if choice.offline:
        yield offline_generate
        return
    generate = _adapter(choice)
    if hasattr(generate, "__aenter__"):
        async with generate:
            yield generate
    else:
        try:
            yield generate
        finally:
            close = getattr(generate, "aclose", None)
            if close is not None:
                await close()
