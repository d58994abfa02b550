"""The command's --model takes the library's model strings, through the library's parser."""

from __future__ import annotations

import sys

import pytest

from operative.cli._errors import UsageError
from operative.cli._models import ModelChoice, choose_model, open_generate
from operative.providers._model_strings import PROVIDERS


def test_every_library_prefix_is_a_model_for_the_command() -> None:
    """Each prefix open_model takes, openai-responses included, is a --model."""
    for provider in PROVIDERS:
        choice = choose_model(f"{provider}:m-1", offline=False, env={})
        assert (choice.provider, choice.model) == (provider, "m-1")
    assert choose_model("ollama:qwen3:8b", offline=False, env={}).model == "qwen3:8b"
    bare = choose_model("openai-responses", offline=False, env={})
    assert (bare.provider, bare.model) == ("openai-responses", "gpt-4o-mini")


def test_servers_come_from_the_environment_as_in_the_library() -> None:
    """OPENAI_BASE_URL serves both OpenAI APIs; a bare OLLAMA_HOST is taken as http://."""
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1", "OLLAMA_HOST": "127.0.0.1:11500"}
    responses = choose_model("openai-responses:qwen", offline=False, env=env)
    assert responses.base_url == "http://127.0.0.1:8080/v1"
    ollama = choose_model("ollama:qwen3", offline=False, env=env)
    assert ollama.base_url == "http://127.0.0.1:11500"


def test_a_bad_model_is_a_usage_error_in_the_library_s_words() -> None:
    """The library's message, with the command's offline alternative."""
    with pytest.raises(UsageError, match="the provider must be one of") as caught:
        choose_model("acme:fast", offline=False, env={})
    assert "'offline'" in str(caught.value)
    with pytest.raises(UsageError, match="name the model"):
        choose_model("gemini", offline=False, env={})


async def test_a_missing_sdk_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the anthropic SDK the command says which extra to install, or --offline."""
    for name in [n for n in sys.modules if n.startswith("operative.providers.anthropic")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "anthropic", None)
    choice = ModelChoice(provider="anthropic", model="claude-haiku-4-5", why="--model")
    with pytest.raises(UsageError, match=r"pip install 'operative\[anthropic\]', or use --offline"):
        async with open_generate(choice):
            pytest.fail("opened without the SDK")
