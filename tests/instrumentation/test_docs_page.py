"""docs/observability.md: every sample runs, in order, and prints what the page shows."""

from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path
from typing import Any

import trio.testing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
_BLOCK = re.compile(
    r"^```python\n(?P<code>.*?)^```\n(?:\nprints:\n\n```text\n(?P<output>.*?)^```)?",
    flags=re.DOTALL | re.MULTILINE,
)


async def test_samples_print_what_the_page_shows(autojump_clock: trio.testing.MockClock) -> None:
    """Each sample's output equals the 'prints:' block after it."""
    samples = [(m["code"], m["output"]) for m in _BLOCK.finditer(PAGE.read_text())]
    assert len(samples) >= 8
    assert samples[0][1] is not None
    assert "invoke_agent forecaster" in samples[0][1]
    namespace: dict[str, Any] = {"__name__": "docs.observability"}
    for index, (code, expected) in enumerate(samples):
        compiled = compile(
            code,
            f"docs/observability.md sample {index + 1}",
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            pending = eval(compiled, namespace)
            if pending is not None:
                await pending
        if expected is not None:
            assert out.getvalue() == expected, f"sample {index + 1}:\n{out.getvalue()}"
