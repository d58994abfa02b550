"""The samples of docs/multi-agent.md run top to bottom and print what the page says."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import trio.testing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "multi-agent.md"


async def test_multi_agent_page_samples_run(
    autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python sample runs in one namespace; each printed line matches its comment."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) == 3
    namespace: dict[str, Any] = {"__name__": "docs.multi_agent"}
    expected: list[str] = []
    for index, block in enumerate(blocks):
        code = compile(
            block, f"docs/multi-agent.md sample {index + 1}", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        pending = eval(code, namespace)
        if pending is not None:
            await pending
        expected += re.findall(r"^print\(.*\)  # (.*)$", block, flags=re.MULTILINE)
    assert capsys.readouterr().out.splitlines() == expected
