"""The sample of the "Output modes" section of docs/providers.md runs, as a program,
against the local double of llama-cpp-python's server, which refuses ``response_format:
json_schema`` with the real server's 500 (its ``base_url`` replaced by the double's
address, no ``OPENAI_API_KEY``)."""

from __future__ import annotations

import json

from ._openai_wire import LlamaCppServer, completion, tool_call
from ._server import WireServer
from .test_docs_provider_samples import _environment, _expected, _run, _sample

SECTION = "## Output modes"
LOCAL = "http://127.0.0.1:8000/v1"
CAPITAL = {"city": "Paris", "population": 2102650}


def _output_mode_samples() -> list[str]:
    """The section's samples, for the test that every block of the page is run."""
    return [_sample(SECTION, "output_mode=")]


async def test_the_output_modes_sample(wire_server: WireServer) -> None:
    """The first run's ``json_schema`` is refused once and the step is sent again with
    ``json_object`` and the schema; the tool-mode run forces ``final_result`` and reads
    the output from its arguments."""
    (sample,) = _output_mode_samples()
    assert LOCAL in sample
    call = tool_call("call__0_final_result_cmpl-2", "final_result", CAPITAL)
    server = LlamaCppServer(
        completion(json.dumps(CAPITAL)),
        completion(None, tool_calls=[call], finish_reason="tool_calls", id="chatcmpl-2"),
    )
    wire_server.handler = server
    here = sample.replace(LOCAL, f"{wire_server.base_url}/v1")
    assert await _run(here, _environment()) == _expected(sample)

    assert len(server.refused) == 1
    refused, fallback, tool = (r.json for r in wire_server.received)
    assert refused["response_format"]["type"] == "json_schema"
    schema = refused["response_format"]["json_schema"]["schema"]
    assert fallback["response_format"] == {"type": "json_object", "schema": schema}
    assert "validates against this JSON Schema" in fallback["messages"][0]["content"]
    assert tool["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
    assert "response_format" not in tool
