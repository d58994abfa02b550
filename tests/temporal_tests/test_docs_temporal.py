"""docs/temporal.md: its samples run against the real Temporal dev server, and the
numbers it states are the code's."""

from __future__ import annotations

import ast
import inspect
import json
import re
import signal
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from operative.temporal import TemporalEngine, serve_temporal_worker
from operative.temporal._workflow import _RETRY

from ._agents import worker_agent
from .conftest import DevServer, start_worker

PAGE = Path(__file__).resolve().parents[2] / "docs" / "temporal.md"
ADDRESS = "127.0.0.1:7233"
"""The address the page's samples use; the test's server is elsewhere."""
SHUTDOWN_BOUND = 45.0


def _python_blocks(text: str) -> list[str]:
    """Every Python sample, in order, including those indented inside a list item."""
    found = re.findall(r"^( *)```python\n(.*?)^\1```", text, flags=re.DOTALL | re.MULTILINE)
    return [textwrap.dedent(body) for _, body in found]


def _printed(block: str) -> list[str]:
    """What the block's prints say they print: ``print(...)  # text`` prints ``text``;
    a ``print(...)`` without a comment prints the ``# ...`` lines right after the block's
    statement that holds it (a loop)."""
    expected: list[str] = []
    trailing = False
    for line in block.splitlines():
        inline = re.match(r"^\s*print\(.*\)  +# (.*)$", line)
        if inline is not None:
            expected.append(inline.group(1))
            trailing = False
        elif re.match(r"^\s*print\(.*\)$", line):
            trailing = True
        elif trailing and line.startswith(" "):
            continue  # still inside the statement that prints
        elif trailing and (comment := re.match(r"^# (.*)$", line)) is not None:
            expected.append(comment.group(1))
        else:
            trailing = False
    return expected


async def test_the_page_samples_run_against_the_dev_server(
    temporal_server: DevServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The samples run in order, in one namespace, with the server's address for the
    page's. A block whose first line is ``# file: NAME`` is a file the page asks the
    reader to save; ``worker.py`` is then started as the page says (``python
    worker.py``), and stopped at the end with Ctrl-C (SIGINT), which must stop it.
    Each ``print`` prints what its comment says."""
    text = PAGE.read_text()
    assert text.count(ADDRESS) >= 5
    blocks = _python_blocks(text.replace(ADDRESS, temporal_server.target))
    assert len(blocks) >= 7
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs.temporal"}
    expected: list[str] = []
    saved: list[str] = []
    worker: trio.Process | None = None
    log = tmp_path / "worker.log"
    try:
        with trio.fail_after(180):
            for index, block in enumerate(blocks):
                file = re.match(r"# file: (\S+)\n", block)
                if file is not None:
                    name = file.group(1)
                    (tmp_path / name).write_text(block)
                    saved.append(name)
                    if name == "worker.py":
                        with log.open("wb") as out:
                            worker = await trio.lowlevel.open_process(
                                [sys.executable, name], cwd=tmp_path, stdout=out, stderr=out
                            )
                    continue
                code = compile(
                    block,
                    f"docs/temporal.md sample {index + 1}",
                    "exec",
                    flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                )
                pending = eval(code, namespace)
                if pending is not None:
                    await pending
                expected += _printed(block)
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGINT)
            with trio.move_on_after(SHUTDOWN_BOUND):
                await worker.wait()
            if worker.returncode is None:
                worker.kill()
                await worker.wait()
    assert saved == ["weather.py", "worker.py"]
    assert worker is not None
    assert capsys.readouterr().out.splitlines() == expected
    assert len(expected) >= 8
    # Ctrl-C stopped the worker (it did not have to be killed), and nothing but the
    # interrupt ended it.
    assert worker.returncode != -signal.SIGKILL, log.read_text()
    errors = re.findall(r"^[\s|]*(\w+Error): ", log.read_text(), flags=re.MULTILINE)
    assert errors == [], log.read_text()


def _signature_defaults(text: str, name: str) -> dict[str, object]:
    """The defaults of ``name``'s signature as the page's reference section shows it
    (the last one the page shows)."""
    found = re.findall(rf"`{name}\((.*?)\)`:", text, flags=re.DOTALL)
    assert found, f"the page shows no signature of {name}"
    defaults: dict[str, object] = {}
    for part in found[-1].split(","):
        key, sep, value = part.strip().partition("=")
        if sep:
            defaults[key] = ast.literal_eval(value)
    return defaults


def test_the_page_states_the_codes_defaults_and_retry_policy() -> None:
    """The signatures the page's reference shows carry the code's defaults, and the
    recovery timing it gives uses the workflow's retry policy."""
    text = " ".join(PAGE.read_text().split())
    for name, function in (
        ("TemporalEngine", TemporalEngine.__init__),
        ("serve_temporal_worker", serve_temporal_worker),
    ):
        code = {
            key: parameter.default
            for key, parameter in inspect.signature(function).parameters.items()
            if parameter.default is not inspect.Parameter.empty and key != "task_status"
        }
        assert _signature_defaults(text, name) == code
    assert _RETRY.initial_interval == timedelta(seconds=0.2)
    assert _RETRY.backoff_coefficient == 2.0
    assert _RETRY.maximum_interval == timedelta(seconds=5)
    assert "0.2 s after the first failure, doubling with each one, at most 5 s" in text
    assert "`heartbeat_timeout` (30 s by default)" in text


async def test_a_one_call_step_adds_the_history_events_the_page_says(
    engine: TemporalEngine, temporal_server: DevServer
) -> None:
    """The page's "a step with one tool call is two writes ..., so N events", measured
    on the server as the difference between runs of 2 and 5 such steps."""
    stated = re.search(
        r"is two writes \(.*?\), so (\d+) events", " ".join(PAGE.read_text().split())
    )
    assert stated is not None
    lengths = {}
    async with trio.open_nursery() as nursery:
        worker = await start_worker(nursery, engine, {"worker": worker_agent()})
        for steps in (2, 5):
            run_id = await engine.start_run("worker", f"steps={steps}")
            await engine.result(run_id)
            described = json.loads(
                temporal_server.cli(
                    "workflow", "describe", "--workflow-id", run_id, "--output", "json"
                )
            )
            lengths[steps] = int(described["workflowExecutionInfo"]["historyLength"])
        worker.cancel()
    assert (lengths[5] - lengths[2]) / 3 == int(stated.group(1)), lengths
