"""The sample of the "OpenAI-compatible servers" section of docs/providers.md runs, as a
program, against the local double of llama-cpp-python's server (its ``base_url``
replaced by the double's address, no ``OPENAI_API_KEY``). The realserver tests run it
against the real server."""

from __future__ import annotations

from ._openai_wire import LlamaCppServer, completion, tool_call, usage_of
from ._server import WireServer
from .test_docs_provider_samples import _environment, _expected, _run, _sample

SECTION = "## OpenAI-compatible servers"
LOCAL = "http://127.0.0.1:8000/v1"


def _compatible_server_samples() -> list[str]:
    """The section's samples, for the test that every block of the page is run."""
    return [compatible_server_sample()]


def compatible_server_sample() -> str:
    """The section's forced tool round trip (it talks to ``LOCAL``)."""
    sample = _sample(SECTION, "openai_generate(")
    assert LOCAL in sample
    return sample


async def test_the_compatible_server_sample(wire_server: WireServer) -> None:
    """Streamed against llama-cpp-python's behaviour: the forced call is ``add`` (not the
    name once per chunk), the second request carries ``"content": ""`` and the result,
    and leaves ``tool_choice`` out."""
    sample = compatible_server_sample()
    call = tool_call("call__0_add_cmpl-1", "add", {"a": 2, "b": 3})
    server = LlamaCppServer(
        completion(None, tool_calls=[call], finish_reason="tool_calls", usage=usage_of(26, 12)),
        completion("2 + 3 = 5", id="chatcmpl-2", usage=usage_of(64, 8)),
    )
    wire_server.handler = server
    here = sample.replace(LOCAL, f"{wire_server.base_url}/v1")
    assert await _run(here, _environment()) == _expected(sample)

    assert server.refused == []
    first, second = (r.json for r in wire_server.received)
    assert (first["model"], first["stream"], first["temperature"]) == ("smollm2", True, 0)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    assert "tool_choice" not in second
    assert second["messages"][-2]["content"] == ""
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "add"
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call__0_add_cmpl-1",
        "content": "5",
    }
