"""anthropic_generate against an Anthropic-format server nobody here wrote.

llm-katan (PyPI) serves the Messages API; its ``echo`` backend needs no model. It reads
the key only from ``x-api-key``, checks its value with ``--validate-keys``, answers
every request that offers tools with a ``tool_use`` block for the first tool, and opens
a streamed ``tool_use`` block with an empty ``partial_json``: what the local wire
server (``_anthropic_wire.py``) reproduces, here from the outside.

llm-katan is installed by pip into a cache directory of its own (once) and run from
there, never into the project's environment: its wheel carries a top-level ``tests``
package that would shadow this suite's. Without PyPI the tests are skipped, except
under CI, where they fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio

pytest.importorskip("anthropic")

import anthropic
from _cached_install import cache_root, install_once
from _doubles import get_weather

from operative import Conversation, GenerateRequest, create_agent
from operative.providers import Delta, ProviderAuthenticationError
from operative.providers.anthropic import anthropic_generate

KEY = "katan-test-key"
MODEL = "claude-katan"
KATAN = "llm-katan==0.22.0"
_RUNNING = re.compile(rb"Uvicorn running on (http://127\.0\.0\.1:\d+)")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def katan_path() -> Path:
    """A directory holding llm-katan and its dependencies (installed on first use)."""
    target = cache_root() / KATAN.replace("==", "-")
    if (target / "llm_katan").is_dir():
        return target
    install_once(
        target,
        lambda staging: [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "--target",
            str(staging),
            KATAN,
        ],
        what=KATAN,
        unavailable=_unavailable,
    )
    return target


@pytest.fixture
async def katan(nursery: trio.Nursery, tmp_path: Path, katan_path: Path) -> AsyncIterator[str]:
    """llm-katan on 127.0.0.1 (an ephemeral port), checking keys; yields its base URL."""
    command = [
        sys.executable,
        "-c",
        "from llm_katan.cli import main; main()",
        "--model=katan-echo",
        f"--served-model-name={MODEL}",
        "--backend=echo",
        "--host=127.0.0.1",
        "--port=0",
        "--providers=anthropic",
        "--validate-keys",
        f"--api-keys=anthropic={KEY}",
        f"--stats-file={tmp_path / 'stats.json'}",
        "--log-level=info",
    ]
    process: trio.Process = await nursery.start(
        partial(
            trio.run_process,
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
            env={**os.environ, "PYTHONPATH": str(katan_path)},
        )
    )
    assert process.stdout is not None
    output = bytearray()
    url: list[str] = []
    ready = trio.Event()

    async def drain() -> None:
        # Read the server's log for as long as it runs, so it never blocks on the pipe.
        assert process.stdout is not None
        async for chunk in process.stdout:
            output.extend(chunk)
            if not url and (found := _RUNNING.search(output)):
                url.append(found.group(1).decode())
                ready.set()
        ready.set()

    nursery.start_soon(drain)
    with trio.fail_after(60):
        await ready.wait()
    assert url, f"llm-katan did not start: {output.decode(errors='replace')}"
    yield url[0]
    nursery.cancel_scope.cancel()  # run_process ends the server


def _client(base_url: str, key: str) -> anthropic.AsyncAnthropic:
    """A client that also sends its key in x-api-key, the header the server reads."""
    return anthropic.AsyncAnthropic(
        api_key=key, default_headers={"x-api-key": key}, base_url=base_url, max_retries=0
    )


def _request() -> GenerateRequest:
    conversation = Conversation()
    conversation.append_user_message("hi")
    return GenerateRequest(conversation=conversation.current)


async def test_a_key_in_the_bearer_header_is_reported_where_it_went(katan: str) -> None:
    """The SDK sends api_key as a bearer token; the server wants x-api-key. The 401
    says the key was sent and rejected, which header carried it, and the server's
    words; it does not tell the user to set ANTHROPIC_API_KEY."""
    async with anthropic_generate(model=MODEL, api_key=KEY, base_url=katan) as generate:
        with pytest.raises(ProviderAuthenticationError) as caught:
            await generate(_request())
    text = str(caught.value)
    assert caught.value.status == 401
    assert "rejected the API key from the api_key= argument, sent in the " in text
    assert "set the ANTHROPIC_API_KEY" not in text
    # This SDK puts api_key in Authorization; an SDK that uses x-api-key gets past the
    # header check and this server's message then names the key, not the header.
    assert "Authorization header" in text or "x-api-key header" in text
    assert "missing x-api-key header" in text or "invalid API key" in text


async def test_a_wrong_key_is_reported_as_rejected(katan: str) -> None:
    """A wrong key in the right header: rejected, named as the client's key."""
    client = _client(katan, "not-the-key")
    try:
        async with anthropic_generate(model=MODEL, client=client) as generate:
            with pytest.raises(ProviderAuthenticationError) as caught:
                await generate(_request())
    finally:
        await client.close()
    text = str(caught.value)
    assert "rejected the API key from the client= given to the adapter" in text
    assert "invalid API key for anthropic" in text
    assert "set the ANTHROPIC_API_KEY" not in text


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_round_trip(katan: str, stream: bool) -> None:
    """The server calls the tool; its result goes back in a tool_result block the server
    accepts (it calls the tool again: it always does, so the run stops at two steps).
    Streamed, no empty tool-argument delta reaches on_delta."""
    deltas: list[Delta] = []
    client = _client(katan, KEY)
    try:
        async with anthropic_generate(
            model=MODEL, client=client, stream=stream, on_delta=deltas.append
        ) as generate:
            agent = create_agent(generate=generate, tools=[get_weather], maximum_steps=2)
            result = await agent.run("Weather in Oslo?")
    finally:
        await client.close()
    assert result.error is None, result.error
    assert result.finish_reason == "maximum-steps"
    assert [len(step.tool_calls) for step in result.steps] == [1, 1]
    call = result.steps[0].tool_calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "test_city"})
    assert result.steps[0].results[0].value == "sunny in test_city"
    assert result.usage.prompt > 0
    if stream:
        first = [d.text for d in deltas if d.kind == "tool_arguments" and d.call_id == call.id]
        assert "".join(first) == '{"city": "test_city"}'
        assert all(d.text for d in deltas), "an empty delta reached on_delta"
    else:
        assert deltas == []
