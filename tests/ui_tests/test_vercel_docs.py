"""The samples of docs/ui.md run: the served agent answers the AI SDK's chat client through
an approved call, and the own-server handler streams a whole answer."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .conftest import open_ui_server, run_node

PAGE = Path(__file__).resolve().parents[2] / "docs" / "ui.md"


def samples() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.DOTALL | re.MULTILINE)


async def test_the_served_sample_completes_an_approval_with_the_ai_sdk_client(
    ui_node_modules: Path,
) -> None:
    serving, _ = samples()
    namespace: dict[str, Any] = {"__name__": "docs.ui"}
    exec(compile(serving, "docs/ui.md sample 1", "exec"), namespace)
    async with open_ui_server(namespace["app"]) as url:
        result = await run_node(ui_node_modules, "vercel_chat.mjs", url, "approve", "buy milk")
    assert namespace["notes"] == ["buy milk"]
    assert result["status"] == "ready"
    _, assistant = result["messages"]
    texts = [part["text"] for part in assistant["parts"] if part["type"] == "text"]
    assert texts == ["Saving that.", "Done: saved 'buy milk'"]


async def test_the_own_server_sample_streams_a_whole_answer() -> None:
    serving, handler = samples()
    namespace: dict[str, Any] = {"__name__": "docs.ui"}
    exec(compile(serving, "docs/ui.md sample 1", "exec"), namespace)
    exec(compile(handler, "docs/ui.md sample 2", "exec"), namespace)
    sent: list[bytes] = []

    async def send(chunk: bytes) -> None:
        sent.append(chunk)

    body = json.dumps(
        {
            "id": "chat-1",
            "trigger": "submit-message",
            "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
        }
    ).encode()
    await namespace["answer_chat"](namespace["agent"], body, send)
    assert sent[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(chunk[len(b"data: ") :]) for chunk in sent[:-1]]
    assert chunks[0]["type"] == "start"
    assert chunks[0]["messageId"].startswith("msg-")
    (asked,) = [chunk for chunk in chunks if chunk["type"] == "tool-approval-request"]
    assert asked["toolCallId"] == "note-1"
    assert chunks[-1]["finishReason"] == "tool-calls"
    assert namespace["notes"] == []
