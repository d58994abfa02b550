"""Every runnable example in examples/ runs offline and prints what its docs promise."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

PyCF_TOP_LEVEL_AWAIT = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name != "quickstart.py")

# A line each example must print (examples not listed only have to exit 0).
EXPECTED = {
    "approvals.py": "second resume refused: replayed",
    "chat_host.py": "final answer: Done: I deleted /reports/q3.txt.",
    "durable_resume.py": "  reserve_stock: run again -> success",
    "live_host.py": "run-2 finished: aborted (host shutting down)",
    "structured_output.py": "output: Forecast(city='Lisbon', high_c=24, summary='Sunny')",
}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(example: Path) -> None:
    """The example exits 0 within seconds and prints its key line."""
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    expected = EXPECTED.get(example.name)
    if expected is not None:
        assert expected in done.stdout.splitlines(), done.stdout


def test_the_chat_host_example_round_trips() -> None:
    """The chat host parks, shows the approval, resumes and prints one result per call."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "chat_host.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "assistant: I'll delete the Q3 draft."
    assert lines[1].startswith('pending approval: {"approval_id":')
    assert lines[-3:] == [
        '  assistant: I\'ll delete the Q3 draft. -> delete_file({"path": "/reports/q3.txt"})',
        '  tool [success]: {"deleted":"/reports/q3.txt"}',
        "  assistant: Done: I deleted /reports/q3.txt.",
    ]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize(
    "page", ["running.md", "economics.md", "observability.md", "guardrails.md"]
)
async def test_guide_samples_run_in_order(
    page: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Every Python sample of the guide runs, top to bottom, in one namespace."""
    blocks = _python_blocks(ROOT / "docs" / page)
    assert blocks
    namespace: dict[str, Any] = {"__name__": f"docs.{page}"}
    for index, block in enumerate(blocks):
        code = compile(block, f"docs/{page} sample {index + 1}", "exec", flags=PyCF_TOP_LEVEL_AWAIT)
        pending = eval(code, namespace)
        if pending is not None:
            await pending


# Pages whose samples wait on SQLite in worker threads: virtual time may jump only after
# 250 ms of real idleness, or a jump while a thread works would fire its timeouts (a
# durable write is bounded by its lease on the same clock).
_THREADED_PAGES = {"storage.md", "run-store.md"}


@pytest.mark.parametrize(
    "page",
    [
        "conversation.md",
        "storage.md",
        "run-store.md",
        "cancellation.md",
        "tools.md",
        "design.md",
        "extending.md",
    ],
)
async def test_page_samples_run_and_print_what_they_say(
    page: str, autojump_clock: trio.testing.MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Python sample runs, top to bottom, in one namespace; each top-level
    ``print(...)  # text`` prints exactly ``text``."""
    if page in _THREADED_PAGES:
        autojump_clock.autojump_threshold = max(autojump_clock.autojump_threshold, 0.25)
    blocks = _python_blocks(ROOT / "docs" / page)
    assert blocks
    namespace: dict[str, Any] = {"__name__": f"docs.{page}"}
    expected: list[str] = []
    for index, block in enumerate(blocks):
        code = compile(block, f"docs/{page} sample {index + 1}", "exec", flags=PyCF_TOP_LEVEL_AWAIT)
        pending = eval(code, namespace)
        if pending is not None:
            await pending
        expected += re.findall(r"^print\(.*\)  +# (.*)$", block, flags=re.MULTILINE)
    assert capsys.readouterr().out.splitlines() == expected


def test_index_sample_runs_as_a_program(capsys: pytest.CaptureFixture[str]) -> None:
    """The front page's sample is a whole program (it calls ``trio.run``) and prints
    what its comments say."""
    (block,) = _python_blocks(ROOT / "docs" / "index.md")
    exec(compile(block, "docs/index.md sample 1", "exec"), {"__name__": "docs.index"})
    expected = re.findall(r"print\(.*\)\s+# (.*)$", block, flags=re.MULTILINE)
    assert expected
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.heavy  # real processes on the real clock, about 11 s: .ci/run's second step
async def test_mcp_page_samples_run_against_real_servers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/mcp.md's samples start real MCP servers (processes), so they run on the real
    clock: virtual time would jump while a server answers. A block whose first line is
    ``# file: NAME`` is a file the page asks the reader to save: it is written to the
    working directory instead of run. Each top-level ``print(...)  # text`` prints
    exactly ``text``."""
    pytest.importorskip("mcp_server_time")
    monkeypatch.chdir(tmp_path)
    blocks = _python_blocks(ROOT / "docs" / "mcp.md")
    assert blocks
    namespace: dict[str, Any] = {"__name__": "docs.mcp"}
    expected: list[str] = []
    with trio.fail_after(120):
        for index, block in enumerate(blocks):
            saved = re.match(r"# file: (\S+)\n", block)
            if saved is not None:
                (tmp_path / saved.group(1)).write_text(block)
                continue
            code = compile(
                block, f"docs/mcp.md sample {index + 1}", "exec", flags=PyCF_TOP_LEVEL_AWAIT
            )
            pending = eval(code, namespace)
            if pending is not None:
                await pending
            expected += re.findall(r"^print\(.*\)  +# (.*)$", block, flags=re.MULTILINE)
    assert capsys.readouterr().out.splitlines() == expected
