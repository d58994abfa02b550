"""The samples of the "Model strings" section of docs/providers.md run, as programs,
against the local wire server (pointed at it through the environment, as the other
samples of the page are: ``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and a dummy key)."""

from __future__ import annotations

import pytest

from ._anthropic_wire import message, text_block, tool_use_block, usage_of
from ._openai_wire import completion
from ._openai_wire import usage_of as openai_usage
from ._server import JsonReply, WireServer
from .test_docs_provider_samples import _environment, _expected, _run, _sample

SECTION = "## Model strings"


def _model_string_samples() -> list[str]:
    """The section's samples, for the test that every block of the page is run."""
    return [_sample(SECTION, "open_model("), _sample(SECTION, 'model="anthropic:')]


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_open_model_sample(wire_server: WireServer) -> None:
    """open_model("openai:gpt-4o-mini", temperature=0): the key from OPENAI_API_KEY, the
    server from OPENAI_BASE_URL, the setting in the body."""
    sample = _sample(SECTION, "open_model(")
    answer = completion(
        "Hi! How can I help you today?", model="gpt-4o-mini", usage=openai_usage(9, 10)
    )
    wire_server.reply(JsonReply(body=answer))
    env = _environment(OPENAI_API_KEY="test", OPENAI_BASE_URL=wire_server.base_url)
    assert await _run(sample, env) == _expected(sample)

    assert wire_server.last.path == "/chat/completions"
    assert wire_server.last.headers["authorization"] == "Bearer test"
    body = wire_server.last.json
    assert (body["model"], body["temperature"]) == ("gpt-4o-mini", 0)
    assert body["messages"] == [{"role": "user", "content": "Say hi"}]


@pytest.mark.heavy  # the sample in a real process: seconds
async def test_the_create_agent_model_sample(wire_server: WireServer) -> None:
    """create_agent(model="anthropic:claude-haiku-4-5"): the run opens the client from
    ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL, calls the tool and answers."""
    sample = _sample(SECTION, 'model="anthropic:')
    call = tool_use_block("toolu_01", "get_weather", {"city": "Oslo"})
    wire_server.reply(
        JsonReply(
            body=message(
                [call], stop_reason="tool_use", model="claude-haiku-4-5", usage=usage_of(590, 54)
            )
        ),
        JsonReply(
            body=message(
                [text_block("It's sunny in Oslo.")],
                id="msg_02",
                model="claude-haiku-4-5",
                usage=usage_of(662, 14),
            )
        ),
    )
    env = _environment(ANTHROPIC_API_KEY="test", ANTHROPIC_BASE_URL=wire_server.base_url)
    assert await _run(sample, env) == _expected(sample)

    first, second = (received.json for received in wire_server.received)
    assert [r.path for r in wire_server.received] == ["/v1/messages"] * 2
    assert first["model"] == second["model"] == "claude-haiku-4-5"
    assert [t["name"] for t in first["tools"]] == ["get_weather"]
    assert second["messages"][-1]["content"][-1]["tool_use_id"] == "toolu_01"
