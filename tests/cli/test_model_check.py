"""A model the environment cannot serve (no SDK, no key) is found before the turn starts:
one line of advice in the command's terms, exit code 2, and nothing stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ._process import clean_env, operative, snapshot


def messages(data_dir: Path, session: str) -> list[str]:
    done = operative("sessions", "show", session, "--json", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    return [m["role"] for m in json.loads(done.stdout)["conversation_history"]["messages"]]


@pytest.mark.heavy  # seven real command processes a model: seconds
@pytest.mark.parametrize(
    ("model", "variables"),
    [
        ("openai:gpt-x", ["OPENAI_API_KEY", "OPENAI_BASE_URL"]),
        ("openai-responses:gpt-x", ["OPENAI_API_KEY"]),
        ("anthropic:claude-x", ["ANTHROPIC_API_KEY"]),
        ("gemini:gemini-x", ["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
    ],
)
def test_no_key_fails_before_the_turn_and_stores_nothing(
    tmp_path: Path, model: str, variables: list[str]
) -> None:
    """Three failed demos leave the session and every file as they were."""
    data = ["--data-dir", str(tmp_path)]
    assert operative("demo", "--offline", *data).returncode == 0
    before_messages = messages(tmp_path, "demo")
    before = snapshot(tmp_path)
    for _ in range(3):
        done = operative("demo", "--model", model, *data)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"operative: error: model {model} needs ")
        for variable in variables:
            assert variable in line
        assert "environment variable" in line
        assert "--offline" in line
        assert "--model" in line
        assert "api_key=" not in line
        assert "client=" not in line
        assert "you: " not in done.stdout  # the turn never began
    assert snapshot(tmp_path) == before
    assert messages(tmp_path, "demo") == before_messages


def test_no_key_creates_no_data_directory(tmp_path: Path) -> None:
    """demo, chat, recover and serve check the model before they create anything."""
    fresh = tmp_path / "fresh"
    for command in (["demo"], ["chat"], ["serve", "--port", "0"]):
        done = operative(*command, "--model", "anthropic:claude-x", "--data-dir", str(fresh))
        assert done.returncode == 2, done.stderr
        assert "ANTHROPIC_API_KEY" in done.stderr
        assert not fresh.exists()


def test_a_key_in_the_environment_passes_the_check(tmp_path: Path) -> None:
    """With OPENAI_BASE_URL (a local server needs no key) the turn starts, and fails
    only where the model is unreachable: a run error, exit 1."""
    env = clean_env(OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    done = operative("demo", "--model", "openai:m", "--data-dir", str(tmp_path), env=env)
    assert "needs an OpenAI API key" not in done.stderr
    assert "you: " in done.stdout


def shadowing(tmp_path: Path, *packages: str) -> Path:
    """A directory that, first on PYTHONPATH, makes ``packages`` missing: importing one
    raises what Python raises for a package that is not installed."""
    shadow = tmp_path / "shadow"
    for package in packages:
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text(
            f'raise ModuleNotFoundError("No module named {package!r}", name={package!r})\n'
        )
    return shadow


@pytest.mark.parametrize(
    ("model", "missing", "extra"),
    [
        ("openai:gpt-x", "openai", "openai"),
        ("openai-responses:gpt-x", "openai", "openai"),
        ("anthropic:claude-x", "anthropic", "anthropic"),
        ("anthropic:claude-x", "httpx2", "anthropic"),
    ],
)
def test_a_missing_sdk_names_the_package_and_the_extra(
    tmp_path: Path, model: str, missing: str, extra: str
) -> None:
    """The package that is not installed is named (never ``None``), with the extra."""
    env = clean_env(
        PYTHONPATH=str(shadowing(tmp_path, missing)),
        OPENAI_API_KEY="sk-test",
        ANTHROPIC_API_KEY="sk-test",
    )
    data = tmp_path / "data"
    done = operative("demo", "--model", model, "--data-dir", str(data), env=env)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert f"the package {missing!r} is not installed" in line
    assert f"pip install 'operative[{extra}]'" in line
    assert "--offline" in line
    assert "None" not in line
    assert not data.exists()


@pytest.mark.parametrize(
    ("model", "sdk"),
    [("anthropic:claude-x", "anthropic"), ("openai:gpt-x", "openai")],
)
def test_a_missing_key_is_said_before_the_sdk_loads(model: str, sdk: str) -> None:
    """Importing an SDK takes about a second: a command whose key is missing says so
    without paying it (the SDK is installed, so the key is what is missing)."""
    script = (
        "import sys, trio\n"
        "from operative.cli._errors import UsageError\n"
        "from operative.cli._models import choose_model, open_generate\n"
        f"choice = choose_model({model!r}, offline=False, env={{}})\n"
        "async def main():\n"
        "    try:\n"
        "        async with open_generate(choice, {}):\n"
        "            raise SystemExit('the model opened without a key')\n"
        "    except UsageError as error:\n"
        "        print(error)\n"
        "trio.run(main)\n"
        f"print({sdk!r} in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=clean_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    said, loaded = done.stdout.splitlines()
    assert "API key" in said
    assert loaded == "False"
