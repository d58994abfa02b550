"""``operative serve --offline`` in a process of its own, driven by the AI SDK's chat client:
a tool-using turn and an approved call, with the chat page still served."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import trio

from .conftest import run_node

ROOT = Path(__file__).resolve().parents[2]


async def test_operative_serve_answers_the_ai_sdk_client(
    tmp_path: Path, ui_node_modules: Path
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ANTHROPIC_", "OPENAI_", "OPERATIVE_", "GEMINI_", "OLLAMA_"))
    }
    env.update(NO_COLOR="1", PYTHONUNBUFFERED="1", OPERATIVE_DATA_DIR=str(tmp_path))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "operative", "serve", "--offline", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=ROOT,
    )
    assert process.stdout is not None
    seen = b""
    try:
        with trio.fail_after(60):
            while (found := re.search(r"serving the chat page at (\S+)/ ", seen.decode())) is None:
                chunk = await process.stdout.receive_some()
                assert chunk, seen.decode()
                seen += chunk
            url = found.group(1)
            async with httpx.AsyncClient() as client:
                home = await client.get(url + "/")
            assert home.status_code == 200
            assert "/api/turn" in home.text
            weather = await run_node(
                ui_node_modules, "vercel_chat.mjs", url, "say", "weather in Oslo"
            )
            approved = await run_node(
                ui_node_modules, "vercel_chat.mjs", url, "approve", "remember to water the plants"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await process.wait()
    assert weather["responses"][0]["header"] == "v1"
    assert weather["responses"][0]["body"].endswith("data: [DONE]\n\n")
    (part,) = [p for p in weather["messages"][1]["parts"] if p["type"] == "tool-get_weather"]
    assert part["state"] == "output-available"
    assert part["output"].startswith("Oslo: ")
    assert approved["status"] == "ready"
    assert len(approved["responses"]) == 2
    (note,) = [p for p in approved["messages"][1]["parts"] if p["type"] == "tool-save_note"]
    assert note["state"] == "output-available"
    assert (tmp_path / "notes.txt").read_text() == "water the plants\n"
