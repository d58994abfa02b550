"""The AG-UI sample in docs/ui.md runs: ``HttpAgent`` through an interrupt and its resume."""

from __future__ import annotations

import os
import re
from pathlib import Path

import trio

from operative import create_agent
from operative.testing import ScriptedModel
from operative.ui import asgi_app

from .conftest import open_ui_server
from .test_agui import make_toolbox, script

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ui.md"


def agui_sample() -> str:
    """The first ``js`` block of the page's "AG-UI" section."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## AG-UI\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```js\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the AG-UI section has no js sample"
    return match.group(1)


async def test_the_agui_sample_approves_a_call(ui_node_modules: Path, tmp_path: Path) -> None:
    script_path = tmp_path / "sample.mjs"
    script_path.write_text(agui_sample(), encoding="utf-8")
    (tmp_path / "node_modules").symlink_to(ui_node_modules)  # bare imports resolve here
    notes: list[str] = []
    agent = create_agent(generate=ScriptedModel(script), toolbox=make_toolbox(notes))
    async with open_ui_server(asgi_app(agent)) as base:
        with trio.fail_after(60):
            done = await trio.run_process(
                ["node", str(script_path)],
                capture_stdout=True,
                capture_stderr=True,
                env=dict(os.environ, AGUI_URL=f"{base}/api/agui"),
                check=False,
            )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stderr == b""  # the client warned of nothing
    lines = done.stdout.decode().splitlines()
    assert lines == ['approve save_note({"text":"buy milk"})?', "Done: saved 'buy milk' "]
    assert notes == ["buy milk"]
