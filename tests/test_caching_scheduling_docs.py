"""The Python samples of docs/caching-and-scheduling.md run, in order, and print what the
page says."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path
from typing import Any

import trio
import trio.testing

PAGE = Path(__file__).resolve().parents[1] / "docs" / "caching-and-scheduling.md"


async def test_samples_run_and_print_what_the_page_says(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Every sample runs top to bottom in one namespace; the printed lines match."""
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) == 5
    namespace: dict[str, Any] = {"__name__": "docs.caching"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for index, block in enumerate(blocks):
            code = compile(
                block,
                f"docs/caching-and-scheduling.md sample {index + 1}",
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            )
            pending = eval(code, namespace)
            if pending is not None:
                await pending
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["Paris Paris 1", "1 0"]
    assert lines[2:7] == ["v1", "v2", "v1", "v3", "miss"]
    assert lines[7] == "fine miss 1"
    ticks = ast.literal_eval(lines[8])
    assert [number for number, _, _ in ticks] == [1, 2, 3]
    for (_, started, content), grid in zip(ticks, (60, 120, 180), strict=True):
        assert grid <= started <= grid + 5
        assert content == "all green"
    assert lines[9:] == ["3", "running 0"]
