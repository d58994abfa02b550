"""docs/testing.md: its samples run in order, and it shows the example file as it is."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import trio
import trio.testing

from operative.testing import RunRecorder, ScriptedModel

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "testing.md"
EXAMPLE = ROOT / "examples" / "property_test_agent.py"


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_page_shows_the_example_file_as_it_is() -> None:
    """The last sample of the page is examples/property_test_agent.py, verbatim."""
    assert _python_blocks()[-1] == EXAMPLE.read_text()


def test_the_example_property_holds() -> None:
    """The example's property test passes when run in-process."""
    spec = importlib.util.spec_from_file_location("property_test_agent", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.test_weather_agent_survives_faults()


def test_the_page_samples_run_in_order() -> None:
    """Every other sample runs, top to bottom, in one namespace, in virtual time.

    A sample with top-level ``await`` runs in its own ``trio.run`` under a MockClock;
    the others run as plain code (the hypothesis sample starts its own ``trio.run``).
    """
    namespace: dict[str, Any] = {"__name__": "docs.testing"}
    blocks = _python_blocks()[:-1]
    assert len(blocks) >= 6
    for index, block in enumerate(blocks):
        code = compile(
            block,
            f"docs/testing.md sample {index + 1}",
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        )
        pending = eval(code, namespace)
        if pending is not None:

            async def finish(awaitable: Any = pending) -> None:
                await awaitable

            trio.run(finish, clock=trio.testing.MockClock(autojump_threshold=0))
    # The plugin sample defines a test; call it with what the fixtures would give.
    test = namespace["test_the_agent_answers"]
    recorder = RunRecorder()
    try:
        trio.run(
            test, ScriptedModel, recorder, None, clock=trio.testing.MockClock(autojump_threshold=0)
        )
    finally:
        recorder.stop_capture()
    assert len(recorder.runs) == 1
