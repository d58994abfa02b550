"""The samples of docs/sessions.md run top to bottom and print what the page says."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "sessions.md"


async def test_sessions_page_samples_run(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python sample runs in one namespace; each printed line matches its comment.

    Virtual time jumps only after 250 ms of real idleness: the durable sample waits on
    SQLite in worker threads, and a jump while a thread works would fire its timeouts.
    """
    autojump_clock.autojump_threshold = max(autojump_clock.autojump_threshold, 0.25)
    text = PAGE.read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 5
    namespace: dict[str, Any] = {"__name__": "docs.sessions"}
    expected: list[str] = []
    for index, block in enumerate(blocks):
        code = compile(
            block, f"docs/sessions.md sample {index + 1}", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        pending = eval(code, namespace)
        if pending is not None:
            await pending
        expected += re.findall(r"^print\(.*\)  # (.*)$", block, flags=re.MULTILINE)
    assert capsys.readouterr().out.splitlines() == expected
