"""``operative serve --offline`` in a process of its own, driven by ``@ag-ui/client``'s
``HttpAgent`` on ``/api/agui``: a tool-using run and an approval interrupt resumed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio

from .conftest import run_node
from .test_agui_client import check_clean

ROOT = Path(__file__).resolve().parents[2]


async def test_operative_serve_answers_httpagent(tmp_path: Path, ui_node_modules: Path) -> None:
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
            url = found.group(1) + "/api/agui"
            weather = await run_node(
                ui_node_modules, "agui_client.mjs", url, "tool", "weather in Oslo"
            )
            approved = await run_node(
                ui_node_modules, "agui_client.mjs", url, "approve", "remember to water the plants"
            )
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await process.wait()
    check_clean(weather)
    assert weather["runs"][0]["outcome"] == "success"
    (result,) = [m for m in weather["messages"] if m["role"] == "tool"]
    assert result["content"].startswith("Oslo: ")
    check_clean(approved)
    assert [run["outcome"] for run in approved["runs"]] == ["interrupt", "success"]
    (interrupt,) = approved["runs"][0]["interrupts"]
    assert interrupt["metadata"]["toolName"] == "save_note"
    assert (tmp_path / "notes.txt").read_text() == "water the plants\n"
